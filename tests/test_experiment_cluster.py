"""`calf experiment --cluster ray` on a real Ray cluster on this machine: a head and a worker node
started by `ray start` on a loopback address, the CLI as a user runs it.

Training is deterministic for a seed: PPO seeds random, numpy and torch from it, each cell trains with
one torch thread on the CPU, and evaluation runs in virtual time with seeded network models, so the
same cell gives the same reports wherever it runs.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from importlib.util import find_spec
from pathlib import Path

import pytest
from ray_cluster import LocalRayCluster, user_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200),  # several experiments on a loaded machine
              pytest.mark.skipif(find_spec('ray') is None,
                                 reason='Ray is optional: pip install -r requirements-ray.lock')]
SMALL = ['experiment', 'table6', '--seeds', '2', '--steps', '2048', '--episodes', '2']


@pytest.fixture(scope='module')
def cluster() -> LocalRayCluster:
    cluster = LocalRayCluster().start()
    try:
        cluster.add_node()
        yield cluster
    finally:
        cluster.close()


def calf(env: dict[str, str], *args: str | Path, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, '-m', 'calf_bringup.cli', *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=600)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def reports(out: Path) -> dict[str, dict]:
    """Every evaluation report; each names its checkpoint in ``out`` (checked, then left out)."""
    found = {}
    for path in sorted((out / 'cache' / 'eval').glob('*.json')):
        report = json.loads(path.read_text())
        assert report.pop('policy') == str(out / 'cache' / 'train' / path.stem.split('--')[0])
        found[path.name] = report
    return found


def cells_run(out: Path, table: str = 'table6') -> dict[str, dict]:
    return json.loads((out / f'{table}.json').read_text())['cells_run']


def test_cluster_run_matches_local_run_cell_for_cell_and_resumes(cluster: LocalRayCluster, tmp_path: Path) -> None:
    local, on_ray, shared = tmp_path / 'local', tmp_path / 'ray', tmp_path / 'shared'
    calf(cluster.env, *SMALL, '--workers', '2', '--out', local)
    calf(cluster.env, *SMALL, '--cluster', f'ray:{cluster.address}', '--out', on_ray)
    calf(cluster.env, *SMALL, '--cluster', f'ray:{cluster.address}', '--shared-out', '--out', shared)

    want = json.loads((local / 'table6.json').read_text())['cells']
    for out in (on_ray, shared):
        assert json.loads((out / 'table6.json').read_text())['cells'] == want
        assert reports(out) == reports(local) and len(reports(local)) == 10
        assert {p.name for p in (out / 'cache' / 'train').iterdir()} == {
            p.name for p in (local / 'cache' / 'train').iterdir()}  # checkpoints reached the head
        assert all(c['status'] == 'done' for c in cells_run(out).values())
        assert len(list((out / 'logs' / 'table6').glob('*.log'))) == 10

    # Resume: the same command skips finished cells; a lost report reruns only its cell.
    calf(cluster.env, *SMALL, '--cluster', f'ray:{cluster.address}', '--out', on_ray)
    assert {c['status'] for c in cells_run(on_ray).values()} == {'cached'}
    lost = sorted((on_ray / 'cache' / 'eval').glob('*.json'))[3]
    lost.unlink()
    calf(cluster.env, *SMALL, '--cluster', f'ray:{cluster.address}', '--out', on_ray)
    statuses = [c['status'] for c in cells_run(on_ray).values()]
    assert statuses.count('done') == 1 and statuses.count('cached') == 9
    assert json.loads((on_ray / 'table6.json').read_text())['cells'] == want


TINY = """
import sys
from pathlib import Path
from calf_bringup.experiment import run_table, write_outputs
from calf_bringup.experiment_ray import RayExecutor
from calf_bringup.experiment_specs import Column, Row, TableSpec
spec = TableSpec('tiny', 'two rows, one of them broken', 'cartpole', 'mean_return', 1.0, 2048,
                 (Row('Baseline', 'sim_clean'), Row('Broken', 'no_such_profile')), (Column('Sim-Clean', 'sim_clean'),), {})
executor = RayExecutor(sys.argv[1])
write_outputs(run_table(spec, 2, 2, Path(sys.argv[2]), executor=executor), Path(sys.argv[2]), 'tiny', 0.0)
executor.close()
"""


def test_a_cell_failing_twice_is_reported_while_the_rest_complete(cluster: LocalRayCluster, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, '-c', TINY, cluster.address, str(tmp_path)], env=cluster.env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / 'tiny.json').read_text())
    runs = result['cells_run']
    broken = {k: c for k, c in runs.items() if 'no_such_profile' in k}
    assert len(broken) == 2 and all(c['status'] == 'failed' and c['attempts'] == 2 for c in broken.values())
    assert all('no_such_profile' in c['error'] for c in broken.values())
    assert [c['status'] for k, c in runs.items() if k not in broken] == ['done', 'done']
    assert len(result['cells']['Baseline']['Sim-Clean']['per_seed']) == 2
    assert result['cells']['Broken']['Sim-Clean']['failed_seeds'] == [0, 1]
    table = (tmp_path / 'tiny.md').read_text()
    assert '| **Broken** | failed |' in table and '2 cells failed' in table
    log = next((tmp_path / 'logs' / 'tiny').glob('*no_such_profile*seed0.log')).read_text()
    assert log.count('=== attempt') == 2 and 'no_such_profile' in log


def test_a_worker_node_killed_mid_cell_and_the_table_still_completes(cluster: LocalRayCluster,
                                                                     tmp_path: Path) -> None:
    victim = cluster.add_node()
    run = subprocess.Popen([sys.executable, '-m', 'calf_bringup.cli', *SMALL, '--steps', '8192',
                            '--cluster', f'ray:{cluster.address}', '--out', str(tmp_path)],
                           env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        cluster.wait_for_cell(victim)
        cluster.kill_node(victim)
        output, _ = run.communicate(timeout=600)
    finally:
        run.kill()
    assert run.returncode == 0, output[-3000:]
    runs = cells_run(tmp_path)
    assert len(runs) == 10 and all(c['status'] == 'done' for c in runs.values())
    retried = [k for k, c in runs.items() if c['attempts'] == 2]
    assert retried, runs  # the killed cell ran again elsewhere
    log = (tmp_path / 'logs' / 'table6' / f'{retried[0]}.log').read_text()
    assert '=== attempt 1' in log and 'failed' in log.split('=== attempt 2')[0]


def test_the_recipe_as_a_new_user_runs_it(tmp_path: Path) -> None:
    """`--cluster ray:local` writes a token and says so; `ray start --head` then finds that token and turns
    token authentication on, and joining it by address works with nothing else set. A wrong token is one
    line naming what to do."""
    home = tmp_path / 'home'
    home.mkdir()
    env, token = user_env(home), home / '.ray' / 'auth_token'
    small = ['experiment', '--env', 'cartpole', '--seeds', '1', '--steps', '2048', '--episodes', '1']
    local = calf(env, *small, '--cluster', 'ray:local', '--out', tmp_path / 'local')
    assert token.is_file() and f'Ray wrote a new authentication token to {token}' in local.stderr
    cluster = LocalRayCluster(home=home).start()
    try:
        joined = calf(env, *small, '--cluster', f'ray:{cluster.address}', '--out', tmp_path / 'joined')
        wrong = calf({**env, 'RAY_AUTH_TOKEN': 'not-the-token'}, *small, '--cluster', f'ray:{cluster.address}',
                     '--out', tmp_path / 'wrong', check=False)
    finally:
        cluster.close()
    assert 'Ray wrote' not in joined.stderr
    table = next((tmp_path / 'local').glob('env_*.json')).name
    assert json.loads((tmp_path / 'joined' / table).read_text())['cells'] == json.loads(
        (tmp_path / 'local' / table).read_text())['cells']
    last = wrong.stderr.splitlines()[-1]
    assert wrong.returncode == 2 and "uses token authentication and refused this machine's token" in last, last
    assert 'ray get-auth-token' in last


def test_cluster_address_without_a_cluster_is_one_line_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, 'RAY_USAGE_STATS_ENABLED': '0'}
    done = calf(env, *SMALL, '--cluster', f'ray:127.0.0.2:{_closed_port()}', '--out', tmp_path, check=False)
    assert done.returncode == 2
    assert 'no Ray cluster at' in done.stderr and 'ray start --head' in done.stderr


def test_a_listener_that_is_not_ray_is_one_line_exit_2_within_seconds(tmp_path: Path) -> None:
    """A plain TCP server that accepts and never answers: Ray's own connect would retry for minutes."""
    from ray_cluster import HOST
    with socket.create_server((HOST, 0)) as server:
        accepted: list[socket.socket] = []
        threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
        env = {**os.environ, 'RAY_USAGE_STATS_ENABLED': '0'}
        started = time.monotonic()
        done = calf(env, *SMALL, '--cluster', f'ray:{HOST}:{server.getsockname()[1]}', '--out', tmp_path,
                    check=False)
        for sock in accepted:
            sock.close()
    assert done.returncode == 2 and done.stderr.count('\n') == 1, done.stderr[-3000:]
    assert 'is not a Ray cluster' in done.stderr and 'ray start --head' in done.stderr
    assert accepted and time.monotonic() - started < 60.0


def _closed_port() -> int:
    from ray_cluster import free_port
    return free_port()
