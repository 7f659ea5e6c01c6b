"""Model-based action plans: a learned model rolls the delivered observation forward, tick by tick.

``PlanningAgent`` answers observation k with a plan for ticks k+1 ... k+H. It predicts the state
before each of those ticks with a learned dynamics model (an ensemble: the mean of its members'
rollouts) and applies its base policy (PPO trained on the bare env) to each prediction. The rollout
is arrival-aware: the plan cannot arrive before the env has run ``lead`` more ticks, and on those
ticks the env runs the newest plan sent earlier (before any plan has arrived: its start plan, or the
action it holds). The rollout uses those actions there and copies them into the new plan. A plan that
arrives early therefore changes nothing, and one that arrives up to ``lead`` ticks late meets the
states it predicted.

The lead is adaptive with ``lead_window`` W > 0: each observation says which plan the env applied at its
tick (``applied_obs_seq``), so ``seq - applied_obs_seq`` is how many ticks that plan's round trip took at
most. The lead of the next plan is the ``lead_quantile`` of the last W such round trips, less one, and never
more than the fixed ``lead`` (the training link's p95 rule), which stands until an observation reports a plan.
Both worlds read the same sequence numbers, and no clock is shared. A lead too long makes the env run
predictions staler than they could be; one too short makes a late plan assume its own actions where the
previous plan's ran. On the double pendulum the 90th percentile of the last 20 kept 92 % of the clean return
behind Wi-Fi-N where the fixed lead kept 77 %, and as much as the fixed lead behind Wi-Fi-D, where shorter
leads (the shortest round trip of the last 5) lost more than half of it (results/NOTES.md).

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
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from calf_agent.dynamics import disagreement, make_dynamics
from calf_agent.gaussian import GaussianAgent
from calf_agent.policies import MlpAgent, as_batch
from calf_agent.sac import SacActor

PlanState = tuple[Tensor]
"""``(memory,)``, memory ``[1, B, 2 + W + H * A]``: a flag that a plan was sent, its obs seq, the last W
round trips the observations reported (0: none yet; W = ``lead_window``), the plan (A = 1 for discrete
actions). All zeros (a fresh episode) means no plan was sent yet."""

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
    them sets the lead (0: the shortest).
    """

    kind = 'model_plan'

    def __init__(self, base: BaseAgent, model: dict[str, Any], plan_horizon: int, lead: int,
                 start_plan: list[Action], hold_action: Action | None = None,
                 disagreement_cut: float | None = None, lengths: list[int] | None = None,
                 lead_window: int = 0, lead_quantile: float = 0.0) -> None:
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
        self.obs_dim = self.base.obs_dim

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
        return spec if self.disagreement_cut is None else {**spec, 'disagreement_cut': self.disagreement_cut}

    def _env_action(self, tick: Tensor, sent: Tensor, prev_seq: Tensor, prev_plan: Tensor) -> Tensor:
        """What the env applies at ``tick`` ``[B]`` if no newer plan arrives: the previous plan's element, its
        hold once it runs out, or the start plan before any plan."""
        index = tick - prev_seq - 1
        held = index >= self.plan_horizon
        element = prev_plan[torch.arange(len(tick)), index.clamp(0, self.plan_horizon - 1)]
        if self._hold is not None:
            element = torch.where(_rows(held, element), self._hold.to(element.dtype), element)
        start = self._start[(tick - 1) % len(self._start)].to(element.dtype)
        return torch.where(_rows(sent, element), element, start)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, state: PlanState | None = None, deterministic: bool = False,
            seq: Any = None, applied_seq: Any = None) -> tuple[np.ndarray, PlanState]:
        """Plans ``[B, H]`` (or ``[B, H, A]``) for observations ``[B, obs_dim]`` taken at ticks ``seq`` ``[B]``.

        ``state`` is what the previous call returned (None, or zeroed rows, at episode starts).
        ``applied_seq`` ``[B]``: each observation's ``applied_obs_seq`` (-1: no plan's element), which an
        adaptive lead reads; without it (None) the lead stays where the reports so far left it.
        """
        if seq is None:
            raise ValueError('a model planner needs the tick (seq) of every observation')
        x = as_batch(obs)
        seq_t = torch.as_tensor(np.asarray(seq), dtype=torch.long).reshape(-1)
        width, window = max(self.action_dim, 1), self.lead_window
        memory = (state[0][0] if state is not None
                  else torch.zeros(x.shape[0], 2 + window + self.plan_horizon * width))
        sent, prev_seq = memory[:, 0] > 0, memory[:, 1].long()
        trips = self._round_trips(memory[:, 2:2 + window], seq_t, applied_seq)
        lead = self._lead(trips)
        prev_plan = memory[:, 2 + window:].view(-1, self.plan_horizon, width)
        prev_plan = prev_plan if self.continuous else prev_plan[..., 0].long()
        states = x[None].expand(self.model.members, -1, -1)
        cut = torch.zeros(len(x), dtype=torch.bool)
        length = self._length(torch.where(sent, seq_t - prev_seq, len(self.lengths or ())))
        plan: list[Tensor] = []
        for j in range(self.plan_horizon):
            env_side = j < lead  # [B]: the env runs an earlier plan (or its fallback) at this tick
            if env_side.all():
                action = self._env_action(seq_t + 1 + j, sent, prev_seq, prev_plan)
            else:
                action = torch.as_tensor(self.base.act(states.mean(0), deterministic=deterministic)[0])
                if j:
                    cut |= ~env_side & (j >= length)
                    if self.disagreement_cut is not None:
                        cut |= ~env_side & (disagreement(states, self.model.y_std) > self.disagreement_cut)
                    held = plan[-1] if self._hold is None else self._hold.to(action.dtype)
                    action = torch.where(_rows(cut, action), held, action)
                if env_side.any():
                    env_action = self._env_action(seq_t + 1 + j, sent, prev_seq, prev_plan)
                    action = torch.where(_rows(env_side, action), env_action.to(action.dtype), action)
            plan.append(action)
            states = self.model.rollout_step(states, action)
        plans = torch.stack(plan, 1)
        memory = torch.cat([torch.ones(len(plans), 1), seq_t.view(-1, 1).float(), trips.float(),
                            plans.float().reshape(len(plans), -1)], 1)
        return plans.numpy(), (memory.unsqueeze(0),)

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
