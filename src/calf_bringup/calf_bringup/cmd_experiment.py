"""``calf experiment table4|table5|table5_dynamic|table6|table7|table8|table8_dynamic|table9|all``: reproduce the paper's tables;
``calf experiment --env ENV``: a Table-4-style table for any env."""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from calf_bringup.cli_args import MAX_EPISODES, MAX_STEPS, count
from calf_bringup.experiment import run_table, write_outputs
from calf_bringup.experiment_ray import RayExecutor, parse_cluster
from calf_bringup.experiment_report import write_results_readme
from calf_bringup.experiment_specs import TABLE_GROUPS, TABLES, TableSpec, env_table
from calf_bringup.placement_tables import PLACEMENT_TABLES, run_placement_table, write_placement_table
from calf_bringup.table9 import run_table9
from calf_core.atomic import make_out_dir
from calf_core.envs import add_env_arguments, resolve_env_arg
from calf_core.errors import ConfigError

CHOICES = (*TABLES, *PLACEMENT_TABLES, 'table9', *TABLE_GROUPS, 'all')


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('experiment', help='reproduce a table of the paper (CSV, Markdown, JSON, PNG)')
    parser.add_argument('name', nargs='?', choices=CHOICES, help='a table of the paper (or --env instead)')
    add_env_arguments(parser)
    parser.add_argument('--seeds', type=count(1, 1000), default=10, help='training seeds per row')
    parser.add_argument('--episodes', type=count(1, MAX_EPISODES), default=50, help='evaluation episodes per seed and column')
    parser.add_argument('--steps', type=count(1, MAX_STEPS), help='PPO steps per seed (default: per table)')
    parser.add_argument('--workers', type=count(1, 256), help='parallel jobs (default: one per core)')
    parser.add_argument('--out', type=Path, default=Path('results'))
    parser.add_argument('--rows', nargs='+', metavar='ROW',
                        help="run only these rows of the table, in this order (names as in its table, e.g. 'Baseline "
                             "(SAC)'); the other rows are filled from --out's cache or marked not run")
    parser.add_argument('--cluster', metavar='ray[:ADDRESS]',
                        help='run the cells of tables 4-6 and plans as Ray tasks: ray (the cluster this machine '
                             'joined), ray:local (start one here) or ray:HOST:PORT; needs the Ray extra')
    parser.add_argument('--shared-out', action='store_true',
                        help='with --cluster: --out is on storage every node mounts at the same path, so workers '
                             "write checkpoints there instead of sending them through Ray's object store")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    tables, names = _tables(args)
    rows = _rows(args.rows, [tables.get(name) for name in names]) if args.rows else None
    if args.shared_out and not args.cluster:
        raise ConfigError('--shared-out applies to --cluster runs only: add --cluster ray, or drop --shared-out')
    address = parse_cluster(args.cluster) if args.cluster else None
    make_out_dir(args.out, 'results directory')
    command = 'calf ' + ' '.join(shlex.quote(a) for a in sys.argv[1:])
    executor = RayExecutor(address, args.shared_out) if address else None
    failed = 0
    for name in names:
        started = time.time()
        if executor and name not in tables:
            print(f'{name}: runs on this machine (--cluster applies to {", ".join(tables)})')
        if name in PLACEMENT_TABLES:
            result = run_placement_table(PLACEMENT_TABLES[name], args.seeds, args.episodes, args.out, args.workers,
                                         args.steps)
            written = write_placement_table(result, args.out, command, started)
        elif name == 'table9':
            written = run_table9(args.out, episodes=max(1, args.episodes // 10), command=command, started=started)
        else:
            result = run_table(tables[name], args.seeds, args.episodes, args.out, args.workers, args.steps, executor,
                               rows)
            written = write_outputs(result, args.out, command, started)
            failed += sum(c['status'] == 'failed' for c in result['cells_run'].values())
        print(f'{name}: wrote ' + ', '.join(str(p) for p in written))
    if executor:
        executor.close()
    print(f'summary: {write_results_readme(args.out)}')
    if failed:
        print(f'{failed} cells failed (errors in the tables, logs in {args.out / "logs"}); '
              'rerun the same command to retry them')
    return 1 if failed else 0


def _tables(args: argparse.Namespace) -> tuple[dict[str, TableSpec], list[str]]:
    """The trained tables this run may use, and the names to run: the paper's, or one built from ``--env``."""
    if args.env is None and args.env_spec is None:
        if args.name is None:
            raise ConfigError(f'calf experiment: name a table ({", ".join(CHOICES)}) or give --env ENV')
        if args.name == 'all':
            return TABLES, [n for n in CHOICES if n != 'all' and n not in TABLE_GROUPS]
        return TABLES, list(TABLE_GROUPS.get(args.name, (args.name,)))
    if args.name is not None:
        raise ConfigError(f'calf experiment: give a table name ({args.name}) or --env, not both')
    spec = env_table(resolve_env_arg(args.env, args.env_spec))
    return {spec.name: spec}, [spec.name]


def _rows(asked: list[str], specs: list[TableSpec | None]) -> tuple[str, ...]:
    """``--rows`` as the names of one trained table's rows (matched without regard to case), or a ConfigError."""
    if len(specs) != 1 or specs[0] is None:
        raise ConfigError('--rows applies to one table that trains its rows (not a group of tables, table9 or a '
                          'placement table): name one, or drop --rows')
    names = {row.name.casefold(): row.name for row in specs[0].rows}
    unknown = [name for name in asked if name.casefold() not in names]
    if unknown:
        raise ConfigError(f'--rows: {specs[0].name} has no row {unknown[0]!r}; its rows are '
                          + ', '.join(repr(row.name) for row in specs[0].rows))
    return tuple(dict.fromkeys(names[name.casefold()] for name in asked))
