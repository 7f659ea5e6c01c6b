"""Continuous actions in CleanRL's form (ppo_continuous_action.py): a diagonal Gaussian actor with a
state-independent log-std, and the running observation normaliser (``calf_agent.normalize``) that travels in its checkpoint.

``GaussianAgent.get_action_and_value`` and ``get_value`` take normalised inputs (the trainer stores
them); ``act`` takes raw features, normalises them with the saved statistics and clips the actions to
the bounds, as executed. Log-probabilities are always of the unclipped sample.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from calf_agent.normalize import RunningNorm
from calf_agent.policies import as_batch, layer_init, mlp
from calf_agent.sac import SacActor

LOG_2PI = math.log(2 * math.pi)


def gaussian_heads(mean: Tensor, log_std: Tensor, action: Tensor | None = None, deterministic: bool = False,
                   mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Sample (or score ``action``) from a diagonal Gaussian over ``[B, H, A]`` (H plan elements).

    ``log_std`` broadcasts against ``mean``. Returns ``(action [B, H, A], logprob [B], entropy [B])``:
    the logprob sums over dimensions and, where ``mask`` (``[B, H]``, 0/1) is given, over the
    executed elements only; the entropy sums over everything.
    """
    log_std = log_std.expand_as(mean)
    std = log_std.exp()
    if action is None:
        action = mean if deterministic else mean + std * torch.randn_like(mean)
    else:
        action = action.view_as(mean)
    per_dim = -0.5 * ((action - mean) / std) ** 2 - log_std - 0.5 * LOG_2PI
    per_element = per_dim.sum(-1)
    logprob = (per_element if mask is None else per_element * mask.view_as(per_element)).sum(-1)
    entropy = (0.5 + 0.5 * LOG_2PI + log_std).sum((-1, -2))
    return action, logprob, entropy


class GaussianAgent(nn.Module):
    """Separate tanh MLPs for actor mean and critic, one learned log-std per action dimension.

    ``low``/``high`` are the action bounds ``act`` clips to. With ``plan_horizon`` H > 1 the actor
    outputs a plan of H actions, shape ``[B, H, A]``; with H = 1 actions are ``[B, A]``.
    """

    kind = 'gaussian'

    def __init__(self, obs_dim: int, action_dim: int, low: Sequence[float], high: Sequence[float],
                 hidden: tuple[int, ...] = (64, 64), plan_horizon: int = 1, log_std_init: float = 0.0) -> None:
        super().__init__()
        if obs_dim < 1 or action_dim < 1 or plan_horizon < 1:
            raise ValueError(f'obs_dim, action_dim and plan_horizon must be >= 1, got '
                             f'{obs_dim}, {action_dim}, {plan_horizon}')
        if not hidden or min(hidden) < 1:
            raise ValueError(f'hidden must be a non-empty tuple of positive sizes, got {hidden!r}')
        bounds = [float(x) for x in low], [float(x) for x in high]  # checked as numbers: no tensor on torch's meta device
        if any(len(b) != action_dim for b in bounds) or not all(lo <= hi for lo, hi in zip(*bounds)):
            raise ValueError(f'low and high must be {action_dim} bounds with low <= high, got {low} and {high}')
        low_t, high_t = (torch.tensor(b, dtype=torch.float32) for b in bounds)
        self.obs_dim, self.action_dim, self.hidden = obs_dim, action_dim, tuple(hidden)
        self.plan_horizon, self.log_std_init = plan_horizon, log_std_init
        self.register_buffer('low', low_t)
        self.register_buffer('high', high_t)
        self.obs_norm = RunningNorm(obs_dim)
        self.critic = nn.Sequential(mlp(obs_dim, hidden), layer_init(nn.Linear(hidden[-1], 1), 1.0))
        self.actor_mean = nn.Sequential(mlp(obs_dim, hidden),
                                        layer_init(nn.Linear(hidden[-1], action_dim * plan_horizon), 0.01))
        self.actor_logstd = nn.Parameter(torch.full((1, 1, action_dim), float(log_std_init)))

    def spec(self) -> dict[str, Any]:
        """The constructor arguments, for checkpoints."""
        return {'kind': self.kind, 'obs_dim': self.obs_dim, 'action_dim': self.action_dim,
                'low': self.low.tolist(), 'high': self.high.tolist(), 'hidden': list(self.hidden),
                'plan_horizon': self.plan_horizon, 'log_std_init': self.log_std_init}

    def get_value(self, x: Tensor) -> Tensor:
        """State values of normalised inputs, shape ``[B]``."""
        return self.critic(x).squeeze(-1)

    def get_action_and_value(self, x: Tensor, action: Tensor | None = None, mask: Tensor | None = None,
                             deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(action, logprob, entropy, value)`` for normalised inputs; samples when ``action`` is None.

        The action is unclipped, ``[B, A]`` (or ``[B, H, A]`` for plans).
        """
        mean = self.actor_mean(x).view(x.shape[0], self.plan_horizon, self.action_dim)
        action, logprob, entropy = gaussian_heads(mean, self.actor_logstd, action, deterministic, mask)
        if self.plan_horizon == 1:
            action = action.squeeze(1)
        return action, logprob, entropy, self.get_value(x)

    def clip(self, action: Tensor) -> Tensor:
        """``action`` clipped to the bounds, as it is executed."""
        return torch.maximum(torch.minimum(action, self.high), self.low)

    def mean_action(self, obs: Tensor) -> Tensor:
        """The deterministic (mean) first actions ``[B, A]``, clipped to the bounds, for raw features ``[B, obs_dim]``,
        differentiably."""
        return self.clip(self.actor_mean(self.obs_norm(obs))[:, :self.action_dim])

    @torch.inference_mode()
    def act(self, obs: np.ndarray, state: None = None, deterministic: bool = False, seq: Any = None,
            applied_seq: Any = None) -> tuple[np.ndarray, None]:
        """Clipped actions for raw features ``[obs_dim]`` or ``[B, obs_dim]``; state, seq and applied_seq are unused."""
        action = self.get_action_and_value(self.obs_norm(as_batch(obs)), deterministic=deterministic)[0]
        return self.clip(action).numpy(), None


def acts_continuously(agent: nn.Module) -> bool:
    """Whether ``agent`` sends Box actions: a Gaussian or SAC policy, or a model planner over one."""
    kinds = (GaussianAgent, SacActor)
    return isinstance(agent, kinds) or isinstance(getattr(agent, 'base', None), kinds)
