"""PPO on a worker's batch collected by an older policy: the lag is corrected, not ignored.

With a version lag up to ``vtrace_lag``, PPO's ratio is taken against the behaviour policy's
logged log-probabilities μ (the batch's ``logprobs``), with GAE advantages: at lag 0 this is plain
PPO. Beyond it, V-trace (Espeholt et al., 2018) computes value targets and advantages with
truncated importance weights ρ = min(ρ̄, π₀/μ) and c = min(c̄, π₀/μ) against π₀, the learner's
policy at the start of the update, and the clipped ratio is taken against π₀: a stale batch then
still moves the policy, by at most the clip range, instead of being clipped away entirely.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from calf_agent.dist_wire import TrajectoryBatch
from calf_agent.policies import MlpAgent
from calf_agent.ppo import PPOConfig, compute_gae, ppo_loss


@dataclass(frozen=True)
class LagConfig:
    """How stale batches are corrected."""

    vtrace_lag: int = 2  # above this lag, V-trace targets and a ratio against the learner's own policy
    rho_bar: float = 1.0
    c_bar: float = 1.0


def vtrace(behaviour_logp: Tensor, target_logp: Tensor, rewards: Tensor, values: Tensor, dones: Tensor,
           next_value: Tensor, next_done: Tensor, gamma: float, rho_bar: float = 1.0, c_bar: float = 1.0
           ) -> tuple[Tensor, Tensor]:
    """V-trace value targets ``vs`` and policy-gradient advantages ``ρ_t (r_t + γ v_{t+1} - V(x_t))``, ``[T, N]``.

    ``dones`` follows ``compute_gae``: ``dones[t]`` is 1 where ``obs[t]`` starts an episode.
    """
    ratio = (target_logp - behaviour_logp).exp()
    rho, c = ratio.clamp(max=rho_bar), ratio.clamp(max=c_bar)
    steps = rewards.shape[0]
    nonterminal = torch.cat([1.0 - dones[1:], (1.0 - next_done).unsqueeze(0)])
    following = torch.cat([values[1:], next_value.unsqueeze(0)])
    deltas = rho * (rewards + gamma * following * nonterminal - values)
    corrections = torch.zeros_like(rewards)
    acc = torch.zeros_like(next_value)
    for t in reversed(range(steps)):
        acc = deltas[t] + gamma * c[t] * nonterminal[t] * acc
        corrections[t] = acc
    vs = values + corrections
    vs_following = torch.cat([vs[1:], next_value.unsqueeze(0)])
    advantages = rho * (rewards + gamma * vs_following * nonterminal - values)
    return vs, advantages


def bootstrapped_rewards(agent: MlpAgent, batch: TrajectoryBatch, gamma: float) -> Tensor:
    """Rewards with ``γ V(final_obs)`` added where an episode was truncated (not terminated)."""
    rewards = batch.rewards.clone()
    if len(batch.final_index):
        with torch.no_grad():
            values = agent.get_value(batch.final_obs)
        rows, cols = batch.final_index[:, 0], batch.final_index[:, 1]
        keep = ~batch.terminated[rows, cols]
        rewards[rows[keep], cols[keep]] += gamma * values[keep]
    return rewards


def update_on_batch(agent: MlpAgent, optimizer: torch.optim.Optimizer, batch: TrajectoryBatch, lag: int,
                    ppo: PPOConfig, lag_cfg: LagConfig, rng: np.random.Generator) -> dict[str, float]:
    """PPO epochs on one batch, lag-corrected as the module doc says; mean loss stats plus ``vtrace``."""
    steps, envs = batch.rewards.shape
    flat_obs, flat_actions = batch.obs.flatten(0, 1), batch.actions.flatten(0, 1)
    with torch.no_grad():
        values = agent.get_value(flat_obs).view(steps, envs)
        next_value = agent.get_value(batch.next_obs)
        target_logp = agent.get_action_and_value(flat_obs, flat_actions)[1].view(steps, envs)
    rewards = bootstrapped_rewards(agent, batch, ppo.gamma)
    use_vtrace = lag > lag_cfg.vtrace_lag
    if use_vtrace:
        returns, advantages = vtrace(batch.logprobs, target_logp, rewards, values, batch.dones, next_value,
                                     batch.next_done, ppo.gamma, lag_cfg.rho_bar, lag_cfg.c_bar)
        old_logp = target_logp
    else:
        advantages, returns = compute_gae(rewards, values, batch.dones, next_value, batch.next_done,
                                          ppo.gamma, ppo.gae_lambda)
        old_logp = batch.logprobs
    flat = (flat_obs, flat_actions, old_logp.flatten(), values.flatten(), advantages.flatten(), returns.flatten())
    totals: dict[str, float] = {}
    count = 0
    for _ in range(ppo.update_epochs):
        for idx in np.array_split(rng.permutation(steps * envs), ppo.num_minibatches):
            index = torch.as_tensor(idx)
            obs, actions, mb_old, mb_values, mb_adv, mb_returns = (f[index] for f in flat)
            _, logprob, entropy, value = agent.get_action_and_value(obs, actions)
            loss, stats = ppo_loss(logprob, mb_old, mb_adv, value, mb_values, mb_returns, entropy, ppo.clip_coef,
                                   ppo.vf_coef, ppo.ent_coef, ppo.clip_vloss, ppo.norm_adv)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), ppo.max_grad_norm, foreach=True)
            optimizer.step()
            for key, value_ in stats.items():
                totals[key] = totals.get(key, 0.0) + value_
            count += 1
    means = {key: total / count for key, total in totals.items()}
    means['vtrace'] = float(use_vtrace)
    return means
