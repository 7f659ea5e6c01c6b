"""A user's own env module in the working directory trains through the installed ``calf`` command."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

CALF = shutil.which('calf')

ROBOT = '''
import gymnasium as gym


def make_robot():
    return gym.make('CartPole-v1')
'''


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / 'myrobot').mkdir()
    (tmp_path / 'myrobot' / '__init__.py').write_text('')
    (tmp_path / 'myrobot' / 'robot.py').write_text(ROBOT)
    (tmp_path / 'robot.yaml').write_text('env: myrobot.robot:make_robot\ndt: 0.02\nagent: mlp\n')
    return tmp_path


@pytest.mark.slow
@pytest.mark.skipif(CALF is None, reason='the calf command is not on PATH: source env.sh')
@pytest.mark.parametrize('pythonpath', ['inherited', 'plain'], ids=['cwd-only', 'PYTHONPATH=$PWD'])
def test_env_module_in_working_directory_trains(user_dir: Path, pythonpath: str) -> None:
    env = dict(os.environ)
    if pythonpath == 'plain':
        env['PYTHONPATH'] = str(user_dir)
    done = subprocess.run([CALF, 'train', '--env-spec', 'robot.yaml', '--steps', '64', '--out', 'out'],
                          cwd=user_dir, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result['steps'] >= 64
    assert (user_dir / 'out' / 'meta.json').is_file()


@pytest.mark.skipif(CALF is None, reason='the calf command is not on PATH: source env.sh')
@pytest.mark.slow
def test_a_reader_that_goes_away_stops_calf_quietly() -> None:
    listing = subprocess.Popen([CALF, 'profile', 'schema'], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    listing.stdout.close()  # as `calf profile schema | head -0` does
    _, err = listing.communicate(timeout=60)
    assert listing.returncode in (0, 141) and b'Traceback' not in err, err.decode()[-2000:]
