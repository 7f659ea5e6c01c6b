"""Adversarial arguments (classes 2 and 3): every out-of-range argument of `calf` is one line and exit 2,
before any work; outputs create their own directory, never a tree of parents; nothing half-written."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from calf_bringup.cli import main
from calf_core.limits import MAX_ACTIONS, MAX_OBS_VALUES

BAD_ARGS = {
    'eval --episodes 0': (['eval', '--policy', 'x', '--episodes', '0'], 'argument --episodes: must be in [1,'),
    'eval --episodes -1': (['eval', '--policy', 'x', '--episodes', '-1'], 'argument --episodes: must be in [1,'),
    'eval --episodes 1e9': (['eval', '--policy', 'x', '--episodes', '1e9'], 'must be an integer'),
    'eval --time-scale 0': (['eval', '--policy', 'x', '--time-scale', '0'], 'argument --time-scale'),
    'eval --time-scale nan': (['eval', '--policy', 'x', '--time-scale', 'nan'], 'argument --time-scale'),
    'train --plan-horizon 0': (['train', '--out', 'x', '--plan-horizon', '0'], 'argument --plan-horizon'),
    'train --plan-horizon 10^6': (['train', '--out', 'x', '--plan-horizon', '1000000'], 'argument --plan-horizon'),
    'train --frames 0': (['train', '--out', 'x', '--frames', '0'], 'argument --frames'),
    'train --frames 10^9': (['train', '--out', 'x', '--frames', '1000000000'], 'argument --frames'),
    'train --action-history -1': (['train', '--out', 'x', '--action-history', '-1'], 'argument --action-history'),
    'train --envs 0': (['train', '--out', 'x', '--envs', '0'], 'argument --envs'),
    'train --steps 0': (['train', '--out', 'x', '--steps', '0'], 'argument --steps'),
    'trace synth --duration 1e7': (['trace', 'synth', '--out', 'x', '--duration', '1e7'], 'argument --duration'),
    'trace synth --duration -1': (['trace', 'synth', '--out', 'x', '--duration', '-1'], 'argument --duration'),
    'trace synth --dt 0': (['trace', 'synth', '--out', 'x', '--dt', '0'], 'argument --dt'),
    'trace synth --dt inf': (['trace', 'synth', '--out', 'x', '--dt', 'inf'], 'argument --dt'),
    'profile show --samples 0': (['profile', 'show', 'wifi_normal', '--samples', '0'], 'argument --samples'),
    'run --episodes -3': (['run', 'local_sim', '--episodes', '-3'], 'bad --episodes -3: must be >= 0'),
    'run --network bogus': (['run', 'edge_sim', '--role', 'edge', '--network', 'bogus'],
                            "bad --network bogus: unknown network profile 'bogus'"),
    'run --network missing.yaml': (['run', 'sim_net', '--network', 'missing.yaml', '--policy', 'x'],
                                   "bad --network missing.yaml: cannot read profile"),
    'experiment --seeds 0': (['experiment', 'table4', '--seeds', '0'], 'argument --seeds'),
    'experiment --cluster ray:': (['experiment', 'table6', '--cluster', 'ray:', '--out', 'no_such_dir'],
                                  '--cluster ray: names no cluster: write ray:local'),
    'unknown option': (['eval', '--policy', 'x', '--bogus'], 'unrecognized arguments'),
}


@pytest.mark.parametrize('case', BAD_ARGS)
def test_bad_arguments_are_one_line_and_exit_2(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv, message = BAD_ARGS[case]
    try:
        code = main(argv)  # a ConfigError from the command
    except SystemExit as exit_:  # an argument argparse refused
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and message in err and err.startswith('calf')


FIXTURES = Path(__file__).resolve().parents[3] / 'tests' / 'fixtures'
HOSTILE_ENVS = {  # entry point in tests/fixtures: what the error line says
    'hostile_envs:raises': 'constructing it raised RuntimeError: the robot is not plugged in',
    'hostile_envs:exits': 'constructing it raised SystemExit: 7',
    'hostile_import:make': 'importing hostile_import raised ValueError: hostile_import: configuration missing',
    'hostile_envs:nan_at_reset': 'reset returned an observation with NaN or infinite values',
    'hostile_envs:inf_at_step': 'its first step returned an observation with NaN or infinite values',
    'hostile_envs:reset_raises': 'reset raised ZeroDivisionError: reset divided by zero',
    'hostile_envs:step_raises': 'step raised ZeroDivisionError: step divided by zero',
    'hostile_envs:wide_observation': f'its observations hold {MAX_OBS_VALUES + 1} values, CALF carries 1 to',
    'hostile_envs:many_actions': f'has {MAX_ACTIONS + 1} actions, a policy emits 1 to {MAX_ACTIONS}',
    'hostile_envs:not_an_env': 'returned int, not a gymnasium env',
    'hostile_envs:raises_a_calf_error': 'constructing it raised ConfigError: first line second line',
}


@pytest.mark.parametrize('entry', HOSTILE_ENVS)
@pytest.mark.parametrize('how', ['--env', '--env-spec'])
def test_hostile_user_envs_are_one_line_and_exit_2(entry: str, how: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Each entry point, named directly or by a spec file that gives its tick, before any work."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    spec = tmp_path / 'task.yaml'
    spec.write_text(f'env: "{entry}"\ndt: 0.02\n')
    out = tmp_path / 'no' / 'ckpt'  # a missing parent: a command that got past the env would say so
    argv = ['train', how, entry if how == '--env' else str(spec), '--steps', '64', '--out', str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and HOSTILE_ENVS[entry] in err, err
    assert err.startswith('calf train: error: ') and entry in err


def test_synth_too_many_messages_is_refused_before_allocating(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'bag'
    assert main(['trace', 'synth', '--profile', 'wifi_normal', '--duration', '600000', '--dt', '0.001',
                 '--out', str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'more than' in err and not out.exists()


@pytest.mark.parametrize('argv', [
    ['trace', 'synth', '--profile', 'wifi_normal', '--duration', '1'],
    ['trace', 'recover', 'no_such_bag'],
    ['train', '--env', 'cartpole', '--regime', 'baseline', '--steps', '64'],
    ['train', '--env', 'cartpole', '--regime', 'baseline', '--planner', 'model', '--plan-horizon', '4'],
    ['train-hierarchy', '--steps', '64'],
    ['experiment', 'table4', '--seeds', '1'],
    ['demo'],
])
def test_out_creates_only_its_own_directory(tmp_path: Path, argv: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / 'no' / 'such' / 'dir'
    assert main([*argv, '--out', str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and ('does not exist' in err or 'no_such_bag' in err)
    assert not (tmp_path / 'no').exists()


def test_to_profile_into_a_missing_directory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = tmp_path / 'bag'
    assert main(['trace', 'synth', '--profile', 'wifi_normal', '--duration', '2', '--out', str(bag)]) == 0
    capsys.readouterr()
    assert main(['trace', 'to-profile', str(bag), '--out', str(tmp_path / 'missing' / 'p.yaml')]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'cannot write' in err and not (tmp_path / 'missing').exists()


@pytest.mark.slow
def test_an_interrupted_training_keeps_the_previous_progress_csv(tmp_path: Path) -> None:
    """A real PPO run on CartPole whose env raises KeyboardInterrupt after a few hundred steps."""
    import gymnasium as gym

    from calf_agent.trainer import TrainConfig
    from calf_agent.training import train

    class Interrupt(gym.Wrapper):
        steps = 0

        def step(self, action):  # noqa: ANN001, ANN202
            Interrupt.steps += 1
            if Interrupt.steps > 300:
                raise KeyboardInterrupt
            return self.env.step(action)

    def envs(n: int) -> gym.vector.VectorEnv:
        return gym.vector.SyncVectorEnv([lambda: Interrupt(gym.make('CartPole-v1')) for _ in range(n)],
                                        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)

    cfg = TrainConfig(total_steps=256, num_envs=2, num_steps=64, meta={'env': 'cartpole'})
    train(cfg, envs, tmp_path, progress=False)
    rows = list(csv.DictReader((tmp_path / 'progress.csv').open()))
    assert rows and int(rows[-1]['global_step']) == 256
    Interrupt.steps = 0
    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig(total_steps=4096, num_envs=2, num_steps=64, meta={'env': 'cartpole'}), envs, tmp_path,
              progress=False)
    assert list(csv.DictReader((tmp_path / 'progress.csv').open())) == rows, 'the old log is intact'
    assert not list(tmp_path.glob('.progress.csv.*'))
