"""calf_core stands alone: a fresh venv with only the pure package and its dependencies runs the README's
two-line example and decodes a trace bag, with no ROS anywhere on its path.

The wheel is built from this tree; the dependency wheels, pinned by requirements.lock, are kept in
build/pure_wheels so that later runs install offline (``--no-index``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
WHEELS = ROOT / 'build' / 'pure_wheels'
DEPENDENCIES = ('numpy', 'gymnasium', 'PyYAML', 'rosbags', 'mcap')
EXAMPLE = '''
import gymnasium as gym, numpy as np, calf_core
env = calf_core.wrap(gym.make("Pendulum-v1"), network="wifi_degraded")
obs, info = env.reset(seed=0)
for _ in range(50):
    obs, reward, terminated, truncated, info = env.step(np.zeros(1, np.float32))
bag = calf_core.wrap(gym.make("CartPole-v1"), network=BAG)
bag.reset(seed=0)
import importlib.util, sys
assert importlib.util.find_spec("rclpy") is None and importlib.util.find_spec("calf_msgs") is None
print("ok", env.dt, bag.dt)
'''

MUJOCO_EXAMPLE = '''
import gymnasium as gym, numpy as np, calf_core
env = calf_core.wrap(gym.make("InvertedPendulum-v5"), network="wifi_degraded")
env.reset(seed=0)
env.step(np.zeros(1, np.float32))
print("ok", env.dt)
'''


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    clean = {key: os.environ[key] for key in ('PATH', 'HOME', 'TMPDIR', 'LANG') if key in os.environ}
    done = subprocess.run(args, capture_output=True, text=True, env=clean, timeout=900, **kwargs)
    assert done.returncode == 0, f'{args}: {done.stdout[-2000:]} {done.stderr[-2000:]}'
    return done


def build_wheel(tmp_path: Path) -> Path:
    """calf_core's wheel, built from a copy of this tree (building leaves nothing in the repository)."""
    tree = tmp_path / 'src'
    shutil.copytree(ROOT / 'src' / 'calf_core', tree / 'calf_core', ignore=shutil.ignore_patterns('test', '__pycache__'))
    shutil.copytree(ROOT / 'src' / 'calf_msgs' / 'msg', tree / 'calf_msgs' / 'msg')
    wheel_dir = tmp_path / 'wheel'
    run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation', '-q', '-w', str(wheel_dir),
         str(tree / 'calf_core')])
    return next(wheel_dir.glob('calf_core-*.whl'))


def fresh_venv(tmp_path: Path, requirement: str, dependencies: tuple[str, ...]) -> str:
    """A new venv with ``requirement`` installed offline from wheels pinned by requirements.lock; its python."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    run([sys.executable, '-m', 'pip', 'download', '-q', '-d', str(WHEELS), '-c', str(ROOT / 'requirements.lock'),
         '--only-binary=:all:', *dependencies])
    venv = tmp_path / 'venv'
    run([sys.executable, '-m', 'venv', str(venv)])
    python = str(venv / 'bin' / 'python')
    run([python, '-m', 'pip', 'install', '-q', '--no-index', '--find-links', str(WHEELS), requirement])
    return python


@pytest.mark.slow
def test_a_fresh_venv_with_only_calf_core_runs_the_two_line_example(tmp_path: Path) -> None:
    python = fresh_venv(tmp_path, str(build_wheel(tmp_path)), DEPENDENCIES)
    bag = ROOT / 'results' / 'traces' / 'wifi_degraded_live'
    done = run([python, '-c', EXAMPLE.replace('BAG', repr(str(bag)))], cwd=tmp_path)
    assert done.stdout.split() == ['ok', '0.05', '0.02']
    listed = run([python, '-m', 'pip', 'list', '--format=freeze']).stdout.lower()
    assert 'torch' not in listed and 'ros' not in listed.replace('rosbags', '')


@pytest.mark.slow
def test_the_mujoco_extra_brings_what_mujoco_tasks_need(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    python = fresh_venv(tmp_path, f'{wheel}[mujoco]', (*DEPENDENCIES, 'gymnasium[mujoco]'))
    done = run([python, '-c', MUJOCO_EXAMPLE], cwd=tmp_path)
    assert done.stdout.split() == ['ok', '0.04']
    listed = run([python, '-m', 'pip', 'list', '--format=freeze']).stdout.lower()
    assert 'mujoco' in listed and 'torch' not in listed
