"""SAC through the ``calf`` command and the experiment harness: ``calf train --algo sac`` and a spec's ``algo:``
write a SAC checkpoint that ``calf eval`` runs; SAC where it cannot train is one line and exit code 2."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calf_agent.checkpoint import load_checkpoint
from calf_agent.sac import SacActor
from calf_bringup import cli
from calf_bringup.experiment import TrainJob, run_train
from calf_bringup.experiment_specs import Row

STEPS = '1100'  # 1,000 random steps, then 100 updates


@pytest.mark.slow
def test_calf_train_algo_sac_writes_a_checkpoint_that_calf_eval_runs(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'sac'
    assert cli.main(['train', '--env', 'Pendulum-v1', '--algo', 'sac', '--regime', 'baseline', '--steps', STEPS,
                     '--quiet', '--out', str(out)]) == 0
    assert json.loads(capsys.readouterr().out)['steps'] == 1100
    agent, meta = load_checkpoint(out)
    assert isinstance(agent, SacActor) and (meta['algo'], meta['regime'], meta['agent']['hidden']) == (
        'sac', 'baseline', [256, 256])
    reports = []
    for _ in range(2):
        assert cli.main(['eval', '--policy', str(out), '--network', 'wifi_normal', '--episodes', '2', '--json']) == 0
        reports.append(json.loads(capsys.readouterr().out))
    assert reports[0]['episodes'] == 2 and reports[0]['backend'] == 'sim' and reports[0]['e2e_latency_ms']['p50'] > 0
    assert reports[0]['returns'] == reports[1]['returns']  # the deployed actor is deterministic


@pytest.mark.slow
def test_a_spec_file_says_sac_and_the_flag_overrides_it(tmp_path: Path) -> None:
    spec = tmp_path / 'pendulum.yaml'
    spec.write_text('env: Pendulum-v1\nalgo: sac\n')
    assert cli.main(['train', '--env-spec', str(spec), '--regime', 'baseline', '--steps', STEPS, '--quiet',
                     '--out', str(tmp_path / 'spec')]) == 0
    assert load_checkpoint(tmp_path / 'spec')[1]['algo'] == 'sac'
    assert cli.main(['train', '--env-spec', str(spec), '--algo', 'ppo', '--regime', 'baseline', '--steps', '2048',
                     '--quiet', '--out', str(tmp_path / 'ppo')]) == 0
    assert load_checkpoint(tmp_path / 'ppo')[0].kind == 'gaussian'


@pytest.mark.slow
def test_an_experiment_row_trains_with_its_algo(tmp_path: Path) -> None:
    job = TrainJob('Pendulum-v1', Row('SAC', 'sim_clean', algo='sac'), 0, 1100)
    assert job.key == 'Pendulum-v1-sim_clean-h1-sac-1100steps-seed0'
    assert TrainJob('Pendulum-v1', Row('PPO', 'sim_clean'), 0, 1100).key == 'Pendulum-v1-sim_clean-h1-1100steps-seed0'
    agent, meta = load_checkpoint(run_train(job, tmp_path))
    assert isinstance(agent, SacActor) and meta['algo'] == 'sac'


@pytest.mark.parametrize('argv, message', [
    (['--env', 'cartpole', '--algo', 'sac'],
     "calf train: error: SAC trains continuous actions (a Box of shape (A,)), and cartpole's actions are "
     'Discrete(2): train it with --algo ppo'),
    (['--env', 'Pendulum-v1', '--algo', 'sac', '--plan-horizon', '4'],
     'calf train: error: SAC trains single actions: drop --plan-horizon, or train plans with --algo ppo'),
    (['--env', 'Pendulum-v1', '--algo', 'sac', '--workers', '2'],
     'calf train: error: --algo sac trains in one process: drop --workers, or use --algo ppo'),
])
def test_sac_where_it_cannot_train_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(['train', *argv, '--steps', '100', '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(message), err
    assert not (tmp_path / 'out').exists()


def test_a_discrete_spec_that_says_sac_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / 'cart.yaml'
    spec.write_text('env: CartPole-v1\ndt: 0.02\nalgo: sac\n')
    assert cli.main(['train', '--env-spec', str(spec), '--steps', '100', '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and 'SAC trains continuous actions' in err and '--algo ppo' in err


def test_an_unknown_algo_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(['train', '--algo', 'ddpg', '--out', str(tmp_path / 'out')])
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("calf train: error: argument --algo: invalid choice: 'ddpg'"), err
