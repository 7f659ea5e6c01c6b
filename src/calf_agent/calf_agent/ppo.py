"""PPO's math, pulled out of the training loop: GAE, the clipped loss and the rollout buffer."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters; defaults are CleanRL's ppo.py."""

    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None

    def __post_init__(self) -> None:
        if self.learning_rate <= 0 or self.num_minibatches < 1 or self.update_epochs < 1:
            raise ValueError('learning_rate, num_minibatches and update_epochs must be positive, got '
                             f'{self.learning_rate}, {self.num_minibatches}, {self.update_epochs}')
        if not (0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1):
            raise ValueError(f'gamma and gae_lambda must lie in [0, 1], got {self.gamma}, {self.gae_lambda}')


def compute_gae(rewards: Tensor, values: Tensor, dones: Tensor, next_value: Tensor, next_done: Tensor,
                gamma: float, gae_lambda: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimates and returns, both ``[T, N]`` (CleanRL's convention).

    ``dones[t]`` is 1 where ``obs[t]`` starts a new episode, i.e. step ``t - 1`` ended one;
    ``next_value``/``next_done`` (``[N]``) describe the observation after the last step.
    """
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        if t == rewards.shape[0] - 1:
            nonterminal, following = 1.0 - next_done, next_value
        else:
            nonterminal, following = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * following * nonterminal - values[t]
        advantages[t] = last = delta + gamma * gae_lambda * nonterminal * last
    return advantages, advantages + values


def ppo_loss(new_logprob: Tensor, old_logprob: Tensor, advantages: Tensor, new_value: Tensor,
             old_value: Tensor, returns: Tensor, entropy: Tensor, clip_coef: float, vf_coef: float,
             ent_coef: float, clip_vloss: bool = True, norm_adv: bool = True
             ) -> tuple[Tensor, dict[str, float]]:
    """The clipped PPO objective for one minibatch, and its diagnostics as floats.

    Stats: ``policy_loss``, ``value_loss``, ``entropy``, ``approx_kl``, ``old_approx_kl``, ``clipfrac``.
    """
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    if norm_adv and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    v_loss_unclipped = (new_value - returns) ** 2
    if clip_vloss:
        v_clipped = old_value + (new_value - old_value).clamp(-clip_coef, clip_coef)
        v_loss = 0.5 * torch.max(v_loss_unclipped, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * v_loss_unclipped.mean()
    entropy_mean = entropy.mean()
    loss = pg_loss - ent_coef * entropy_mean + vf_coef * v_loss
    with torch.no_grad():
        stats = {
            'policy_loss': pg_loss.item(),
            'value_loss': v_loss.item(),
            'entropy': entropy_mean.item(),
            'approx_kl': ((ratio - 1) - logratio).mean().item(),
            'old_approx_kl': (-logratio).mean().item(),
            'clipfrac': ((ratio - 1.0).abs() > clip_coef).float().mean().item(),
        }
    return loss, stats


class Minibatch(NamedTuple):
    """Flat minibatch tensors; for recurrent minibatches, time-major over ``env_idx``."""

    obs: Tensor
    actions: Tensor
    logprobs: Tensor
    values: Tensor
    dones: Tensor
    advantages: Tensor
    returns: Tensor
    masks: Tensor  # [B, H] executed plan elements (all ones unless the buffer tracks them)
    env_idx: Tensor | None


class RolloutBuffer:
    """Preallocated ``[T, N]`` storage for one PPO rollout.

    Discrete actions are stored as integers; ``continuous`` ones as floats, their last dimension the
    action's (``action_shape`` ``(A,)`` or ``(H, A)``).
    ``masks[t, n, j]`` marks plan element ``j`` of step ``t`` as executed. It starts at 1 unless
    ``track_executed``; then it starts at 0 and ``mark_executed`` sets it from the env's reports.
    """

    def __init__(self, num_steps: int, num_envs: int, obs_dim: int, action_shape: tuple[int, ...] = (),
                 track_executed: bool = False, continuous: bool = False) -> None:
        self.num_steps, self.num_envs = num_steps, num_envs
        self.obs = torch.zeros(num_steps, num_envs, obs_dim)
        self.actions = torch.zeros(num_steps, num_envs, *action_shape,
                                   dtype=torch.float32 if continuous else torch.long)
        self.logprobs = torch.zeros(num_steps, num_envs)
        self.values = torch.zeros(num_steps, num_envs)
        self.dones = torch.zeros(num_steps, num_envs)
        self.rewards = torch.zeros(num_steps, num_envs)
        self.track_executed = track_executed
        plan_shape = action_shape[:-1] if continuous else action_shape
        self.masks = torch.full((num_steps, num_envs, *(plan_shape or (1,))), float(not track_executed))
        self.pos = 0

    @property
    def full(self) -> bool:
        """True once ``num_steps`` steps have been added."""
        return self.pos == self.num_steps

    def reset(self) -> None:
        """Start a new rollout (the storage is overwritten, not cleared; tracked masks are)."""
        self.pos = 0
        if self.track_executed:
            self.masks.zero_()

    def mark_executed(self, executed: np.ndarray) -> None:
        """OR ``executed[n, l, j]`` (element ``j`` of env ``n``'s plan from ``l`` steps before the
        last added step ran) into the masks; steps before this rollout are dropped."""
        last = self.pos - 1
        for lag in range(min(executed.shape[1], last + 1)):
            row = torch.as_tensor(executed[:, lag], dtype=torch.float32)
            self.masks[last - lag] = torch.maximum(self.masks[last - lag], row)

    def add(self, obs: Tensor, done: Tensor, action: Tensor, logprob: Tensor, value: Tensor,
            reward: Tensor | np.ndarray) -> None:
        """Store one vector step: ``done`` flags ``obs`` as the first of an episode."""
        if self.full:
            raise IndexError(f'rollout buffer is full ({self.num_steps} steps): call reset() first')
        t = self.pos
        self.obs[t] = obs
        self.dones[t] = done
        self.actions[t] = action
        self.logprobs[t] = logprob
        self.values[t] = value
        self.rewards[t] = torch.as_tensor(reward)
        self.pos += 1

    def minibatches(self, advantages: Tensor, returns: Tensor, num_minibatches: int,
                    rng: np.random.Generator, by_env: bool = False) -> Iterator[Minibatch]:
        """One epoch of shuffled minibatches covering every stored step once.

        ``by_env`` keeps whole env sequences together (for recurrent agents): each minibatch
        holds ``num_envs / num_minibatches`` envs, all ``T`` steps, flattened time-major.
        """
        fields = (self.obs, self.actions, self.logprobs, self.values, self.dones, advantages, returns, self.masks)
        if by_env:
            for env_idx in np.array_split(rng.permutation(self.num_envs), num_minibatches):
                idx = torch.as_tensor(env_idx)
                yield Minibatch(*(f[:, idx].flatten(0, 1) for f in fields), env_idx=idx)
            return
        flat = [f.flatten(0, 1) for f in fields]
        for idx in np.array_split(rng.permutation(self.num_steps * self.num_envs), num_minibatches):
            index = torch.as_tensor(idx)
            yield Minibatch(*(f[index] for f in flat), env_idx=None)
