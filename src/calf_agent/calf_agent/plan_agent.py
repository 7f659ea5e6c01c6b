"""Model-based action plans: a learned model rolls the delivered observation forward, tick by tick.

``PlanningAgent`` answers observation k with a plan for ticks k+1 ... k+H. It predicts the state
before each of those ticks with a learned dynamics model and applies its base policy (PPO trained
on the bare env) to each prediction. The rollout is arrival-aware: the plan cannot arrive before
the env has run ``lead`` more ticks, and on those ticks the env runs the newest plan sent earlier
(before any plan has arrived: its start plan, or the action it holds). The rollout uses those actions
there and copies them into the new plan. A plan that arrives early therefore changes nothing, and one
that arrives up to ``lead`` ticks late meets the states it predicted.

Discrete and continuous (Box) actions plan alike: the base is an ``MlpAgent`` (plans ``[B, H]`` of
indices) or a ``GaussianAgent`` (plans ``[B, H, A]``, clipped to the bounds). The model needs a fully
observed state, so the base acts on one plain observation.

It learns or uses only what a deployment has: the base policy and the dynamics model learn from
the simulator, ``lead`` is the training profile's p95 end-to-end latency in ticks, and the actions
before the first plan are the env side's own (the task's safe start plan, which the checkpoint asks
the env to run, or its start plan, initial action and hold rule).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from calf_agent.gaussian import GaussianAgent
from calf_agent.policies import MlpAgent, as_batch, mlp
from calf_core import progress as progress_bars

PlanState = tuple[Tensor]
"""``(memory,)``, memory ``[1, B, 2 + H * A]``: a flag that a plan was sent, its obs seq, the plan
(A = 1 for discrete actions). All zeros (a fresh episode) means no plan was sent yet."""

BaseAgent = MlpAgent | GaussianAgent
Action = int | list[float]
"""One action as a planner spec stores it: an index, or a Box action's values."""


class DynamicsModel(nn.Module):
    """``s' = s + f(s, a)``: an MLP on normalised inputs that predicts the normalised change of state.

    Discrete actions (``n_actions``) enter one-hot, continuous ones (``action_dim`` values) as they are.
    """

    def __init__(self, obs_dim: int, n_actions: int = 0, hidden: tuple[int, ...] = (64, 64),
                 action_dim: int = 0) -> None:
        super().__init__()
        if (n_actions > 0) == (action_dim > 0):
            raise ValueError(f'give n_actions (discrete) or action_dim (continuous), got {n_actions} and {action_dim}')
        self.obs_dim, self.n_actions, self.action_dim, self.hidden = obs_dim, n_actions, action_dim, tuple(hidden)
        inputs = obs_dim + n_actions + action_dim
        self.net = nn.Sequential(mlp(inputs, self.hidden), nn.Linear(self.hidden[-1], obs_dim))
        for name, size in (('x_mean', inputs), ('x_std', inputs), ('y_mean', obs_dim), ('y_std', obs_dim)):
            self.register_buffer(name, torch.zeros(size) if 'mean' in name else torch.ones(size))

    def spec(self) -> dict[str, Any]:
        actions = {'n_actions': self.n_actions} if self.n_actions else {'action_dim': self.action_dim}
        return {'obs_dim': self.obs_dim, **actions, 'hidden': list(self.hidden)}

    def _encode(self, action: Tensor) -> Tensor:
        """``[B]`` indices one-hot, or ``[B, A]`` values as floats."""
        if self.n_actions:
            return nn.functional.one_hot(action.long(), self.n_actions).float()
        return action.float().reshape(-1, self.action_dim)

    def _inputs(self, obs: Tensor, action: Tensor) -> Tensor:
        return (torch.cat([obs, self._encode(action)], -1) - self.x_mean) / self.x_std

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        """The predicted next observation ``[B, obs_dim]``."""
        return obs + self.net(self._inputs(obs, action)) * self.y_std + self.y_mean

    def fit(self, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray, epochs: int, seed: int,
            batch: int = 256, lr: float = 1e-3, progress: bool = False) -> float:
        """Fit to transitions by Adam on the normalised squared error; return the last epoch's loss."""
        x_obs, x_act = torch.as_tensor(obs, dtype=torch.float32), torch.as_tensor(actions)
        delta = torch.as_tensor(next_obs, dtype=torch.float32) - x_obs
        raw = torch.cat([x_obs, self._encode(x_act)], -1)
        self.x_mean.copy_(raw.mean(0))
        self.x_std.copy_(raw.std(0).clamp_min(1e-6))
        self.y_mean.copy_(delta.mean(0))
        self.y_std.copy_(delta.std(0).clamp_min(1e-6))
        target = (delta - self.y_mean) / self.y_std
        optimizer = torch.optim.Adam(self.net.parameters(), lr)
        generator = torch.Generator().manual_seed(seed)
        loss = math.nan
        for _ in progress_bars.bar(epochs, 'epoch', 'dynamics model', allowed=progress, iterable=range(epochs)):
            order, total = torch.randperm(len(x_obs), generator=generator), 0.0
            for start in range(0, len(order), batch):
                idx = order[start:start + batch]
                step_loss = ((self.net(self._inputs(x_obs[idx], x_act[idx])) - target[idx]) ** 2).mean()
                optimizer.zero_grad()
                step_loss.backward()
                optimizer.step()
                total += step_loss.item() * len(idx)
            loss = total / len(order)
        return loss


class PlanningAgent(nn.Module):
    """Plans of H actions from an arrival-aware rollout of ``model`` under the ``base`` policy.

    ``start_plan`` is what the env applies before the first plan arrives, cycled (a held action is a
    one-element cycle); ``hold_action`` is what it applies when a plan runs out, None for the plan's
    last element (hold last).
    """

    kind = 'model_plan'

    def __init__(self, base: BaseAgent, model: dict[str, Any], plan_horizon: int, lead: int,
                 start_plan: list[Action], hold_action: Action | None = None) -> None:
        super().__init__()
        self.base = base
        if not isinstance(self.base, (MlpAgent, GaussianAgent)) or self.base.plan_horizon != 1:
            raise ValueError('the base policy of a model planner must be an MLP or Gaussian agent with single actions')
        self.continuous = isinstance(self.base, GaussianAgent)
        self.action_dim = self.base.action_dim if self.continuous else 0
        self.n_actions = 0 if self.continuous else self.base.n_actions
        self.model = DynamicsModel(model['obs_dim'], model.get('n_actions', 0), tuple(model['hidden']),
                                   model.get('action_dim', 0))
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
        return spec if self.hold_action is None else {**spec, 'hold_action': self.hold_action}

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
            seq: Any = None) -> tuple[np.ndarray, PlanState]:
        """Plans ``[B, H]`` (or ``[B, H, A]``) for observations ``[B, obs_dim]`` taken at ticks ``seq`` ``[B]``.

        ``state`` is what the previous call returned (None, or zeroed rows, at episode starts).
        """
        if seq is None:
            raise ValueError('a model planner needs the tick (seq) of every observation')
        x = as_batch(obs)
        seq_t = torch.as_tensor(np.asarray(seq), dtype=torch.long).reshape(-1)
        width = max(self.action_dim, 1)
        memory = (state[0][0] if state is not None
                  else torch.zeros(x.shape[0], 2 + self.plan_horizon * width))
        sent, prev_seq = memory[:, 0] > 0, memory[:, 1].long()
        prev_plan = memory[:, 2:].view(-1, self.plan_horizon, width)
        prev_plan = prev_plan if self.continuous else prev_plan[..., 0].long()
        plan = []
        for j in range(self.plan_horizon):
            if j < self.lead:
                action = self._env_action(seq_t + 1 + j, sent, prev_seq, prev_plan)
            else:
                action = torch.as_tensor(self.base.act(x, deterministic=deterministic)[0])
            plan.append(action)
            x = self.model(x, action)
        plans = torch.stack(plan, 1)
        memory = torch.cat([torch.ones(len(plans), 1), seq_t.view(-1, 1).float(),
                            plans.float().reshape(len(plans), -1)], 1)
        return plans.numpy(), (memory.unsqueeze(0),)


def _rows(mask: Tensor, like: Tensor) -> Tensor:
    """A ``[B]`` mask shaped to broadcast over ``like``'s rows (``[B]`` or ``[B, A]``)."""
    return mask.view(-1, *([1] * (like.dim() - 1)))
