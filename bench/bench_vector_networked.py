"""The vector NetworkedEnv's throughput against the same bare vector env, under a profile with stalls.

Rows (all under ``--network``, default wifi_degraded):

- CartPole, ``--envs`` envs (16): ``VectorNetworkedCartPole`` (CartPole physics in numpy) and
  ``gym.make_vec('calf/Networked-v0', env='CartPole-v1')`` (gymnasium's CartPole stepped one by one),
  against gymnasium's own vector CartPole (``gym.make_vec('CartPole-v1', vectorization_mode='vector_entry_point')``);
- CartPole, ``--envs`` envs: the trainers' path below ``FAST_PATH_MIN_ENVS``, a SyncVectorEnv of ``NetworkedEnv``s,
  as ``calf_core.sync_vector.SyncVectorEnv`` (its cheaper info merge) against gymnasium's ``SyncVectorEnv``;
- CartPole, ``--many`` envs (256): ``VectorNetworkedCartPole`` agent steps/s (goal >= 1,000,000);
- HalfCheetah-v5, ``--envs`` envs: ``gym.make_vec('calf/Networked-v0', env='HalfCheetah-v5')`` (in this process,
  and with ``workers=2``: in two worker processes) against gymnasium's ``AsyncVectorEnv`` of bare HalfCheetahs
  (subprocesses, both cores) and its ``SyncVectorEnv`` (one core).

Throughput is env ticks per second (``info['ticks']`` summed for the networked env, one per env and step for the
bare ones), random actions, medians over ``--repeats``; each repeat measures every row back to back. The CartPole
rows all run in this process and are timed on its CPU time, so other jobs on a shared machine do not count; the
HalfCheetah rows are timed on wall-clock time, since the async env's work is in its subprocesses.

With ``--against REV`` (a git revision of this repository) the CartPole rows of ``VectorNetworkedCartPole`` are
measured for that revision's ``calf_core/vector_networked.py`` too, in the same run, and their ratio printed.

    python bench/bench_vector_networked.py [--seconds 3] [--repeats 3] [--envs 16] [--many 256] [--against REV]
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from revision import module_at

import calf_core
from calf_core.profiles import Profile, load_profile
from calf_core.sync_vector import SyncVectorEnv
from calf_core.vector_networked import VectorNetworkedCartPole


def ticks_per_s(make: Callable[[], gym.vector.VectorEnv], seconds: float,
                clock: Callable[[], float]) -> tuple[float, float]:
    """(env ticks per second, agent steps per second) of random actions for ``seconds`` of ``clock``."""
    envs = make()
    envs.reset(seed=0)
    envs.action_space.seed(0)
    actions = [envs.action_space.sample() for _ in range(64)]
    ticks = steps = 0
    start = clock()
    while (elapsed := clock() - start) < seconds:
        info = envs.step(actions[steps % 64])[4]
        ticks += int(np.sum(info['ticks'])) if 'ticks' in info else envs.num_envs
        steps += 1
    envs.close()
    return ticks / elapsed, steps * envs.num_envs / elapsed


def sync_networked(cls: type[gym.vector.SyncVectorEnv], n: int, profile: Profile) -> gym.vector.VectorEnv:
    """``n`` NetworkedEnvs of CartPole-v1 behind ``profile`` in a ``cls`` SyncVectorEnv, as the trainers build it."""
    return cls([lambda i=i: calf_core.wrap('CartPole-v1', network=profile, seed=i) for i in range(n)],
               autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=3.0)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--envs', type=int, default=16)
    parser.add_argument('--many', type=int, default=256)
    parser.add_argument('--network', default='wifi_degraded')
    parser.add_argument('--against', metavar='REV', help='also measure VectorNetworkedCartPole at this git revision')
    args = parser.parse_args()
    n, net = args.envs, args.network
    profile = load_profile(net)
    rows: dict[str, Callable[[], gym.vector.VectorEnv]] = {
        f'CartPole bare vector x{n}': lambda: gym.make_vec('CartPole-v1', n, vectorization_mode='vector_entry_point'),
        f'VectorNetworkedCartPole x{n}': lambda: VectorNetworkedCartPole(n, profile),
        f'make_vec CartPole-v1 x{n}': lambda: gym.make_vec(calf_core.ENV_ID, n, env='CartPole-v1', network=net),
        f'VectorNetworkedCartPole x{args.many}': lambda: VectorNetworkedCartPole(args.many, profile),
        f'gymnasium sync CartPole-v1 x{n}': lambda: sync_networked(gym.vector.SyncVectorEnv, n, profile),
        f'calf_core sync CartPole-v1 x{n}': lambda: sync_networked(SyncVectorEnv, n, profile),
    }
    if args.against:
        old = module_at(args.against, 'src/calf_core/calf_core/vector_networked.py').VectorNetworkedCartPole
        rows.update({f'VectorNetworkedCartPole x{k} @{args.against}': (lambda k=k: old(k, profile))
                     for k in (n, args.many)})
    if importlib.util.find_spec('mujoco') is not None:
        rows.update({
            f'HalfCheetah bare async x{n}': lambda: gym.make_vec('HalfCheetah-v5', n, vectorization_mode='async'),
            f'HalfCheetah bare sync x{n}': lambda: gym.make_vec('HalfCheetah-v5', n, vectorization_mode='sync'),
            f'make_vec HalfCheetah-v5 x{n}': lambda: gym.make_vec(calf_core.ENV_ID, n, env='HalfCheetah-v5',
                                                                 network=net),
            f'make_vec HalfCheetah-v5 x{n} workers=2': lambda: gym.make_vec(
                calf_core.ENV_ID, n, env='HalfCheetah-v5', network=net, workers=2),
        })
    measured: dict[str, list[tuple[float, float]]] = {name: [] for name in rows}
    for _ in range(args.repeats):
        for name, make in rows.items():
            clock = time.process_time if 'CartPole' in name else time.perf_counter
            measured[name].append(ticks_per_s(make, args.seconds, clock))
    median = {name: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
              for name, runs in measured.items()}
    print(f'network {net}, medians of {args.repeats} x {args.seconds:g} s (CartPole rows CPU time, HalfCheetah rows '
          f'wall-clock)')
    print(f'{"vector env":<34}{"ticks/s":>12}{"agent steps/s":>15}')
    for name, (ticks, steps) in median.items():
        print(f'{name:<34}{ticks:>12,.0f}{steps:>15,.0f}')
    bare_cp = median[f'CartPole bare vector x{n}'][0]
    print(f'\nCartPole x{n}: VectorNetworkedCartPole {median[f"VectorNetworkedCartPole x{n}"][0] / bare_cp:.2f}x, '
          f'make_vec {median[f"make_vec CartPole-v1 x{n}"][0] / bare_cp:.2f}x the bare vector env (goal >= 0.9x)')
    sync_ratio = median[f'calf_core sync CartPole-v1 x{n}'][0] / median[f'gymnasium sync CartPole-v1 x{n}'][0]
    print(f'CartPole x{n}, SyncVectorEnv of NetworkedEnvs: calf_core.sync_vector {sync_ratio:.2f}x gymnasium\'s')
    many = median[f'VectorNetworkedCartPole x{args.many}'][1]
    print(f'CartPole x{args.many}: {many:,.0f} agent steps/s (goal >= 1,000,000)')
    if args.against:
        for k in (n, args.many):
            ratio = median[f'VectorNetworkedCartPole x{k}'][1] / median[f'VectorNetworkedCartPole x{k} @{args.against}'][1]
            print(f'VectorNetworkedCartPole x{k}: {ratio:.2f}x the agent steps/s of {args.against}')
    if f'make_vec HalfCheetah-v5 x{n}' in median:
        bare_async, bare_sync = median[f'HalfCheetah bare async x{n}'][0], median[f'HalfCheetah bare sync x{n}'][0]
        for name in (f'make_vec HalfCheetah-v5 x{n}', f'make_vec HalfCheetah-v5 x{n} workers=2'):
            print(f'{name}: {median[name][0] / bare_async:.2f}x the bare async env, '
                  f'{median[name][0] / bare_sync:.2f}x the bare sync env (goal >= 0.9x async)')


if __name__ == '__main__':
    main()
