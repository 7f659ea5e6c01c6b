"""NetworkedEnv's cost per step against bare CartPole-v1, and the many-env fast path's throughput.

The bare baseline is ``gym.make('CartPole-v1')``, the same env object stack that NetworkedEnv wraps
(``calf_core.envs.make_env('cartpole')``), stepped with the same actions. Per step, NetworkedEnv runs
one agent decision: the ticks until the next delivered observation (each one a CartPole step) and
the link events in between. So two ratios are printed: per agent step and per env tick.

The fast path (``VectorNetworkedCartPole``) steps ``--envs`` CartPoles at once; its agent steps per
second are printed absolute and as a multiple of bare CartPole steps per second.

Times are this process's CPU time (``time.process_time``), so other jobs on the machine do not
count; each repeat measures the baseline and the wrapper back to back; medians over repeats.

    python bench/bench_networked_env.py [--steps 20000] [--repeats 5] [--envs 256] [--vector-steps 200]
"""
from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np

from calf_core.envs import make_networked_env
from calf_core.profiles import load_profile
from calf_core.vector_networked import VectorNetworkedCartPole


def bare_steps_per_s(steps: int) -> float:
    env = gym.make('CartPole-v1')
    env.reset(seed=0)
    start = time.process_time()
    for i in range(steps):
        _, _, terminated, truncated, _ = env.step(i % 2)
        if terminated or truncated:
            env.reset()
    return steps / (time.process_time() - start)


def networked_rates(steps: int, profile_name: str) -> tuple[float, float]:
    """(agent steps per second, env ticks per second) through NetworkedEnv."""
    env = make_networked_env('cartpole', load_profile(profile_name), seed=0)
    env.reset(seed=0)
    ticks = 0
    start = time.process_time()
    for i in range(steps):
        _, _, terminated, truncated, info = env.step(i % 2)
        ticks += info['ticks']
        if terminated or truncated:
            env.reset()
    elapsed = time.process_time() - start
    return steps / elapsed, ticks / elapsed


def vector_rates(envs: int, steps: int, profile_name: str) -> tuple[float, float]:
    """(agent steps per second, env ticks per second) through the fast path with ``envs`` envs."""
    env = VectorNetworkedCartPole(envs, load_profile(profile_name))
    env.reset(seed=0)
    ticks = 0
    start = time.process_time()
    for i in range(steps):
        _, _, _, _, info = env.step(np.full(envs, i % 2))
        ticks += int(info['ticks'].sum())
    elapsed = time.process_time() - start
    return envs * steps / elapsed, ticks / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=20_000)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--envs', type=int, default=256)
    parser.add_argument('--vector-steps', type=int, default=200)
    args = parser.parse_args()
    print(f'NetworkedEnv, one env\n{"profile":<16}{"bare steps/s":>14}{"agent steps/s":>15}{"ticks/s":>10}'
          f'{"cost/step":>11}{"cost/tick":>11}')
    for profile in ('sim_clean', 'full_net_aware', 'wifi_degraded'):
        rows = [(bare_steps_per_s(args.steps), *networked_rates(args.steps, profile)) for _ in range(args.repeats)]
        bare = statistics.median(r[0] for r in rows)
        agent = statistics.median(r[1] for r in rows)
        ticks = statistics.median(r[2] for r in rows)
        print(f'{profile:<16}{bare:>14.0f}{agent:>15.0f}{ticks:>10.0f}{bare / agent:>10.2f}x{bare / ticks:>10.2f}x')
    print(f'\nVectorNetworkedCartPole, {args.envs} envs\n{"profile":<16}{"bare steps/s":>14}{"agent steps/s":>15}'
          f'{"ticks/s":>10}{"vs bare":>11}')
    for profile in ('sim_clean', 'full_net_aware', 'real_eth'):
        rows = [(bare_steps_per_s(args.steps), *vector_rates(args.envs, args.vector_steps, profile))
                for _ in range(args.repeats)]
        bare = statistics.median(r[0] for r in rows)
        agent = statistics.median(r[1] for r in rows)
        ticks = statistics.median(r[2] for r in rows)
        print(f'{profile:<16}{bare:>14.0f}{agent:>15.0f}{ticks:>10.0f}{agent / bare:>10.2f}x')


if __name__ == '__main__':
    main()
