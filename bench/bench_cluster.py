"""Wall-clock of a Table 4 run: the local process pool against a local Ray cluster, in one run.

Each repeat runs the same experiment twice into fresh folders: ``run_table`` on a local process
pool of one worker per core, then on a Ray cluster started on this machine (``--cluster ray:local``,
on the loopback interface; its start-up is timed apart and counted in the Ray total). Medians over
repeats, with the load average beside each run since the machine may be shared.

From the per-cell timings of the runs it then estimates, on paper, the wall-clock of the full
10-seed Tables 4 to 6 on 8 and 32 cores: a cell's CPU time is its wall-clock on a core of its own
(it trains on one thread), and cells are dealt longest-first to the least-loaded core. A Table 5 (MiniGrid) cell is not measured here; its time comes
from ``--minigrid-cell-s`` (default: the committed results/table5.json, run time × workers / cells,
scaled to 500k steps).

    python bench/bench_cluster.py [--seeds 4] [--steps 200000] [--episodes 50] [--repeats 1] [--ppo-cell-s S]
"""
from __future__ import annotations

import argparse
import heapq
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from calf_bringup.experiment import run_table
from calf_bringup.experiment_cells import LocalExecutor
from calf_bringup.experiment_specs import TABLES


def load() -> str:
    return ' '.join(f'{x:.2f}' for x in os.getloadavg())


def one_run(mode: str, seeds: int, steps: int, episodes: int, out: Path) -> dict:
    """Wall-clock of one Table 4 run, its start-up part, and its per-cell seconds."""
    workers, before = os.cpu_count() or 1, load()
    started = time.monotonic()
    if mode == 'ray':
        from calf_bringup.experiment_ray import RayExecutor
        executor = RayExecutor('local')
    else:
        executor = LocalExecutor(workers)
    startup = time.monotonic() - started
    try:
        result = run_table(TABLES['table4'], seeds, episodes, out, steps=steps, executor=executor)
    finally:
        executor.close()
    wall = time.monotonic() - started
    cells = {k: c['cpu_seconds'] for k, c in result['cells_run'].items()}
    return {'mode': mode, 'wall_s': wall, 'startup_s': startup, 'cells_s': cells, 'load_before': before}


def makespan(durations: list[float], cores: int) -> float:
    """Longest-first list scheduling of independent cells on ``cores``."""
    free = [0.0] * cores
    for d in sorted(durations, reverse=True):
        heapq.heapreplace(free, free[0] + d)
    return max(free)


def paper_estimate(cells_s: dict[str, float], steps: int, minigrid_cell_s: float,
                   ppo_cell_s: float | None) -> dict[int, float]:
    """Wall-clock of Tables 4-6 with 10 seeds. A CartPole PPO cell takes ``ppo_cell_s`` if given, else its
    time here scaled from ``steps`` to 200k (an upper bound: its evaluations do not scale with steps)."""
    scale = TABLES['table4'].steps / steps
    ppo = [s * scale for k, s in cells_s.items() if '-model-' not in k]
    model = [s for k, s in cells_s.items() if '-model-' in k]  # a planner's cost does not follow --steps
    ppo_mean, model_mean = ppo_cell_s or statistics.mean(ppo), statistics.mean(model) if model else 0.0
    t4 = [ppo_mean] * 30 + [model_mean] * 10
    t5 = [minigrid_cell_s] * 30
    t6 = [ppo_mean] * 50  # an upper bound: a Table 6 cell evaluates one column, not five
    durations = t4 + t5 + t6
    return {cores: makespan(durations, cores) for cores in (8, 32)} | {'ppo_cell_s': ppo_mean,
                                                                       'model_cell_s': model_mean,
                                                                       'serial_s': sum(durations)}


def committed_minigrid_cell_s() -> float:
    result = json.loads(Path('results/table5.json').read_text())
    workers = int(result['command'].split('--workers ')[1].split()[0])
    cells = result['seeds'] * len(result['cells'])
    return result['run_time_s'] * workers / cells * TABLES['table5'].steps / result['steps']


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seeds', type=int, default=4)
    parser.add_argument('--steps', type=int, default=TABLES['table4'].steps)
    parser.add_argument('--episodes', type=int, default=50)
    parser.add_argument('--repeats', type=int, default=1)
    parser.add_argument('--minigrid-cell-s', type=float, help='seconds of one Table 5 cell at 500k steps')
    parser.add_argument('--ppo-cell-s', type=float, help='seconds of one CartPole PPO cell at 200k steps, '
                        'measured elsewhere (default: this run\'s, scaled to 200k steps)')
    args = parser.parse_args()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix='calf-bench-cluster-') as tmp:
        for repeat in range(args.repeats):
            for mode in ('local', 'ray'):
                run = one_run(mode, args.seeds, args.steps, args.episodes, Path(tmp) / f'{mode}{repeat}')
                run['load_after'] = load()
                runs.append(run)
                print(f'repeat {repeat} {mode}: {run["wall_s"]:.1f} s (start-up {run["startup_s"]:.1f} s), '
                      f'load {run["load_before"]} -> {run["load_after"]}', flush=True)
    local = statistics.median(r['wall_s'] for r in runs if r['mode'] == 'local')
    ray = statistics.median(r['wall_s'] for r in runs if r['mode'] == 'ray')
    startup = statistics.median(r['startup_s'] for r in runs if r['mode'] == 'ray')
    print(f'table4, {args.seeds} seeds, {args.steps} steps, {args.episodes} episodes, {os.cpu_count()} cores: '
          f'local pool {local:.1f} s, Ray {ray:.1f} s (of which start-up {startup:.1f} s): '
          f'overhead {100 * (ray / local - 1):+.1f} % ({100 * ((ray - startup) / local - 1):+.1f} % without start-up)')
    cells = {k: statistics.median(r['cells_s'][k] for r in runs) for k in runs[0]['cells_s']}
    minigrid = args.minigrid_cell_s or committed_minigrid_cell_s()
    est = paper_estimate(cells, args.steps, minigrid, args.ppo_cell_s)
    print(f'per cell (CPU time, median): PPO {est["ppo_cell_s"]:.1f} s at 200k steps, model planner '
          f'{est["model_cell_s"]:.1f} s, MiniGrid {minigrid:.0f} s (assumed); Tables 4-6 with 10 seeds: '
          f'{est["serial_s"] / 3600:.2f} h on one core, {est[8] / 60:.1f} min on 8 cores, '
          f'{est[32] / 60:.1f} min on 32 cores')


if __name__ == '__main__':
    main()
