"""Progress bars as a user sees them: on a terminal by default, absent from a pipe unless ``--progress``,
with an ETA; an experiment's bar counts a running cell's env steps."""
from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from calf_agent.checkpoint import save_checkpoint
from calf_agent.policies import MlpAgent
from calf_bringup.experiment_cells import Cell, LocalExecutor, run_cells
from calf_core import progress

EPISODES = 20


@pytest.fixture(scope='module')
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained CartPole checkpoint: evaluation does not care how good it is."""
    out = tmp_path_factory.mktemp('policy')
    save_checkpoint(out, MlpAgent(4, 2), {'env': 'cartpole'})
    return out


def calf_eval(policy: Path, *extra: str, stderr: int | None = subprocess.PIPE) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != progress.ENV}
    return subprocess.run([sys.executable, '-m', 'calf_bringup.cli', 'eval', '--policy', str(policy),
                           '--network', 'wifi_degraded', '--episodes', str(EPISODES), '--json', *extra],
                          env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=300)


@pytest.mark.slow
def test_eval_into_a_pipe_has_no_bar_and_with_progress_has_one_with_an_eta(policy: Path) -> None:
    quiet = calf_eval(policy)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert json.loads(quiet.stdout)['episodes'] == EPISODES
    assert 'episode' not in quiet.stderr
    shown = calf_eval(policy, '--progress')
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert json.loads(shown.stdout) == json.loads(quiet.stdout)  # the bar changes nothing else
    assert 'eval: 100%' in shown.stderr and f'{EPISODES}/{EPISODES}' in shown.stderr and 'episode/s' in shown.stderr


@pytest.mark.slow
def test_eval_on_a_terminal_shows_its_bar_by_default(policy: Path) -> None:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack('HHHH', 24, 100, 0, 0))  # a terminal 100 columns wide
    seen: list[bytes] = []

    def read() -> None:
        with contextlib.suppress(OSError):  # EIO once the writer is gone
            while chunk := os.read(leader, 65536):
                seen.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        done = calf_eval(policy, stderr=follower)
    finally:
        os.close(follower)
        reader.join(30)
        os.close(leader)
    assert done.returncode == 0
    text = b''.join(seen)
    assert f'{EPISODES}/{EPISODES}'.encode() in text and b'episode' in text, text[-2000:]


def stepping_cell(go: Path, cache: Path) -> dict:
    """A cell that has trained half its env steps, then waits for ``go`` before it writes its report."""
    progress.report(512, 1024)
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # waits on the test: there is no event across the two processes but the file
    (cache / 'eval').mkdir(parents=True, exist_ok=True)
    (cache / 'eval' / 'a.json').write_text('{}')
    return {}


@pytest.mark.slow
def test_an_experiment_bar_shows_a_running_cells_env_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(progress.ENV, '1')
    go, logs, stderr = tmp_path / 'go', tmp_path / 'logs', io.StringIO()
    cell = Cell('a', partial(stepping_cell, go), ('eval/a.json',))
    executor = LocalExecutor(1)
    outcomes = {}

    def run() -> None:
        with contextlib.redirect_stderr(stderr):
            outcomes.update(run_cells([cell], executor, tmp_path / 'cache', logs, 'tiny'))

    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while 'steps=512/1024' not in stderr.getvalue() and time.monotonic() < deadline and runner.is_alive():
            time.sleep(0.05)  # polls the bar's text, which has no event
        seen = stderr.getvalue()
    finally:
        go.touch()
        runner.join(120)
        executor.close()
    assert 'steps=512/1024' in seen and 'tiny:  45%' in seen, seen[-2000:]
    assert outcomes['a'].status == 'done'
    assert not (logs / 'a.progress').exists()


def test_enabled_follows_the_terminal_and_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setattr(sys, 'stderr', io.StringIO())
    assert not progress.enabled()
    monkeypatch.setattr(sys, 'stderr', Terminal())
    assert progress.enabled() and not progress.enabled(allowed=False)
    monkeypatch.setenv(progress.ENV, '0')
    assert not progress.enabled()
    monkeypatch.setenv(progress.ENV, '1')
    monkeypatch.setattr(sys, 'stderr', io.StringIO())
    assert progress.enabled() and not progress.enabled(allowed=False)


@pytest.mark.slow
def test_the_sb3_example_shows_its_steps_and_episodes() -> None:
    example = Path(__file__).resolve().parents[3] / 'examples' / 'sb3_ppo.py'
    done = subprocess.run([sys.executable, str(example), '--steps', '256', '--n-steps', '32', '--envs', '2',
                           '--episodes', '2', '--progress'], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)['steps'] >= 256
    assert 'train: 100%' in done.stderr and '256/256' in done.stderr and 'eval: 100%' in done.stderr, done.stderr[-2000:]


@pytest.mark.slow
def test_distributed_training_shows_the_learners_env_steps(tmp_path: Path) -> None:
    """The learner node reports its env steps; calf's bar shows them (not only an eval line now and then)."""
    env = {k: v for k, v in os.environ.items() if k != progress.ENV}
    done = subprocess.run([sys.executable, '-m', 'calf_bringup.cli', 'train', '--env', 'cartpole', '--workers', '1',
                           '--steps', '2048', '--out', str(tmp_path / 'run'), '--progress'],
                          env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'train: 100%' in done.stderr and '2048/2048' in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / 'run' / '.progress').exists()


@pytest.mark.slow
def test_train_into_a_pipe_is_quiet_and_with_progress_shows_its_env_steps(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != progress.ENV}
    runs = {flag: subprocess.run([sys.executable, '-m', 'calf_bringup.cli', 'train', '--env', 'cartpole', '--steps',
                                  '2048', '--out', str(tmp_path / (flag.strip('-') or 'plain')), *([flag] if flag else [])],
                                 env=env, capture_output=True, text=True, timeout=280)
            for flag in ('', '--progress')}
    assert all(r.returncode == 0 for r in runs.values()), [r.stderr[-2000:] for r in runs.values()]
    assert 'step' not in runs[''].stderr
    assert '2048/2048' in runs['--progress'].stderr and 'step/s' in runs['--progress'].stderr
