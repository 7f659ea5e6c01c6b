"""`calf train --workers N --cluster ray:local`: the learner in the calling process, the workers as Ray actors
on a Ray instance started on this machine, frames through Ray's object store; the CLI as a user runs it."""
from __future__ import annotations

import csv
import json
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import replace
from importlib.util import find_spec

import pytest

from calf_agent.dist.key import KEY_ENV

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
    assert summary['workers'] == ['w0', 'w1'] and summary['updates'] == line['updates'] >= 5  # rounds of 2 batches
    assert not summary['refused'] and summary['batches_received']['messages'] >= summary['updates']
    kinds = summary['weights_messages']
    assert kinds['snapshots'] == 2 + kinds['snapshots_for_kl'] and kinds['deltas'] >= 4  # one each, then deltas
    assert kinds['precision'] == 'int8'
    assert max(int(lag) for lag in summary['lag_histogram'] if lag.isdigit()) >= 1  # period:2: older versions ran
    with open(out / 'progress.csv') as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == summary['updates'] and all(0 < float(r['rho_mean']) <= 1 for r in rows)
    assert (out / 'policy.safetensors').is_file() and (out / 'eval.csv').is_file()


def test_a_killed_worker_actor_is_restarted_and_costs_only_its_batch(tmp_path, monkeypatch):
    """One of two actors is killed mid-run (its process ended, as a lost node would): Ray restarts it, it says
    hello, gets a snapshot and trains on; the learner never stops and refuses nothing."""
    from calf_agent.dist.learner import Learner
    from calf_agent.dist.learner_node import PARAMETERS, learner_config
    from calf_bringup.distributed_ray import RAY_CHUNK_BYTES, drive, start_workers
    from calf_bringup.experiment_ray import connect

    params = {**{name: default for name, (default, _) in PARAMETERS.items()}, 'out': str(tmp_path / 'run'),
              'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline', 'steps': 10**6, 'eval_every': 10**6,
              'key_file': ''}
    monkeypatch.setenv(KEY_ENV, secrets.token_hex(32))
    # connect('local') sets this for Ray's single-machine mode; set here, monkeypatch takes it back, so later
    # tests' `ray start` worker nodes do not inherit it and refuse to start
    monkeypatch.setenv('RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER', '0')
    cfg = learner_config(params)
    lines: list[str] = []
    ray = connect('local')
    try:
        actors = start_workers(ray, cfg, 2, 4, 0, 'sim_clean')
        learner = Learner(replace(cfg, chunk_bytes=RAY_CHUNK_BYTES), log=lines.append)
        driving = threading.Thread(target=drive, args=(ray, learner, actors, lines.append), daemon=True)
        driving.start()
        deadline = time.monotonic() + 700
        assert _wait_for(lambda: {'w0', 'w1'} <= set().union(*_workers(tmp_path)), deadline), lines[-5:]
        killed_at = learner.updates
        ray.kill(actors['w1'], no_restart=False)  # ends its process; Ray restarts it (max_restarts)
        # more batches of w1 than could have waited at the kill: the restarted actor trains on
        assert _wait_for(lambda: sum('w1' in round_ for round_ in _workers(tmp_path)[killed_at:]) > 2, deadline), \
            lines[-5:]
        learner.solved = True  # stop here, as an evaluation reaching --stop-return does
        driving.join(timeout=60)
        assert not driving.is_alive(), f'the learner did not stop: {lines[-5:]}'
        learner.close()
    finally:
        ray.shutdown()
    assert not any('giving it up' in line for line in lines)
    assert learner.snapshots >= 3 and not learner.reassembler.refused  # a snapshot for the restarted actor


def _wait_for(condition, deadline: float) -> bool:
    """Poll ``condition`` (on a file the learner writes) every 0.2 s until it holds or ``deadline`` passes."""
    while time.monotonic() < deadline and not condition():
        time.sleep(0.2)
    return condition()


def _workers(tmp_path) -> list[set[str]]:
    """The workers of each update so far, in order (the learner's progress.csv: a round's, as ``w0+w1``)."""
    path = tmp_path / 'run' / 'progress.csv'
    return [set(row['worker'].split('+')) for row in csv.DictReader(path.open())] if path.is_file() else []
