"""Stable-Baselines3 PPO trained behind a simulated Wi-Fi link, through ``calf_core.wrap``.

    python examples/sb3_ppo.py --env Pendulum-v1 --network wifi_normal --steps 200000

Prints one JSON line: the steps trained and the mean return of deterministic evaluation episodes,
played behind the same network.
"""
from __future__ import annotations

import argparse
import json

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

import calf_core


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--env', default='Pendulum-v1')
    parser.add_argument('--network', default='wifi_normal')
    parser.add_argument('--steps', type=int, default=200_000)
    parser.add_argument('--envs', type=int, default=4)
    parser.add_argument('--n-steps', type=int, default=1024, help='PPO rollout length per env')
    parser.add_argument('--episodes', type=int, default=5, help='evaluation episodes')
    args = parser.parse_args(argv)
    envs = make_vec_env(lambda: calf_core.wrap(gym.make(args.env), network=args.network), n_envs=args.envs, seed=0)
    model = PPO('MlpPolicy', envs, n_steps=args.n_steps, batch_size=min(64, args.n_steps * args.envs), seed=0,
                device='cpu', verbose=0)
    model.learn(args.steps)
    env, returns = calf_core.wrap(gym.make(args.env), network=args.network, seed=1), []
    for episode in range(args.episodes):
        obs, _ = env.reset(seed=1000 + episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    result = {'steps': int(model.num_timesteps), 'mean_return': float(np.mean(returns)), 'network': args.network}
    print(json.dumps(result))
    return result


if __name__ == '__main__':
    main()
