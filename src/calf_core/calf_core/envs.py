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

An env is user code: it is built and checked by :mod:`calf_core.user_env`, probed once per process
where the command resolves ``--env`` (:func:`resolve_env_arg`) and where an env is built (:func:`make_env`).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
from pathlib import Path

import gymnasium as gym
import numpy as np

from calf_core.errors import ConfigError, shown
from calf_core.link import Link
from calf_core.networked_env import NetworkedEnv
from calf_core.profiles import Profile
from calf_core.task_spec import Action, TaskSpec, parse_start_plan, spec_from_mapping, spec_imports
from calf_core.timing import Stepper
from calf_core.user_env import FlattenObservation, construct, entry_point, flatten, import_module, probe
from calf_core.yaml_files import read_yaml

TASKS_DIR = Path(__file__).resolve().parent / 'tasks'
BUILTIN_TASKS: tuple[str, ...] = tuple(sorted(p.stem for p in TASKS_DIR.glob('*.yaml')))
SPEC_SUFFIXES = ('.yaml', '.yml')

__all__ = ['BUILTIN_TASKS', 'add_env_arguments', 'builtin_for_id', 'FlattenObservation', 'env_spec', 'make_env',
           'make_networked_env', 'make_stepper', 'parse_start_plan', 'resolve_env_arg']


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
    probe(spec.env, spec.observation_keys)
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
    if ':' in name and entry_point(name) is not None:
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
        import_module(module, name)
    probe(spec.env, spec.observation_keys)
    return flatten(construct(spec.env, spec.observation_keys), spec.observation_keys)


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


def _with_start_plan(spec: TaskSpec, start_plan: tuple[Action, ...] | None) -> TaskSpec:
    return spec if start_plan is None else dataclasses.replace(spec, start_plan=tuple(start_plan))


def _spec_file(path: Path, name: str, env: str | None = None) -> TaskSpec:
    data = read_yaml(path, 'task spec')
    if isinstance(data, dict) and env is not None:
        data = {**data, 'env': data.get('env') or env}
    if not isinstance(data, dict) or not data.get('env'):
        raise ConfigError(f'task spec {str(path)!r} names no env: add `env: GYM_ID` or `env: package.module:callable`')
    for module in spec_imports(data, name):
        import_module(module, name)
    if data.get('dt') is not None:
        return spec_from_mapping(data, name)
    keys = data.get('observation_keys')
    return spec_from_mapping(data, name, dt=probe(str(data['env']), tuple(keys) if isinstance(keys, list) else None).dt)


def _default_spec(name: str) -> TaskSpec:
    """A gymnasium id or entry point without a spec file: its own dt, hold zero for Box actions."""
    facts = probe(name, None)
    if facts.dt is None:
        raise ConfigError(f'env {name} has no dt of its own: give its tick period in a spec file '
                          f'(--env-spec FILE.yaml with `env: {name}` and `dt: SECONDS`)')
    return spec_from_mapping({'env': name, 'dt': facts.dt, 'hold': 'zero' if facts.box_actions else 'last'}, name)


def _beside(name: str) -> Path | None:
    """``package/module.calf.yaml`` beside the entry point's module, if there is one."""
    module = import_module(name.partition(':')[0], name)
    source = getattr(module, '__file__', None)
    if source is None:
        return None
    path = Path(source).with_suffix('.calf.yaml')
    return path if path.is_file() else None
