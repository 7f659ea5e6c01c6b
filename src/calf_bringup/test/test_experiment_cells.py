"""The cell scheduler on the local process pool: resume, one retry, failures, files shipped to the head;
and that Ray stays out of a run without ``--cluster``. The Ray cluster itself is tested in
tests/test_experiment_cluster.py."""
from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from calf_bringup.experiment_cells import Cell, LocalExecutor, execute_cell, run_cells, store_files
from calf_bringup.experiment_ray import parse_cluster
from calf_core.errors import ConfigError


def write_cell(name: str, cache: Path) -> dict:
    """A real cell's shape: a checkpoint folder, then the report; counts its runs in the folder."""
    ckpt = cache / 'train' / name
    ckpt.mkdir(parents=True, exist_ok=True)
    runs = ckpt / 'runs'
    runs.write_text(str(int(runs.read_text()) + 1 if runs.is_file() else 1))
    print(f'training {name}')
    report = cache / 'eval' / f'{name}.json'
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps({'mean_return': len(name)}))
    return {}


def logged_cell(name: str, cache: Path) -> dict:
    """``write_cell``, after appending ``name`` to the cache's ``order`` file."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / 'order').open('a') as order:
        order.write(name + ' ')
    return write_cell(name, cache)


def broken_cell(cache: Path) -> dict:
    raise ValueError('profile not found: no_such_profile')


def cell(name: str) -> Cell:
    return Cell(name, partial(write_cell, name), (f'eval/{name}.json',), (f'train/{name}',))


@pytest.mark.parametrize(('value', 'address'), [('ray', 'auto'), ('ray:local', 'local'),
                                                ('ray:10.0.0.1:6379', '10.0.0.1:6379')])
def test_parse_cluster(value: str, address: str) -> None:
    assert parse_cluster(value) == address


def test_parse_cluster_rejects_other_schedulers() -> None:
    with pytest.raises(ConfigError, match="--cluster 'slurm'"):
        parse_cluster('slurm')


def test_cells_run_resume_and_a_cell_failing_twice_is_reported(tmp_path: Path) -> None:
    cache, logs = tmp_path / 'cache', tmp_path / 'logs'
    cells = [cell('a'), cell('bb'), Cell('broken', broken_cell, ('eval/broken.json',)),
             Cell('after-broken', partial(write_cell, 'after-broken'), ('eval/after-broken.json',), after='broken')]
    executor = LocalExecutor(2)
    try:
        first = run_cells(cells, executor, cache, logs, 'test')
        second = run_cells(cells, executor, cache, logs, 'test')
    finally:
        executor.close()
    assert [first[k].status for k in ('a', 'bb', 'broken', 'after-broken')] == ['done', 'done', 'failed', 'failed']
    assert first['a'].reports == {'a': {'mean_return': 1}} and first['bb'].attempts == 1
    assert first['broken'].attempts == 2 and first['broken'].error == 'ValueError: profile not found: no_such_profile'
    assert first['after-broken'].error == 'needs cell broken, which failed'
    assert second['a'].status == 'cached' and second['a'].reports == first['a'].reports
    assert (cache / 'train' / 'a' / 'runs').read_text() == '1'  # the rerun skipped it
    assert second['broken'].status == 'failed'  # a rerun retries failed cells
    assert (logs / 'broken.log').read_text().count('=== attempt') == 4
    assert 'training a' in (logs / 'a.log').read_text()


def test_a_cell_that_waited_for_another_keeps_its_place_in_the_order(tmp_path: Path) -> None:
    """Cells start a slot at a time in list order: a plan row placed first runs right after its Baseline, not
    after every cell that was ready before it (``calf experiment --rows``)."""
    def logged(name: str, after: str | None = None) -> Cell:
        return Cell(name, partial(logged_cell, name), (f'eval/{name}.json',), after=after)

    cells = [logged('base'), logged('plans', after='base'), logged('other-1'), logged('other-2')]
    executor = LocalExecutor(1)
    try:
        outcomes = run_cells(cells, executor, tmp_path / 'cache', tmp_path / 'logs', 'test')
    finally:
        executor.close()
    assert {o.status for o in outcomes.values()} == {'done'}
    assert (tmp_path / 'cache' / 'order').read_text().split() == ['base', 'plans', 'other-1', 'other-2']


def test_a_shipped_cell_returns_its_new_files_and_the_head_stores_them(tmp_path: Path) -> None:
    """Object-store mode: the cell works in a private folder seeded with its inputs."""
    result = execute_cell(partial(write_cell, 'a'), None, {'train/a/runs': b'4'}, 1)
    assert result['error'] == '' and set(result['files']) == {'eval/a.json'}  # inputs are not sent back
    store_files(tmp_path, {**result['files'], 'train/b/runs': b'1', 'train/b/meta.json': b'{}'})
    assert json.loads((tmp_path / 'eval' / 'a.json').read_text()) == {'mean_return': 1}
    assert sorted(p.name for p in (tmp_path / 'train' / 'b').iterdir()) == ['meta.json', 'runs']
    assert not list(tmp_path.rglob('*.partial*'))


@pytest.mark.slow
def test_cluster_without_ray_installed_is_one_line_exit_2(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['ray'] = None; from calf_bringup.cli import main; "
            f"sys.exit(main(['experiment', 'table4', '--cluster', 'ray', '--out', {str(tmp_path)!r}]))")
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        'calf experiment: error: --cluster ray needs Ray, which is not installed: pip install -r requirements-ray.lock']


@pytest.mark.slow
def test_a_local_run_never_imports_ray(tmp_path: Path) -> None:
    code = ("import sys; from calf_bringup.cli import main; "
            f"rc = main(['experiment', 'table6', '--seeds', '1', '--steps', '1024', '--episodes', '1', "
            f"'--workers', '2', '--out', {str(tmp_path)!r}]); "
            "assert 'ray' not in sys.modules, 'ray was imported'; sys.exit(rc)")
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / 'table6.md').is_file()
