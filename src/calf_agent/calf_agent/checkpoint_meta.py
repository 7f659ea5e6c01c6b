"""The schema of a checkpoint's ``meta.json``: types and sane bounds, checked before anything is built.

``check_meta`` runs on the parsed JSON. It checks the fields CALF reads (``env``, ``agent``,
``representation``, ``plan_horizon``, ``start_plan``, ``seed``, ``steps``) and leaves other keys
alone, so that newer fields load in older readers. Sizes are bounded so that no meta.json can
make the loader allocate more than ``MAX_PARAMETERS`` floats; the weights file is then compared
with an agent built on torch's ``meta`` device, which allocates nothing.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from calf_agent.agents import make_agent
from calf_agent.errors import CheckpointError
from calf_agent.plan_agent import MAX_LEAD_WINDOW
from calf_core.errors import shown
from calf_core.limits import MAX_ACTIONS, MAX_OBS_VALUES, MAX_PLAN_HORIZON

MAX_OBS_DIM = MAX_OBS_VALUES
MAX_LAYERS = 16
MAX_WIDTH = 16384
MAX_FRAMES = 256
MAX_ACTION_HISTORY = 1024
MAX_PARAMETERS = 1 << 26
"""Most weights (float32: 256 MiB) a checkpoint may describe."""
MAX_INT = (1 << 63) - 1

# Agent spec fields that are sizes: (lowest, highest).
SPEC_SIZES: dict[str, tuple[int, int]] = {
    'obs_dim': (1, MAX_OBS_DIM), 'n_actions': (1, MAX_ACTIONS), 'action_dim': (1, MAX_ACTIONS),
    'plan_horizon': (1, MAX_PLAN_HORIZON),
    'lstm_size': (1, MAX_WIDTH), 'lead': (0, MAX_PLAN_HORIZON - 1), 'lead_window': (0, MAX_LEAD_WINDOW),
}


def check_meta(meta: Mapping[str, Any], where: str) -> None:
    """Raise CheckpointError (one line, naming the field) unless ``meta`` fits the schema."""
    for key, check in TOP_LEVEL.items():
        if key in meta:
            check(meta[key], key)
        elif key in REQUIRED:
            raise _Bad(f'has no {key!r}')
    _check_spec(meta['agent'], 'agent')


def agent_shapes(spec: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The weight shapes ``spec`` builds, found on torch's ``meta`` device (nothing allocated).

    CheckpointError if ``spec`` builds no agent or one of more than ``MAX_PARAMETERS`` weights.
    """
    try:
        with torch.device('meta'):
            shapes = {k: tuple(v.shape) for k, v in make_agent(dict(spec)).state_dict().items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f'has no valid agent spec ({" ".join(str(exc).split())[:200]})') from None
    size = sum(math.prod(shape) for shape in shapes.values())
    if size > MAX_PARAMETERS:
        raise CheckpointError(f'describes an agent of {size} weights, more than {MAX_PARAMETERS}')
    return shapes


class _Bad(CheckpointError):
    """A schema violation; the loader prefixes the file and appends the remedy."""


def _int(value: Any, name: str, low: int = -MAX_INT, high: int = MAX_INT) -> int:
    """``value`` as an int in [low, high], or _Bad naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f'{name} must be an integer, got {shown(value)}')
    if not low <= value <= high:
        raise _Bad(f'{name} must be in [{low}, {high}], got {shown(value)}')
    return value


def _str(value: Any, name: str) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= 256:
        raise _Bad(f'{name} must be a non-empty string of at most 256 characters, got {shown(value)}')


def _representation(value: Any, name: str) -> None:
    if not isinstance(value, dict):
        raise _Bad(f'{name} must be an object like {{"frames": 1, "actions": 0}}, got {shown(value)}')
    _int(value.get('frames', 1), f'{name}.frames', 1, MAX_FRAMES)
    _int(value.get('actions', 0), f'{name}.actions', 0, MAX_ACTION_HISTORY)
    _int(value.get('history_element', 0), f'{name}.history_element', 0, MAX_PLAN_HORIZON - 1)
    for flag in ('obs_age', 'delay_state'):
        if not isinstance(value.get(flag, False), bool):
            raise _Bad(f'{name}.{flag} must be true or false, got {shown(value[flag])}')
    extra = sorted(set(value) - {'frames', 'actions', 'obs_age', 'delay_state', 'history_element'})
    if extra:
        raise _Bad(f'{name} has unknown fields {extra}')


def _plan(value: Any, name: str) -> None:
    if not isinstance(value, list) or len(value) > MAX_PLAN_HORIZON:
        raise _Bad(f'{name} must be a list of at most {MAX_PLAN_HORIZON} actions, got {shown(value)}')
    for i, action in enumerate(value):
        _action(action, f'{name}[{i}]')


def _action(value: Any, name: str) -> None:
    """One action: an index, or the finite values of a Box action."""
    if isinstance(value, list):
        if not 1 <= len(value) <= MAX_ACTIONS or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
            raise _Bad(f'{name} must be a list of 1 to {MAX_ACTIONS} finite numbers, got {shown(value)}')
        return
    _int(value, name, 0, MAX_ACTIONS - 1)


def _hidden(value: Any, name: str) -> None:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_LAYERS:
        raise _Bad(f'{name} must be a list of 1 to {MAX_LAYERS} layer widths, got {shown(value)}')
    for i, width in enumerate(value):
        _int(width, f'{name}[{i}]', 1, MAX_WIDTH)


def _columns(value: Any, name: str, obs_dim: Any) -> None:
    """Columns ``[start, stop]`` of the agent's input, within ``obs_dim``."""
    top = obs_dim if isinstance(obs_dim, int) and not isinstance(obs_dim, bool) else MAX_OBS_DIM
    if not (isinstance(value, list) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value) and 0 <= value[0] <= value[1] <= top):
        raise _Bad(f'{name} must be two column indices [start, stop] with 0 <= start <= stop <= obs_dim, '
                   f'got {shown(value)}')


def _check_spec(spec: Any, name: str) -> None:
    """An agent spec: a ``kind``, bounded sizes, and nested specs (a planner's base and model)."""
    if not isinstance(spec, dict):
        raise _Bad(f'{name} must be an object (the agent spec), got {shown(spec)}')
    if 'kind' in spec or name == 'agent':
        _str(spec.get('kind'), f'{name}.kind')
    for key, value in spec.items():
        field = f'{name}.{key}'
        if key in SPEC_SIZES:
            _int(value, field, *SPEC_SIZES[key])
        elif key == 'hidden':
            _hidden(value, field)
        elif key == 'unscaled':
            _columns(value, field, spec.get('obs_dim'))
        elif key == 'start_plan':
            _plan(value, field)
        elif key == 'hold_action':
            _action(value, field)
        elif isinstance(value, dict):
            _check_spec(value, field)


TOP_LEVEL: dict[str, Callable[[Any, str], Any]] = {
    'env': _str,
    'agent': lambda value, name: None,  # checked last, as a whole
    'representation': _representation,
    'plan_horizon': lambda value, name: _int(value, name, 1, MAX_PLAN_HORIZON),
    'start_plan': _plan,
    'seed': _int,
    'steps': lambda value, name: _int(value, name, 0),
}
REQUIRED = ('env', 'agent')
