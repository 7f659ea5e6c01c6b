"""NetworkedEnv's cost per env tick against the bare env, measured as gymnasium's ``benchmark_step`` does.

The method is ``gymnasium.utils.performance.benchmark_step``'s: reset with a seed, then step with
``env.action_space.sample()`` and reset at episode ends until ``--duration`` seconds have passed.
Two changes make the ratio fair on a shared machine: time is this process's CPU time
(``time.process_time``), so other jobs do not count, and the networked env's rate is in env ticks
(one ``step`` is one decision, which runs ``info['ticks']`` ticks). Each repeat measures the bare
env (``calf_core.envs.make_env``, the same stack NetworkedEnv wraps, made by ``gym.make``) and
``calf_core.wrap(env, network=profile)`` back to back; the ratio printed is the median over repeats
of bare ticks/s over networked ticks/s, all rows in one run.

Rows: CartPole-v1 under every built-in profile (goal <= 2.0x), InvertedPendulum-v5 and
HalfCheetah-v5 under wifi_degraded (goal <= 1.3x; skipped without mujoco).

With ``--against REV`` (a git revision of this repository) each repeat also measures the networked env of
``calf_core`` as it is at that revision, in a worker process that imports it and measures while this one
waits, so the three measurements of a repeat follow each other; its ratio and the speed-up are printed too.

    python bench/bench_gym_overhead.py [--duration 2] [--repeats 5] [--only cartpole|mujoco] [--against REV]
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time

import gymnasium as gym
from revision import pythonpath_at

import calf_core
from calf_core.envs import make_env
from calf_core.profiles import available_profiles

MUJOCO = ('InvertedPendulum-v5', 'HalfCheetah-v5')
GOALS = {'CartPole-v1': 2.0, **{env_id: 1.3 for env_id in MUJOCO}}


def ticks_per_s(env: gym.Env, duration: float, seed: int = 0) -> float:
    """benchmark_step's loop on CPU time, counting env ticks (``info['ticks']``, 1 for a bare env)."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    sample = env.action_space.sample
    ticks = 0
    start = time.process_time()
    while True:
        _, _, terminal, truncated, info = env.step(sample())
        ticks += info.get('ticks', 1)
        if terminal or truncated:
            env.reset()
        elapsed = time.process_time() - start
        if elapsed > duration:
            return ticks / elapsed


class Against:
    """A worker process running this bench's ``--serve`` with ``calf_core`` as it is at git revision ``rev``."""

    def __init__(self, rev: str) -> None:
        env = pythonpath_at(rev)
        self.worker = subprocess.Popen([sys.executable, __file__, '--serve'], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, env=env)

    def ticks_per_s(self, env_id: str, profile: str, duration: float) -> float:
        assert self.worker.stdin is not None and self.worker.stdout is not None
        self.worker.stdin.write(f'{env_id} {profile} {duration}\n')
        self.worker.stdin.flush()
        return float(self.worker.stdout.readline())

    def close(self) -> None:
        assert self.worker.stdin is not None
        self.worker.stdin.close()
        self.worker.wait()


def serve() -> None:
    """Worker: for each line ``ENV_ID PROFILE DURATION`` on stdin, the networked env's ticks/s on stdout (one env
    per row, kept across repeats, as ``overhead`` keeps its own)."""
    envs: dict[tuple[str, str], gym.Env] = {}
    for line in sys.stdin:
        env_id, profile, duration = line.split()
        if (env_id, profile) not in envs:
            envs[env_id, profile] = calf_core.wrap(make_env(env_id), network=profile, seed=0)
        print(ticks_per_s(envs[env_id, profile], float(duration)), flush=True)


def overhead(env_id: str, profile: str, duration: float, repeats: int,
             against: Against | None = None) -> tuple[float, ...]:
    """Medians of bare µs/tick, networked µs/tick and their ratio for ``env_id`` under ``profile``; with ``against``,
    also that revision's networked µs/tick, its ratio and the speed-up (its µs/tick over today's), each repeat's
    measurements back to back."""
    bare_env = make_env(env_id)
    networked = calf_core.wrap(make_env(env_id), network=profile, seed=0)
    rows = []
    for _ in range(repeats):
        bare = ticks_per_s(bare_env, duration)
        net = ticks_per_s(networked, duration)
        row = [1e6 / bare, 1e6 / net, bare / net]
        if against is not None:
            old = against.ticks_per_s(env_id, profile, duration)
            row += [1e6 / old, bare / old, net / old]
        rows.append(row)
    return tuple(statistics.median(row[i] for row in rows) for i in range(len(rows[0])))


def cases(only: str | None) -> list[tuple[str, str]]:
    rows = [] if only == 'mujoco' else [('CartPole-v1', name) for name in available_profiles()]
    if only != 'cartpole' and importlib.util.find_spec('mujoco') is not None:
        rows += [(env_id, 'wifi_degraded') for env_id in MUJOCO]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--duration', type=float, default=2.0, help='CPU seconds per measurement')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--only', choices=('cartpole', 'mujoco'))
    parser.add_argument('--against', metavar='REV', help='also measure the networked env of calf_core at this git '
                                                         'revision, in the same run')
    parser.add_argument('--serve', action='store_true', help=argparse.SUPPRESS)  # the --against worker
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    against = Against(args.against) if args.against else None
    print(f'benchmark_step method on CPU time, {args.duration:g} s a measurement, medians of {args.repeats}')
    old = f'{"@" + args.against[:10]:>13}{"ratio":>8}{"speed-up":>9}' if against else ''
    print(f'{"env":<22}{"profile":<18}{"bare µs/tick":>13}{"net µs/tick":>12}{"ratio":>8}{"goal":>7}{"":9}{old}')
    for env_id, profile in cases(args.only):
        bare_us, net_us, ratio, *rest = overhead(env_id, profile, args.duration, args.repeats, against)
        goal = GOALS[env_id]
        line = (f'{env_id:<22}{profile:<18}{bare_us:>13.2f}{net_us:>12.2f}{ratio:>7.2f}x{goal:>6.1f}x '
                f'{"met" if ratio <= goal else "NOT met":<8}')
        if rest:
            old_us, old_ratio, speed_up = rest
            line += f'{old_us:>13.2f}{old_ratio:>7.2f}x{speed_up:>8.2f}x'
        print(line, flush=True)
    if against is not None:
        against.close()


if __name__ == '__main__':
    main()
