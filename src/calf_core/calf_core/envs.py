"""The envs CALF runs: ``--env`` resolved to a TaskSpec in one function, and their networked builds.

``--env`` names (see :func:`env_spec`):

- a built-in task, ``cartpole`` or ``minigrid`` (``calf_core/tasks/NAME.yaml``);
- a task spec file, ``my_robot.yaml`` (``--env-spec``), whose ``env`` key names one of the next two;
- a registered gymnasium id, such as ``Pendulum-v1`` or ``InvertedPendulum-v5`` (a built-in task's
  id, ``CartPole-v1``, is that task);
- a ``package.module:callable`` entry point returning a gymnasium env; a spec file
  ``package/module.calf.yaml`` beside the module gives its tick and hold rule.

Without a spec file the tick is the env's own ``env.unwrapped.dt`` (MuJoCo and Pendulum have one);
Box actions hold ``zero`` and Discrete ones ``last``; surviving to the time limit is success.

An env is user code, checked at this boundary: importing its modules, constructing it, and its spaces,
whenever CALF builds it; and once per process (:func:`resolve_env_arg`, :func:`make_env`) a probe: one
instance reset with seed 0, one step with the zero action (Box zeros clipped into its bounds, or a
Discrete space's first action), and closed. Whatever that code raises (``SystemExit`` included; not
``KeyboardInterrupt``), a non-finite observation or one of the wrong size, or spaces outside 1 to
``MAX_OBS_VALUES`` observation values or 1 to ``MAX_ACTIONS`` actions (or Box action values) becomes
one ConfigError naming the env. Later steps are not checked.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import math
import numbers
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from calf_core.errors import ConfigError, shown
from calf_core.limits import MAX_ACTIONS, MAX_OBS_VALUES
from calf_core.link import Link
from calf_core.networked_env import NetworkedEnv
from calf_core.profiles import Profile
from calf_core.task_spec import Action, TaskSpec, parse_start_plan, spec_from_mapping, spec_imports
from calf_core.timing import Stepper
from calf_core.yaml_files import read_yaml

TASKS_DIR = Path(__file__).resolve().parent / 'tasks'
BUILTIN_TASKS: tuple[str, ...] = tuple(sorted(p.stem for p in TASKS_DIR.glob('*.yaml')))
SPEC_SUFFIXES = ('.yaml', '.yml')

__all__ = ['BUILTIN_TASKS', 'add_env_arguments', 'builtin_for_id', 'FlattenObservation', 'check_spaces', 'env_spec',
           'make_env', 'make_networked_env', 'make_stepper', 'parse_start_plan', 'resolve_env_arg', 'user_code']


def add_env_arguments(parser: argparse.ArgumentParser) -> None:
    """``--env`` and ``--env-spec``, as every command that runs a task takes them."""
    parser.add_argument('--env', help=f'task: a built-in ({", ".join(BUILTIN_TASKS)}; default cartpole), a '
                                      f'registered gymnasium id such as Pendulum-v1, or package.module:callable')
    parser.add_argument('--env-spec', metavar='FILE.yaml',
                        help='task spec file: env, dt (tick), hold, initial action, start plan, success rule')


def resolve_env_arg(env: str | None, env_spec_file: str | None) -> str:
    """The one ``--env`` string for ``--env NAME`` and/or ``--env-spec FILE`` (the file's path), its env
    checked (see the module doc) before any work."""
    if env_spec_file is None:
        env = env or 'cartpole'
        spec = env_spec(env)
    else:
        path = str(Path(env_spec_file).resolve())
        spec = env_spec(path)
        if env is not None and env not in (spec.env, spec.name):
            raise ConfigError(f'--env {env} and --env-spec {env_spec_file} (env: {spec.env}) disagree: give one')
        env = path
    _probe(spec.env, spec.observation_keys)
    return env


def builtin_for_id(gym_id: str) -> str | None:
    """The built-in task that runs gymnasium id ``gym_id`` (``CartPole-v1``: ``cartpole``), if any."""
    return next((name for name in BUILTIN_TASKS if _builtin_env(name) == gym_id), None)


@functools.cache
def _builtin_env(name: str) -> str:
    """The env a built-in spec file names (read without importing what it needs)."""
    return str(read_yaml(TASKS_DIR / f'{name}.yaml', 'task spec').get('env', ''))


@functools.lru_cache(maxsize=64)
def env_spec(name: str) -> TaskSpec:
    """The TaskSpec for ``name`` (see the module doc), or a one-line ConfigError."""
    if name in BUILTIN_TASKS:
        return _spec_file(TASKS_DIR / f'{name}.yaml', name)
    builtin = builtin_for_id(name)
    if builtin is not None:
        return env_spec(builtin)
    if name.endswith(SPEC_SUFFIXES):
        return _spec_file(Path(name), name)
    if ':' in name and _entry_point(name, required=False) is not None:
        beside = _beside(name)
        if beside is not None:
            return _spec_file(beside, name, env=name)
        return _default_spec(name)
    if name not in gym.registry and ':' not in name:
        raise ConfigError(f'unknown env {shown(name)}: give a built-in task ({", ".join(BUILTIN_TASKS)}), a registered '
                          f'gymnasium id such as Pendulum-v1, a package.module:callable or a spec file (.yaml)')
    return _default_spec(name)


def make_env(name: str, spec: TaskSpec | None = None) -> gym.Env:
    """A fresh gymnasium env for ``name`` (or ``spec``), its Dict/Tuple observations flattened."""
    spec = spec or env_spec(name)
    for module in spec.imports:
        _import(module, name)
    _probe(spec.env, spec.observation_keys)
    return _flat(_construct(spec.env, spec.observation_keys), spec.observation_keys)


@contextlib.contextmanager
def user_code(env_name: str, what: str, passing: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Run a piece of a user's env: anything it raises (``SystemExit`` too; not ``KeyboardInterrupt``, nor
    the ``passing`` types the caller handles) becomes one ConfigError naming ``env_name`` and ``what``."""
    try:
        yield
    except (KeyboardInterrupt, *passing):
        raise
    except BaseException as err:  # noqa: BLE001 - user code may raise anything, SystemExit included
        text = ' '.join(str(err).split())
        text = f': {text[:200]}{"..." if len(text) > 200 else ""}' if text else ''
        raise ConfigError(f'env {env_name}: {what} raised {type(err).__name__}{text}') from None


def check_spaces(env: gym.Env, env_name: str, keys: tuple[str | int, ...] | None = None) -> None:
    """One-line ConfigError unless ``env``'s spaces are ones CALF carries: observations of 1 to
    ``MAX_OBS_VALUES`` values (the ``keys`` parts of a Dict/Tuple), and Discrete actions (1 to
    ``MAX_ACTIONS`` of them) or Box actions (1 to ``MAX_ACTIONS`` values)."""
    with user_code(env_name, 'reading its spaces'):
        observation_space, action_space = env.observation_space, env.action_space
    size = _values(observation_space, keys)
    if size is None:
        raise ConfigError(f'env {env_name}: its observation space {shown(observation_space)} is not one CALF can '
                          f'flatten: use Box, Discrete, MultiBinary, MultiDiscrete or a Dict/Tuple of them')
    if not 1 <= size <= MAX_OBS_VALUES:
        raise ConfigError(f'env {env_name}: its observations hold {size} values, CALF carries 1 to {MAX_OBS_VALUES}: '
                          f'observe fewer values (observation_keys in a spec file selects parts)')
    if not isinstance(action_space, (gym.spaces.Box, gym.spaces.Discrete)):
        raise ConfigError(f'env {env_name}: its action space {shown(action_space)} is not one CALF carries: '
                          f'use Box or Discrete')
    size = _values(action_space, None)
    if not 1 <= size <= MAX_ACTIONS:
        what = 'values per action' if isinstance(action_space, gym.spaces.Box) else 'actions'
        raise ConfigError(f'env {env_name}: its action space {shown(action_space)} has {size} {what}, a policy emits '
                          f'1 to {MAX_ACTIONS}')


class _Facts(NamedTuple):
    """What a probe learns of an env: its own tick (``env.unwrapped.dt``), and whether its actions are a Box."""

    dt: float | None
    box_actions: bool


@functools.lru_cache(maxsize=64)
def _probe(env_name: str, keys: tuple[str | int, ...] | None) -> _Facts:
    """Construct ``env_name`` (checked), reset it with seed 0, step it with the zero action and close it: a
    one-line ConfigError for anything it raises or a bad observation. Cached: once per env and process."""
    env = _construct(env_name, keys)
    try:
        with user_code(env_name, 'reading env.unwrapped.dt'):
            dt = getattr(env.unwrapped, 'dt', None)
        if dt is not None and (isinstance(dt, bool) or not isinstance(dt, numbers.Real)):
            raise ConfigError(f'env {env_name}: env.unwrapped.dt is {shown(dt)}, not a tick period in seconds: '
                              f'give `dt: SECONDS` in a spec file')
        flat = _flat(env, keys)
        with user_code(env_name, 'reset'):
            observation = flat.reset(seed=0)[0]
        _check_observation(observation, flat.observation_space, env_name, 'reset')
        with user_code(env_name, 'step'):
            observation = flat.step(_zero_action(flat.action_space))[0]
        _check_observation(observation, flat.observation_space, env_name, 'its first step')
    finally:
        with user_code(env_name, 'close'):
            env.close()
    return _Facts(None if dt is None else float(dt), isinstance(env.action_space, gym.spaces.Box))


def _zero_action(space: gym.Space) -> Any:
    """The action a probe applies: zeros clipped into a Box's bounds, or a Discrete space's first action."""
    if isinstance(space, gym.spaces.Box):
        return np.clip(np.zeros(space.shape, space.dtype), space.low, space.high)
    return space.start


def _check_observation(observation: Any, space: gym.Space, env_name: str, when: str) -> None:
    """One-line ConfigError unless ``observation`` is as many finite float32 values as ``space`` holds."""
    with np.errstate(all='ignore'):
        try:
            values = np.asarray(observation, dtype=np.float32)
        except (TypeError, ValueError):
            raise ConfigError(f'env {env_name}: {when} returned an observation that is not numbers '
                              f'({shown(observation)})') from None
    expected = math.prod(space.shape) if space.shape is not None else None
    if expected is not None and values.size != expected:
        raise ConfigError(f'env {env_name}: {when} returned {values.size} observation values, its observation '
                          f'space {shown(space)} holds {expected}')
    if not np.isfinite(values).all():
        raise ConfigError(f'env {env_name}: {when} returned an observation with NaN or infinite values (as float32): '
                          f'an env must emit finite observations')


def _values(space: Any, keys: tuple[str | int, ...] | None) -> int | None:
    """How many values one element of ``space`` flattens to, at most (a Discrete one is one-hot: ``n``), over
    the ``keys`` parts of a Dict/Tuple; None for a space CALF does not flatten."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec, dtype=object))
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return math.prod(space.shape)
    if not isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return None
    if keys is None:
        keys = tuple(space.spaces.keys() if isinstance(space, gym.spaces.Dict) else range(len(space.spaces)))
    try:
        parts = [_values(space[key], None) for key in keys]
    except (KeyError, IndexError):
        raise ConfigError(f'observation_keys {list(keys)} are not all parts of {shown(space)}') from None
    return None if None in parts else sum(parts)


def _flat(env: gym.Env, keys: tuple[str | int, ...] | None) -> gym.Env:
    """``env`` with its Dict/Tuple observations flattened (the ``keys`` parts), else ``env`` itself."""
    if isinstance(env.observation_space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return FlattenObservation(env, keys)
    return env




def make_stepper(name: str, env: gym.Env | None = None, start_plan: tuple[Action, ...] | None = None) -> Stepper:
    """The tick-driven stepper for ``name``, as the env node runs it; ``start_plan`` replaces the spec's."""
    spec = _with_start_plan(env_spec(name), start_plan)
    return Stepper(env if env is not None else make_env(name, spec), spec)


def make_networked_env(name: str, profile: Profile, seed: int | None = None, plan_horizon: int = 1,
                       links: tuple[Link, Link] | None = None, env: gym.Env | None = None,
                       start_plan: tuple[Action, ...] | None = None, task: TaskSpec | None = None) -> NetworkedEnv:
    """``name`` (or ``env``, a variant of it) behind ``profile``'s uplink and downlink, in virtual time.

    ``start_plan`` is the env-side action cycle run until the first plan arrives (default: the spec's,
    else hold the initial action). ``task`` replaces ``name``'s spec.
    """
    spec = _with_start_plan(task or env_spec(name), start_plan)
    uplink, downlink = links if links is not None else profile.make_links(np.random.default_rng(seed))
    inner = env if env is not None else make_env(name, spec)
    return NetworkedEnv(inner, spec, uplink, downlink, profile.compute_ms, plan_horizon, seed)


class FlattenObservation(gym.ObservationWrapper):
    """A Dict or Tuple observation as one flat float32 vector: the parts ``keys`` (default: all), in order."""

    def __init__(self, env: gym.Env, keys: tuple[str | int, ...] | None = None) -> None:
        super().__init__(env)
        space = env.observation_space
        self.keys = tuple(keys) if keys is not None else tuple(
            space.spaces.keys() if isinstance(space, gym.spaces.Dict) else range(len(space.spaces)))
        try:
            self.parts = [space[key] for key in self.keys]
        except (KeyError, IndexError):
            raise ConfigError(f'observation_keys {list(self.keys)} are not all parts of {space}') from None
        flat = [gym.spaces.flatten_space(part) for part in self.parts]
        self.observation_space = gym.spaces.Box(np.concatenate([f.low for f in flat]).astype(np.float32),
                                                np.concatenate([f.high for f in flat]).astype(np.float32),
                                                dtype=np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        return np.concatenate([np.asarray(gym.spaces.flatten(part, observation[key]), dtype=np.float32)
                               for part, key in zip(self.parts, self.keys)])


def _with_start_plan(spec: TaskSpec, start_plan: tuple[Action, ...] | None) -> TaskSpec:
    return spec if start_plan is None else dataclasses.replace(spec, start_plan=tuple(start_plan))


def _spec_file(path: Path, name: str, env: str | None = None) -> TaskSpec:
    data = read_yaml(path, 'task spec')
    if isinstance(data, dict) and env is not None:
        data = {**data, 'env': data.get('env') or env}
    if not isinstance(data, dict) or not data.get('env'):
        raise ConfigError(f'task spec {str(path)!r} names no env: add `env: GYM_ID` or `env: package.module:callable`')
    for module in spec_imports(data, name):
        _import(module, name)
    if data.get('dt') is not None:
        return spec_from_mapping(data, name)
    keys = data.get('observation_keys')
    return spec_from_mapping(data, name, dt=_probe(str(data['env']), tuple(keys) if isinstance(keys, list) else None).dt)


def _default_spec(name: str) -> TaskSpec:
    """A gymnasium id or entry point without a spec file: its own dt, hold zero for Box actions."""
    facts = _probe(name, None)
    if facts.dt is None:
        raise ConfigError(f'env {name} has no dt of its own: give its tick period in a spec file '
                          f'(--env-spec FILE.yaml with `env: {name}` and `dt: SECONDS`)')
    return spec_from_mapping({'env': name, 'dt': facts.dt, 'hold': 'zero' if facts.box_actions else 'last'}, name)


def _construct(env_name: str, keys: tuple[str | int, ...] | None = None) -> gym.Env:
    """``gym.make(env_name)``, or the entry point's callable called with no arguments; its spaces checked."""
    factory = _entry_point(env_name, required=False) if ':' in env_name else None
    try:
        with user_code(env_name, 'constructing it', passing=(gym.error.Error,)):
            env = factory() if factory is not None else gym.make(env_name)
    except gym.error.Error as err:
        if ':' in env_name:
            module, _, attr = env_name.partition(':')
            raise ConfigError(f'entry point {env_name}: module {module} has no callable {attr!r} and gymnasium '
                              f'knows no such id') from None
        raise ConfigError(f'env {shown(env_name)}: {" ".join(str(err).split())[:300]}') from None
    if not isinstance(env, gym.Env):
        raise ConfigError(f'entry point {env_name} returned {type(env).__name__}, not a gymnasium env')
    check_spaces(env, env_name, keys)
    return env


def _entry_point(name: str, required: bool) -> Callable[[], gym.Env] | None:
    """The callable ``package.module:callable`` names (None if the module has no such attribute)."""
    module_name, _, attr = name.partition(':')
    module = _import(module_name, name)
    with user_code(name, f'reading {attr!r} of module {module_name}'):
        factory = getattr(module, attr, None)
    if factory is None and required:
        raise ConfigError(f'entry point {name}: module {module_name} has no {attr!r}')
    return factory if callable(factory) else None


def _beside(name: str) -> Path | None:
    """``package/module.calf.yaml`` beside the entry point's module, if there is one."""
    module = _import(name.partition(':')[0], name)
    source = getattr(module, '__file__', None)
    if source is None:
        return None
    path = Path(source).with_suffix('.calf.yaml')
    return path if path.is_file() else None


def _import(module_name: str, name: str) -> Any:
    try:
        with user_code(name, f'importing {module_name}', passing=(ImportError,)):
            return importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f'env {name}: cannot import {module_name}: {" ".join(str(err).split())[:200]}') from None

