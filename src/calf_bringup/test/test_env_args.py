"""``--env`` / ``--env-spec`` on the CLI: a bad env is one line on stderr and exit code 2."""
from __future__ import annotations

from pathlib import Path

import pytest

from calf_bringup import cli


@pytest.mark.parametrize('args, message', [
    (['--env', 'NoSuchEnv-v0'], "unknown env 'NoSuchEnv-v0'"),
    (['--env', 'no_such_package.robot:make'], 'cannot import no_such_package'),
    (['--env', 'gymnasium.envs.classic_control.cartpole:CartPoleEnv'], 'has no dt of its own'),
])
def test_train_and_run_refuse_a_bad_env_with_one_line(args: list[str], message: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for command in (['train', '--out', str(tmp_path / 'out')], ['run', 'local_sim', '--role', 'edge']):
        assert cli.main([*command, *args]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count('\n') == 1


def test_a_spec_file_without_a_tick_for_an_env_without_dt_exits_2(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / 'robot.yaml'
    spec.write_text('env: gymnasium.envs.classic_control.cartpole:CartPoleEnv\nhold: last\n')
    assert cli.main(['train', '--env-spec', str(spec), '--out', str(tmp_path / 'out')]) == 2
    assert 'give the tick period' in capsys.readouterr().err
