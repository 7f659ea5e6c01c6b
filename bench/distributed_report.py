"""Tables of results/distributed.md from the run directories of bench/run_distributed.sh (the sync policies)
or bench/run_dist_goals.sh (the issue's goals, ``--goals``).

    python bench/distributed_report.py RUNS_DIR
    python bench/distributed_report.py --goals RUNS_DIR

Per run: time and env steps to the first deterministic evaluation >= 475 (the learner's eval.csv,
10 episodes; evaluation time included), the final checkpoint's mean return over 20 deterministic
episodes (calf eval), weight bytes and messages sent (snapshots / deltas), bytes per message, the share
of the env steps received that were superseded (wasted), and the version lag of the batches trained on.
"""
from __future__ import annotations

import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

TARGET = 475.0


def run_row(run: Path) -> dict | None:
    summary_path = run / 'distributed.json'
    if not summary_path.is_file():
        return None
    summary = json.loads(summary_path.read_text())
    evals = list(csv.DictReader((run / 'eval.csv').open())) if (run / 'eval.csv').is_file() else []
    hit = next((row for row in evals if float(row['mean_return']) >= TARGET), None)
    eval_json = run.parent / f'{run.name}.eval.json'
    final = json.loads(eval_json.read_text())['mean_return'] if eval_json.is_file() and eval_json.stat().st_size else None
    lags = [int(k) for k, n in summary['lag_histogram'].items() if k != 'other_run' for _ in range(n)]
    updates = list(csv.DictReader((run / 'progress.csv').open())) if (run / 'progress.csv').is_file() else []
    steady = None
    if len(updates) > 2:  # from the first update on: without process start-up and discovery
        first, last = updates[0], updates[-1]
        steady = (int(last['env_steps']) - int(first['env_steps'])) / (float(last['time_s']) - float(first['time_s']))
    load = (run.parent / f'{run.name}.uptime')
    return {'run': run.name, 'sync': summary['sync'], 'time_to_475_s': float(hit['time_s']) if hit else None,
            'steps_to_475': int(hit['env_steps']) if hit else None, 'final_return': final,
            'weights_bytes': summary['weights_sent']['bytes'], 'weights_messages': summary['weights_sent']['messages'],
            'updates': summary['updates'], 'env_steps': summary['env_steps'], 'wall_time_s': summary['wall_time_s'],
            'kinds': summary.get('weights_messages', {}), 'wasted': summary.get('wasted_fraction'),
            'superseded_steps': summary['batches_superseded']['env_steps'], 'steady_sps': steady,
            'first_update_s': float(updates[0]['time_s']) if updates else None,
            'lag_p50': float(np.percentile(lags, 50)) if lags else None,
            'lag_p90': float(np.percentile(lags, 90)) if lags else None, 'lag_max': max(lags) if lags else None,
            'load': load.read_text().split('load average:')[-1].split(',')[0].strip() if load.is_file() else '?'}


def fmt(value: object, spec: str = '') -> str:
    return '-' if value is None else format(value, spec)


def main(root: Path) -> None:
    rows = [row for run in sorted(root.iterdir()) if run.is_dir() and (row := run_row(run))]
    scale = [r for r in rows if r['run'].startswith('scale_w')]
    rows = [r for r in rows if r not in scale]
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[re.sub(r'_s\d+$', '', row['run'])].append(row)
    print('| run | sync | time to 475 (s) | env steps to 475 | final return (20 ep) | weight bytes | weight msgs '
          '(snapshots / deltas) | bytes per msg | wasted | updates | lag p50 / p90 / max | load at start |')
    print('|---|---|---|---|---|---|---|---|---|---|---|---|')
    for row in rows:
        kinds = row['kinds']
        split = f' ({kinds["snapshots"]} / {kinds["deltas"]})' if kinds else ''
        print(f'| {row["run"]} | {row["sync"]} | {fmt(row["time_to_475_s"], ".0f")} | {fmt(row["steps_to_475"])} '
              f'| {fmt(row["final_return"], ".1f")} | {row["weights_bytes"]:,} | {row["weights_messages"]}{split} '
              f'| {row["weights_bytes"] / max(1, row["weights_messages"]):,.0f} | {fmt(row["wasted"], ".1%")} '
              f'| {row["updates"]} | {fmt(row["lag_p50"], ".0f")} / {fmt(row["lag_p90"], ".0f")} / '
              f'{fmt(row["lag_max"])} | {row["load"]} |')
    print('\nMeans over seeds (runs that reached 475 for the time and steps):\n')
    print('| group | runs | reached 475 | time to 475 (s) | env steps to 475 | final return | weight bytes |')
    print('|---|---|---|---|---|---|---|')
    for name, group in groups.items():
        hits = [r for r in group if r['time_to_475_s'] is not None]
        finals = [r['final_return'] for r in group if r['final_return'] is not None]

        def mean(values: list) -> str:
            return f'{np.mean(values):,.0f}' if values else '-'
        print(f'| {name} | {len(group)} | {len(hits)} | {mean([r["time_to_475_s"] for r in hits])} '
              f'| {mean([r["steps_to_475"] for r in hits])} | {mean(finals)} '
              f'| {mean([r["weights_bytes"] for r in group])} |')
    if scale:
        print('\nScaling (30,000 env steps, sync every; consumed = trained on, collected = consumed + superseded):\n')
        print('| workers | wall time (s) | first update at (s) | consumed env steps/s | consumed from the first '
              'update on | collected env steps/s |')
        print('|---|---|---|---|---|---|')
        for r in scale:
            print(f'| {r["run"].split("_")[1][1:]} | {r["wall_time_s"]:.0f} | {fmt(r["first_update_s"], ".1f")} '
                  f'| {r["env_steps"] / r["wall_time_s"]:.0f} | {fmt(r["steady_sps"], ".0f")} '
                  f'| {(r["env_steps"] + r["superseded_steps"]) / r["wall_time_s"]:.0f} |')
    for log in sorted(root.glob('scale_single_s*.log')):
        done = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{')]
        if done:
            print(f'\nSingle-process `calf train` ({log.stem}): {done[-1]["steps"]} env steps in '
                  f'{done[-1]["wall_time_s"]} s = {done[-1]["steps"] / done[-1]["wall_time_s"]:.0f} env steps/s.')


GOAL_TARGETS = {'cp': 475.0, 'ip': 950.0}
"""The return each task's goal runs must reach: CartPole's 475 on a deterministic evaluation (eval.csv),
InvertedPendulum-v5's 950 on the 20-episode training return (progress.csv), which single-process calf train
also logs."""


def curve(run: Path) -> list[tuple[int, float]]:
    """(env steps, 20-episode training return) after each update: the learner's or calf train's progress.csv."""
    rows = list(csv.DictReader((run / 'progress.csv').open())) if (run / 'progress.csv').is_file() else []
    return [(int(float(r.get('env_steps') or r['global_step'])), float(r['episodic_return'])) for r in rows
            if r['episodic_return'] not in ('', 'nan')]


def goal_row(run: Path) -> dict:
    """One goal run: env steps to its task's target, final return, weight bytes (sent, and as snapshots)."""
    task = run.name.split('_')[0]
    target = GOAL_TARGETS[task]
    summary_path = run / 'distributed.json'
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    if task == 'cp':
        evals = list(csv.DictReader((run / 'eval.csv').open())) if (run / 'eval.csv').is_file() else []
        hit = next((int(r['env_steps']) for r in evals if float(r['mean_return']) >= target), None)
    else:
        hit = next((steps for steps, ret in curve(run) if ret >= target), None)
    eval_json = run.parent / f'{run.name}.eval.json'
    final = json.loads(eval_json.read_text())['mean_return'] if eval_json.is_file() and eval_json.stat().st_size else None
    points = curve(run)
    row = {'run': run.name, 'group': re.sub(r'_s\d+$', '', run.name), 'steps_to_target': hit, 'final_return': final,
           'last_window': points[-1][1] if points else None, 'env_steps': points[-1][0] if points else None,
           'bytes': None, 'as_snapshots': None, 'messages': None, 'kinds': None, 'lag_p50': None, 'refused': None,
           'load': _load(run)}
    if summary:
        lags = [int(k) for k, n in summary['lag_histogram'].items() if k != 'other_run' for _ in range(n)]
        kinds = summary['weights_messages']
        row.update(bytes=summary['weights_sent']['bytes'], messages=summary['weights_sent']['messages'],
                   as_snapshots=kinds.get('bytes_as_snapshots'), env_steps=summary['env_steps'],
                   kinds=f'{kinds["snapshots"]} / {kinds["deltas"]}',
                   lag_p50=float(np.percentile(lags, 50)) if lags else None,
                   refused=', '.join(f'{k} {v}' for k, v in summary['refused'].items()) or 'none')
    return row


def _load(run: Path) -> str:
    path = run.parent / f'{run.name}.uptime'
    if not path.is_file():
        return '?'
    return ' → '.join(line.split('load average:')[-1].split(',')[0].strip() for line in path.read_text().splitlines())


def goals(root: Path) -> None:
    """The goal tables: per run, then per group (medians over seeds) and the ratios the goals name."""
    rows = [goal_row(run) for run in sorted(root.iterdir()) if run.is_dir() and (run / 'done').is_file()]
    print('| run | env steps to target | final return (20 ep) | last 20-episode return | env steps | weight bytes '
          '| as full snapshots | weight msgs (snapshots / deltas) | lag p50 | refused at the learner | load at start → end |')
    print('|---|---|---|---|---|---|---|---|---|---|---|')
    for r in rows:
        print(f'| {r["run"]} | {fmt(r["steps_to_target"])} | {fmt(r["final_return"], ".1f")} '
              f'| {fmt(r["last_window"], ".1f")} | {fmt(r["env_steps"])} | {fmt(r["bytes"], ",")} '
              f'| {fmt(r["as_snapshots"], ",")} | {fmt(r["messages"])} ({fmt(r["kinds"])}) | {fmt(r["lag_p50"], ".0f")} '
              f'| {fmt(r["refused"])} | {r["load"]} |')
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r['group']].append(r)
    print('\nPer group (medians over seeds; steps to target over the runs that reached it):\n')
    print('| group | runs | reached target | env steps to target | final return | weight bytes | as full snapshots |')
    print('|---|---|---|---|---|---|---|')
    for name, group in groups.items():
        print(f'| {name} | {len(group)} | {sum(r["steps_to_target"] is not None for r in group)} '
              f'| {_median(group, "steps_to_target")} | {_median(group, "final_return")} | {_median(group, "bytes")} '
              f'| {_median(group, "as_snapshots")} |')


    print()
    for line in goal_lines(groups):
        print(line)


def goal_lines(groups: dict[str, list[dict]]) -> list[str]:
    """The ratios the goals name, from the per-group medians (a group missing: its lines left out)."""
    def med(name: str, key: str) -> float | None:
        values = [r[key] for r in groups.get(name, []) if r[key] is not None]
        return float(np.median(values)) if values else None

    lines = []
    for int8, base in (('cp_int8', 'cp_snapshots'), ('cp_wifi_int8', 'cp_wifi_snapshots')):
        sent, full = med(int8, 'bytes'), med(base, 'bytes')
        steps, base_steps = med(int8, 'steps_to_target'), med(base, 'steps_to_target')
        ret, base_ret = med(int8, 'final_return'), med(base, 'final_return')
        if None not in (sent, full, steps, base_steps, ret, base_ret):
            lines.append(f'- {int8} against {base}: weight bytes {full / sent:.1f}x fewer (goal 10x), env steps to '
                         f'target {steps / base_steps:.2f}x (goal <= 1.2x), final return {100 * (ret / base_ret - 1):+.1f} % '
                         '(goal within 5 %)')
    for dist in ('ip_int8', 'ip_wifi_int8'):
        steps, single = med(dist, 'steps_to_target'), med('ip_single', 'steps_to_target')
        sent, full = med(dist, 'bytes'), med(dist, 'as_snapshots')
        if None not in (steps, single, sent, full):
            lines.append(f'- {dist} against ip_single: env steps to target {steps / single:.2f}x (goal <= 1.2x), '
                         f'weight bytes {full / sent:.1f}x fewer than as full snapshots (goal 10x)')
    return lines


def _median(group: list[dict], key: str) -> str:
    values = [r[key] for r in group if r[key] is not None]
    return f'{np.median(values):,.0f}' if values else '-'


if __name__ == '__main__':
    if sys.argv[1] == '--goals':
        goals(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1]))
