"""Soft Actor-Critic for Box actions (Haarnoja et al. 2018, in the form of CleanRL's sac_continuous_action
and Stable-Baselines3's SAC): a tanh-squashed Gaussian actor, twin soft Q critics with polyak-averaged
targets, automatic entropy tuning and a bounded, preallocated numpy replay buffer.

Pure: no env, no logging (``calf_agent.sac_training`` drives it). The actor works on running-normalised
observations (``RunningNorm``, saved with its weights, as ``GaussianAgent``'s) and on actions in
``[-1, 1]``; ``SacActor.act`` takes raw features and returns actions scaled to the bounds. Deployed, it
acts deterministically: the tanh of the mean, scaled to the bounds.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from calf_agent.normalize import RunningNorm
from calf_agent.policies import as_batch

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
LOG_2PI = math.log(2 * math.pi)
LOG_2 = math.log(2.0)


@dataclass(frozen=True)
class SacConfig:
    """SAC's settings (the defaults: CleanRL's and SB3's, one learning rate for actor, critics and alpha)."""

    learning_rate: float = 3e-4
    gamma: float = 0.99
    tau: float = 0.005  # polyak step of the target critics, every update
    batch_size: int = 256
    buffer_size: int = 1_000_000  # transitions kept (allocated: at most the run's total steps)
    learning_starts: int = 1_000  # env steps of uniform random actions before the first update
    init_alpha: float = 1.0  # initial entropy coefficient
    autotune: bool = True  # learn alpha towards ``target_entropy``; False keeps ``init_alpha``
    target_entropy: float | None = None  # None: -(action values)
    smoothness: float = 0.0  # CAPS's temporal term: weight of |mean(x) - mean(x')| (next decision) in the actor's loss

    def __post_init__(self) -> None:
        if not (self.learning_rate > 0 and 0 < self.gamma <= 1 and 0 < self.tau <= 1 and self.init_alpha > 0):
            raise ValueError(f'sac needs learning_rate > 0, 0 < gamma <= 1, 0 < tau <= 1 and init_alpha > 0, got '
                             f'{self.learning_rate}, {self.gamma}, {self.tau}, {self.init_alpha}')
        if not 0 <= self.smoothness <= 100:
            raise ValueError(f'sac needs smoothness in [0, 100], got {self.smoothness}')
        if min(self.batch_size, self.buffer_size) < 1 or self.learning_starts < 0:
            raise ValueError(f'sac needs batch_size, buffer_size >= 1 and learning_starts >= 0, got '
                             f'{self.batch_size}, {self.buffer_size}, {self.learning_starts}')


def relu_mlp(in_dim: int, hidden: Sequence[int]) -> nn.Sequential:
    """ReLU MLP trunk ``in_dim -> hidden[0] -> ... -> hidden[-1]`` (PyTorch's default init)."""
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(in_dim, size), nn.ReLU()]
        in_dim = size
    return nn.Sequential(*layers)


class SacActor(nn.Module):
    """A tanh-squashed diagonal Gaussian over ``action_dim`` values, its log-std a function of the state.

    ``sample`` and ``unit_mean`` take normalised inputs and work in ``[-1, 1]``; ``scale`` maps that onto
    the bounds ``[low, high]``; ``act`` does all three for raw features, as a policy node does. The columns
    ``unscaled`` (the delay state's: ``Representation.delay_state_columns``) reach the networks as they are.
    """

    kind = 'sac'
    plan_horizon = 1

    def __init__(self, obs_dim: int, action_dim: int, low: Sequence[float], high: Sequence[float],
                 hidden: tuple[int, ...] = (256, 256), unscaled: Sequence[int] = (0, 0)) -> None:
        super().__init__()
        if obs_dim < 1 or action_dim < 1:
            raise ValueError(f'obs_dim and action_dim must be >= 1, got {obs_dim}, {action_dim}')
        if not hidden or min(hidden) < 1:
            raise ValueError(f'hidden must be a non-empty tuple of positive sizes, got {hidden!r}')
        bounds = [float(x) for x in low], [float(x) for x in high]  # numbers: no tensor on torch's meta device
        if any(len(b) != action_dim for b in bounds) or not all(
                math.isfinite(lo) and math.isfinite(hi) and lo < hi for lo, hi in zip(*bounds)):
            raise ValueError(f'SAC needs {action_dim} finite bounds with low < high, got {low} and {high}')
        self.obs_dim, self.action_dim, self.hidden = obs_dim, action_dim, tuple(hidden)
        low_t, high_t = (torch.tensor(b, dtype=torch.float32) for b in bounds)
        self.register_buffer('low', low_t)
        self.register_buffer('high', high_t)
        self.obs_norm = RunningNorm(obs_dim, unscaled=tuple(unscaled))
        self.trunk = relu_mlp(obs_dim, hidden)
        self.mean = nn.Linear(hidden[-1], action_dim)
        self.log_std = nn.Linear(hidden[-1], action_dim)

    def spec(self) -> dict[str, Any]:
        """The constructor arguments, for checkpoints."""
        start, stop = self.obs_norm.unscaled
        return {'kind': self.kind, 'obs_dim': self.obs_dim, 'action_dim': self.action_dim,
                'low': self.low.tolist(), 'high': self.high.tolist(), 'hidden': list(self.hidden),
                **({'unscaled': [start, stop]} if stop > start else {})}

    def sample(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(action in [-1, 1] [B, A], log-probability [B])`` of a reparameterised sample for normalised ``x``."""
        h = self.trunk(x)
        mean = self.mean(h)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(self.log_std(h)) + 1)
        noise = torch.randn_like(mean)
        u = mean + log_std.exp() * noise
        # log N(u) - log(1 - tanh(u)^2), the latter as 2 (log 2 - u - softplus(-2u)) for stability
        logp = (-0.5 * noise.square() - log_std - 0.5 * LOG_2PI - 2 * (LOG_2 - u - F.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), logp

    def unit_mean(self, x: Tensor) -> Tensor:
        """The deterministic action in ``[-1, 1]``: the tanh of the mean, for normalised ``x``."""
        return torch.tanh(self.mean(self.trunk(x)))

    def scale(self, unit: Tensor) -> Tensor:
        """Actions in ``[-1, 1]`` mapped onto the bounds."""
        return self.low + (unit + 1) * (0.5 * (self.high - self.low))

    def mean_action(self, obs: Tensor) -> Tensor:
        """The deterministic actions ``[B, A]`` within the bounds for raw features ``[B, obs_dim]``, differentiably."""
        return self.scale(self.unit_mean(self.obs_norm(obs)))

    @torch.inference_mode()
    def act(self, obs: np.ndarray, state: None = None, deterministic: bool = False, seq: Any = None,
            applied_seq: Any = None) -> tuple[np.ndarray, None]:
        """Actions within the bounds for raw features ``[obs_dim]`` or ``[B, obs_dim]``; state, seq and applied_seq are unused."""
        x = as_batch(obs)
        actions = self.mean_action(x) if deterministic else self.scale(self.sample(self.obs_norm(x))[0])
        return actions.numpy(), None


class TwinQ(nn.Module):
    """Two Q networks (ReLU MLPs over observation and action) evaluated together: each layer is one
    batched matmul over both, ``forward -> [2, B]``."""

    def __init__(self, in_dim: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        sizes = (in_dim, *hidden, 1)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = 1 / math.sqrt(fan_in)  # nn.Linear's default init
            self.weights.append(nn.Parameter(torch.empty(2, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(2, 1, fan_out).uniform_(-bound, bound)))

    def forward(self, obs: Tensor, action: Tensor, frozen: bool = False) -> Tensor:
        """``[2, B]``; ``frozen``: on detached weights, so that a loss through it moves only its inputs."""
        x = torch.cat([obs, action], -1).expand(2, -1, -1)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(bias.detach(), x, weight.detach()) if frozen else torch.baddbmm(bias, x, weight)
            if i < last:
                x = x.relu_()
        return x.squeeze(-1)


class ReplayBuffer:
    """The last ``capacity`` transitions in preallocated float32 arrays (a ring: memory stays flat)."""

    def __init__(self, capacity: int, obs_dim: int, action_dim: int) -> None:
        if capacity < 1:
            raise ValueError(f'capacity must be >= 1, got {capacity}')
        self.capacity, self.size, self.pos = capacity, 0, 0
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.actions = np.zeros((capacity, action_dim), np.float32)
        self.rewards = np.zeros(capacity, np.float32)
        self.terminated = np.zeros(capacity, np.float32)

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
            terminated: np.ndarray) -> None:
        """Append one row per env; the oldest rows are overwritten once full."""
        index = (self.pos + np.arange(len(rewards))) % self.capacity
        self.obs[index], self.next_obs[index], self.actions[index] = obs, next_obs, actions
        self.rewards[index], self.terminated[index] = rewards, terminated
        self.pos = int(index[-1] + 1) % self.capacity
        self.size = min(self.size + len(rewards), self.capacity)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[Tensor, ...]:
        """``(obs, actions, rewards, next_obs, terminated)`` of ``n`` rows drawn uniformly, with replacement."""
        index = rng.integers(0, self.size, n)
        return tuple(torch.from_numpy(a[index]) for a in
                     (self.obs, self.actions, self.rewards, self.next_obs, self.terminated))


class SacLearner:
    """The critics, their targets, the entropy coefficient and two optimisers around one actor.

    The critics see the actor's observations, or with ``critic_obs_dim`` other inputs of that size (BPQL's
    true states, ``calf_agent.bpql``). The actor and alpha share one optimiser (their losses are independent:
    one backward, one step); both optimisers are Adam's fused CPU kernel."""

    def __init__(self, actor: SacActor, cfg: SacConfig, critic_obs_dim: int | None = None) -> None:
        self.actor, self.cfg = actor, cfg
        self.critic = TwinQ((critic_obs_dim or actor.obs_dim) + actor.action_dim, actor.hidden)
        self.target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), requires_grad=cfg.autotune)
        self.target_entropy = -float(actor.action_dim) if cfg.target_entropy is None else cfg.target_entropy
        adam = {'lr': cfg.learning_rate, 'fused': True}
        self.actor_opt = torch.optim.Adam([*actor.parameters(), *([self.log_alpha] if cfg.autotune else [])], **adam)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), **adam)
        self._critic_params = list(self.critic.parameters())
        self._target_params = list(self.target.parameters())

    def update(self, obs: Tensor, actions: Tensor, rewards: Tensor, next_obs: Tensor, terminated: Tensor,
               states: Tensor | None = None, next_states: Tensor | None = None, discounts: Tensor | None = None
               ) -> dict[str, Tensor]:
        """One gradient step of the critics, then of the actor (its loss on the updated critics) and alpha, on a
        batch (normalised observations, actions in ``[-1, 1]``), then the polyak step; returns the losses and
        values as 0-d tensors. Alpha enters both losses as it was before the step.

        The critics see ``states``/``next_states`` if given (else the observations), and bootstrap with the
        per-row ``discounts`` if given (else gamma)."""
        cfg = self.cfg
        states = obs if states is None else states
        next_states = next_obs if next_states is None else next_states
        discount = cfg.gamma if discounts is None else discounts
        pi, logp_pi = self.actor.sample(obs)
        alpha = self.log_alpha.detach().exp()
        with torch.no_grad():
            next_pi, next_logp = self.actor.sample(next_obs)
            next_q = self.target(next_states, next_pi).min(0).values.sub_(alpha * next_logp)
            target_q = next_q.mul_(discount * (1.0 - terminated)).add_(rewards)
        q = self.critic(states, actions)
        critic_loss = 0.5 * (q - target_q).square().mean(1).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        actor_loss = (alpha * logp_pi - self.critic(states, pi, frozen=True).min(0).values).mean()
        if cfg.smoothness > 0:  # CAPS (Mysore et al., 2021): the mean action changes little from one decision to the next
            step = self.actor.unit_mean(obs) - self.actor.unit_mean(next_obs)
            actor_loss = actor_loss + cfg.smoothness * step.norm(dim=-1).mean()
        logp = logp_pi.detach()
        loss = actor_loss - (self.log_alpha * (logp + self.target_entropy)).mean() if cfg.autotune else actor_loss
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._critic_params, cfg.tau)
        return {'alpha': alpha, 'entropy': -logp.mean(), 'critic_loss': critic_loss.detach(),
                'actor_loss': actor_loss.detach(), 'q_value': q.detach().mean()}
