"""SAC on a clean link: CALF's SAC (calf_agent.sac) vs Stable-Baselines3's SAC, same budget and settings.

Both train on the plain gymnasium env, one env, one torch thread, with the same settings (256x256
networks, batch 256, lr 3e-4, gamma 0.99, tau 0.005, alpha tuned towards -A, 1,000 random steps
first, one gradient step per env step); CALF also normalises observations, as it always does. Each
run is a fresh process; the clock covers env and model construction plus learning, not imports. A
run's final return is the mean of its last 20 training episodes. CALF's time to reach SB3's final
return (less 5 % of its magnitude; read from progress.csv, one row per 1,000 steps, so a little late)
is compared with SB3's wall-clock for the whole budget (goal: <= 1.0x). Printed per seed, then the medians.

``--jobs 1`` (the default) trains SB3, then CALF, seed by seed. ``--jobs N`` runs N processes at once,
each seed's SB3 and CALF side by side, so that on a shared machine both meet the same load. Each run also
reports its process's CPU time. ``--out DIR`` keeps CALF's runs (progress.csv, checkpoint).

    python bench/bench_sac_vs_sb3.py [--task Pendulum-v1] [--seeds 0 1 2] [--budget 20000] [--jobs 2] [--out DIR]
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import multiprocessing as mp
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import NamedTuple

WINDOW = 20
MARGIN = 0.05
LEARNING_STARTS = 1_000


class Run(NamedTuple):
    """One training run for the whole budget."""

    library: str
    seed: int
    steps: int
    wall_s: float
    final_return: float
    cpu_s: float  # the process's CPU time over the same span
    progress: tuple[tuple[float, float], ...]  # CALF: (time_s, windowed return) per progress.csv row; SB3: none


def run_sb3(task: str, seed: int, budget: int) -> Run:
    """SB3's SAC with its defaults (which are CALF's), ``LEARNING_STARTS`` random steps first."""
    import torch
    from stable_baselines3 import SAC

    torch.set_num_threads(1)
    start, cpu = time.perf_counter(), time.process_time()
    model = SAC('MlpPolicy', task, learning_starts=LEARNING_STARTS, seed=seed, device='cpu', verbose=0)
    model.learn(budget)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    episodes = list(model.ep_info_buffer)[-WINDOW:]
    final = statistics.fmean(e['r'] for e in episodes) if episodes else math.nan
    return Run('sb3', seed, model.num_timesteps, wall, final, cpu, ())


def run_calf(task: str, seed: int, budget: int, out: str | None) -> Run:
    """CALF's SAC (``sac_defaults()``) for the whole budget, into ``out`` (None: a temporary directory)."""
    import dataclasses

    import gymnasium as gym

    from calf_agent.sac import SacConfig
    from calf_agent.trainer import sac_defaults
    from calf_agent.training import train

    def make(num_envs: int) -> gym.vector.VectorEnv:
        return gym.make_vec(task, num_envs, vectorization_mode='sync',
                            vector_kwargs={'autoreset_mode': gym.vector.AutoresetMode.SAME_STEP})

    cfg = dataclasses.replace(sac_defaults(), seed=seed, total_steps=budget, return_window=WINDOW, torch_threads=1,
                              sac=SacConfig(learning_starts=LEARNING_STARTS))
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(out) / f'{task}-seed{seed}' if out else Path(tmp)
        start, cpu = time.perf_counter(), time.process_time()
        result = train(cfg, make, run_dir, progress=False)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        with (run_dir / 'progress.csv').open() as rows:
            progress = tuple((float(r['time_s']), float(r['episodic_return'])) for r in csv.DictReader(rows))
    return Run('calf', seed, result.global_steps, wall, result.mean_return, cpu, progress)


def time_to(calf: Run, target: float) -> float:
    """The time CALF's windowed return first reached ``target`` (nan: never)."""
    return next((t for t, ret in calf.progress if ret >= target), math.nan)


def target_of(sb3_final: float) -> float:
    """SB3's final return less ``MARGIN`` of its magnitude."""
    return sb3_final - MARGIN * abs(sb3_final)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--task', default='Pendulum-v1')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--budget', type=int, default=20_000)
    parser.add_argument('--jobs', type=int, default=1, help='processes at once (2: SB3 and CALF side by side)')
    parser.add_argument('--out', default=None, help="keep CALF's runs in this directory")
    args = parser.parse_args()
    print(f'{args.task}, {args.budget} steps per run, seeds {args.seeds}, {args.jobs} process(es) at once')
    print('seed | SB3 final return | SB3 wall s (CPU s) | CALF final return | CALF wall s (CPU s) | '
          'CALF time to SB3 final s | to-target / SB3 wall | wall / SB3 wall')
    pairs: list[tuple[Run, Run]] = []
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=mp.get_context('spawn'), max_tasks_per_child=1) as pool:
        if args.jobs == 1:  # one at a time
            runs = [(pool.submit(run_sb3, args.task, seed, args.budget).result(),
                     pool.submit(run_calf, args.task, seed, args.budget, args.out).result()) for seed in args.seeds]
        else:
            futures = [(pool.submit(run_sb3, args.task, seed, args.budget),
                        pool.submit(run_calf, args.task, seed, args.budget, args.out)) for seed in args.seeds]
            runs = [(sb3.result(), calf.result()) for sb3, calf in futures]
    for sb3, calf in runs:
        reached = time_to(calf, target_of(sb3.final_return))
        pairs.append((sb3, calf))
        print(f'{sb3.seed} | {sb3.final_return:.1f} | {sb3.wall_s:.1f} ({sb3.cpu_s:.1f}) | {calf.final_return:.1f} | '
              f'{calf.wall_s:.1f} ({calf.cpu_s:.1f}) | {reached:.1f} | {reached / sb3.wall_s:.2f} | '
              f'{calf.wall_s / sb3.wall_s:.2f}', flush=True)
    reached = [time_to(c, target_of(s.final_return)) / s.wall_s for s, c in pairs]
    reached = [r for r in reached if not math.isnan(r)]
    print('medians:', json.dumps({
        'sb3_final_return': round(statistics.median(s.final_return for s, _ in pairs), 1),
        'calf_final_return': round(statistics.median(c.final_return for _, c in pairs), 1),
        'return_ratio_calf_over_sb3': round(statistics.median(c.final_return / s.final_return for s, c in pairs), 3),
        'wall_ratio_calf_over_sb3': round(statistics.median(c.wall_s / s.wall_s for s, c in pairs), 3),
        'cpu_ratio_calf_over_sb3': round(statistics.median(c.cpu_s / s.cpu_s for s, c in pairs), 3),
        'calf_reached_sb3_final': f'{len(reached)}/{len(pairs)}',
        'time_to_sb3_final_over_sb3_wall': round(statistics.median(reached), 3) if reached else None}))
    print('(returns are negative on Pendulum-v1: a return ratio below 1 means CALF scored higher)')


if __name__ == '__main__':
    main()
