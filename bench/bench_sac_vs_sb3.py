"""SAC on a clean link: CALF's SAC (calf_agent.sac) vs Stable-Baselines3's SAC, same budget and settings.

Both train on the plain gymnasium env, one env, one torch thread, with the same settings (256x256
networks, batch 256, lr 3e-4, gamma 0.99, tau 0.005, alpha tuned towards -A, 1,000 random steps
first, one gradient step per env step); CALF also normalises observations, as it always does. Each
run is a fresh process; the clock covers env and model construction plus learning, not imports. A
run's final return is the mean of its last 20 training episodes. For each seed SB3 trains first;
CALF then trains for the same budget, and its time to reach SB3's final return (less 5 % of its
magnitude; read from progress.csv, one row per 1,000 steps, so a little late) is compared with SB3's
wall-clock for the whole budget (goal: <= 1.0x). Printed per seed, then the medians.

    python bench/bench_sac_vs_sb3.py [--task Pendulum-v1] [--seeds 0 1 2] [--budget 20000]
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
    to_target_s: float  # CALF: time until its windowed return first reached the target (nan: never)


def run_sb3(task: str, seed: int, budget: int) -> Run:
    """SB3's SAC with its defaults (which are CALF's), ``LEARNING_STARTS`` random steps first."""
    import torch
    from stable_baselines3 import SAC

    torch.set_num_threads(1)
    start = time.perf_counter()
    model = SAC('MlpPolicy', task, learning_starts=LEARNING_STARTS, seed=seed, device='cpu', verbose=0)
    model.learn(budget)
    wall = time.perf_counter() - start
    episodes = list(model.ep_info_buffer)[-WINDOW:]
    final = statistics.fmean(e['r'] for e in episodes) if episodes else math.nan
    return Run('sb3', seed, model.num_timesteps, wall, final, wall)


def run_calf(task: str, seed: int, budget: int, target: float) -> Run:
    """CALF's SAC (``sac_defaults()``) for the whole budget; the time its windowed return first reached ``target``."""
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
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        result = train(cfg, make, Path(out), progress=False)
        wall = time.perf_counter() - start
        with (Path(out) / 'progress.csv').open() as rows:
            reached = [float(r['time_s']) for r in csv.DictReader(rows) if float(r['episodic_return']) >= target]
    return Run('calf', seed, result.global_steps, wall, result.mean_return, reached[0] if reached else math.nan)


def target_of(sb3_final: float) -> float:
    """SB3's final return less ``MARGIN`` of its magnitude."""
    return sb3_final - MARGIN * abs(sb3_final)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--task', default='Pendulum-v1')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--budget', type=int, default=20_000)
    args = parser.parse_args()
    pairs: list[tuple[Run, Run]] = []
    print(f'{args.task}, {args.budget} steps per run, seeds {args.seeds}')
    print('seed | SB3 final return | SB3 wall s | CALF final return | CALF wall s | CALF time to SB3 final s | '
          'to-target / SB3 wall | wall / SB3 wall')
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context('spawn'), max_tasks_per_child=1) as pool:
        for seed in args.seeds:
            sb3 = pool.submit(run_sb3, args.task, seed, args.budget).result()
            calf = pool.submit(run_calf, args.task, seed, args.budget, target_of(sb3.final_return)).result()
            pairs.append((sb3, calf))
            print(f'{seed} | {sb3.final_return:.1f} | {sb3.wall_s:.1f} | {calf.final_return:.1f} | {calf.wall_s:.1f} | '
                  f'{calf.to_target_s:.1f} | {calf.to_target_s / sb3.wall_s:.2f} | {calf.wall_s / sb3.wall_s:.2f}',
                  flush=True)
    reached = [c.to_target_s / s.wall_s for s, c in pairs if not math.isnan(c.to_target_s)]
    print('medians:', json.dumps({
        'sb3_final_return': round(statistics.median(s.final_return for s, _ in pairs), 1),
        'calf_final_return': round(statistics.median(c.final_return for _, c in pairs), 1),
        'return_ratio_calf_over_sb3': round(statistics.median(c.final_return / s.final_return for s, c in pairs), 3),
        'wall_ratio_calf_over_sb3': round(statistics.median(c.wall_s / s.wall_s for s, c in pairs), 3),
        'calf_reached_sb3_final': f'{len(reached)}/{len(pairs)}',
        'time_to_sb3_final_over_sb3_wall': round(statistics.median(reached), 3) if reached else None}))
    print('(returns are negative on Pendulum-v1: a return ratio below 1 means CALF scored higher)')


if __name__ == '__main__':
    main()
