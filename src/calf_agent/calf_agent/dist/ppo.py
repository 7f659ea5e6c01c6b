"""PPO on a worker's batch collected by an older policy: V-trace corrects the lag, at every lag.

The batch logs μ, the behaviour policy's log-probability of each action taken. Against π₀, the
learner's policy at the start of the update, V-trace (Espeholt et al., 2018, IMPALA) weighs each step
with the truncated importance weights ρ_t = min(ρ̄, π₀/μ) and c_t = λ min(c̄, π₀/μ) (ρ̄ = c̄ = 1) and gives
the value targets ``vs``; the advantage of step t is ρ_t (r_t + γ ((1 - λ) V(x_{t+1}) + λ vs_{t+1}) - V(x_t)),
IMPALA's policy-gradient advantage (λ = 1) generalised to GAE's λ. PPO's clipped ratio is then taken
against π₀ (the ratio π₀/μ is in ρ_t), as decoupled PPO does: a stale batch still moves the policy by at
most the clip range instead of being clipped away. When π₀ = μ (a batch of the learner's own version)
the targets and advantages are exactly GAE(λ)'s, so a fresh batch is trained as single-process PPO trains
it. One rule for every lag, with no threshold to tune. The epochs and minibatches are the single-process trainer's
(``ppo.RolloutBuffer``, ``ppo.ppo_loss``): whole env sequences from the batch's stored state for an
LSTM, the loss on executed plan elements only.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from calf_agent.dist.policy import PpoAgent, normalised, params, score
from calf_agent.dist.wire import TrajectoryBatch
from calf_agent.gaussian import GaussianAgent
from calf_agent.policies import LstmAgent
from calf_agent.ppo import PPOConfig, RolloutBuffer, ppo_loss


@dataclass(frozen=True)
class LagConfig:
    """V-trace's truncation levels of the importance weights."""

    rho_bar: float = 1.0
    c_bar: float = 1.0


def vtrace(behaviour_logp: Tensor, target_logp: Tensor, rewards: Tensor, values: Tensor, dones: Tensor,
           next_value: Tensor, next_done: Tensor, gamma: float, gae_lambda: float = 1.0, rho_bar: float = 1.0,
           c_bar: float = 1.0) -> tuple[Tensor, Tensor]:
    """V-trace value targets ``vs`` and advantages ``ρ_t (r_t + γ ((1 - λ) V_{t+1} + λ vs_{t+1}) - V_t)``, ``[T, N]``.

    ``dones`` follows ``compute_gae``: ``dones[t]`` is 1 where ``obs[t]`` starts an episode. With equal
    log-probabilities both are ``compute_gae``'s returns and advantages.
    """
    ratio = (target_logp - behaviour_logp).exp()
    rho, c = ratio.clamp(max=rho_bar), gae_lambda * ratio.clamp(max=c_bar)
    nonterminal = torch.cat([1.0 - dones[1:], (1.0 - next_done).unsqueeze(0)])
    following = torch.cat([values[1:], next_value.unsqueeze(0)])
    deltas = rho * (rewards + gamma * following * nonterminal - values)
    corrections = torch.zeros_like(rewards)  # vs - V
    acc = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        acc = deltas[t] + gamma * c[t] * nonterminal[t] * acc
        corrections[t] = acc
    later = torch.cat([corrections[1:], torch.zeros_like(next_value).unsqueeze(0)])  # vs_{t+1} - V_{t+1}
    advantages = rho * (rewards + gamma * nonterminal * (following + gae_lambda * later) - values)
    return values + corrections, advantages


def merged(batches: list[TrajectoryBatch]) -> TrajectoryBatch:
    """``batches`` (of equal steps) as one batch of all their envs, as a single process's rollout holds its envs;
    the first one's ids and version, every episode return."""
    if len(batches) == 1:
        return batches[0]
    first = batches[0]
    per_env = {name: torch.cat([getattr(b, name) for b in batches], 1)
               for name in ('obs', 'actions', 'logprobs', 'behaviour', 'rewards', 'dones', 'masks')}
    per_env.update({name: torch.cat([getattr(b, name) for b in batches], 0)
                    for name in ('next_obs', 'next_done', 'state_h', 'state_c')})
    return replace(first, **per_env, episode_returns=[r for b in batches for r in b.episode_returns])


def update_on_batch(agent: PpoAgent, optimizer: torch.optim.Optimizer, batch: TrajectoryBatch,
                    ppo: PPOConfig, lag_cfg: LagConfig, rng: np.random.Generator) -> dict[str, float]:
    """PPO epochs on one batch of any PPO agent, lag-corrected by V-trace as the module doc says; mean loss
    stats plus ``rho_mean`` (the mean truncated weight ρ: 1 on-policy). A Gaussian agent trains on the batch
    normalised with the statistics its weights carried when the update started (those a worker of this version
    acted on, so that a batch without lag is on-policy) and folds the batch into them after the update."""
    steps, envs = batch.rewards.shape
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
    returns, advantages = vtrace(batch.logprobs, target_logp, batch.rewards, values, batch.dones, next_value,
                                 batch.next_done, ppo.gamma, ppo.gae_lambda, lag_cfg.rho_bar, lag_cfg.c_bar)
    rho = (target_logp - batch.logprobs).exp().clamp(max=lag_cfg.rho_bar)
    buf = RolloutBuffer(steps, envs, x.shape[1], tuple(batch.actions.shape[2:]), continuous=batch.actions.is_floating_point())
    for name, value in (('obs', x.view(steps, envs, -1)), ('actions', batch.actions), ('logprobs', target_logp),
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
    if isinstance(agent, GaussianAgent):
        agent.obs_norm.update(batch.obs.flatten(0, 1))
    means = {key: total / count for key, total in totals.items()}
    means['rho_mean'] = float(rho.mean())
    return means
