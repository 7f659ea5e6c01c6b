"""PPO on a worker's batch collected by an older policy: the lag is corrected, not ignored.

With a version lag up to ``vtrace_lag``, PPO's ratio is taken against the behaviour policy's
logged log-probabilities μ (the batch's ``logprobs``), with GAE advantages: at lag 0 this is plain
PPO. Beyond it, V-trace (Espeholt et al., 2018) computes value targets and advantages with
truncated importance weights ρ = min(ρ̄, π₀/μ) and c = min(c̄, π₀/μ) against π₀, the learner's
policy at the start of the update, and the clipped ratio is taken against π₀: a stale batch then
still moves the policy, by at most the clip range, instead of being clipped away entirely.
The epochs and minibatches are the single-process trainer's (``ppo.RolloutBuffer``, ``ppo.ppo_loss``):
whole env sequences for an LSTM, the loss on executed plan elements only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from calf_agent.dist.policy import PpoAgent, normalised, params, score
from calf_agent.dist.wire import TrajectoryBatch
from calf_agent.gaussian import GaussianAgent
from calf_agent.policies import LstmAgent
from calf_agent.ppo import PPOConfig, RolloutBuffer, compute_gae, ppo_loss


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


def update_on_batch(agent: PpoAgent, optimizer: torch.optim.Optimizer, batch: TrajectoryBatch, lag: int,
                    ppo: PPOConfig, lag_cfg: LagConfig, rng: np.random.Generator) -> dict[str, float]:
    """PPO epochs on one batch of any PPO agent, lag-corrected as the module doc says; mean loss stats
    plus ``vtrace``. A Gaussian agent first folds the batch's observations into its normaliser."""
    steps, envs = batch.rewards.shape
    if isinstance(agent, GaussianAgent):
        agent.obs_norm.update(batch.obs.flatten(0, 1))
    x = normalised(agent, batch.obs.flatten(0, 1))
    recurrent = isinstance(agent, LstmAgent)
    start = (batch.state_h.unsqueeze(0), batch.state_c.unsqueeze(0)) if recurrent else None
    masks = batch.masks.flatten(0, 1)
    with torch.no_grad():
        p, end = params(agent, x, start, batch.dones.flatten())
        target_logp = score(agent, p, batch.actions.flatten(0, 1), masks).view(steps, envs)
        if isinstance(agent, LstmAgent):
            values = agent.critic(agent.get_states(x, start, batch.dones.flatten())[0]).view(steps, envs)
            next_value = agent.get_value(normalised(agent, batch.next_obs), end, batch.next_done)
        else:
            values = agent.get_value(x).view(steps, envs)
            next_value = agent.get_value(normalised(agent, batch.next_obs))
    use_vtrace = lag > lag_cfg.vtrace_lag
    if use_vtrace:
        returns, advantages = vtrace(batch.logprobs, target_logp, batch.rewards, values, batch.dones, next_value,
                                     batch.next_done, ppo.gamma, lag_cfg.rho_bar, lag_cfg.c_bar)
        old_logp = target_logp
    else:
        advantages, returns = compute_gae(batch.rewards, values, batch.dones, next_value, batch.next_done,
                                          ppo.gamma, ppo.gae_lambda)
        old_logp = batch.logprobs
    buf = RolloutBuffer(steps, envs, x.shape[1], tuple(batch.actions.shape[2:]), continuous=batch.actions.is_floating_point())
    for name, value in (('obs', x.view(steps, envs, -1)), ('actions', batch.actions), ('logprobs', old_logp),
                        ('values', values), ('dones', batch.dones), ('rewards', batch.rewards), ('masks', batch.masks)):
        getattr(buf, name).copy_(value.view_as(getattr(buf, name)))
    totals: dict[str, float] = {}
    count = 0
    for _ in range(ppo.update_epochs):
        for mb in buf.minibatches(advantages, returns, ppo.num_minibatches, rng, recurrent):
            if isinstance(agent, LstmAgent):
                sub = (start[0][:, mb.env_idx], start[1][:, mb.env_idx])
                _, logprob, entropy, value, _ = agent.get_action_and_value(mb.obs, sub, mb.dones, mb.actions, mb.masks)
            else:
                _, logprob, entropy, value = agent.get_action_and_value(mb.obs, mb.actions, mb.masks)
            loss, stats = ppo_loss(logprob, mb.logprobs, mb.advantages, value, mb.values, mb.returns, entropy,
                                   ppo.clip_coef, ppo.vf_coef, ppo.ent_coef, ppo.clip_vloss, ppo.norm_adv)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), ppo.max_grad_norm, foreach=True)
            optimizer.step()
            for key, value_ in stats.items():
                totals[key] = totals.get(key, 0.0) + value_
            count += 1
        if ppo.target_kl is not None and stats['approx_kl'] > ppo.target_kl:
            break
    means = {key: total / count for key, total in totals.items()}
    means['vtrace'] = float(use_vtrace)
    return means
