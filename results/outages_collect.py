"""Write an outages table from the cells already in an experiment cache, without training or evaluating more.

    python results/outages_collect.py outages_cartpole /root/calf_cache/outages results

Seeds whose cells are not in the cache are listed as missing in the cell (``failed_seeds``); ``calf experiment
outages --seeds 3 --episodes 50 --workers 1 --out /root/calf_cache/outages`` fills the rest from the same cache.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from calf_bringup.experiment import EvalJob, TrainJob, collect, write_outputs
from calf_bringup.experiment_specs import TABLES
from calf_core.yaml_files import read_json


def main(name: str, out: Path, results: Path, seeds: int = 3, episodes: int = 50) -> None:
    spec = TABLES[name]
    trains = [TrainJob(spec.env, row, seed, spec.steps) for row in spec.rows for seed in range(seeds)]
    evals = [EvalJob(t, col.network, episodes) for t in trains for col in spec.columns]
    cached = {e.key: out / 'cache' / 'eval' / f'{e.key}.json' for e in evals}
    reports = {key: read_json(path, 'cached evaluation') for key, path in cached.items() if path.is_file()}
    command = f'python results/outages_collect.py {name} {out} {results}'
    for path in write_outputs(collect(spec, trains, evals, reports), results, command, time.time()):
        print(path)


if __name__ == '__main__':
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
