"""PPO training throughput for any env behind a profile: the SyncVectorEnv path against the vector path.

Each run trains CALF's PPO with the env's default settings (``train_defaults``) and representation
(``default_representation``), the same seed and budget; only the vector env differs:

- sync: a ``SyncVectorEnv`` of ``NetworkedEnv``s under one ``VectorHistoryWrapper``
  (``vec_env_factory(..., fast=False)``);
- vector: one ``VectorNetworkedEnv`` under a ``VectorHistoryWrapper`` (``fast=True``; ``VectorNetworkedCartPole``
  for CartPole). By default ``vec_env_factory`` picks it from ``FAST_PATH_MIN_ENVS`` envs;
- with ``--against REV``: the path ``vec_env_factory`` picks by default, with ``calf_core`` and ``calf_agent`` as
  they are at git revision REV, in a worker process, measured right after the two others. ``now/@`` is the path
  picked today over it.

Training steps per second count agent decisions (PPO samples), rollouts and updates both. Times are the
training process's CPU time (the trainer runs torch on one thread), so other jobs on the machine count little;
each repeat runs every path back to back; medians over repeats; the returns are the last repeat's. ``--envs``
takes several values, to show how the gap changes with the number of envs.

    python bench/bench_train_fast_path.py [--env cartpole] [--network full_net_aware] [--steps 16384]
        [--repeats 3] [--envs 8 32 128] [--against REV]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from revision import pythonpath_at

from calf_agent.regimes import FAST_PATH_MIN_ENVS, default_representation, train_defaults, vec_env_factory
from calf_agent.training import train
from calf_core.profiles import load_profile

PATHS = {'sync': False, 'vector': True, 'default': None}


def steps_per_s(env: str, network: str, path: str, envs: int, steps: int, seed: int) -> tuple[float, float]:
    """(training steps per CPU second, mean return of the last episodes) for one run on ``path``."""
    profile = load_profile(network)
    rep = default_representation(env, profile)
    cfg = dataclasses.replace(train_defaults(env), seed=seed, num_envs=envs, total_steps=steps)
    factory = vec_env_factory(env, profile, rep, seed, fast=PATHS[path])
    with tempfile.TemporaryDirectory() as out:
        start = time.process_time()
        result = train(cfg, factory, Path(out), progress=False)
        elapsed = time.process_time() - start
    return result.global_steps / elapsed, result.mean_return


class Against:
    """A worker process running this bench's ``--serve`` with ``calf_core`` and ``calf_agent`` at revision ``rev``."""

    def __init__(self, rev: str) -> None:
        self.worker = subprocess.Popen([sys.executable, __file__, '--serve'], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True,
                                       env=pythonpath_at(rev, ('calf_core', 'calf_agent')))

    def steps_per_s(self, env: str, network: str, envs: int, steps: int, seed: int) -> tuple[float, float]:
        assert self.worker.stdin is not None and self.worker.stdout is not None
        self.worker.stdin.write(f'{env} {network} {envs} {steps} {seed}\n')
        self.worker.stdin.flush()
        rate, mean_return = self.worker.stdout.readline().split()
        return float(rate), float(mean_return)

    def close(self) -> None:
        assert self.worker.stdin is not None
        self.worker.stdin.close()
        self.worker.wait()


def serve() -> None:
    """Worker: for each line ``ENV NETWORK ENVS STEPS SEED`` on stdin, the default path's steps/s and mean return
    (after a warm-up run on the first line, as the main process has)."""
    warm = False
    for line in sys.stdin:
        env, network, envs, steps, seed = line.split()
        if not warm:
            steps_per_s(env, network, 'default', 2, 256, int(seed))
            warm = True
        rate, mean_return = steps_per_s(env, network, 'default', int(envs), int(steps), int(seed))
        print(rate, mean_return, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--env', default='cartpole')
    parser.add_argument('--network', default='full_net_aware')
    parser.add_argument('--steps', type=int, default=16_384)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--envs', type=int, nargs='+', default=[8, 32, 128])
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--against', metavar='REV', help='also measure the default path at this git revision')
    parser.add_argument('--serve', action='store_true', help=argparse.SUPPRESS)  # the --against worker
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    against = Against(args.against) if args.against else None
    for path in ('sync', 'vector'):  # warm up: imports and first-call costs land outside the measured runs
        steps_per_s(args.env, args.network, path, 2, 256, args.seed)
    print(f'PPO on {args.env} behind {args.network}, {args.steps} steps, median of {args.repeats} repeats (CPU time)')
    old = f'{"@" + args.against[:10]:>14}{"now/@":>8}' if against else ''
    print(f'{"envs":>5}{"sync steps/s":>14}{"vector steps/s":>16}{"vector/sync":>12}{old}'
          f'{"sync return":>13}{"vector return":>15}{"@ return" if against else "":>10}')
    for envs in args.envs:
        runs = []
        for _ in range(args.repeats):
            run = [steps_per_s(args.env, args.network, path, envs, args.steps, args.seed)
                   for path in ('sync', 'vector')]
            if against is not None:
                run.append(against.steps_per_s(args.env, args.network, envs, args.steps, args.seed))
            runs.append(run)
        sync, vector = (statistics.median(run[i][0] for run in runs) for i in (0, 1))
        line = f'{envs:>5}{sync:>14,.0f}{vector:>16,.0f}{statistics.median(r[1][0] / r[0][0] for r in runs):>11.2f}×'
        if against is not None:
            line += f'{statistics.median(run[2][0] for run in runs):>14,.0f}'
            now = int(envs >= FAST_PATH_MIN_ENVS)  # the path vec_env_factory picks today
            line += f'{statistics.median(r[now][0] / r[2][0] for r in runs):>7.2f}×'
        old_return = f'{runs[-1][2][1]:>10.1f}' if against is not None else ''
        print(f'{line}{runs[-1][0][1]:>13.1f}{runs[-1][1][1]:>15.1f}{old_return}', flush=True)
    if against is not None:
        against.close()


if __name__ == '__main__':
    main()
