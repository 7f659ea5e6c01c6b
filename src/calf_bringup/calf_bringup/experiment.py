"""The experiment harness: train every row × seed, evaluate every column, write tables and plots.

Every training run and every evaluation is cached under ``OUT/cache/`` under a key naming its
configuration, so an interrupted experiment resumes where it stopped; a SAC or BPQL training stopped midway
continues from its snapshot (``calf_agent.train_state``). Runs go to a process pool, one job per core, or to
Ray tasks on a cluster (``calf_bringup.experiment_cells``).
"""
from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from calf_bringup.experiment_cells import Cell, Executor, LocalExecutor, run_cells
from calf_bringup.experiment_specs import BASED_PLANNERS, Row, TableSpec, env_slug
from calf_core import atomic
from calf_core.errors import ConfigError
from calf_core.yaml_files import read_json


@dataclass(frozen=True)
class TrainJob:
    env: str
    row: Row
    seed: int
    steps: int

    @property
    def key(self) -> str:
        planner = '' if self.row.planner == 'ppo' else f'-{self.row.planner}'
        features = {None: '', True: '-ds', False: '-nods'}[self.row.delay_state]
        algo = f'-{self.row.algo}' if self.row.algo else ''
        planner += f'-{self.row.model}' if self.row.model else ''
        return (f'{env_slug(self.env)}-{network_slug(self.row.network)}-h{self.row.plan_horizon}{planner}{features}{algo}'
                f'-{self.steps}steps-seed{self.seed}')

    @property
    def base(self) -> TrainJob:
        """The Baseline job whose checkpoint a model planner wraps, or an imitation student learns from."""
        return TrainJob(self.env, Row('Baseline', 'sim_clean', algo=self.row.algo), self.seed, self.steps)


@dataclass(frozen=True)
class EvalJob:
    train: TrainJob
    network: str
    episodes: int

    @property
    def key(self) -> str:
        return f'{self.train.key}--{network_slug(self.network)}-{self.episodes}ep'


def network_slug(network: str) -> str:
    """``network`` as part of a cache file's name: a profile file's or trace bag's path flattened (``/`` -> ``_``)."""
    return network.replace('/', '_')


def run_train(job: TrainJob, cache: Path) -> Path:
    """Train one checkpoint unless it is cached; written to a temporary folder, then renamed.

    A model-planner or imitation job first trains (or finds) its Baseline job. A policy job continues the
    newest snapshot a stopped run of it left (``claim_partial``).
    """
    from calf_agent.imitation import train_student
    from calf_agent.planner import RECIPES, train_planner
    from calf_agent.regimes import default_representation
    from calf_agent.train_state import has_snapshot
    from calf_core.network import resolve_network
    final = cache / 'train' / job.key
    if (final / 'meta.json').is_file():
        return final
    if job.row.planner in ('model', 'imitation'):
        base = run_train(job.base, cache)  # before this job's folder is claimed: the base may take hours
    partial, lock = claim_partial(final)
    try:
        if job.row.planner == 'model':
            train_planner(base, partial, job.row.network, job.row.plan_horizon, job.seed,
                          cfg=RECIPES[job.row.model or 'ensemble'], progress=False)
        elif job.row.planner == 'imitation':
            rep = default_representation(job.env, resolve_network(job.row.network), job.row.delay_state)
            train_student(base, job.env, job.row.network, job.seed, partial, steps=job.steps,
                          plan_horizon=job.row.plan_horizon, rep=rep, regime=job.row.name, progress=False)
        else:
            train_job(job, partial, resume=has_snapshot(partial))
        try:
            partial.rename(final)
        except OSError:  # another worker finished the same job first
            shutil.rmtree(partial, ignore_errors=True)
    finally:
        os.close(lock)
    return final


def train_job(job: TrainJob, out_dir: Path, resume: bool = False, snapshot_every: int | None = None) -> None:
    """Train a policy job (not a planner or student) into ``out_dir``; ``resume``: from its snapshot (SAC, BPQL),
    taken every ``snapshot_every`` env steps (default ``train_state.EVERY_STEPS``)."""
    from calf_agent.regimes import default_representation, train_policy
    from calf_agent.train_state import EVERY_STEPS
    from calf_core.network import resolve_network
    rep = default_representation(job.env, resolve_network(job.row.network), job.row.delay_state)
    train_policy(job.env, job.row.network, job.seed, out_dir, steps=job.steps, regime=job.row.name, rep=rep,
                 plan_horizon=job.row.plan_horizon, progress=False, algo=job.row.algo, resume=resume,
                 snapshot_every=snapshot_every or EVERY_STEPS)


def claim_partial(final: Path) -> tuple[Path, int]:
    """This process's temporary folder for ``final``, ``<final>.partial<pid>``, locked (the descriptor of the
    ``flock`` it holds is returned: close it when done).

    The folders other runs of the job left are examined: one locked belongs to a live run and is left alone;
    of the others (their process is gone) the one holding the newest snapshot becomes this run's folder, and
    the rest are removed.
    """
    from calf_agent.train_state import SNAPSHOT
    mine = final.with_name(f'{final.name}.partial{os.getpid()}')
    stale: list[tuple[Path, int]] = []
    for path in final.parent.glob(f'{final.name}.partial*'):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:  # gone meanwhile, or not a folder
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live run's
            os.close(fd)
            continue
        stale.append((path, fd))
    snapshots = [(path / SNAPSHOT).stat().st_mtime if (path / SNAPSHOT).is_file() else None for path, _ in stale]
    newest = max((i for i, t in enumerate(snapshots) if t is not None), key=lambda i: snapshots[i], default=None)
    for i, (path, fd) in enumerate(stale):
        if i != newest:
            shutil.rmtree(path, ignore_errors=True)
            os.close(fd)
    if newest is not None:
        path, fd = stale[newest]
        if path != mine:
            path.rename(mine)
        return mine, fd
    mine.mkdir(parents=True)
    fd = os.open(mine, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return mine, fd


def run_eval(job: EvalJob, cache: Path, named: Path | None = None) -> dict[str, Any]:
    """Evaluate one cached checkpoint under one profile, in virtual time; cached as JSON.

    The report names the checkpoint under ``named`` (the head's cache when a cell works elsewhere)."""
    from calf_agent.evaluate import evaluate_sim
    from calf_core.network import resolve_network
    path = cache / 'eval' / f'{job.key}.json'
    if path.is_file():
        return read_json(path, 'cached evaluation')
    report = evaluate_sim(cache / 'train' / job.train.key, resolve_network(job.network), job.episodes,
                          seed=10_000 + job.train.seed)
    report['policy'] = str((named or cache) / 'train' / job.train.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(report))
    return report


def run_cell(train: TrainJob, evals: tuple[EvalJob, ...], named: Path, cache: Path) -> dict[str, Any]:
    """One cell: train (or find) a checkpoint in ``cache``, then evaluate it under every column."""
    run_train(train, cache)
    return {ev.key: run_eval(ev, cache, named) for ev in evals}


def table_cells(trains: list[TrainJob], evals: list[EvalJob], cache: Path) -> list[Cell]:
    """One cell per training run; a model-planner or imitation cell waits for its Baseline cell if the table
    has one."""
    keys = {t.key for t in trains}
    cells = []
    for t in trains:
        mine = tuple(e for e in evals if e.train == t)
        base = t.base.key if t.row.planner in BASED_PLANNERS else None
        cells.append(Cell(t.key, partial(run_cell, t, mine, cache), tuple(f'eval/{e.key}.json' for e in mine),
                          tuple(f'train/{k}' for k in (t.key, base) if k), base if base in keys else None))
    return cells


def run_table(spec: TableSpec, seeds: int, episodes: int, out: Path, workers: int | None = None,
              steps: int | None = None, executor: Executor | None = None,
              rows: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Train and evaluate everything ``spec`` needs; return per-seed metrics by row and column.

    Cells run on ``executor``, by default a local process pool of ``workers`` (one per core). ``rows`` (names of
    ``spec``'s rows) runs those rows only, in that order; the other rows' cells are taken from the cache where
    they are there, and are marked not run where not.
    """
    check_profile_files(spec)
    trains, evals = table_jobs(spec, seeds, episodes, steps)
    order = {name: i for i, name in enumerate(rows or [row.name for row in spec.rows])}
    chosen = sorted((t for t in trains if t.row.name in order), key=lambda t: order[t.row.name])
    others = [e for e in evals if e.train.row.name not in order]
    local = None if executor else LocalExecutor(workers or os.cpu_count() or 1)
    try:
        outcomes = run_cells(table_cells(chosen, evals, out / 'cache'), executor or local, out / 'cache',
                             out / 'logs' / spec.name, spec.name)
    finally:
        if local:
            local.close()
    reports = {k: r for o in outcomes.values() for k, r in o.reports.items()} | cached_reports(others, out / 'cache')
    part = {} if rows is None else {'missing_as': 'not run'}
    return {**collect(spec, trains, evals, reports), **part,
            'cells_run': {k: o.summary() for k, o in outcomes.items()}}


def table_jobs(spec: TableSpec, seeds: int, episodes: int,
               steps: int | None = None) -> tuple[list[TrainJob], list[EvalJob]]:
    """Every training run of ``spec`` (each row, ``seeds`` seeds, ``steps`` or the table's budget) and every
    evaluation of ``episodes`` episodes (each run in each column)."""
    trains = [TrainJob(spec.env, row, seed, steps or spec.steps) for row in spec.rows for seed in range(seeds)]
    return trains, [EvalJob(t, col.network, episodes) for t in trains for col in spec.columns]


def check_profile_files(spec: TableSpec) -> None:
    """Refuse, before any cell runs, a table whose rows or columns name a profile file or trace bag that is not
    there: the project's own tables name theirs relative to the repository root (``results/profiles``)."""
    for network in [row.network for row in spec.rows] + [col.network for col in spec.columns]:
        if '/' in network and not Path(network).exists():
            raise ConfigError(f'{spec.name}: no profile or trace {network!r} under {Path.cwd()}: run calf experiment '
                              f'{spec.name} from the root of the CALF repository, where results/ holds it')


def cached_reports(evals: list[EvalJob], cache: Path) -> dict[str, dict[str, Any]]:
    """The reports of the evaluations in ``evals`` that ``cache`` holds, by key."""
    paths = {e.key: cache / 'eval' / f'{e.key}.json' for e in evals}
    return {key: read_json(path, 'cached evaluation') for key, path in paths.items() if path.is_file()}


def collect(spec: TableSpec, trains: list[TrainJob], evals: list[EvalJob],
            reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per-seed metric values, plus mean and std across seeds, for every row and column.

    A seed whose cell failed has no report; its cell lists it under ``failed_seeds``.
    """
    cells: dict[str, dict[str, Any]] = {}
    for row in spec.rows:
        cells[row.name] = {}
        for col in spec.columns:
            mine = [e for e in evals if e.train.row == row and e.network == col.network]
            values = [reports[e.key][spec.metric] * spec.scale for e in mine if e.key in reports]
            latency = [reports[e.key]['e2e_latency_ms']['p50'] for e in mine if e.key in reports]
            cells[row.name][col.name] = {
                'per_seed': values, 'mean': float(np.mean(values)) if values else float('nan'),
                'std': float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
                'failed_seeds': [e.train.seed for e in mine if e.key not in reports],
                'e2e_p50_ms_median': float(np.median([x for x in latency if x is not None] or [np.nan]))}
    return {'table': spec.name, 'title': spec.title, 'env': spec.env, 'metric': spec.metric,
            'seeds': len({t.seed for t in trains}), 'episodes': evals[0].episodes,
            'steps': trains[0].steps, 'columns': [c.name for c in spec.columns], 'cells': cells,
            'paper': spec.paper, 'reference': spec.reference}


def keep_earlier_rows(result: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """``result`` with each row that has no seed in it taken from ``earlier`` (a table's JSON of the same table),
    for a table rebuilt from a cache that lost some rows. ``kept_rows`` names each kept row's run: the command and
    git revision that measured it, carried over if ``earlier`` had kept it in turn."""
    if earlier.get('table') != result['table'] or earlier.get('columns') != result['columns']:
        raise ConfigError(f'the earlier table is {earlier.get("table")} with columns {earlier.get("columns")}, not '
                          f'{result["table"]} with {result["columns"]}: pass the JSON of the same table')
    measured = {'command': earlier.get('command', ''), 'git': earlier.get('versions', {}).get('git', '')}
    sources = {kept['row']: kept for kept in earlier.get('kept_rows', [])}
    kept = [sources.get(row, {'row': row, **measured}) for row, cols in result['cells'].items()
            if not _has_seeds(cols) and _has_seeds(earlier['cells'].get(row, {}))]
    if not kept:
        return result
    cells = {**result['cells'], **{k['row']: _nan_for_null(earlier['cells'][k['row']]) for k in kept}}
    return {**result, 'cells': cells, 'kept_rows': kept}


def _has_seeds(cols: dict[str, dict[str, Any]]) -> bool:
    """Whether any cell of a row holds a seed's result."""
    return any(cell['per_seed'] for cell in cols.values())


def write_outputs(result: dict[str, Any], out: Path, command: str, started: float) -> list[Path]:
    """CSV, Markdown, JSON and a Figure-3-style PNG for one table."""
    from calf_bringup.experiment_report import (
        write_bar_chart,
        write_csv,
        write_markdown,
    )
    result = {**result, 'command': command, 'run_time_s': round(time.time() - started, 1),
              'versions': run_versions()}
    name = result['table']
    json_path = out / f'{name}.json'
    json_path.write_text(json.dumps(_null_for_nan(result), indent=1, allow_nan=False))
    return [json_path, write_csv(result, out / f'{name}.csv'), write_markdown(result, out / f'{name}.md'),
            write_bar_chart(result, out / f'{name}.png')]


def _nan_for_null(value: Any) -> Any:
    """``value`` read back from a table's JSON: every None (``_null_for_nan``'s) a NaN again."""
    if value is None:
        return math.nan
    if isinstance(value, dict):
        return {k: _nan_for_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_for_null(v) for v in value]
    return value


def _null_for_nan(value: Any) -> Any:
    """``value`` with every NaN (the mean of a cell whose seeds all failed) as None, so the JSON is strict."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _null_for_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_null_for_nan(v) for v in value]
    return value


def run_versions() -> dict[str, str]:
    """The library versions and git revision a results file records."""
    from calf_agent.checkpoint import git_revision, versions
    return {**versions(), 'git': git_revision()}
