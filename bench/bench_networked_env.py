"""NetworkedEnv's cost per step against bare CartPole-v1, measured in the same run.

Per step, NetworkedEnv runs one agent decision: the ticks until the next delivered observation
(each one a CartPole step) and the link events in between. So two ratios are printed: per agent
step and per env tick. Medians over repeats; the machine is noisy.

    python bench/bench_networked_env.py [--steps 20000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym

from calf_env.envs import make_networked_env
from calf_shim.profiles import load_profile


def bare_steps_per_s(steps: int) -> float:
    env = gym.make('CartPole-v1')
    env.reset(seed=0)
    start = time.perf_counter()
    for i in range(steps):
        _, _, terminated, truncated, _ = env.step(i % 2)
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def networked_rates(steps: int, profile_name: str) -> tuple[float, float]:
    """(agent steps per second, env ticks per second) through NetworkedEnv."""
    env = make_networked_env('cartpole', load_profile(profile_name), seed=0)
    env.reset(seed=0)
    ticks = 0
    start = time.perf_counter()
    for i in range(steps):
        _, _, terminated, truncated, info = env.step(i % 2)
        ticks += info['ticks']
        if terminated or truncated:
            env.reset()
    elapsed = time.perf_counter() - start
    return steps / elapsed, ticks / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=20_000)
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args()
    print(f'{"profile":<16}{"bare steps/s":>14}{"agent steps/s":>15}{"ticks/s":>10}'
          f'{"cost/step":>11}{"cost/tick":>11}')
    for profile in ('sim_clean', 'full_net_aware', 'wifi_degraded'):
        rows = [(bare_steps_per_s(args.steps), *networked_rates(args.steps, profile)) for _ in range(args.repeats)]
        bare = statistics.median(r[0] for r in rows)
        agent = statistics.median(r[1] for r in rows)
        ticks = statistics.median(r[2] for r in rows)
        print(f'{profile:<16}{bare:>14.0f}{agent:>15.0f}{ticks:>10.0f}{bare / agent:>10.2f}x{bare / ticks:>10.2f}x')


if __name__ == '__main__':
    main()
