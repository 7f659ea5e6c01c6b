"""SAC training speed: CALF's SAC against Stable-Baselines3's SAC, env steps per second, in one run.

Both train with the same settings as bench_sac_vs_sb3.py (256x256 networks, batch 256, one gradient step
per env step after 1,000 random steps, one env, one torch thread, a fresh process per run) for ``--steps``
env steps. Each repeat runs SB3 and CALF side by side, so that both meet the same load on a shared
machine. Steps/s are given on CPU time (the process's, which the load changes least) and on wall-clock
time; the ratio is CALF over SB3 (above 1: CALF is faster). Medians over the repeats, per task.

    python bench/bench_sac_speed.py [--tasks Pendulum-v1 InvertedDoublePendulum-v5] [--steps 3000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
from concurrent.futures import ProcessPoolExecutor

from bench_sac_vs_sb3 import Run, run_calf, run_sb3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--tasks', nargs='+', default=['Pendulum-v1', 'InvertedDoublePendulum-v5'])
    parser.add_argument('--steps', type=int, default=3_000, help='env steps per run (the first 1,000 random)')
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    print(f'{args.steps} steps per run, {args.repeats} repeats, load average {os.getloadavg()[0]:.1f}')
    print('task | repeat | SB3 steps/s CPU (wall) | CALF steps/s CPU (wall) | CALF / SB3 CPU (wall)')
    summary = {}
    with ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context('spawn'), max_tasks_per_child=1) as pool:
        for task in args.tasks:
            pairs: list[tuple[Run, Run]] = []
            for repeat in range(args.repeats):
                sb3 = pool.submit(run_sb3, task, repeat, args.steps)
                calf = pool.submit(run_calf, task, repeat, args.steps, None)
                pairs.append((sb3.result(), calf.result()))
                s, c = pairs[-1]
                print(f'{task} | {repeat} | {s.steps / s.cpu_s:.1f} ({s.steps / s.wall_s:.1f}) | '
                      f'{c.steps / c.cpu_s:.1f} ({c.steps / c.wall_s:.1f}) | {s.cpu_s / c.cpu_s:.2f} '
                      f'({s.wall_s / c.wall_s:.2f})', flush=True)
            summary[task] = {
                'sb3_steps_per_cpu_s': round(statistics.median(s.steps / s.cpu_s for s, _ in pairs), 1),
                'calf_steps_per_cpu_s': round(statistics.median(c.steps / c.cpu_s for _, c in pairs), 1),
                'calf_over_sb3_cpu': round(statistics.median(s.cpu_s / c.cpu_s for s, c in pairs), 3),
                'calf_over_sb3_wall': round(statistics.median(s.wall_s / c.wall_s for s, c in pairs), 3)}
    print(f'medians (load average {os.getloadavg()[0]:.1f}):', json.dumps(summary))


if __name__ == '__main__':
    main()
