"""Table 9 analog: end-to-end latency per condition, from the live graph and from virtual time."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from calf_agent.evaluate import evaluate_sim
from calf_bringup.experiment import TrainJob, run_train, run_versions
from calf_bringup.experiment_report import write_latency_cdf
from calf_bringup.experiment_specs import (
    REGIME_ROWS,
    TABLE9_PAPER,
    TABLE9_PROFILES,
    TABLES,
)
from calf_bringup.ros_eval import evaluate_ros
from calf_core.network import resolve_network
from calf_core.profiles import sample_e2e


def run_table9(out: Path, episodes: int, command: str, started: float) -> list[Path]:
    """Measure E2E p50/p95 of the Full Net-Aware seed-0 CartPole policy under each condition."""
    policy = run_train(TrainJob('cartpole', REGIME_ROWS[-1], 0, TABLES['table4'].steps), out / 'cache')
    rows: dict[str, dict[str, Any]] = {}
    samples: dict[str, list[float]] = {}
    for condition, network in TABLE9_PROFILES.items():
        print(f'table9: {condition} ({network}) through the live graph, {episodes} episodes')
        live = evaluate_ros(policy, network, episodes, seed=0, time_scale=1.0, keep_samples=True)
        sim = evaluate_sim(policy, resolve_network(network), episodes=max(episodes, 20), seed=0)
        sampled = sample_e2e(resolve_network(network), n=100_000, seed=0)
        samples[f'{condition} (live)'] = live['e2e_samples_ms']
        rows[condition] = {'network': network, 'live': live['e2e_latency_ms'], 'sim': sim['e2e_latency_ms'],
                           'profile': {'p50': sampled.p50_ms, 'p95': sampled.p95_ms},
                           'paper': dict(zip(('p50', 'p95'), TABLE9_PAPER[condition])),
                           'live_return': live['mean_return']}
    result = {'table': 'table9', 'title': 'End-to-end latency (ms), measured on the env side',
              'episodes': episodes, 'rows': rows, 'markdown': _markdown(rows), 'command': command,
              'run_time_s': round(time.time() - started, 1), 'versions': run_versions()}
    json_path, md_path = out / 'table9.json', out / 'table9.md'
    how = (f'The Full Net-Aware seed-0 CartPole policy: {episodes} episodes per condition through the live Mode 2 '
           f'graph (env node, shim, policy node over DDS) at time scale 1, {max(episodes, 20)} in virtual time. '
           'The live figures include the graph\'s own overhead (the Local row).')
    result['markdown'] += '\n\n' + how
    md_path.write_text(f'# table9: {result["title"]}\n\n{result["markdown"]}\n\nCommand: `{command}`\n\n'
                       '![table9](table9_cdf.png)\n')
    json_path.write_text(json.dumps(result, indent=1))
    return [json_path, md_path, write_latency_cdf(samples, out / 'table9_cdf.png')]


def _markdown(rows: dict[str, dict[str, Any]]) -> str:
    lines = ['| condition | profile | live p50 / p95 | virtual-time p50 / p95 | profile sampled p50 / p95 '
             '| paper p50 / p95 |', '|---|---|---|---|---|---|']
    for condition, row in rows.items():
        cells = [f'{_ms(row[k]["p50"])} / {_ms(row[k]["p95"])}' for k in ('live', 'sim', 'profile', 'paper')]
        lines.append(f'| {condition} | `{row["network"]}` | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def _ms(value: float | None) -> str:
    return '-' if value is None else f'{value:.1f}'
