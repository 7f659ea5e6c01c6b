"""Model-based action plans: a learned model rolls the delivered observation forward, tick by tick.

``PlanningAgent`` answers observation k with a plan for ticks k+1 ... k+H. It predicts the state
before each of those ticks with a learned dynamics model (an ensemble: the mean of its members'
rollouts) and applies its base policy (PPO trained on the bare env) to each prediction. The rollout
is arrival-aware: the plan cannot arrive before the env has run ``lead`` more ticks, and on those
ticks the env runs the newest plan sent earlier (before any plan has arrived: its start plan, or the
action it holds). The rollout uses those actions there and copies them into the new plan. A plan that
arrives early therefore changes nothing, and one that arrives up to ``lead`` ticks late meets the
states it predicted. A first plan (of its episode) with a lead is the exception: no plan was sent before it,
but on a fast link it may arrive at the next tick. Its element 0 is then the base policy's action at the
observation itself, which runs only if it arrives that soon; the rollouts (this one, and the next plan's,
which reads this one) assume the fallback there. Copying the fallback cost Reacher-v5 its first tick on a
clean link, 6 % of its return (results/NOTES.md).

The lead is adaptive with ``lead_window`` W > 0: each observation says which plan the env applied at its
tick (``applied_obs_seq``), so ``seq - applied_obs_seq`` is how many ticks that plan's round trip took at
most. The lead of the next plan is the ``lead_quantile`` of the last W such round trips, less one, and never
more than the fixed ``lead`` (the training link's p95 rule), which stands until an observation reports a plan.
Both worlds read the same sequence numbers, and no clock is shared. A lead too long makes the env run
predictions staler than they could be; one too short makes a late plan assume its own actions where the
previous plan's ran. On the double pendulum the 90th percentile of the last 20 kept 92 % of the clean return
behind Wi-Fi-N where the fixed lead kept 77 %, and as much as the fixed lead behind Wi-Fi-D, where shorter
leads (the shortest round trip of the last 5) lost more than half of it (results/NOTES.md).

With ``feedback`` (continuous bases), each plan element also carries the base policy's gains at its predicted
state, ``K_j = d base(x) / dx`` at ``x_j``, and that prediction: the env applies ``clip(u_j + K_j (o - x_j))``, o
being what it observes (``calf_core.timing.FeedbackPlan``), the base's action at the true state to first order.
The rollout applies the previous plan's feedback on the lead ticks too, as the env will: without it the feedback
drives the state away from what the next plan assumes. Behind Wi-Fi-D on the double pendulum a diagnosis of
such plans kept 73 % of the clean return where open-loop ones kept 33 % (results/NOTES.md).

Discrete and continuous (Box) actions plan alike: the base is an ``MlpAgent`` (plans ``[B, H]`` of
indices) or a ``GaussianAgent`` or ``SacActor`` (plans ``[B, H, A]``, clipped to the bounds). The model needs a fully
observed state, so the base acts on one plain observation.

It learns or uses only what a deployment has: the base policy and the dynamics model learn from
the simulator, the fixed ``lead`` is one less than the training profile's p95 round trip in ticks (the plan
element that runs first when the plan is that late: ``regimes.first_element``), the adaptive one reads the
env's reports, and the actions before the first plan are the env side's own (the task's safe start plan,
which the checkpoint asks the env to run, or its start plan, initial action and hold rule).
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from calf_agent.dynamics import disagreement, make_dynamics
from calf_agent.gaussian import GaussianAgent
from calf_agent.policies import MlpAgent, as_batch
from calf_agent.sac import SacActor
from calf_core.timing import FeedbackPlan

PlanState = tuple[Tensor]
"""``(memory,)``, memory ``[1, B, 2 + W + H * A (+ H * A * O + H * O)]``: a flag that a plan was sent, its obs
seq, the last W round trips the observations reported (0: none yet; W = ``lead_window``), the plan (A = 1 for
discrete actions) and, with feedback, its gains and predicted observations (O values each). A new episode
zeroes all but the round trips (``policies.new_episode_state``): a zero flag means no plan was sent yet."""


class FeedbackPlans(NamedTuple):
    """A batch of plans with feedback: row i is ``FeedbackPlan(actions[i], gains[i], predicted[i])``."""

    actions: np.ndarray  # [B, H, A]
    gains: np.ndarray  # [B, H, A, O]
    predicted: np.ndarray  # [B, H, O]

    def row(self, i: int) -> FeedbackPlan:
        return FeedbackPlan(self.actions[i], self.gains[i], self.predicted[i])


def plan_row(plans: np.ndarray | FeedbackPlans, i: int) -> Any:
    """Row ``i`` of what ``act`` returned, as ``NetworkedEnv.step`` takes it: a plan, or a ``FeedbackPlan``."""
    return plans.row(i) if isinstance(plans, FeedbackPlans) else plans[i]


def plan_actions(plans: np.ndarray | FeedbackPlans) -> np.ndarray:
    """The actions of what ``act`` returned: ``[B, H]`` or ``[B, H, A]``."""
    return plans.actions if isinstance(plans, FeedbackPlans) else plans


BaseAgent = MlpAgent | GaussianAgent | SacActor
Action = int | list[float]
"""One action as a planner spec stores it: an index, or a Box action's values."""


PLANNER_BASES = (MlpAgent, GaussianAgent, SacActor)
"""The policies a model planner can plan with: single actions on the plain observation."""
MAX_LEAD_WINDOW = 64
"""Most round trips an adaptive lead remembers."""
MAX_TRIP = 1 << 20
"""Round trips are remembered up to this many ticks (float32 holds them exactly)."""


class PlanningAgent(nn.Module):
    """Plans of H actions from an arrival-aware rollout of ``model`` under the ``base`` policy.

    ``model`` is a dynamics spec (``calf_agent.dynamics.make_dynamics``): each ensemble member rolls its own
    trajectory and the base acts on their mean. ``start_plan`` is what the env applies before the first plan
    arrives, cycled (a held action is a one-element cycle); ``hold_action`` is what it applies when a plan runs
    out, None for the plan's last element (hold last). ``disagreement_cut``: from the first element after the
    lead whose state the members disagree on by more than this (``dynamics.disagreement``), the plan is cut:
    that element and the rest are what the env would apply had the plan ended there (its hold rule).
    ``lead_window``: the adaptive lead's memory of round trips (0: ``lead`` always); ``lead_quantile``: which of
    them sets the lead (0: the shortest). ``feedback``: plans carry first-order feedback (continuous bases only);
    ``act`` then returns them as a ``FeedbackPlans``.
    """

    kind = 'model_plan'

    def __init__(self, base: BaseAgent, model: dict[str, Any], plan_horizon: int, lead: int,
                 start_plan: list[Action], hold_action: Action | None = None,
                 disagreement_cut: float | None = None, lengths: list[int] | None = None,
                 lead_window: int = 0, lead_quantile: float = 0.0, feedback: bool = False) -> None:
        super().__init__()
        self.base = base
        if not isinstance(self.base, PLANNER_BASES) or self.base.plan_horizon != 1:
            raise ValueError('the base policy of a model planner must be an MLP, Gaussian or SAC agent with single '
                             'actions')
        self.continuous = not isinstance(self.base, MlpAgent)
        self.action_dim = self.base.action_dim if self.continuous else 0
        self.n_actions = 0 if self.continuous else self.base.n_actions
        self.model = make_dynamics(model)
        if (self.model.n_actions, self.model.action_dim) != (self.n_actions, self.action_dim):
            raise ValueError('the dynamics model and the base policy must take the same actions')
        if not 0 <= lead < plan_horizon:
            raise ValueError(f'lead must be in [0, plan_horizon), got {lead} with plan_horizon {plan_horizon}')
        self.plan_horizon, self.lead = plan_horizon, lead
        if not start_plan:
            raise ValueError('start_plan must hold at least one action')
        self.start_plan, self.hold_action = list(start_plan), hold_action
        self._start = torch.stack([self._action_tensor(a, 'start_plan') for a in start_plan])
        self._hold = None if hold_action is None else self._action_tensor(hold_action, 'hold_action')
        if disagreement_cut is not None and (isinstance(disagreement_cut, bool) or not isinstance(
                disagreement_cut, (int, float)) or not 0 < disagreement_cut < math.inf):
            raise ValueError(f'disagreement_cut must be a positive number or absent, got {disagreement_cut!r}')
        self.disagreement_cut = disagreement_cut
        if lengths is not None and not (lengths and all(
                isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= plan_horizon for n in lengths)):
            raise ValueError(f'lengths must be plan lengths in 1..{plan_horizon}, got {lengths!r}')
        self.lengths = None if lengths is None else list(lengths)
        if isinstance(lead_window, bool) or not isinstance(lead_window, int) \
                or not 0 <= lead_window <= MAX_LEAD_WINDOW:
            raise ValueError(f'lead_window must be an integer in [0, {MAX_LEAD_WINDOW}], got {lead_window!r}')
        if isinstance(lead_quantile, bool) or not isinstance(lead_quantile, (int, float)) \
                or not 0 <= lead_quantile <= 1:
            raise ValueError(f'lead_quantile must be a number in [0, 1], got {lead_quantile!r}')
        self.lead_window, self.lead_quantile = lead_window, float(lead_quantile)
        self.kept_across_episodes = slice(2, 2 + lead_window)  # the round trips (PlanState; new_episode_state)
        self.obs_dim = self.base.obs_dim
        if not isinstance(feedback, bool) or (feedback and not self.continuous):
            raise ValueError(f'feedback must be true or false, and true only over a continuous base, got {feedback!r}')
        self.feedback = feedback

    def _action_tensor(self, action: Action, name: str) -> Tensor:
        """One action of this planner's kind: an index tensor, or ``[A]`` values."""
        if self.continuous:
            values = torch.as_tensor(action, dtype=torch.float32).reshape(-1)
            if values.numel() != self.action_dim:
                raise ValueError(f'{name} actions must have {self.action_dim} values, got {action!r}')
            return values
        if isinstance(action, bool) or not isinstance(action, int) or not 0 <= action < self.n_actions:
            raise ValueError(f'{name} actions must be in 0..{self.n_actions - 1}, got {action!r}')
        return torch.tensor(action)

    def spec(self) -> dict[str, Any]:
        spec = {'kind': self.kind, 'base': self.base.spec(), 'model': self.model.spec(),
                'plan_horizon': self.plan_horizon, 'lead': self.lead, 'start_plan': self.start_plan}
        if self.hold_action is not None:
            spec['hold_action'] = self.hold_action
        if self.lengths is not None:
            spec['lengths'] = self.lengths
        if self.lead_window:
            spec['lead_window'], spec['lead_quantile'] = self.lead_window, self.lead_quantile
        if self.feedback:
            spec['feedback'] = True
        return spec if self.disagreement_cut is None else {**spec, 'disagreement_cut': self.disagreement_cut}

    def _env_element(self, tick: Tensor, sent: Tensor, prev_seq: Tensor, prev_plan: Tensor,
                     prev_feedback: tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """What the env applies at ``tick`` ``[B]`` if no newer plan arrives: the previous plan's element, its
        hold once it runs out, or the start plan before any plan. With feedback (``prev_feedback``: the previous
        plan's gains and predicted states) also that element's gains ``[B, A, O]``, zero on a held tick or the start
        plan, and its predicted state ``[B, O]``."""
        index = tick - prev_seq - 1
        held = index >= self.plan_horizon
        rows, kept = torch.arange(len(tick)), index.clamp(0, self.plan_horizon - 1)
        element = prev_plan[rows, kept]
        if self._hold is not None:
            element = torch.where(_rows(held, element), self._hold.to(element.dtype), element)
        start = self._start[(tick - 1) % len(self._start)].to(element.dtype)
        action = torch.where(_rows(sent, element), element, start)
        if prev_feedback is None:
            return action, None, None
        prev_gains, prev_predicted = prev_feedback
        gains = torch.where(_rows(sent & ~held, prev_gains[:, 0]), prev_gains[rows, kept], 0.0)
        return action, gains, prev_predicted[rows, kept]

    def _base_action(self, x: Tensor, deterministic: bool) -> Tensor:
        """The base policy's actions at ``x`` ``[B, obs_dim]``; with feedback its deterministic one, whose gains
        ``_gains`` gives."""
        if self.feedback:
            return self.base.mean_action(x)
        return torch.as_tensor(self.base.act(x, deterministic=deterministic)[0])

    def _gains(self, x: Tensor) -> Tensor:
        """The Jacobians ``[N, A, O]`` of the base policy's deterministic action at the states ``x`` ``[N, O]``:
        rows are independent, so one backward pass per action value serves every row."""
        with torch.inference_mode(False), torch.enable_grad():
            z = x.clone().requires_grad_(True)
            actions = self.base.mean_action(z)
            gains = torch.stack([torch.autograd.grad(actions[:, i].sum(), z, retain_graph=i + 1 < self.action_dim)[0]
                                 for i in range(self.action_dim)], 1)
        return gains.detach().clone()

    @torch.inference_mode()
    def act(self, obs: np.ndarray, state: PlanState | None = None, deterministic: bool = False,
            seq: Any = None, applied_seq: Any = None) -> tuple[np.ndarray | FeedbackPlans, PlanState]:
        """Plans ``[B, H]`` (or ``[B, H, A]``; with feedback, ``FeedbackPlans``) for observations ``[B, obs_dim]``
        taken at ticks ``seq`` ``[B]``.

        ``state`` is what the previous call returned (None at first; at an episode's start, ``new_episode_state``'s).
        ``applied_seq`` ``[B]``: each observation's ``applied_obs_seq`` (-1: no plan's element), which an
        adaptive lead reads; without it (None) the lead stays where the reports so far left it.
        """
        if seq is None:
            raise ValueError('a model planner needs the tick (seq) of every observation')
        x = as_batch(obs)
        seq_t = torch.as_tensor(np.asarray(seq), dtype=torch.long).reshape(-1)
        width, window = max(self.action_dim, 1), self.lead_window
        horizon, feedback, obs_size = self.plan_horizon, self.feedback, self.obs_dim
        plan_size = horizon * width
        feedback_size = horizon * obs_size * (self.action_dim + 1) if feedback else 0
        memory = (state[0][0] if state is not None
                  else torch.zeros(x.shape[0], 2 + window + plan_size + feedback_size))
        sent, prev_seq = memory[:, 0] > 0, memory[:, 1].long()
        trips = self._round_trips(memory[:, 2:2 + window], seq_t, applied_seq)
        lead = self._lead(trips)
        prev_plan = memory[:, 2 + window:2 + window + plan_size].view(-1, horizon, width)
        prev_plan = prev_plan if self.continuous else prev_plan[..., 0].long()
        prev_feedback = None
        if feedback:
            previous = memory[:, 2 + window + plan_size:]
            prev_feedback = (previous[:, :horizon * width * obs_size].view(-1, horizon, width, obs_size),
                             previous[:, horizon * width * obs_size:].view(-1, horizon, obs_size))
        states = x[None].expand(self.model.members, -1, -1)
        cut = torch.zeros(len(x), dtype=torch.bool)
        length = self._length(torch.where(sent, seq_t - prev_seq, len(self.lengths or ())))
        plan: list[Tensor] = []
        all_env_gains: list[Tensor] = []  # per element: the env's plan's gains on the lead ticks, else zero
        all_predicted: list[Tensor] = []
        all_own: list[Tensor] = []  # per element: rows whose element is this plan's own, not cut (their gains after)
        no_gains = torch.zeros(len(x), width, obs_size) if feedback else None
        no_rows = torch.zeros(len(x), dtype=torch.bool)
        for j in range(horizon):
            env_side = j < lead  # [B]: the env runs an earlier plan (or its fallback) at this tick
            predicted = states.mean(0)
            env_gains, own = no_gains, no_rows
            if env_side.all():
                action, gains, env_predicted = self._env_element(seq_t + 1 + j, sent, prev_seq, prev_plan,
                                                                 prev_feedback)
                if feedback:
                    env_gains, predicted = gains, env_predicted
            else:
                action = self._base_action(predicted, deterministic)
                if j:
                    cut |= ~env_side & (j >= length)
                    if self.disagreement_cut is not None:
                        cut |= ~env_side & (disagreement(states, self.model.y_std) > self.disagreement_cut)
                    held = plan[-1] if self._hold is None else self._hold.to(action.dtype)
                    action = torch.where(_rows(cut, action), held, action)
                own = ~env_side & ~cut
                if env_side.any():
                    env_action, gains, env_predicted = self._env_element(seq_t + 1 + j, sent, prev_seq, prev_plan,
                                                                         prev_feedback)
                    action = torch.where(_rows(env_side, action), env_action.to(action.dtype), action)
                    if feedback:
                        env_gains = torch.where(_rows(env_side, gains), gains, 0.0)
                        predicted = torch.where(_rows(env_side, predicted), env_predicted, predicted)
            plan.append(action)
            applied = action
            if feedback:  # the env's plans' elements are corrected; this plan's own predict its state exactly
                all_env_gains.append(env_gains)
                all_predicted.append(predicted)
                all_own.append(own)
                correction = (env_gains @ (states.mean(0) - predicted).unsqueeze(-1)).squeeze(-1)
                applied = torch.minimum(torch.maximum(action + correction, self.base.low), self.base.high)
            states = self.model.rollout_step(states, applied)
        plans = torch.stack(plan, 1)
        kept = [torch.ones(len(plans), 1), seq_t.view(-1, 1).float(), trips.float(),
                plans.float().reshape(len(plans), -1)]
        if feedback:
            gains_t, predicted_t, own_t = (torch.stack(all_env_gains, 1), torch.stack(all_predicted, 1),
                                           torch.stack(all_own, 1))
            if own_t.any():
                gains_t[own_t] = self._gains(predicted_t[own_t])
            kept += [gains_t.reshape(len(plans), -1), predicted_t.reshape(len(plans), -1)]
        memory = torch.cat(kept, 1)
        first = ~sent & (lead > 0)  # an episode's first plan: on a clean link it arrives before its lead
        sent_plans = plans
        if first.any():
            sent_plans = plans.clone()  # the memory keeps the plan as its rollout assumed it
            sent_plans[first, 0] = self._base_action(x[first], deterministic).to(plans.dtype)
        sent_plans = sent_plans.numpy()
        if feedback:
            return FeedbackPlans(sent_plans, gains_t.numpy(), predicted_t.numpy()), (memory.unsqueeze(0),)
        return sent_plans, (memory.unsqueeze(0),)

    def _round_trips(self, trips: Tensor, seq: Tensor, applied_seq: Any) -> Tensor:
        """The last ``lead_window`` round trips ``[B, W]`` after this observation's report (``seq`` less the
        ``applied_seq`` of the plan the env ran at its tick; none when it ran none)."""
        if not self.lead_window or applied_seq is None:
            return trips
        applied = torch.as_tensor(np.asarray(applied_seq), dtype=torch.long).reshape(-1)
        reported = (applied >= 0) & (applied < seq)
        shifted = torch.cat([trips[:, 1:], (seq - applied).clamp(max=MAX_TRIP).view(-1, 1).to(trips.dtype)], 1)
        return torch.where(reported.view(-1, 1), shifted, trips)

    def _lead(self, trips: Tensor) -> Tensor:
        """The lead ``[B]`` of each row's next plan: the ``lead_quantile`` of its remembered round trips (the
        rank ``ceil(q * (n - 1))`` of n, from the shortest), less one, and never more than the fixed lead, which
        stands while it remembers none."""
        fixed = torch.full((len(trips),), self.lead, dtype=torch.long)
        if not self.lead_window:
            return fixed
        known = (trips > 0).sum(1)
        ordered = torch.where(trips > 0, trips, torch.inf).sort(1).values  # the empty places last
        rank = torch.ceil(self.lead_quantile * (known - 1).clamp(min=0).double() - 1e-9).long()
        trip = ordered.gather(1, rank.view(-1, 1))[:, 0].nan_to_num(0, posinf=0).long()
        return torch.where(known > 0, torch.minimum(trip - 1, fixed), fixed).clamp(min=0)

    def _length(self, silence: Tensor) -> Tensor:
        """The plan length ``[B]`` after silences ``[B]`` of so many ticks (``lengths``; H without them)."""
        if self.lengths is None:
            return torch.full_like(silence, self.plan_horizon)
        return torch.as_tensor(self.lengths)[silence.clamp(1, len(self.lengths)) - 1]


def _rows(mask: Tensor, like: Tensor) -> Tensor:
    """A ``[B]`` mask shaped to broadcast over ``like``'s rows (``[B]`` or ``[B, A]``)."""
    return mask.view(-1, *([1] * (like.dim() - 1)))
