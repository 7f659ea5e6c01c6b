"""NetworkedEnv's cost per env tick against the bare MuJoCo env it wraps (InvertedPendulum-v5). Target <= 1.3x.

The bare baseline is ``calf_core.envs.make_env('InvertedPendulum-v5')`` (``gym.make``), the same env
object stack that NetworkedEnv wraps, driven the same way. Two mixes:

- ``balance``: a linear controller, torque 3 tanh(x + 10 theta + x' + theta') on the observation it
  got (about 1 µs a call, on both sides): episodes run to the 1000-tick limit, so this is the
  steady per-tick cost;
- ``falls``: a fixed sequence of random torques in [-0.5, 0.5]: the pole falls every ~15 ticks, so
  resets weigh in.

Per agent step NetworkedEnv runs the ticks until the next delivered observation (each one a MuJoCo
step) and the link events in between, so the cost is given per env tick.

Times are this process's CPU time (``time.process_time``), so other jobs on the machine do not
count; each repeat measures the bare env and NetworkedEnv back to back; medians over repeats.

    python bench/bench_networked_mujoco.py [--steps 20000] [--repeats 5] [--mixes balance falls]
                                           [--profiles sim_clean full_net_aware wifi_normal]
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from calf_core.envs import make_env, make_networked_env
from calf_core.profiles import load_profile

ENV = 'InvertedPendulum-v5'
TARGET = 1.3
GAINS = np.float32([1.0, 10.0, 1.0, 1.0])
Policy = Callable[[np.ndarray, int], np.ndarray]


def policy(mix: str, steps: int) -> Policy:
    """The agent of ``mix``: the torque for observation ``obs`` at agent step ``i``."""
    if mix == 'balance':
        return lambda obs, i: np.float32([3.0 * np.tanh(GAINS @ obs)])
    torques = np.random.default_rng(0).uniform(-0.5, 0.5, size=(steps, 1)).astype(np.float32)
    return lambda obs, i: torques[i]


def bare_ticks_per_s(act: Policy, steps: int) -> tuple[float, float]:
    """(ticks per second, mean episode length) of the bare env."""
    env = make_env(ENV)
    obs, _ = env.reset(seed=0)
    episodes = 1
    start = time.process_time()
    for i in range(steps):
        obs, _, terminated, truncated, _ = env.step(act(obs, i))
        if terminated or truncated:
            obs, _ = env.reset()
            episodes += 1
    return steps / (time.process_time() - start), steps / episodes


def networked_ticks_per_s(act: Policy, steps: int, profile_name: str) -> tuple[float, float]:
    """(env ticks per second, mean episode length in ticks) through NetworkedEnv."""
    env = make_networked_env(ENV, load_profile(profile_name), seed=0)
    obs, _ = env.reset(seed=0)
    ticks, episodes = 0, 1
    start = time.process_time()
    for i in range(steps):
        obs, _, terminated, truncated, info = env.step(act(obs, i))
        ticks += info['ticks']
        if terminated or truncated:
            obs, _ = env.reset()
            episodes += 1
    return ticks / (time.process_time() - start), ticks / episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=20_000)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--profiles', nargs='+', default=['sim_clean', 'full_net_aware', 'wifi_normal'])
    parser.add_argument('--mixes', nargs='+', choices=('balance', 'falls'), default=['balance', 'falls'])
    args = parser.parse_args()
    print(f'{ENV}, {args.steps} agent steps, median of {args.repeats} repeats (CPU time)')
    print(f'{"mix":<9}{"profile":<16}{"bare ticks/s":>14}{"net ticks/s":>13}{"bare µs":>9}{"net µs":>8}'
          f'{"ep len bare/net":>17}{"cost/tick":>11}  target <= {TARGET}x')
    for mix, profile in [(m, p) for m in args.mixes for p in args.profiles]:
        act = policy(mix, args.steps)
        rows = [(*bare_ticks_per_s(act, args.steps), *networked_ticks_per_s(act, args.steps, profile))
                for _ in range(args.repeats)]
        bare, bare_len = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
        net, net_len = statistics.median(r[2] for r in rows), statistics.median(r[3] for r in rows)
        ratio = bare / net
        print(f'{mix:<9}{profile:<16}{bare:>14.0f}{net:>13.0f}{1e6 / bare:>9.1f}{1e6 / net:>8.1f}'
              f'{bare_len:>9.0f}/{net_len:<7.0f}{ratio:>10.2f}x  {"met" if ratio <= TARGET else "NOT met"}')


if __name__ == '__main__':
    main()
