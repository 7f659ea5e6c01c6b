"""SAC and BPQL trainings stopped by SIGKILL continue from their snapshot (``calf train --resume``), and
``calf experiment`` continues a job from the snapshot its stopped run left; a bad snapshot is one line, exit 2.
Each step is logged once, in progress.csv and in TensorBoard."""
from __future__ import annotations

import csv
import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors import safe_open
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from calf_agent.checkpoint import load_checkpoint
from calf_agent.train_state import SNAPSHOT
from calf_bringup.cli import main
from calf_bringup.experiment import TrainJob, claim_partial, run_train
from calf_bringup.experiment_specs import Row

ENV = {**os.environ, 'OMP_NUM_THREADS': '1', 'MKL_NUM_THREADS': '1'}


def _calf(*args: str) -> list[str]:
    return [sys.executable, '-m', 'calf_bringup.cli', *args]


def _kill_after_snapshot(argv: list[str], snapshot: Path, timeout: float = 250.0) -> None:
    """Start ``argv``, SIGKILL it once ``snapshot`` exists (polling the file: the event), and wait for it."""
    proc = subprocess.Popen(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    try:
        while not snapshot.is_file():
            assert proc.poll() is None, f'the training ended before its first snapshot: {proc.stderr.read()}'
            assert time.monotonic() < deadline, 'no snapshot in time'
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()


def _steps(out: Path) -> list[int]:
    with open(out / 'progress.csv', newline='') as stream:
        return [int(row['global_step']) for row in csv.DictReader(stream)]


@pytest.mark.slow
@pytest.mark.parametrize('algo', ['sac', 'bpql'])
def test_a_killed_training_resumes_to_its_budget_with_its_buffer_and_alpha(algo: str, tmp_path: Path) -> None:
    out = tmp_path / 'run'
    train = _calf('train', '--env', 'Pendulum-v1', '--algo', algo, '--regime', 'baseline', '--steps', '3000',
                  '--snapshot-every', '2000', '--out', str(out), '--quiet')
    _kill_after_snapshot(train, out / SNAPSHOT)
    assert not (out / 'meta.json').exists()
    with safe_open(str(out / SNAPSHOT), 'pt') as snap:
        saved_alpha = math.exp(snap.get_tensor('log_alpha').item())
        saved_rows = snap.get_slice('buffer.reward' if algo == 'bpql' else 'buffer.rewards').get_shape()[0]
        state = json.loads(snap.metadata()['calf_train_state'])
    assert state['global_step'] == 2000 and state['updates'] == 1000 and saved_rows == state['buffer']['size'] > 0
    assert saved_alpha != 1.0  # alpha was tuned before the snapshot

    with SummaryWriter(str(out / 'tb')) as late:  # as if the killed run had logged beyond its snapshot
        late.add_scalar('charts/alpha', 123.0, 3000)
    again = subprocess.run(train, env=ENV, capture_output=True, text=True, timeout=280)
    assert again.returncode == 2 and '--resume' in again.stderr and again.stderr.count('\n') == 1

    done = subprocess.run([*train, '--resume'], env=ENV, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr
    assert (f'resumed {out / SNAPSHOT}: step 2000, {saved_rows} transitions in the buffer, alpha {saved_alpha:.6g}'
            in done.stderr)
    assert json.loads(done.stdout)['steps'] == 3000
    steps = _steps(out)
    assert steps == [1000, 2000, 3000]  # the budget, each row once
    with open(out / 'progress.csv', newline='') as stream:
        last = list(csv.DictReader(stream))[-1]
    assert math.isfinite(float(last['critic_loss'])) and float(last['alpha']) != saved_alpha  # it went on learning
    events = EventAccumulator(str(out / 'tb'))
    events.Reload()
    alphas = [(e.step, e.value) for e in events.Scalars('charts/alpha')]
    assert [step for step, _ in alphas] == [1000, 2000, 3000] and alphas[-1][1] == pytest.approx(float(last['alpha']))
    agent, meta = load_checkpoint(out)
    assert meta['steps'] == 3000 and agent.kind == 'sac'
    assert not (out / SNAPSHOT).exists() and not list(out.glob('.*.tmp'))


def test_resume_or_snapshots_without_a_snapshot_or_of_ppo_are_one_line_exit_2(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'run'
    assert main(['train', '--env', 'cartpole', '--resume', '--out', str(out)]) == 2
    assert 'SAC or BPQL' in capsys.readouterr().err
    assert main(['train', '--env', 'cartpole', '--snapshot-every', '1000', '--out', str(out)]) == 2
    assert 'SAC or BPQL' in capsys.readouterr().err and not out.exists()
    out.mkdir()
    assert main(['train', '--env', 'Pendulum-v1', '--algo', 'sac', '--steps', '10', '--resume', '--out', str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and f'{out} holds no training snapshot' in err


def test_a_corrupt_snapshot_is_one_line_naming_it_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'run'
    out.mkdir()
    (out / SNAPSHOT).write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"oops": ')
    assert main(['train', '--env', 'Pendulum-v1', '--algo', 'sac', '--steps', '10', '--resume', '--out', str(out),
                 '--quiet']) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and f'{out / SNAPSHOT} is not a readable training snapshot' in err
    assert 'delete it' in err and not (out / 'meta.json').exists()


@pytest.mark.slow
def test_an_experiment_job_resumes_the_newest_snapshot_its_stopped_runs_left(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    job = TrainJob('Pendulum-v1', Row('Baseline (SAC)', 'sim_clean', algo='sac'), 0, 2000)
    cache = tmp_path / 'cache'
    final = cache / 'train' / job.key
    stopped = final.with_name(f'{final.name}.partial999999')  # a run of another session, killed
    stopped.parent.mkdir(parents=True)
    code = (f'from pathlib import Path; from calf_bringup.experiment import TrainJob, train_job; '
            f'from calf_bringup.experiment_specs import Row; '
            f'train_job({job!r}, Path({str(stopped)!r}), snapshot_every=1000)')
    _kill_after_snapshot([sys.executable, '-c', code], stopped / SNAPSHOT)
    older = final.with_name(f'{final.name}.partial999998')  # an older stopped run, without a snapshot
    older.mkdir()
    capfd.readouterr()
    assert run_train(job, cache) == final
    assert f'resumed {final.parent}/{final.name}.partial{os.getpid()}/{SNAPSHOT}: step 1000' in capfd.readouterr().err
    assert _steps(final) == [1000, 2000]
    assert load_checkpoint(final)[1]['steps'] == 2000
    assert sorted(p.name for p in final.parent.iterdir()) == [final.name]  # the stopped runs' folders are gone
    assert sorted(p.name for p in final.iterdir()) == ['meta.json', 'policy.safetensors', 'progress.csv', 'tb']


@pytest.mark.slow
def test_a_snapshot_of_other_settings_is_one_line_naming_them(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'run'
    argv = ['train', '--env', 'Pendulum-v1', '--algo', 'sac', '--steps', '2000', '--snapshot-every', '1000',
            '--out', str(out), '--quiet']
    _kill_after_snapshot(_calf(*argv, '--seed', '1'), out / SNAPSHOT)
    assert main([*argv, '--seed', '0', '--resume']) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and f'{out / SNAPSHOT} was written by a training with other settings (seed)' in err
    assert (out / SNAPSHOT).is_file() and not (out / 'meta.json').exists()


def test_a_job_claims_the_newest_stopped_snapshot_and_leaves_a_live_runs_folder_alone(tmp_path: Path) -> None:
    final = tmp_path / 'train' / 'job'
    live, newer, older, bare = (final.with_name(f'job.partial{n}') for n in (101, 102, 103, 104))
    for folder in (live, newer, older, bare):
        folder.mkdir(parents=True)
    for folder, mtime in ((live, 300), (newer, 200), (older, 100)):
        (folder / SNAPSHOT).write_text(folder.name)
        os.utime(folder / SNAPSHOT, (mtime, mtime))
    held = os.open(live, os.O_RDONLY | os.O_DIRECTORY)  # another run, alive: its folder is locked
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        mine, lock = claim_partial(final)
        try:
            assert mine == final.with_name(f'job.partial{os.getpid()}')
            assert (mine / SNAPSHOT).read_text() == 'job.partial102'  # the newest stopped one, not the live one
            assert sorted(p.name for p in final.parent.iterdir()) == sorted([live.name, mine.name])
            probe = os.open(mine, os.O_RDONLY | os.O_DIRECTORY)
            with pytest.raises(BlockingIOError):  # this run holds its folder
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.close(probe)
        finally:
            os.close(lock)
    finally:
        os.close(held)
    assert (live / SNAPSHOT).read_text() == 'job.partial101'
