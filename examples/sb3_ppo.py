"""Stable-Baselines3 PPO trained behind a simulated Wi-Fi link, through ``calf_core.wrap``.

    python examples/sb3_ppo.py --env Pendulum-v1 --network wifi_normal --steps 200000

Prints one JSON line: the steps trained and the mean return of deterministic evaluation episodes,
played behind the same network. On a terminal (or with ``--progress``), bars on stderr show the env
steps trained and the episodes evaluated, with an ETA.
"""
from __future__ import annotations

import argparse
import json
import os

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

import calf_core
from calf_core import progress


class StepBar(BaseCallback):
    """A bar over the env steps SB3 trains (``calf_core.progress``: stderr, shown on a terminal)."""

    def __init__(self, total: int) -> None:
        super().__init__()
        self.total = total

    def _on_training_start(self) -> None:
        self.bar = progress.bar(self.total, 'step', 'train')

    def _on_step(self) -> bool:
        self.bar.update(self.training_env.num_envs)
        return True

    def _on_training_end(self) -> None:
        self.bar.close()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--env', default='Pendulum-v1')
    parser.add_argument('--network', default='wifi_normal')
    parser.add_argument('--steps', type=int, default=200_000)
    parser.add_argument('--envs', type=int, default=4)
    parser.add_argument('--n-steps', type=int, default=1024, help='PPO rollout length per env')
    parser.add_argument('--episodes', type=int, default=5, help='evaluation episodes')
    parser.add_argument('--progress', action='store_true', help='show the bars even when stderr is not a terminal')
    args = parser.parse_args(argv)
    if args.progress:
        os.environ[progress.ENV] = '1'
    envs = make_vec_env(lambda: calf_core.wrap(gym.make(args.env), network=args.network), n_envs=args.envs, seed=0)
    model = PPO('MlpPolicy', envs, n_steps=args.n_steps, batch_size=min(64, args.n_steps * args.envs), seed=0,
                device='cpu', verbose=0)
    model.learn(args.steps, callback=StepBar(args.steps))
    env, returns = calf_core.wrap(gym.make(args.env), network=args.network, seed=1), []
    with progress.bar(args.episodes, 'episode', 'eval') as bar:
        for episode in range(args.episodes):
            obs, _ = env.reset(seed=1000 + episode)
            total, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = env.step(action)
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
            bar.update(1)
    result = {'steps': int(model.num_timesteps), 'mean_return': float(np.mean(returns)), 'network': args.network}
    print(json.dumps(result))
    return result


if __name__ == '__main__':
    main()
