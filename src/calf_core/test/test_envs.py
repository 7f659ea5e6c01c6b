"""``--env`` resolution: built-in tasks, gymnasium ids, entry points and task spec files, with one-line errors."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from calf_core.envs import env_spec, make_env, resolve_env_arg
from calf_core.errors import ConfigError
from calf_core.task_spec import HoldMode, SuccessRule


def test_builtin_tasks_come_from_their_spec_files() -> None:
    cartpole, minigrid = env_spec('cartpole'), env_spec('minigrid')
    assert (cartpole.env, cartpole.dt, cartpole.hold, cartpole.safe_start, cartpole.success) == (
        'CartPole-v1', 0.02, HoldMode.LAST, (0, 1), SuccessRule.TIME_LIMIT)
    assert (minigrid.dt, minigrid.hold, minigrid.noop_action, minigrid.success) == (0.1, HoldMode.NOOP, 6,
                                                                                       SuccessRule.GOAL)
    assert make_env('minigrid').observation_space.shape == (147,)  # the image part of the Dict, flattened


def test_minigrid_dynamic_repeats_its_last_action_and_trains_an_lstm() -> None:
    spec = env_spec('minigrid_dynamic')
    assert (spec.env, spec.dt, spec.hold, spec.initial_action, spec.success) == (
        'MiniGrid-Dynamic-Obstacles-Random-5x5-v0', 0.08, HoldMode.LAST, 0, SuccessRule.GOAL)
    assert (spec.agent, spec.ppo, env_spec('minigrid').agent) == ('lstm', (('ent_coef', 0.1),), 'lstm')
    env = make_env('minigrid_dynamic')
    assert env.observation_space.shape == (147,) and env.action_space.n == 3  # left, right, forward: no no-op


def test_a_gymnasium_id_ticks_at_the_envs_own_dt_and_holds_zero_for_box_actions() -> None:
    spec = env_spec('Pendulum-v1')
    assert (spec.env, spec.dt, spec.hold) == ('Pendulum-v1', 0.05, HoldMode.ZERO)
    assert env_spec('Acrobot-v1').hold is HoldMode.LAST  # Discrete actions: zero-order hold


def test_an_entry_point_takes_the_spec_file_beside_its_module() -> None:
    spec = env_spec('robot_task:make_wheel')
    assert (spec.env, spec.dt, spec.hold) == ('robot_task:make_wheel', 0.01, HoldMode.ZERO)
    assert make_env('robot_task:make_wheel').action_space.shape == (1,)


def test_a_spec_file_names_its_env_and_may_leave_dt_to_it(tmp_path: Path) -> None:
    path = tmp_path / 'pendulum.yaml'
    path.write_text('env: Pendulum-v1\nhold: last\nsuccess: goal\n')
    resolved = resolve_env_arg(None, str(path))
    spec = env_spec(resolved)
    assert (spec.env, spec.dt, spec.hold, spec.success) == ('Pendulum-v1', 0.05, HoldMode.LAST, SuccessRule.GOAL)
    assert resolve_env_arg('Pendulum-v1', str(path)) == resolved
    with pytest.raises(ConfigError, match='disagree'):
        resolve_env_arg('cartpole', str(path))


@pytest.mark.parametrize('name, message', [
    ('NoSuchEnv-v0', "unknown env 'NoSuchEnv-v0': give a built-in task"),
    ('no_such_module:make', 'cannot import no_such_module'),
    ('gymnasium.envs.classic_control.cartpole:CartPoleEnv', 'has no dt of its own: give its tick period'),
    ('robot_task:NOT_CALLABLE', "module robot_task has no callable 'NOT_CALLABLE'"),
])
def test_bad_envs_are_one_line_config_errors(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        env_spec(name)
    assert '\n' not in str(err.value)


@pytest.mark.parametrize('text, message', [
    ('env: robot_task:make_wheel_nodt\n', "module robot_task has no callable 'make_wheel_nodt'"),
    ('hold: zero\n', 'names no env'),
    ('env: gymnasium.envs.classic_control.cartpole:CartPoleEnv\n', 'has no dt of its own'),
    ('env: Pendulum-v1\nhold: sometimes\n', 'hold must be one of last, zero, noop'),
    ('env: Pendulum-v1\ntick: 0.05\n', "unknown key 'tick'"),
    ('env: Pendulum-v1\ndt: -1\n', r'dt must be a tick period in seconds in \[0.0001, 60\], got -1'),
    ('env: Pendulum-v1\ndt: 1e308\n', r"dt must be a tick period in seconds in \[0.0001, 60\], got '1e308'"),
    ('env: Pendulum-v1\ndt: 1.0e+308\n', r'dt must be a tick period in seconds in \[0.0001, 60\], got 1e\+308'),
    ('env: Pendulum-v1\ndt: 1.0e-300\n', r'in \[0.0001, 60\], got 1e-300'),
    ('env: Pendulum-v1\nimports: gymnasium\n', r'imports must be a list of at most 64 module names such as '
                                                r'\[gymnasium\], got .gymnasium.'),
    ('env: Pendulum-v1\nimports: [gymnasium, 7]\n', 'imports must be a list of at most 64 module names'),
    ('env: Pendulum-v1\nstart_plan: [[.nan]]\n', 'lists of at most 4096 finite numbers'),
    ('env: Pendulum-v1\nstart_plan: [' + '[0.0], ' * 1025 + ']\n', 'start_plan must be a list of at most 1024'),
    ('env: Pendulum-v1\nobservation_keys: ' + str(list(range(65))) + '\n', 'observation_keys must be a list of at'),
    ('env: Pendulum-v1\nppo: {ent_coef: .inf}\n', 'ppo must map PPO settings to finite numbers'),
    ('just text\n', 'names no env'),
    ('env: Acrobot-v1\nhold: noop\n', 'hold noop needs a noop_action'),
    ('env: Acrobot-v1\nagent: gru\n', "agent must be one of mlp, lstm, got 'gru'"),
    ('env: Acrobot-v1\nppo: [0.1]\n', r'ppo must map PPO settings to finite numbers, such as \{ent_coef: 0.1\}'),
    ('env: Acrobot-v1\nppo: {ent_coef: high}\n', 'ppo must map PPO settings to finite numbers'),
])
def test_bad_spec_files_are_one_line_config_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / 'task.yaml'
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        env_spec(str(path))
    assert '\n' not in str(err.value)


FIXTURES = Path(__file__).resolve().parents[3] / 'tests' / 'fixtures'


def test_a_user_env_is_probed_once_per_process_with_the_zero_action(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe (one instance: reset with seed 0, one zero-action step, close) runs once; later builds
    are plain constructions, and their steps are not checked."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    log = importlib.import_module('hostile_envs').Recorded.LOG
    log.clear()
    first, second = make_env('hostile_envs:recorded'), make_env('hostile_envs:recorded')
    assert log == ['construct', ('reset', 0), ('step', [0.0, 0.0]), 'close', 'construct', 'construct']
    assert first is not second and first.action_space.shape == (2,)
