"""calf_core.wrap's per-tick overhead against the bare env, both under SB3's ``make_vec_env`` with 8 envs.

For each env, one run measures the bare env (``make_vec_env(ENV_ID, n_envs=8)``) and the wrapped one
(``make_vec_env(lambda: calf_core.wrap(gym.make(ENV_ID), network=...), n_envs=8)``) back to back,
stepped with random actions. A wrapped step is one decision, which runs ``info['ticks']`` env
ticks, so the wrapper's cost is per tick: CPU time / ticks. Targets: <= 2x on CartPole-v1 and
<= 1.3x on InvertedPendulum-v5 (MuJoCo, skipped when mujoco is not installed). Times are this
process's CPU time (``time.process_time``), medians over repeats.

    python bench/bench_wrapper_overhead.py [--steps 5000] [--repeats 5] [--network wifi_normal]
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv

import calf_core

ENVS = (('CartPole-v1', 2.0), ('InvertedPendulum-v5', 1.3))


def seconds_per_tick(make: Callable[[], VecEnv], steps: int) -> float:
    """CPU seconds per env tick of ``steps`` vector steps with random actions."""
    vec = make()
    vec.seed(0)
    vec.reset()
    space = vec.action_space
    space.seed(0)
    actions = [np.stack([space.sample() for _ in range(vec.num_envs)]) for _ in range(64)]
    ticks = 0
    start = time.process_time()
    for i in range(steps):
        _, _, _, infos = vec.step(actions[i % 64])
        ticks += sum(info.get('ticks', 1) for info in infos)
    elapsed = time.process_time() - start
    vec.close()
    return elapsed / ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=5000, help='vector steps per measurement')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--network', default='wifi_normal')
    args = parser.parse_args()
    print(f'8 envs under make_vec_env, network {args.network}; CPU microseconds per env tick, medians of '
          f'{args.repeats}')
    print(f'{"env":<22}{"bare us/tick":>14}{"wrapped us/tick":>17}{"ratio":>8}{"target":>8}')
    for env_id, target in ENVS:
        if env_id.startswith('Inverted') and importlib.util.find_spec('mujoco') is None:
            print(f'{env_id:<22}  skipped: mujoco is not installed')
            continue
        rows = []
        for _ in range(args.repeats):
            bare = seconds_per_tick(lambda env_id=env_id: make_vec_env(env_id, n_envs=8, seed=0), args.steps)
            wrapped = seconds_per_tick(lambda env_id=env_id: make_vec_env(
                lambda: calf_core.wrap(gym.make(env_id), network=args.network), n_envs=8, seed=0), args.steps)
            rows.append((bare, wrapped, wrapped / bare))
        bare, wrapped, ratio = (statistics.median(r[i] for r in rows) for i in range(3))
        verdict = 'met' if ratio <= target else 'MISSED'
        print(f'{env_id:<22}{bare * 1e6:>14.1f}{wrapped * 1e6:>17.1f}{ratio:>7.2f}x{target:>7.1f}x {verdict}')


if __name__ == '__main__':
    main()
