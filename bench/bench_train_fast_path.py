"""PPO training throughput on CartPole under full_net_aware: SyncVectorEnv path vs the fast path.

Both runs train CALF's CartPole PPO (``cartpole_defaults``, the default representation) with the same
seed and budget; only the vector env differs: a ``SyncVectorEnv`` of ``HistoryWrapper(NetworkedEnv)``
(``vec_env_factory(..., fast=False)``) or ``VectorHistoryWrapper(VectorNetworkedCartPole)``
(``fast=True``; by default ``vec_env_factory`` picks it from ``FAST_PATH_MIN_ENVS`` envs). Training
steps per second count agent decisions (PPO samples), rollout and updates both.

Times are this process's CPU time (``time.process_time``; the trainer runs torch on one thread), so
other jobs on the machine count little; each repeat runs the two paths back to back; medians over
repeats. ``--envs`` takes several values to show how the gap grows with the number of envs.

    python bench/bench_train_fast_path.py [--steps 16384] [--repeats 3] [--envs 8 32 128]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from calf_agent.regimes import default_representation, vec_env_factory
from calf_agent.trainer import cartpole_defaults
from calf_agent.training import train
from calf_core.profiles import load_profile

PROFILE = 'full_net_aware'


def steps_per_s(fast: bool, envs: int, steps: int, seed: int) -> tuple[float, float]:
    """(training steps per CPU second, mean return of the last episodes) for one run."""
    profile = load_profile(PROFILE)
    rep = default_representation('cartpole', profile)
    cfg = dataclasses.replace(cartpole_defaults(), seed=seed, num_envs=envs, total_steps=steps)
    factory = vec_env_factory('cartpole', profile, rep, seed, fast=fast)
    with tempfile.TemporaryDirectory() as out:
        start = time.process_time()
        result = train(cfg, factory, Path(out), progress=False)
        elapsed = time.process_time() - start
    return result.global_steps / elapsed, result.mean_return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=16_384)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--envs', type=int, nargs='+', default=[8, 32, 128])
    parser.add_argument('--seed', type=int, default=1)
    args = parser.parse_args()
    for fast in (False, True):  # warm up: imports and first-call costs land outside the measured runs
        steps_per_s(fast, 2, 256, args.seed)
    print(f'PPO on CartPole behind {PROFILE}, {args.steps} steps, median of {args.repeats} repeats (CPU time)')
    print(f'{"envs":>5}{"sync steps/s":>14}{"fast steps/s":>14}{"ratio":>8}{"sync return":>13}{"fast return":>13}')
    for envs in args.envs:
        runs = [(steps_per_s(False, envs, args.steps, args.seed), steps_per_s(True, envs, args.steps, args.seed))
                for _ in range(args.repeats)]
        sync = statistics.median(s for (s, _), _ in runs)
        fast = statistics.median(f for _, (f, _) in runs)
        ratio = statistics.median(f / s for (s, _), (f, _) in runs)
        sync_ret, fast_ret = runs[-1][0][1], runs[-1][1][1]
        print(f'{envs:>5}{sync:>14,.0f}{fast:>14,.0f}{ratio:>7.2f}×{sync_ret:>13.1f}{fast_ret:>13.1f}')


if __name__ == '__main__':
    main()
