"""CALF as a gymnasium wrapper: ``calf_core.wrap(env, network=...)`` and ``gym.make('calf/Networked-v0', ...)``.

    import calf_core
    env = calf_core.wrap(gym.make('Pendulum-v1'), network='wifi_degraded')
    envs = gym.make_vec('calf/Networked-v0', num_envs=8, env='Pendulum-v1', network='wifi_normal')

The wrapped env is a :class:`calf_core.networked_env.NetworkedEnv`: every observation crosses the
network's uplink and every action its downlink, in virtual time, under CALF's timing rules
(:mod:`calf_core.timing`). One ``step`` is one decision: the reward is summed over the env ticks
until the next observation reaches the agent (``info['ticks']`` of them). ``plan_horizon`` H > 1
makes an action a plan for the H ticks after the observation it answers. ``info`` keys are listed in
the NetworkedEnv module doc.
"""
from __future__ import annotations

import dataclasses
import numbers
import os
from pathlib import Path
from typing import Any

import gymnasium as gym

from calf_core.env_workers import ProcessEnvBatch
from calf_core.envs import FlattenObservation, builtin_for_id, env_spec, make_env, make_networked_env
from calf_core.errors import ConfigError, ConfigTypeError, shown
from calf_core.limits import MAX_PLAN_HORIZON, U64_MAX
from calf_core.network import resolve_network
from calf_core.networked_env import ENV_ID, NetworkedEnv
from calf_core.profiles import Profile
from calf_core.task_spec import HoldMode, TaskSpec
from calf_core.user_env import check_spaces
from calf_core.vector_networked import EnvBatch, VectorNetworkedEnv

MAX_VECTOR_ENVS = 65536
"""Most envs ``make_vec`` builds in one vector env."""
MAX_ENV_WORKERS = 256
"""Most worker processes ``make_vec`` starts."""


def wrap(env: gym.Env | str, network: str | Path | Profile = 'wifi_degraded', dt: float | None = None,
         seed: int = 0, plan_horizon: int = 1, task: TaskSpec | str | None = None) -> NetworkedEnv:
    """``env`` behind ``network``, in virtual time.

    - ``env``: a gymnasium env, or a name as ``--env`` takes it (``Pendulum-v1``, ``cartpole``,
      ``package.module:callable``, a task spec ``.yaml``).
    - ``network``: a built-in profile name (``sim_clean``, ``wifi_normal``, ``wifi_degraded``, ...), a
      profile YAML path, a recorded trace bag (replayed), or a :class:`~calf_core.profiles.Profile`.
    - ``dt``: the tick period in seconds; default the task spec's, else the env's own
      ``env.unwrapped.dt``; an env with neither raises a ConfigError asking for it.
    - ``seed``: seeds the links and the first reset; ``reset(seed=...)`` reseeds both.
    - ``task``: a :class:`~calf_core.task_spec.TaskSpec` or spec file for what gymnasium does not say
      (hold rule, initial action, start plan, success rule); default: Box actions hold ``zero``,
      Discrete ones hold ``last``.

    Arguments get the bounds the ``calf`` command applies (``plan_horizon`` in [1, 1024], ``seed`` in
    [0, 2^64 - 1], ``dt`` as a task spec's); an env named by a string is checked as ``--env`` is
    (:mod:`calf_core.envs`), an env object's spaces as well. A bad value raises a one-line
    :class:`~calf_core.errors.ConfigError` (a ``ValueError``), a value of the wrong type a
    :class:`~calf_core.errors.ConfigTypeError` (also a ``TypeError``).
    """
    _check_arguments(env, network, seed, plan_horizon, task)
    dt = _seconds(dt)
    env = os.fspath(env) if isinstance(env, os.PathLike) else env
    task = os.fspath(task) if isinstance(task, os.PathLike) else task
    profile = network if isinstance(network, Profile) else resolve_network(network)
    spec = _task_for(env, task, dt)
    if dt is not None:
        spec = dataclasses.replace(spec, dt=dt)
    inner = env if isinstance(env, gym.Env) else make_env(spec.name, spec)
    if isinstance(env, gym.Env):
        check_spaces(inner, spec.name, spec.observation_keys)
    if isinstance(inner.observation_space, (gym.spaces.Dict, gym.spaces.Tuple)):
        inner = FlattenObservation(inner, spec.observation_keys)
    return make_networked_env(spec.name, profile, seed=None if seed is None else int(seed),
                              plan_horizon=int(plan_horizon), env=inner, task=spec)


def make(env: str | gym.Env = 'cartpole', network: str | Path | Profile = 'wifi_degraded', dt: float | None = None,
         seed: int = 0, plan_horizon: int = 1, task: TaskSpec | str | None = None) -> NetworkedEnv:
    """The entry point of ``calf/Networked-v0``: :func:`wrap` with the same arguments."""
    return wrap(env, network, dt, seed, plan_horizon, task)


def make_vec(num_envs: int = 1, env: str = 'cartpole', network: str | Path | Profile = 'wifi_degraded',
             dt: float | None = None, seed: int = 0, plan_horizon: int = 1,
             task: TaskSpec | str | None = None, workers: int = 0) -> VectorNetworkedEnv:
    """The vector entry point of ``calf/Networked-v0`` (``gym.make_vec``): ``num_envs`` copies of ``env``, each as
    :func:`wrap` builds it, stepped together in one :class:`~calf_core.vector_networked.VectorNetworkedEnv` (the
    links of all envs simulated together, ``SAME_STEP`` autoreset). ``env`` is a name, not an env object: each
    copy is built from it. ``workers`` > 0 steps the envs in that many worker processes (``ProcessEnvBatch``: slow
    envs such as MuJoCo's then use every core), 0 in this process. ``gym.make_vec(..., vectorization_mode='sync')``
    gives a SyncVectorEnv of wrapped envs."""
    if not isinstance(env, (str, os.PathLike)):
        raise ConfigTypeError(f'make_vec: env must be an env name such as "Pendulum-v1" (each copy is built from it), '
                              f'got {_short(env)}')
    _check_int(num_envs, 'num_envs', 1, MAX_VECTOR_ENVS)
    _check_int(workers, 'workers', 0, MAX_ENV_WORKERS)
    _check_arguments(env, network, seed, plan_horizon, task)
    profile = network if isinstance(network, Profile) else resolve_network(network)
    first = wrap(env, profile, dt, seed, plan_horizon, task)
    spec = first.task

    def copy() -> gym.Env:
        return wrap(env, profile, dt, seed, plan_horizon, spec).env

    batch = EnvBatch([first.env] + [copy() for _ in range(num_envs - 1)]) if not workers \
        else ProcessEnvBatch([copy] * num_envs, int(workers))
    return VectorNetworkedEnv(batch, spec, first.env.observation_space, first.env.action_space, profile,
                              int(plan_horizon), seed=int(seed))


def _seconds(dt: Any) -> float | None:
    """``dt`` as a float, or None; its range is a task spec's (TaskSpec checks it)."""
    if dt is None:
        return None
    if not _is_number(dt):
        raise ConfigTypeError(f'wrap: dt must be a tick period in seconds (a number), got {_short(dt)}')
    try:
        return float(dt)
    except OverflowError:
        raise ConfigError(f'wrap: dt must be a tick period in seconds, got {shown(dt)}') from None


def _check_arguments(env: Any, network: Any, seed: Any, plan_horizon: Any, task: Any) -> None:
    """One-line ConfigTypeError or ConfigError for the first argument of :func:`wrap` that is wrong."""
    if not isinstance(env, (gym.Env, str, os.PathLike)):
        raise ConfigTypeError(f'wrap: env must be a gymnasium env or an env name such as "Pendulum-v1", '
                              f'got {_short(env)}')
    if not isinstance(network, (str, os.PathLike, Profile)):
        raise ConfigTypeError(f'wrap: network must be a profile name such as "wifi_normal", a profile or trace '
                              f'path, or a Profile, got {_short(network)}')
    if seed is not None:
        _check_int(seed, 'seed', 0, U64_MAX)
    _check_int(plan_horizon, 'plan_horizon', 1, MAX_PLAN_HORIZON)
    if not (task is None or isinstance(task, (TaskSpec, str, os.PathLike))):
        raise ConfigTypeError(f'wrap: task must be a TaskSpec or a task spec file, got {_short(task)}')


def _check_int(value: Any, name: str, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigTypeError(f'wrap: {name} must be an integer in [{low}, {high}], got {_short(value)}')
    if not low <= value <= high:
        raise ConfigError(f'wrap: {name} must be in [{low}, {high}], got {shown(value)}')


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _short(value: Any) -> str:
    """``value`` for a wrong-type message: its type, then the value."""
    return f'{type(value).__name__} {shown(value)}'


def _task_for(env: gym.Env | str, task: TaskSpec | str | None, dt: float | None) -> TaskSpec:
    """The TaskSpec of ``env``: ``task`` if given, a name's own, a built-in's for its gymnasium id, or the
    default for an env instance (its dt; hold zero for Box actions, last for Discrete ones)."""
    if isinstance(task, TaskSpec):
        return task
    if task is not None:
        return env_spec(str(task))
    if isinstance(env, str):
        return env_spec(env)
    gym_id = env.spec.id if env.spec is not None else None
    builtin = builtin_for_id(gym_id) if gym_id else None
    if builtin is not None:
        return env_spec(builtin)
    name = gym_id or type(env.unwrapped).__name__
    dt = dt if dt is not None else getattr(env.unwrapped, 'dt', None)
    if dt is None:
        raise ConfigError(f'env {name} has no dt of its own: give its tick period, wrap(env, dt=SECONDS)')
    hold = HoldMode.ZERO if isinstance(env.action_space, gym.spaces.Box) else HoldMode.LAST
    return TaskSpec(name, float(dt), env=gym_id or '', hold=hold)


def register() -> None:
    """Register ``calf/Networked-v0`` with gymnasium (done on ``import calf_core``)."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point='calf_core.api:make', vector_entry_point='calf_core.api:make_vec',
                     disable_env_checker=True)


__all__ = ['ENV_ID', 'ConfigError', 'make', 'make_vec', 'register', 'wrap']
