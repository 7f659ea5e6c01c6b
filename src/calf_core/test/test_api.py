"""The public API: calf_core.wrap and calf/Networked-v0, and the pure core's independence from ROS."""
from __future__ import annotations

import importlib
import math
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import calf_core
from calf_core.errors import ConfigError, ConfigTypeError
from calf_core.limits import MAX_PLAN_HORIZON
from calf_core.task_spec import HoldMode

TRACE_BAG = Path(__file__).resolve().parents[3] / 'results' / 'traces' / 'wifi_degraded_live'
FIXTURES = Path(__file__).resolve().parents[3] / 'tests' / 'fixtures'  # hostile_envs: entry points that break rules


def rollout(env: gym.Env, seed: int) -> tuple[float, int]:
    """(return, env ticks) of one episode of a constant half torque (or action 1)."""
    env.reset(seed=seed)
    action = np.array([0.5], np.float32) if isinstance(env.action_space, gym.spaces.Box) else 1
    total, ticks, done = 0.0, 0, False
    while not done:
        _, reward, terminated, truncated, info = env.step(action)
        total, ticks, done = total + reward, ticks + info['ticks'], terminated or truncated
    return total, ticks


def test_wrap_puts_any_env_behind_a_network_at_its_own_dt() -> None:
    env = calf_core.wrap(gym.make('Pendulum-v1'), network='wifi_degraded')
    assert isinstance(env, calf_core.NetworkedEnv)
    assert (env.dt, env.task.hold, env.action_space) == (0.05, HoldMode.ZERO, gym.make('Pendulum-v1').action_space)
    first = [rollout(env, seed) for seed in (0, 3)]
    assert first[0][1] == 200, 'Pendulum ticks to its 200-step limit, whatever the decisions'
    again = calf_core.wrap(gym.make('Pendulum-v1'), network='wifi_degraded')
    assert [rollout(again, seed) for seed in (0, 3)] == first, 'the same seeds give the same episodes'
    cartpole = calf_core.wrap(gym.make('CartPole-v1'), network='sim_clean')
    assert (cartpole.dt, cartpole.task.name) == (0.02, 'cartpole'), "a built-in task's id takes its spec"


def test_wrap_asks_for_dt_when_the_env_has_none() -> None:
    with pytest.raises(ConfigError, match=r'has no dt of its own: give its tick period, wrap\(env, dt=SECONDS\)'):
        calf_core.wrap(gym.make('MountainCarContinuous-v0'))
    assert calf_core.wrap(gym.make('MountainCarContinuous-v0'), dt=0.1).dt == 0.1


BAD_WRAPS = {  # the call: (the error class, what its one line says)
    'wrap(42)': (lambda: calf_core.wrap(42), ConfigTypeError, 'env must be a gymnasium env or an env name'),
    'wrap(None)': (lambda: calf_core.wrap(None), ConfigTypeError, 'got NoneType None'),
    'dt=inf': (lambda: calf_core.wrap(gym.make('Pendulum-v1'), dt=math.inf), ConfigError, 'dt must be'),
    'dt=nan': (lambda: calf_core.wrap(gym.make('MountainCarContinuous-v0'), dt=math.nan), ConfigError, 'dt must be'),
    'dt giant': (lambda: calf_core.wrap(gym.make('Pendulum-v1'), dt=10 ** 5000), ConfigError, 'dt must be'),
    'dt 1e308': (lambda: calf_core.wrap(gym.make('Pendulum-v1'), dt=1e308), ConfigError, 'dt must be'),
    'dt as text': (lambda: calf_core.wrap(gym.make('Pendulum-v1'), dt='0.05'), ConfigTypeError, 'dt must be'),
    'plan_horizon=10**9': (lambda: calf_core.wrap(gym.make('Pendulum-v1'), plan_horizon=10 ** 9), ConfigError,
                           f'plan_horizon must be in [1, {MAX_PLAN_HORIZON}], got 1000000000'),
    'plan_horizon=0': (lambda: calf_core.wrap('Pendulum-v1', plan_horizon=0), ConfigError, 'plan_horizon must be in'),
    'plan_horizon giant': (lambda: calf_core.wrap('Pendulum-v1', plan_horizon=10 ** 5000), ConfigError,
                           'an integer of 16610 bits'),
    'plan_horizon=2.0': (lambda: calf_core.wrap('Pendulum-v1', plan_horizon=2.0), ConfigTypeError,
                         'plan_horizon must be an integer'),
    'seed=-1': (lambda: calf_core.wrap('Pendulum-v1', seed=-1), ConfigError, 'seed must be in [0, '),
    'network=3': (lambda: calf_core.wrap('Pendulum-v1', network=3), ConfigTypeError, 'network must be'),
    'task=3': (lambda: calf_core.wrap('Pendulum-v1', task=3), ConfigTypeError, 'task must be a TaskSpec'),
    'gym.make plan_horizon=5000': (lambda: gym.make(calf_core.ENV_ID, env='Pendulum-v1', plan_horizon=5000),
                                   ConfigError, 'plan_horizon must be in'),
    'an env object with too many observation values': (
        lambda: calf_core.wrap(importlib.import_module('hostile_envs').wide_observation()), ConfigError,
        'values, CALF carries 1 to'),
    'an entry point that emits NaN': (lambda: calf_core.wrap('hostile_envs:nan_at_reset'), ConfigError,
                                      'env hostile_envs:nan_at_reset: reset returned an observation with NaN'),
    'an entry point that exits': (lambda: calf_core.wrap('hostile_envs:exits'), ConfigError,
                                  'constructing it raised SystemExit: 7'),
}


@pytest.mark.parametrize('case', BAD_WRAPS)
def test_bad_wrap_arguments_are_one_line_config_errors(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    call, kind, message = BAD_WRAPS[case]
    with pytest.raises(kind) as info:
        call()
    assert isinstance(info.value, ValueError) and message in str(info.value) and '\n' not in str(info.value)
    assert isinstance(info.value, TypeError) == (kind is ConfigTypeError)


def test_plans_of_continuous_actions_widen_the_action_space() -> None:
    env = calf_core.wrap('Pendulum-v1', network='wifi_normal', plan_horizon=4)
    assert env.action_space.shape == (4, 1) and env.action_space.high.max() == 2.0
    env.reset(seed=0)
    assert env.step(env.action_space.sample())[4]['executed'].shape == (5, 4)


def test_gym_make_and_make_vec_build_networked_envs() -> None:
    env = gym.make(calf_core.ENV_ID, env='Pendulum-v1', network='wifi_normal')
    assert isinstance(env.env, calf_core.NetworkedEnv) and env.get_wrapper_attr('dt') == 0.05
    assert type(env.unwrapped).__name__ == 'PendulumEnv'
    envs = gym.make_vec(calf_core.ENV_ID, num_envs=3, env='CartPole-v1', network='wifi_normal')
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (3, 4)
    _, reward, _, _, info = envs.step(np.ones(3, dtype=np.int64))
    assert reward.shape == (3,) and (info['ticks'] >= 1).all()
    envs.close()


def test_a_trace_bag_is_a_network() -> None:
    env = calf_core.wrap(gym.make('Pendulum-v1'), network=TRACE_BAG, seed=0)
    env.reset(seed=0)
    e2e: list[float] = []
    for _ in range(100):
        e2e.extend(env.step(np.zeros(1, np.float32))[4]['e2e_ms'])
    assert len(e2e) > 20 and 20.0 < float(np.median(e2e)) < 500.0, 'the bag holds a degraded Wi-Fi link'


@pytest.mark.slow
def test_the_pure_core_imports_neither_rclpy_nor_message_types() -> None:
    modules = sorted(p.stem for p in Path(calf_core.__file__).parent.glob('*.py') if p.stem != '__init__')
    code = ('import importlib, sys\n'
            f'for m in {modules!r}: importlib.import_module("calf_core." + m)\n'
            'ros = [m for m in sys.modules if m.split(".")[0] in ("rclpy", "calf_msgs", "calf_ros", "rosidl_runtime_py",'
            ' "builtin_interfaces", "std_msgs", "rosbag2_py")]\n'
            'print(ros); sys.exit(1 if ros else 0)\n')
    run = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    for path in Path(calf_core.__file__).parent.glob('*.py'):
        text = path.read_text(encoding='utf-8')
        assert 'import rclpy' not in text and 'calf_msgs.msg' not in text, path.name
