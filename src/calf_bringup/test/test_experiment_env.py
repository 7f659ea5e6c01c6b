"""``calf experiment --env ENV``: a Table-4-style table for a user's env, built from the env, refused in one line
when the env or the arguments are wrong; and the built-in task's table, ``table5_dynamic``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calf_bringup.cli import main
from calf_bringup.experiment_specs import COLUMNS, env_table


def test_env_table_has_baseline_and_full_under_the_five_networks(tmp_path: Path) -> None:
    spec_file = tmp_path / 'my robot.yaml'
    spec_file.write_text('env: Pendulum-v1\nhold: zero\n')
    spec = env_table(str(spec_file))
    assert spec.name == 'env_my_robot' and spec.env == str(spec_file)
    assert [r.network for r in spec.rows] == ['sim_clean', 'full_net_aware'] and spec.columns == COLUMNS
    assert spec.steps > 0
    assert env_table('InvertedPendulum-v5').name == 'env_InvertedPendulum-v5'


@pytest.mark.parametrize(('argv', 'message'), [
    (['experiment', '--env', 'NoSuchEnv-v0'], "unknown env 'NoSuchEnv-v0'"),
    (['experiment', '--env', 'no_such_pkg.robot:make'], 'no_such_pkg'),
    (['experiment', 'table4', '--env', 'Pendulum-v1'], 'not both'),
    (['experiment'], 'or give --env ENV'),
    (['experiment', 'robots_reacher', '--rows', 'Baseline'], "no row 'Baseline'; its rows are 'Baseline (SAC)', "),
    (['experiment', 'robots', '--rows', 'Baseline (SAC)'], '--rows applies to one table'),
    (['experiment', 'table9', '--rows', 'Baseline'], '--rows applies to one table'),
])
def test_bad_env_experiments_are_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'out'
    assert main([*argv, '--out', str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and message in err and not out.exists()


@pytest.mark.slow
def test_experiment_on_a_spec_file_writes_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Real PPO on Pendulum-v1 named by a spec file whose path has a space and slashes (one rollout per row)."""
    spec_file = tmp_path / 'my robot.yaml'
    spec_file.write_text('env: Pendulum-v1\nhold: zero\n')
    out = tmp_path / 'results'
    assert main(['experiment', '--env-spec', str(spec_file), '--seeds', '1', '--episodes', '1', '--steps', '2048',
                 '--workers', '1', '--out', str(out)]) == 0
    result = json.loads((out / 'env_my_robot.json').read_text())
    assert result['env'] == str(spec_file) and result['columns'] == [c.name for c in COLUMNS]
    for row in ('Baseline', 'Full Net-Aware'):
        for column in result['columns']:
            cell = result['cells'][row][column]
            assert len(cell['per_seed']) == 1 and -2000 < cell['mean'] < 0  # Pendulum returns are negative
    assert 'my_robot' in (out / 'README.md').read_text()
    assert (out / 'env_my_robot.md').is_file() and (out / 'env_my_robot.csv').is_file()


def test_the_tables_regime_rows_train_under_the_regimes_profiles() -> None:
    from calf_agent.regimes import REGIMES
    from calf_bringup.experiment_specs import REGIME_ROWS

    assert [row.network for row in REGIME_ROWS] == [REGIMES[r] for r in ('baseline', 'delay_only', 'full')]


@pytest.mark.slow
def test_table5_dynamic_trains_the_three_regimes_into_the_results_readme(tmp_path: Path) -> None:
    """One rollout per regime on minigrid_dynamic, every network column, into the results README."""
    out = tmp_path / 'results'
    assert main(['experiment', 'table5_dynamic', '--seeds', '1', '--episodes', '2', '--steps', '1024',
                 '--workers', '1', '--out', str(out)]) == 0
    result = json.loads((out / 'table5_dynamic.json').read_text())
    assert (result['env'], result['metric'], list(result['cells'])) == (
        'minigrid_dynamic', 'success_rate', ['Baseline', 'Delay-Only', 'Full Net-Aware'])
    assert all(len(cell['per_seed']) == 1 and 0 <= cell['mean'] <= 100
               for row in result['cells'].values() for cell in row.values())
    assert list(result['cells']['Baseline']) == [c.name for c in COLUMNS]
    assert '## table5_dynamic: MiniGrid Dynamic-Obstacles' in (out / 'README.md').read_text()


def test_a_table_whose_profile_files_are_elsewhere_is_refused_before_it_trains(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The robots tables' constant-delay columns are files under the repository's results/profiles."""
    monkeypatch.chdir(tmp_path)
    assert main(['experiment', 'robots_reacher', '--seeds', '1', '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and "no profile or trace 'results/profiles/constant_2_ticks_20ms.yaml'" in err
    assert 'from the root of the CALF repository' in err and not (tmp_path / 'out' / 'cache').exists()


@pytest.mark.slow
def test_rows_run_one_row_and_take_the_others_from_the_cache(tmp_path: Path) -> None:
    """--rows trains only the rows named; a later run of another row finds the first one's cells cached."""
    out = tmp_path / 'results'
    common = ['experiment', 'table5_dynamic', '--seeds', '1', '--episodes', '2', '--steps', '1024', '--workers', '1',
              '--out', str(out)]
    assert main([*common, '--rows', 'full net-aware']) == 0
    first = json.loads((out / 'table5_dynamic.json').read_text())
    assert [key.split('-')[1] for key in first['cells_run']] == ['full_net_aware']
    assert len(first['cells']['Full Net-Aware']['Sim-Clean']['per_seed']) == 1
    assert first['cells']['Baseline']['Sim-Clean']['per_seed'] == []
    assert '| **Baseline** | not run |' in (out / 'table5_dynamic.md').read_text()

    assert main([*common, '--rows', 'Baseline']) == 0
    second = json.loads((out / 'table5_dynamic.json').read_text())
    assert [key.split('-')[1] for key in second['cells_run']] == ['sim_clean']
    assert second['cells']['Full Net-Aware'] == first['cells']['Full Net-Aware']
    assert len(second['cells']['Baseline']['Wi-Fi-D']['per_seed']) == 1
