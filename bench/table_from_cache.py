"""Write a table of `calf experiment` from the cells already in its cache, without training or evaluating more.

    python bench/table_from_cache.py TABLE OUT results [--seeds 3] [--episodes 50] [--earlier JSON]  # OUT: its --out

Seeds whose cells are not in the cache are listed as not run in the cell (``failed_seeds``); ``calf experiment
TABLE --seeds 3 --episodes 50 --workers 1 --out OUT`` fills the rest from the same cache. With ``--earlier``
(an earlier JSON of the same table, read before it is overwritten), rows with no seed in the cache keep that
table's cells, and the table names them.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from calf_bringup.experiment import cached_reports, collect, keep_earlier_rows, table_jobs, write_outputs
from calf_bringup.experiment_specs import TABLES
from calf_core.yaml_files import read_json


def main(name: str, out: Path, results: Path, seeds: int = 3, episodes: int = 50,
         earlier: Path | None = None) -> None:
    spec = TABLES[name]
    trains, evals = table_jobs(spec, seeds, episodes)
    reports = cached_reports(evals, out / 'cache')
    command = f'python bench/table_from_cache.py {name} {out} {results} --seeds {seeds} --episodes {episodes}'
    result = {**collect(spec, trains, evals, reports), 'missing_as': 'not run'}
    if earlier is not None:
        result = keep_earlier_rows(result, read_json(earlier, 'earlier table'))
        command += f' --earlier {earlier}'
    for path in write_outputs(result, results, command, time.time()):
        print(path)


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('table', choices=sorted(TABLES))
    parser.add_argument('out', type=Path, help='the --out of `calf experiment TABLE`')
    parser.add_argument('results', type=Path)
    parser.add_argument('--seeds', type=int, default=3)
    parser.add_argument('--episodes', type=int, default=50)
    parser.add_argument('--earlier', type=Path,
                        help='an earlier JSON of the table: rows not in the cache keep its cells')
    args = parser.parse_args()
    main(args.table, args.out, args.results, args.seeds, args.episodes, args.earlier)
