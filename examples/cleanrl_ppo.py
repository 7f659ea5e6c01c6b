"""A single-file PPO loop for continuous actions in CleanRL's style, on ``gym.make_vec('calf/Networked-v0')``.

    python examples/cleanrl_ppo.py --env Pendulum-v1 --network wifi_normal --total-timesteps 200000

The vector env is CALF's: each sub-env runs the task behind the network in virtual time, so one
step is one policy decision. Prints one JSON line with the steps and the mean return of the
episodes that ended in the last iterations.
"""
from __future__ import annotations

import argparse
import json
from collections import deque

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Normal

import calf_core  # noqa: F401  (registers calf/Networked-v0)


def layer(n_in: int, n_out: int, std: float = np.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(linear.weight, std)
    nn.init.zeros_(linear.bias)
    return linear


class Agent(nn.Module):
    """Diagonal Gaussian actor with a state-independent log-std, and a critic."""

    def __init__(self, n_obs: int, n_act: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(layer(n_obs, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
        self.actor_mean = nn.Sequential(layer(n_obs, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, n_act, 0.01))
        self.actor_logstd = nn.Parameter(torch.zeros(1, n_act))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        mean = self.actor_mean(x)
        dist = Normal(mean, self.actor_logstd.expand_as(mean).exp())
        action = dist.sample() if action is None else action
        return action, dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(x)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--env', default='Pendulum-v1')
    p.add_argument('--network', default='wifi_normal')
    p.add_argument('--total-timesteps', type=int, default=200_000)
    p.add_argument('--num-envs', type=int, default=4)
    p.add_argument('--num-steps', type=int, default=512)
    p.add_argument('--seed', type=int, default=0)
    args = p.parse_args(argv)
    lr, gamma, lam, epochs, minibatches, clip, ent, vf = 3e-4, 0.99, 0.95, 10, 8, 0.2, 0.0, 0.5
    torch.manual_seed(args.seed)
    envs = gym.make_vec('calf/Networked-v0', num_envs=args.num_envs, env=args.env, network=args.network,
                        vectorization_mode='sync')
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    low, high = envs.single_action_space.low, envs.single_action_space.high
    n_obs, n_act = int(np.prod(envs.single_observation_space.shape)), int(np.prod(envs.single_action_space.shape))
    agent = Agent(n_obs, n_act)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    n, t = args.num_envs, args.num_steps
    obs_buf, act_buf = torch.zeros(t, n, n_obs), torch.zeros(t, n, n_act)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros(t, n) for _ in range(4))
    obs, _ = envs.reset(seed=args.seed)
    next_obs, next_done = torch.as_tensor(obs, dtype=torch.float32), torch.zeros(n)
    returns: deque[float] = deque(maxlen=20)
    steps = 0
    for _ in range(-(-args.total_timesteps // (n * t))):  # the budget is a minimum: whole rollouts, rounded up
        for step in range(t):
            obs_buf[step], done_buf[step] = next_obs, next_done
            with torch.no_grad():
                action, logp, _, value = agent.get_action_and_value(next_obs)
            act_buf[step], logp_buf[step], val_buf[step] = action, logp, value.flatten()
            obs, reward, terminated, truncated, info = envs.step(np.clip(action.numpy(), low, high))
            rew_buf[step] = torch.as_tensor(reward, dtype=torch.float32)
            next_obs = torch.as_tensor(obs, dtype=torch.float32)
            next_done = torch.as_tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
            if 'episode' in info:
                returns.extend(float(r) for r in info['episode']['r'][info['_episode']])
        steps += n * t
        with torch.no_grad():  # GAE
            advantages, last = torch.zeros(t, n), torch.zeros(n)
            next_value = agent.get_value(next_obs).flatten()
            for step in reversed(range(t)):
                not_done = 1.0 - (next_done if step == t - 1 else done_buf[step + 1])
                value_next = next_value if step == t - 1 else val_buf[step + 1]
                delta = rew_buf[step] + gamma * value_next * not_done - val_buf[step]
                advantages[step] = last = delta + gamma * lam * not_done * last
            targets = advantages + val_buf
        b_obs, b_act, b_logp = obs_buf.reshape(-1, n_obs), act_buf.reshape(-1, n_act), logp_buf.reshape(-1)
        b_adv, b_ret, batch = advantages.reshape(-1), targets.reshape(-1), n * t
        for _ in range(epochs):
            for idx in torch.randperm(batch).split(batch // minibatches):
                _, logp, entropy, value = agent.get_action_and_value(b_obs[idx], b_act[idx])
                ratio, adv = (logp - b_logp[idx]).exp(), b_adv[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                loss = pg_loss + vf * 0.5 * ((value.flatten() - b_ret[idx]) ** 2).mean() - ent * entropy.mean()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()
    envs.close()
    result = {'steps': steps, 'episodes': len(returns),
              'mean_return': float(np.mean(returns)) if returns else None, 'network': args.network}
    print(json.dumps(result))
    return result


if __name__ == '__main__':
    main()
