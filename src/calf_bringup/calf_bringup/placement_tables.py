"""Tables 7 and 8 analogs: one task deployed in three placements, Flat (Desktop), Flat (Edge) and Hierarchical.

Per seed, a flat policy trains ``steps`` PPO steps under the regime, and a hierarchy trains the same
total budget split evenly across its sub-policies (``calf train-hierarchy``). Every placement is then
evaluated under the deployment network (wifi_normal) in virtual time (``calf_agent.placement_sim``,
all seeds), and the seed-0 policies also through the live node graph over DDS at time scale 1
(``calf eval --backend ros --placement ...``), which measures E2E latency with the real node hops.
Runs are cached under ``OUT/graph_cache/`` so that an interrupted experiment resumes. A task without
sub-tasks (``calf_agent.subtasks``), such as MiniGrid Dynamic-Obstacles, has the two flat rows only.
"""
from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from calf_agent.subtasks import SUBTASKS, subtasks
from calf_core import atomic
from calf_core.yaml_files import read_json

PLACEMENT_ROWS = {'Flat (Desktop)': 'flat_desktop', 'Flat (Edge)': 'flat_edge',
                  'Hierarchical (Distributed)': 'hierarchical'}


class PlacementTable(NamedTuple):
    name: str
    title: str
    env: str
    network: str  # the deployment condition every configuration is evaluated under
    regime: str  # training regime of the flat policy and the desktop sub-policies
    steps: int  # PPO steps of the flat policy = total over the sub-policies
    paper: dict[str, str]  # row -> the paper's figures for that configuration
    note: str = ''


PLACEMENT_TABLES = {
    'table7': PlacementTable('table7', 'CartPole policy graph: deployment configurations over Wi-Fi-Normal',
                             'cartpole', 'wifi_normal', 'full', 200_000,
                             {'Flat (Desktop)': 'return 448 ± 28, E2E 38 / 62 ms',
                              'Flat (Edge)': 'return 472 ± 21, E2E 6 / 11 ms',
                              'Hierarchical (Distributed)': 'return 465 ± 24, E2E 22 / 45 ms'}),
    'table8': PlacementTable('table8', 'MiniGrid DoorKey policy graph: deployment configurations over Wi-Fi-Normal',
                             'minigrid', 'wifi_normal', 'full', 500_000,
                             {'Flat (Desktop)': 'success 77 ± 9 %', 'Flat (Edge)': 'success 82 ± 7 %',
                              'Hierarchical (Distributed)': 'success 79 ± 8 %'}),
    'table8_dynamic': PlacementTable('table8_dynamic', 'MiniGrid Dynamic-Obstacles policy graph: deployment '
                                     'configurations over Wi-Fi-Normal', 'minigrid_dynamic', 'wifi_normal', 'full',
                                     200_000, {}, 'Dynamic-Obstacles has no sub-tasks, so no hierarchical placement.'),
}


def _one_thread() -> None:
    import torch
    torch.set_num_threads(1)


def _cached(final: Path, marker: str, build: Any) -> Path:
    """``final`` if ``final/marker`` exists, else ``build(partial_dir)`` renamed to ``final``."""
    if (final / marker).is_file():
        return final
    partial = final.with_name(final.name + '.partial')
    shutil.rmtree(partial, ignore_errors=True)
    build(partial)
    partial.rename(final)
    return final


def train_flat(spec: PlacementTable, seed: int, steps: int, cache: Path) -> Path:
    from calf_agent.regimes import regime_profile, train_policy
    return _cached(cache / f'{spec.env}-{spec.regime}-{steps}steps-seed{seed}-flat', 'meta.json',
                   lambda out: train_policy(spec.env, regime_profile(spec.regime), seed, out, steps=steps,
                                            regime=spec.regime, progress=False))


def train_hierarchy_cached(spec: PlacementTable, seed: int, steps: int, cache: Path) -> Path:
    from calf_agent.hierarchy_train import train_hierarchy
    per_sub = steps // len(subtasks(spec.env))
    return _cached(cache / f'{spec.env}-{spec.regime}-{steps}steps-seed{seed}-hierarchy', 'hierarchy.json',
                   lambda out: train_hierarchy(spec.env, spec.regime, seed, out, per_sub, progress=False))


def evaluate_cached(placement: str, policy: Path, network: str, episodes: int, seed: int) -> dict[str, Any]:
    """``calf eval --backend sim --placement`` of one trained seed, cached beside the checkpoint."""
    from calf_agent.placement_sim import evaluate_placement_sim
    from calf_core.network import resolve_network
    path = policy.parent / f'{policy.name}--{placement}-{network}-{episodes}ep.json'
    if not path.is_file():
        report = evaluate_placement_sim(placement, policy, resolve_network(network), episodes, seed=10_000 + seed)
        atomic.write_text(path, json.dumps(report))
    return read_json(path, 'cached evaluation')


def _train(job: tuple[str, PlacementTable, int, int, Path]) -> Path:
    kind, spec, seed, steps, cache = job
    return (train_flat if kind == 'flat' else train_hierarchy_cached)(spec, seed, steps, cache)


def _evaluate(job: tuple[str, Path, str, int, int]) -> dict[str, Any]:
    return evaluate_cached(*job)


def run_placement_table(spec: PlacementTable, seeds: int, episodes: int, out: Path, workers: int | None = None,
                        steps: int | None = None) -> dict[str, Any]:
    """Train every seed, evaluate every placement in virtual time, and seed 0 over DDS; return the result.

    Ablation rows evaluate each sub-policy of the hierarchy alone, where it runs (virtual time only).
    """
    from calf_agent.hierarchy import load_hierarchy
    steps = steps or spec.steps
    cache = out / 'graph_cache'
    cache.mkdir(parents=True, exist_ok=True)
    placements = placement_rows(spec)
    kinds = ('flat', 'hierarchy') if 'hierarchical' in placements.values() else ('flat',)
    jobs = [(kind, spec, seed, steps, cache) for seed in range(seeds) for kind in kinds]
    with ProcessPoolExecutor(workers, initializer=_one_thread) as pool:
        trained = dict(zip([(kind, seed) for kind, _, seed, _, _ in jobs], pool.map(_train, jobs)))
        evals = {(row, seed): (placement, trained['hierarchy' if placement == 'hierarchical' else 'flat', seed],
                               spec.network, episodes, seed)
                 for row, placement in placements.items() for seed in range(seeds)}
        for sub in load_hierarchy(trained['hierarchy', 0]).subpolicies if 'hierarchy' in kinds else ():
            placement = 'flat_edge' if sub.placement == 'edge' else 'flat_desktop'
            evals.update({(f'{sub.name} alone ({sub.placement}, ablation)', seed): (
                placement, load_hierarchy(trained['hierarchy', seed]).checkpoint(sub), spec.network, episodes, seed)
                for seed in range(seeds)})
        reports = dict(zip(evals, pool.map(_evaluate, evals.values())))
    live = _live(spec, {placement: evals[row, 0][1] for row, placement in placements.items()}, max(2, episodes // 5))
    rows = {row: _row([reports[row, seed] for seed in range(seeds)], live.get(PLACEMENT_ROWS.get(row)))
            for row in dict.fromkeys(row for row, _ in evals)}
    return {'table': spec.name, 'title': spec.title, 'env': spec.env, 'network': spec.network,
            'regime': spec.regime, 'seeds': seeds, 'episodes': episodes, 'steps': steps,
            'live_episodes': live['flat_desktop']['episodes'], 'rows': rows, 'paper': spec.paper,
            'note': spec.note, 'goal': _goal(rows) if 'hierarchy' in kinds else {}}


def placement_rows(spec: PlacementTable) -> dict[str, str]:
    """The rows ``spec`` has: row name -> placement; no hierarchical row for a task without sub-tasks."""
    return {row: placement for row, placement in PLACEMENT_ROWS.items()
            if placement != 'hierarchical' or spec.env in SUBTASKS}


def _live(spec: PlacementTable, policy: dict[str, Path], episodes: int) -> dict[str, dict[str, Any]]:
    """Each placement of seed 0 through the live node graph at time scale 1."""
    from calf_bringup.ros_eval import evaluate_ros
    reports = {}
    for placement, path in policy.items():
        print(f'{spec.name}: {placement} through the live node graph, {episodes} episodes under {spec.network}')
        reports[placement] = evaluate_ros(path, spec.network, episodes, seed=0, time_scale=1.0, placement=placement)
    return reports


def _row(per_seed: list[dict[str, Any]], live: dict[str, Any] | None) -> dict[str, Any]:
    """One row: virtual-time metrics across seeds, and the live run's (None for ablations)."""
    success = [100.0 * r['success_rate'] for r in per_seed]
    returns = [r['mean_return'] for r in per_seed]
    row = {'graph': per_seed[0]['graph'], 'success_per_seed': success, 'return_per_seed': returns,
           'success': _mean_std(success), 'return': _mean_std(returns),
           'e2e_p50_ms': float(np.median([r['e2e_latency_ms']['p50'] for r in per_seed])),
           'e2e_p95_ms': float(np.median([r['e2e_latency_ms']['p95'] for r in per_seed])), 'live': None}
    if 'forwarded_share' in per_seed[0]:
        row['forwarded_share'] = {name: round(float(np.mean([r['forwarded_share'][name] for r in per_seed])), 3)
                                  for name in per_seed[0]['forwarded_share']}
    if live is not None:
        row['live'] = {'success': 100.0 * live['success_rate'], 'return': live['mean_return'],
                       'e2e_p50_ms': live['e2e_latency_ms']['p50'], 'e2e_p95_ms': live['e2e_latency_ms']['p95'],
                       'episodes': live['episodes'], **{k: live[k] for k in ('forwarded_share',) if k in live}}
    return row


def _mean_std(values: list[float]) -> dict[str, float]:
    return {'mean': float(np.mean(values)), 'std': float(np.std(values, ddof=1)) if len(values) > 1 else 0.0}


def _goal(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, bool]]:
    """The issue's goal in virtual time: hierarchical >= flat desktop, and within 5 % of flat edge."""
    goal = {}
    for metric in ('success', 'return'):
        hier, desk, edge = (rows[r][metric]['mean'] for r in ('Hierarchical (Distributed)', 'Flat (Desktop)',
                                                                 'Flat (Edge)'))
        goal[metric] = {'at_least_flat_desktop': hier >= desk, 'within_5pct_of_flat_edge': hier >= 0.95 * edge}
    return goal


def markdown(result: dict[str, Any]) -> str:
    header = ('| configuration | success % | return | E2E p50 / p95 ms | live success % | live return '
              '| live E2E p50 / p95 ms | paper |')
    lines = [header, '|---' * 8 + '|']
    for name, row in result['rows'].items():
        live = row['live']
        live_cells = (f'{live["success"]:.0f} | {live["return"]:.3g} | {_ms(live["e2e_p50_ms"])} / '
                      f'{_ms(live["e2e_p95_ms"])}') if live else '— | — | —'
        lines.append(
            f'| {name} | {row["success"]["mean"]:.0f} ± {row["success"]["std"]:.0f} | '
            f'{row["return"]["mean"]:.3g} ± {row["return"]["std"]:.2g} | {row["e2e_p50_ms"]:.1f} / '
            f'{row["e2e_p95_ms"]:.1f} | {live_cells} | {result["paper"].get(name, "—")} |')
    return '\n'.join(lines)


def _ms(value: float | None) -> str:
    return '-' if value is None else f'{value:.1f}'


def _shares(shares: dict[str, float]) -> str:
    return ', '.join(f'{name} {100 * share:.0f} %' for name, share in shares.items())


def _verdict(goal: dict[str, dict[str, bool]]) -> str:
    return '; '.join(f'{metric}: hierarchical ≥ Flat (Desktop) {"yes" if g["at_least_flat_desktop"] else "NO"}, '
                     f'within 5 % of Flat (Edge) {"yes" if g["within_5pct_of_flat_edge"] else "NO"}'
                     for metric, g in goal.items())


def write_placement_table(result: dict[str, Any], out: Path, command: str, started: float) -> list[Path]:
    """``OUT/<table>.json`` and ``.md``, with the command, run time and versions."""
    from calf_bringup.experiment import run_versions
    result = {**result, 'markdown': markdown(result), 'command': command,
              'run_time_s': round(time.time() - started, 1), 'versions': run_versions()}
    return write_placement_files(result, out)


def write_placement_files(result: dict[str, Any], out: Path) -> list[Path]:
    """Write a finished placement table's JSON and Markdown."""
    json_path, md_path = out / f'{result["table"]}.json', out / f'{result["table"]}.md'
    json_path.write_text(json.dumps(result, indent=1))
    hierarchy = _hierarchy_text(result['rows'].get('Hierarchical (Distributed)'))
    goal = f'Goal (virtual time): {_verdict(result["goal"])}.\n\n' if result['goal'] else ''
    md_path.write_text(
        f'# {result["table"]}: {result["title"]}\n\n{result["markdown"]}\n\n'
        f'Success, return and E2E latency: {result["seeds"]} training seeds × {result["episodes"]} episodes in '
        f'virtual time (mean ± sample std across seeds; latency: median across seeds). Live: the seed-0 policies, '
        f'{result["live_episodes"]} episodes each through the node graph over DDS at time scale 1. Every '
        f'configuration is evaluated under `{result["network"]}`; Flat (Edge) sends nothing across it. The flat '
        f'policy trains {result["steps"]} PPO steps under the `{result["regime"]}` regime{hierarchy} '
        f'{result["note"]}\n\n{goal}'
        f'Command: `{result["command"]}` ({result["run_time_s"]:.0f} s)\n')
    return [json_path, md_path]


def _hierarchy_text(hier: dict[str, Any] | None) -> str:
    """How the hierarchy trained and what each sub-policy did, or the live latencies' note without one."""
    if hier is None:
        return '.\n\nLive latencies include the Python DDS hops of the env, shim and policy nodes on a shared 2-core host.'
    return (f'; the hierarchy the same total, split evenly across its sub-policies (edge ones under `sim_clean`). '
            f'Ablation rows run one sub-policy alone on the whole task, where it is placed.\n\n'
            f'Share of the env\'s actions per sub-policy (hierarchical): {_shares(hier["forwarded_share"])} in virtual '
            f'time; {_shares(hier["live"]["forwarded_share"])} live.\n\n'
            f'Live latencies include every node\'s Python DDS hops on a shared 2-core host: in the hierarchical '
            f'graph all sub-policy nodes, the arbiter and the shim wake on each observation, so they vary with the '
            f'host\'s load.')
