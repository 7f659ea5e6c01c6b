"""Learned dynamics for the model planner: an ensemble of MLPs, fitted on multi-step open-loop rollouts.

``EnsembleDynamics`` holds K MLPs (one batched weight tensor per layer) that each predict the normalised
change of state, ``s' = s + f_k(s, a)``. Every member rolls its own trajectory; the planner acts on their
mean, and their spread (``disagreement``) says how far the model has left what it knows.

``fit`` trains on windows of k consecutive transitions of one episode: from the window's first state each
member is rolled open-loop over the recorded actions (teacher-forced actions, predicted states fed back),
and the loss at step j is the squared error in units of j typical one-step changes, so that every step of
the window weighs alike. k = 1 is the usual one-step loss; k ramps up to ``FitConfig.rollout`` over the
first half of the epochs. ``DynamicsModel`` is the single MLP of planner checkpoints from before the
ensemble, kept so that they still load.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from calf_agent.policies import mlp
from calf_core import progress as progress_bars

MAX_MEMBERS = 64
INPUT_BOUND = 10.0
"""Inputs are clamped to this many standard deviations of the training data: a rollout that leaves the data
drifts by bounded steps instead of blowing up, in training and in a plan."""


class Transitions(NamedTuple):
    """Transitions in the order they ran; ``follows[i]``: transition i + 1 starts where i ended (same episode)."""

    obs: np.ndarray
    actions: np.ndarray
    next_obs: np.ndarray
    follows: np.ndarray

    def __len__(self) -> int:
        return len(self.obs)

    def window_starts(self, k: int) -> np.ndarray:
        """Indices i at which k consecutive transitions i .. i + k - 1 lie in one episode."""
        run = np.ones(len(self.obs), np.int64)  # transitions left in the episode from i on
        for i in range(len(self.obs) - 2, -1, -1):
            if self.follows[i]:
                run[i] = run[i + 1] + 1
        return np.flatnonzero(run >= k)

    @staticmethod
    def concat(parts: list[Transitions]) -> Transitions:
        """The parts one after the other; no window spans two parts."""
        follows = [np.concatenate([p.follows[:-1], [False]]) if len(p) else p.follows for p in parts]
        return Transitions(*(np.concatenate([getattr(p, f) for p in parts]) for f in ('obs', 'actions', 'next_obs')),
                           np.concatenate(follows).astype(bool))


class EnsembleLinear(nn.Module):
    """K independent linear layers applied to ``[K, B, in]`` at once."""

    def __init__(self, members: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(members, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(members, 1, out_dim))

    def forward(self, x: Tensor) -> Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleDynamics(nn.Module):
    """K MLPs (SiLU) on normalised inputs, each predicting the normalised change of state.

    Discrete actions (``n_actions``) enter one-hot, continuous ones (``action_dim`` values) as they are.
    """

    def __init__(self, obs_dim: int, n_actions: int = 0, hidden: tuple[int, ...] = (200, 200),
                 action_dim: int = 0, members: int = 5) -> None:
        super().__init__()
        if (n_actions > 0) == (action_dim > 0):
            raise ValueError(f'give n_actions (discrete) or action_dim (continuous), got {n_actions} and {action_dim}')
        if not 1 <= members <= MAX_MEMBERS:
            raise ValueError(f'an ensemble has 1 to {MAX_MEMBERS} members, got {members}')
        self.obs_dim, self.n_actions, self.action_dim = obs_dim, n_actions, action_dim
        self.hidden, self.members = tuple(hidden), members
        inputs = obs_dim + n_actions + action_dim
        sizes = (inputs, *self.hidden, obs_dim)
        self.layers = nn.ModuleList(EnsembleLinear(members, a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        for name, size in (('x_mean', inputs), ('x_std', inputs), ('y_mean', obs_dim), ('y_std', obs_dim)):
            self.register_buffer(name, torch.zeros(size) if 'mean' in name else torch.ones(size))

    def spec(self) -> dict[str, Any]:
        actions = {'n_actions': self.n_actions} if self.n_actions else {'action_dim': self.action_dim}
        return {'obs_dim': self.obs_dim, **actions, 'hidden': list(self.hidden), 'members': self.members}

    def encode(self, action: Tensor) -> Tensor:
        """Actions ``[..., B]`` (indices) one-hot, or ``[..., B, A]`` (values) as floats: ``[..., B, inputs]``."""
        if self.n_actions:
            return nn.functional.one_hot(action.long(), self.n_actions).float()
        return action.float().reshape(*action.shape[:-1], self.action_dim)

    def step(self, states: Tensor, actions: Tensor) -> Tensor:
        """Each member's next state ``[K, B, obs]`` from its state ``[K, B, obs]`` and encoded actions
        ``[K or 1, B, inputs - obs]``."""
        x = (torch.cat([states, actions.expand(len(states), -1, -1)], -1) - self.x_mean) / self.x_std
        x = x.clamp(-INPUT_BOUND, INPUT_BOUND)
        *hidden, last = self.layers  # iterated, not sliced: a slice builds a new ModuleList on every step
        for layer in hidden:
            x = nn.functional.silu(layer(x))
        return states + last(x) * self.y_std + self.y_mean

    def rollout_step(self, states: Tensor, action: Tensor) -> Tensor:
        """``step`` with one raw action per row (``[B]`` or ``[B, A]``), the same for every member."""
        return self.step(states, self.encode(action.reshape(len(action), -1) if self.action_dim else action)[None])

    def normalise(self, data: Transitions) -> None:
        """Set the input and output scales from ``data``."""
        x_obs = torch.as_tensor(data.obs, dtype=torch.float32)
        raw = torch.cat([x_obs, self.encode(torch.as_tensor(data.actions))], -1)
        delta = torch.as_tensor(data.next_obs, dtype=torch.float32) - x_obs
        self.x_mean.copy_(raw.mean(0))
        self.x_std.copy_(raw.std(0).clamp_min(1e-6))
        self.y_mean.copy_(delta.mean(0))
        self.y_std.copy_(delta.std(0).clamp_min(1e-6))


class DynamicsModel(nn.Module):
    """The single tanh MLP of planner checkpoints saved before the ensemble (a ``model`` spec without
    ``members``): loaded and run, no longer trained."""

    members = 1

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

    def rollout_step(self, states: Tensor, action: Tensor) -> Tensor:
        """The next state ``[1, B, obs]`` from ``[1, B, obs]`` and raw actions ``[B]`` or ``[B, A]``."""
        encoded = (nn.functional.one_hot(action.long(), self.n_actions).float() if self.n_actions
                   else action.float().reshape(-1, self.action_dim))
        obs = states[0]
        x = (torch.cat([obs, encoded], -1) - self.x_mean) / self.x_std
        return (obs + self.net(x) * self.y_std + self.y_mean)[None]


def make_dynamics(spec: dict[str, Any]) -> EnsembleDynamics | DynamicsModel:
    """The model a planner spec's ``model`` describes: an ensemble, or (no ``members``) the old single MLP."""
    args = {k: v for k, v in spec.items() if k != 'hidden'}
    cls = EnsembleDynamics if 'members' in spec else DynamicsModel
    return cls(**args, hidden=tuple(spec['hidden']))


def disagreement(states: Tensor, scale: Tensor) -> Tensor:
    """The members' spread ``[B]``: their std per value in units of ``scale`` (a typical one-step change),
    averaged over the values; 0 for one member."""
    if len(states) < 2:
        return torch.zeros(states.shape[1])
    return (states.std(0) / scale).mean(-1)


@dataclass(frozen=True)
class FitConfig:
    """How an ensemble is fitted."""

    epochs: int = 30
    rollout: int = 1  # k: steps of the open-loop loss (1: one-step changes only)
    batch: int = 256
    learning_rate: float = 1e-3
    grad_clip: float = 10.0

    def __post_init__(self) -> None:
        if min(self.epochs, self.rollout, self.batch) < 1 or not 0 < self.learning_rate < 1:
            raise ValueError('epochs, rollout and batch must be >= 1 and learning_rate in (0, 1)')


def fit(model: EnsembleDynamics, data: Transitions, cfg: FitConfig, seed: int, progress: bool = False,
        optimizer: torch.optim.Optimizer | None = None) -> float:
    """Train ``model`` on ``data`` (its scales as they are: see ``normalise``); the last epoch's mean loss.

    Each member draws its own minibatches of windows (with replacement), so the members see different data.
    """
    obs = torch.as_tensor(data.obs, dtype=torch.float32)
    nxt = torch.as_tensor(data.next_obs, dtype=torch.float32)
    act = model.encode(torch.as_tensor(data.actions))
    optimizer = optimizer or torch.optim.Adam(model.parameters(), cfg.learning_rate)
    generator = torch.Generator().manual_seed(seed)
    ramp = max(1, cfg.epochs // 2)
    loss = math.nan
    for epoch in progress_bars.bar(cfg.epochs, 'epoch', 'dynamics model', allowed=progress,
                                   iterable=range(cfg.epochs)):
        k = min(cfg.rollout, 1 + epoch * cfg.rollout // ramp)
        starts = torch.as_tensor(data.window_starts(k))
        if len(starts) == 0:
            raise ValueError(f'no {k} consecutive transitions of one episode to fit on')
        total, batches = 0.0, max(1, len(starts) // cfg.batch)
        for _ in range(batches):
            idx = starts[torch.randint(len(starts), (model.members, cfg.batch), generator=generator)]
            step_loss = multi_step_loss(model, obs, act, nxt, idx, k)
            optimizer.zero_grad()
            step_loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            total += step_loss.item()
        loss = total / batches
    return loss


def multi_step_loss(model: EnsembleDynamics, obs: Tensor, act: Tensor, nxt: Tensor, idx: Tensor, k: int) -> Tensor:
    """Mean over j = 1..k of the squared open-loop error j steps on, in units of j typical changes; ``idx``
    ``[K, b]`` the windows' first transitions."""
    x, loss = obs[idx], obs.new_zeros(())
    for j in range(k):
        x = model.step(x, act[idx + j])
        loss = loss + (((x - nxt[idx + j]) / ((j + 1) * model.y_std)) ** 2).mean()
    return loss / k


@torch.inference_mode()
def open_loop(model: EnsembleDynamics | DynamicsModel, data: Transitions, horizon: int,
              stride: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Open-loop errors and disagreement on ``data``'s windows of ``horizon`` (every ``stride``-th start, default
    ``horizon``): the squared error of the members' mean ``[n, horizon, obs]`` and the disagreement
    ``[n, horizon]`` at each step."""
    starts = data.window_starts(horizon)[::stride or horizon]
    x = torch.as_tensor(data.obs[starts], dtype=torch.float32)[None].repeat(model.members, 1, 1)
    scale = model.y_std
    errors, spread = [], []
    for j in range(horizon):
        x = model.rollout_step(x, torch.as_tensor(data.actions[starts + j]))
        errors.append(((x.mean(0) - torch.as_tensor(data.next_obs[starts + j])) ** 2).numpy())
        spread.append(disagreement(x, scale).numpy())
    return np.stack(errors, 1), np.stack(spread, 1)
