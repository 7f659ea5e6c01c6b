"""TaskSpec: what CALF needs to know about a task that gymnasium does not say, in one frozen object.

A spec is read from YAML (the built-in tasks are ``calf_core/tasks/*.yaml``; a user's is given with
``--env-spec FILE.yaml``) or built in code. Its keys::

    env: Pendulum-v1          # a registered gymnasium id or a package.module:callable returning an env
    dt: 0.05                  # tick period (seconds); default: the env's own ``env.unwrapped.dt``
    hold: zero                # last | zero | noop: what a tick without a fresh plan element applies
    noop_action: 6            # the action that hold noop applies (an int, or a list for Box actions)
    initial_action: 0         # applied before the first plan arrives; default: the no-op, zeros or 0
    start_plan: [0, 1]        # a policy-free cycle applied before the first plan instead
    safe_start: [0, 1]        # a start plan known to keep the task recoverable (the model planner's)
    success: time_limit       # time_limit (survives to truncation) | goal (terminal with reward > 0)
    observation_keys: [image] # Dict/Tuple observations: the parts flattened into one vector, in order
    imports: [minigrid]       # modules imported first, to register the env's id
    agent: lstm               # the policy it trains by default: lstm (one frame, memory) | mlp (frame stack)
    ppo: {ent_coef: 0.1}      # PPO settings that differ from the defaults for its action space
    algo: sac                 # the algorithm it trains with by default: ppo | sac | bpql (sac, bpql: Box actions)

Bounds, closed on both sides: dt in [MIN_DT_S, MAX_DT_S]; a plan (start_plan, safe_start) of at most
MAX_PLAN_HORIZON actions; a continuous action of at most MAX_ACTIONS finite values; at most
MAX_SPEC_LIST observation keys, imports and ppo settings. ``imports`` is a list even for one module: a
single string is refused, not read as a list of its characters.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from calf_core.errors import ConfigError, shown
from calf_core.limits import MAX_ACTIONS, MAX_PLAN_HORIZON

MIN_DT_S = 1e-4
"""Shortest tick period a spec may give (seconds)."""
MAX_DT_S = 60.0
"""Longest tick period a spec may give (seconds)."""
MAX_SPEC_LIST = 64
"""Most observation keys, imports or ppo settings a spec may list."""

Action = int | tuple[float, ...]
"""One action as a spec gives it: a Discrete index or the values of a Box action."""


class HoldMode(enum.Enum):
    """What the env applies on ticks not covered by a plan."""

    LAST = 'last'  # the last applied action again (zero-order hold)
    ZERO = 'zero'  # a zero command (Box actions): a policy that falls silent stops the robot
    NOOP = 'noop'  # the spec's named no-op action


class SuccessRule(enum.Enum):
    """When an episode counts as a success."""

    TIME_LIMIT = 'time_limit'  # it reached the time limit without terminating (CartPole, balancing tasks)
    GOAL = 'goal'  # it ended in a terminal state with a positive reward (MiniGrid)


AGENTS = ('mlp', 'lstm')
"""The policies a spec's ``agent`` may name (``calf_agent.policies``: MlpAgent, LstmAgent)."""
ALGOS = ('ppo', 'sac', 'bpql')
"""The training algorithms (``calf train --algo``, a spec's ``algo``): PPO, or for Box actions SAC or BPQL (SAC
whose critic learns on the true, undelayed state: ``calf_agent.bpql``)."""
SAC_ALGOS = ('sac', 'bpql')
"""The algorithms that train a SAC actor (an mlp policy of single Box actions)."""


@dataclass(frozen=True)
class TaskSpec:
    """How one task is ticked and what it does without a fresh action (see the module doc)."""

    name: str
    dt: float
    env: str = ''
    hold: HoldMode = HoldMode.LAST
    noop_action: Action | None = None
    initial_action: Action | None = None
    start_plan: tuple[Action, ...] = ()
    safe_start: tuple[Action, ...] = ()
    success: SuccessRule = SuccessRule.TIME_LIMIT
    observation_keys: tuple[str | int, ...] | None = None
    imports: tuple[str, ...] = ()
    agent: str | None = None  # None: the trainer's default for the action space
    ppo: tuple[tuple[str, float], ...] = ()  # (PPOConfig field, number) pairs over the trainer's defaults
    algo: str | None = None  # None: ppo, unless ``calf train --algo`` says otherwise

    def __post_init__(self) -> None:
        if not (isinstance(self.dt, (int, float)) and not isinstance(self.dt, bool)
                and MIN_DT_S <= self.dt <= MAX_DT_S):
            raise ConfigError(f'task {self.name}: dt must be a tick period in seconds in [{MIN_DT_S:g}, {MAX_DT_S:g}], '
                              f'got {shown(self.dt)}')
        if self.hold is HoldMode.NOOP and self.noop_action is None:
            raise ConfigError(f'task {self.name}: hold noop needs a noop_action')
        if self.agent is not None and self.agent not in AGENTS:
            raise ConfigError(f'task {self.name}: agent must be one of {", ".join(AGENTS)}, got {self.agent!r}')
        if self.algo is not None and self.algo not in ALGOS:
            raise ConfigError(f'task {self.name}: algo must be one of {", ".join(ALGOS)}, got {self.algo!r}')
        if self.algo in SAC_ALGOS and self.agent == 'lstm':
            raise ConfigError(f'task {self.name}: algo {self.algo} trains an mlp policy: drop agent: lstm, or use '
                              'algo: ppo')


_KEYS = {f.name for f in fields(TaskSpec)}


def spec_from_mapping(data: Any, name: str, dt: float | None = None) -> TaskSpec:
    """A TaskSpec from a parsed YAML mapping; ``dt`` fills in a missing tick. One-line ConfigErrors."""
    if not isinstance(data, Mapping):  # its type only: a file given by mistake is not echoed
        raise ConfigError(f'task spec {name}: expected a mapping of keys such as env, dt, hold, got a '
                          f'{type(data).__name__}')
    unknown = sorted(set(data) - _KEYS - {'name'})
    if unknown:
        raise ConfigError(f'task spec {name}: unknown key {unknown[0]!r}: use {", ".join(sorted(_KEYS - {"name"}))}')
    values = dict(data)
    values['name'] = str(values.get('name', name))
    if values.get('dt') is None:
        if dt is None:
            raise ConfigError(f'task spec {name}: the env has no dt of its own: give the tick period as '
                              f'`dt: SECONDS` in its spec file')
        values['dt'] = dt
    values['hold'] = _enum(HoldMode, values.get('hold', 'last'), 'hold', name)
    values['success'] = _enum(SuccessRule, values.get('success', 'time_limit'), 'success', name)
    for key in ('noop_action', 'initial_action'):
        if values.get(key) is not None:
            values[key] = _action(values[key], key, name)
    for key in ('start_plan', 'safe_start'):
        plan = values.get(key) or []
        if not isinstance(plan, list) or len(plan) > MAX_PLAN_HORIZON:
            raise ConfigError(f'task spec {name}: {key} must be a list of at most {MAX_PLAN_HORIZON} actions, '
                              f'got {shown(plan)}')
        values[key] = tuple(_action(a, key, name) for a in plan)
    keys = values.get('observation_keys')
    if keys is not None:
        if not (isinstance(keys, list) and len(keys) <= MAX_SPEC_LIST
                and all(isinstance(k, str | int) and not isinstance(k, bool) for k in keys)):
            raise ConfigError(f'task spec {name}: observation_keys must be a list of at most {MAX_SPEC_LIST} '
                              f'names or indices, got {shown(keys)}')
        values['observation_keys'] = tuple(keys)
    values['imports'] = spec_imports(data, name)
    values['ppo'] = _ppo(values.get('ppo'), name)
    values['env'] = str(values.get('env') or '')
    return TaskSpec(**values)


def spec_imports(data: Mapping, name: str) -> tuple[str, ...]:
    """The modules a spec mapping's ``imports`` names, checked before any is imported: a list of at most
    MAX_SPEC_LIST module names (a single string is refused, not read as its characters)."""
    modules = data.get('imports')
    if modules is None:
        return ()
    if not (isinstance(modules, list) and len(modules) <= MAX_SPEC_LIST
            and all(isinstance(m, str) and 0 < len(m) <= 200 for m in modules)):
        hint = f' such as [{modules}]' if isinstance(modules, str) and len(modules) <= 60 else ''
        raise ConfigError(f'task spec {name}: imports must be a list of at most {MAX_SPEC_LIST} module names'
                          f'{hint}, got {shown(modules)}')
    return tuple(modules)


def parse_start_plan(value: Any) -> tuple[Action, ...]:
    """A start plan given as a list of actions, or as its YAML text (``''``: none), else a ConfigError."""
    import yaml

    if isinstance(value, str):
        try:
            value = yaml.safe_load(value) if value.strip() else []
        except yaml.YAMLError:
            pass  # reported below, as the text it is
    try:
        if not isinstance(value, (list, tuple)):
            raise ConfigError('not a list')
        return tuple(_action(a, 'start_plan', None) for a in value)
    except ConfigError:
        raise ConfigError(f'start_plan must be a list of integer actions such as [0, 1], got {value!r}') from None


def _action(value: Any, key: str, name: str | None) -> Action:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_ACTIONS:
        return value
    if isinstance(value, (list, tuple)) and 0 < len(value) <= MAX_ACTIONS and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        return tuple(float(v) for v in value)
    where = f'task spec {name}: ' if name else ''
    raise ConfigError(f'{where}{key} must hold integer actions such as [0, 1] (at most {MAX_ACTIONS} in size) or '
                      f'lists of at most {MAX_ACTIONS} finite numbers for continuous actions, got {shown(value)}')


def _ppo(value: Any, name: str) -> tuple[tuple[str, float], ...]:
    """``ppo: {ent_coef: 0.1}`` as sorted (name, number) pairs; the trainer checks the names."""
    if value is None:
        return ()
    if not isinstance(value, Mapping) or len(value) > MAX_SPEC_LIST or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for k, v in value.items()):
        raise ConfigError(f'task spec {name}: ppo must map PPO settings to finite numbers, such as '
                          f'{{ent_coef: 0.1}}, got {shown(value)}')
    return tuple(sorted((k, v) for k, v in value.items()))


def _enum(kind: type[enum.Enum], value: Any, key: str, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f'task spec {name}: {key} must be one of {", ".join(m.value for m in kind)}, '
                          f'got {value!r}') from None
