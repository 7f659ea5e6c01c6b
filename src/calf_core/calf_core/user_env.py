"""A user's env at CALF's boundary: imported, constructed, checked, flattened; every failure one line.

Importing an env's modules, constructing it (a ``package.module:callable`` entry point or
``gym.make``) and reading its spaces are guarded whenever CALF builds it (:func:`construct`); once
per env and process a probe (:func:`probe`) builds one more instance, resets it with seed 0, steps it
once with the zero action (Box zeros clipped into its bounds, or a Discrete space's first action) and
closes it. Whatever that code raises (``SystemExit`` included; not ``KeyboardInterrupt``), a
non-finite observation or one of the wrong size, or spaces outside 1 to ``MAX_OBS_VALUES``
observation values or 1 to ``MAX_ACTIONS`` actions (or Box action values) becomes one ConfigError
naming the env (:func:`user_code`). Later steps are not checked.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import math
import numbers
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from calf_core.errors import ConfigError, shown
from calf_core.limits import MAX_ACTIONS, MAX_OBS_VALUES

__all__ = ['Facts', 'FlattenObservation', 'check_spaces', 'construct', 'entry_point', 'flatten', 'import_module',
           'probe', 'user_code']


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


class Facts(NamedTuple):
    """What a probe learns of an env: its own tick (``env.unwrapped.dt``), and whether its actions are a Box."""

    dt: float | None
    box_actions: bool


@functools.lru_cache(maxsize=64)
def probe(env_name: str, keys: tuple[str | int, ...] | None) -> Facts:
    """Construct ``env_name`` (checked), reset it with seed 0, step it with the zero action and close it: a
    one-line ConfigError for anything it raises or a bad observation. Cached: once per env and process."""
    env = construct(env_name, keys)
    try:
        with user_code(env_name, 'reading env.unwrapped.dt'):
            dt = getattr(env.unwrapped, 'dt', None)
        if dt is not None and (isinstance(dt, bool) or not isinstance(dt, numbers.Real)):
            raise ConfigError(f'env {env_name}: env.unwrapped.dt is {shown(dt)}, not a tick period in seconds: '
                              f'give `dt: SECONDS` in a spec file')
        flat = flatten(env, keys)
        with user_code(env_name, 'reset'):
            observation = flat.reset(seed=0)[0]
        _check_observation(observation, flat.observation_space, env_name, 'reset')
        with user_code(env_name, 'step'):
            observation = flat.step(_zero_action(flat.action_space))[0]
        _check_observation(observation, flat.observation_space, env_name, 'its first step')
    finally:
        with user_code(env_name, 'close'):
            env.close()
    return Facts(None if dt is None else float(dt), isinstance(env.action_space, gym.spaces.Box))


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


def flatten(env: gym.Env, keys: tuple[str | int, ...] | None) -> gym.Env:
    """``env`` with its Dict/Tuple observations flattened (the ``keys`` parts), else ``env`` itself."""
    if isinstance(env.observation_space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return FlattenObservation(env, keys)
    return env


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


def construct(env_name: str, keys: tuple[str | int, ...] | None = None) -> gym.Env:
    """``gym.make(env_name)``, or the entry point's callable called with no arguments; its spaces checked."""
    factory = entry_point(env_name) if ':' in env_name else None
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


def entry_point(name: str) -> Callable[[], gym.Env] | None:
    """The callable ``package.module:callable`` names (None if the module has no such callable)."""
    module_name, _, attr = name.partition(':')
    module = import_module(module_name, name)
    with user_code(name, f'reading {attr!r} of module {module_name}'):
        factory = getattr(module, attr, None)
    return factory if callable(factory) else None


def import_module(module_name: str, name: str) -> Any:
    """``importlib.import_module(module_name)`` for env ``name``, guarded as user code."""
    try:
        with user_code(name, f'importing {module_name}', passing=(ImportError,)):
            return importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f'env {name}: cannot import {module_name}: {" ".join(str(err).split())[:200]}') from None
