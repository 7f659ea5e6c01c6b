"""`calf train --workers N --cluster ray:local`: the learner in the calling process, the workers as Ray actors
on a Ray instance started on this machine, frames through Ray's object store; the CLI as a user runs it."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from importlib.util import find_spec

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),  # Ray starts in tens of seconds on a loaded machine
              pytest.mark.skipif(find_spec('ray') is None,
                                 reason='Ray is optional and not installed: pip install -r requirements-ray.lock')]


def test_workers_as_ray_actors_train_with_deltas_and_vtrace(tmp_path):
    out = tmp_path / 'run'
    done = subprocess.run([sys.executable, '-m', 'calf_bringup.cli', 'train', '--regime', 'baseline', '--workers', '2',
                           '--cluster', 'ray:local', '--sync', 'period:2', '--steps', '3000', '--eval-every', '2000',
                           '--out', str(out), '--quiet'], capture_output=True, text=True, timeout=800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line['steps'] >= 3000 and line['weights_bytes'] > 0
    summary = json.loads((out / 'distributed.json').read_text())
    assert summary['workers'] == ['w0', 'w1'] and summary['updates'] == line['updates'] >= 11
    assert not summary['refused'] and summary['batches_received']['messages'] >= summary['updates']
    kinds = summary['weights_messages']
    assert kinds['snapshots'] == 2 + kinds['snapshots_for_kl'] and kinds['deltas'] >= 4  # one each, then deltas
    assert kinds['precision'] == 'int8'
    assert max(int(lag) for lag in summary['lag_histogram'] if lag.isdigit()) >= 1  # workers ran older versions
    with open(out / 'progress.csv') as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == summary['updates'] and all(0 < float(r['rho_mean']) <= 1 for r in rows)
    assert (out / 'policy.safetensors').is_file() and (out / 'eval.csv').is_file()
