"""The arbiter of a hierarchical policy graph: which sub-policy's action reaches the env. Pure.

Every sub-policy answers every observation it receives; the arbiter forwards one of them:

- **Gating.** A rule looks at the newest observation and names the sub-policy that should drive
  (``CartPoleGate``, ``DoorKeyGate``).
- **Freshness.** A sub-policy is *fresh* if one of its actions arrived within ``timeout_s``.
  When the one the gate names is not fresh, the arbiter follows the first fresh sub-policy in
  fallback order instead (the safest first). ``silence_changes`` reports who fell silent or
  came back, for the node to log.
- **Forwarding.** An action is forwarded when it comes from the followed sub-policy, belongs
  to the current episode, and answers a newer observation than the last action forwarded. An
  older one would be discarded by the env anyway (``calf_core.timing``): so after a switch from
  the edge sub-policy to a remote one, the env holds the last action until the remote one
  answers an observation newer than the switch.

Times are float seconds on one clock, supplied by the caller.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple, Protocol

import numpy as np

from calf_core.errors import ConfigError
from calf_core.timing import ObservationGate, ReceivedObservation


class Gate(Protocol):
    """A gating rule: the sub-policy that should drive, from the newest observation."""

    def reset(self) -> None:
        """Forget what was learnt in the episode (a new episode starts)."""

    def choose(self, obs: np.ndarray) -> str:
        """The name of the sub-policy for ``obs``."""

    def params(self) -> dict[str, Any]:
        """The rule's parameters, as written to hierarchy.json."""


def _init_params(gate: Any) -> dict[str, Any]:
    return {f.name: getattr(gate, f.name) for f in fields(gate) if f.init}


@dataclass
class CartPoleGate:
    """``stabilise`` while |angle| or |angular velocity| exceeds its threshold, else ``recenter``."""

    angle_rad: float = 0.05
    angular_velocity_rad_s: float = 0.5

    def __post_init__(self) -> None:
        if not (self.angle_rad > 0 and self.angular_velocity_rad_s > 0):
            raise ConfigError(f'cartpole gate thresholds must be > 0, got angle_rad={self.angle_rad!r}, '
                              f'angular_velocity_rad_s={self.angular_velocity_rad_s!r}')

    def reset(self) -> None:
        pass

    def choose(self, obs: np.ndarray) -> str:
        off = abs(float(obs[2])) > self.angle_rad or abs(float(obs[3])) > self.angular_velocity_rad_s
        return 'stabilise' if off else 'recenter'

    def params(self) -> dict[str, Any]:
        return _init_params(self)


VIEW = 7  # MiniGrid's agent view is VIEW x VIEW cells of (object, colour, state)
AGENT_CELL = (VIEW // 2, VIEW - 1)  # where the view shows what the agent carries
KEY, DOOR, GOAL = 5, 4, 8  # minigrid.core.constants.OBJECT_TO_IDX
DOOR_OPEN = 0  # minigrid.core.constants.STATE_TO_IDX['open']


@dataclass
class DoorKeyGate:
    """``reach_goal`` once the door is known open or the goal is in view; else ``open_door`` while
    carrying the key; else ``get_key``.

    The flat partial view shows what the agent carries (at the agent's own cell), but the door
    only while it is in view. So the gate remembers the door's state from the last time it saw
    the door in this episode: once seen open, it counts as open until seen closed again.
    """

    door_open: bool = field(default=False, init=False)

    def reset(self) -> None:
        self.door_open = False

    def choose(self, obs: np.ndarray) -> str:
        view = np.asarray(obs).reshape(VIEW, VIEW, 3)
        doors = view[..., 0] == DOOR
        if doors.any():
            self.door_open = bool((view[..., 2][doors] == DOOR_OPEN).any())
        if self.door_open or (view[..., 0] == GOAL).any():
            return 'reach_goal'
        return 'open_door' if view[AGENT_CELL][0] == KEY else 'get_key'

    def params(self) -> dict[str, Any]:
        return _init_params(self)


GATES: dict[str, type] = {'cartpole': CartPoleGate, 'minigrid': DoorKeyGate}


def make_gate(env: str, params: Mapping[str, Any] | None = None) -> Gate:
    """The gating rule of ``env`` with ``params`` (defaults where absent)."""
    if env not in GATES:
        raise ConfigError(f'no gating rule for env {env!r}: choose one of {", ".join(GATES)}')
    try:
        return GATES[env](**dict(params or {}))
    except TypeError as err:
        raise ConfigError(f'invalid {env} gating parameters {dict(params or {})!r}: {err}') from None


class Reason(enum.Enum):
    """Why an arriving action was or was not forwarded."""

    FORWARDED = 'forwarded'
    INACTIVE = 'inactive'  # another sub-policy drives now
    STALE = 'stale'  # answers an observation no newer than the last action forwarded
    OTHER_EPISODE = 'other_episode'
    UNKNOWN_SOURCE = 'unknown_source'


class Decision(NamedTuple):
    forward: bool
    reason: Reason
    active: str  # the sub-policy followed when the action arrived


@dataclass
class Arbiter:
    """Chooses, action by action, which sub-policy's actions reach the env."""

    gate: Gate
    sources: tuple[str, ...]  # fallback order: the first fresh one drives when the chosen one is silent
    timeout_s: float
    wanted: str = field(init=False)
    forwarded: dict[str, int] = field(init=False)
    _obs_gate: ObservationGate = field(init=False, default_factory=ObservationGate)
    _heard: dict[str, float] = field(init=False, default_factory=dict)
    _reported_silent: set[str] = field(init=False)
    _last_forwarded: int = field(init=False, default=-1)

    def __post_init__(self) -> None:
        if len(self.sources) < 2 or len(set(self.sources)) != len(self.sources):
            raise ConfigError(f'an arbiter needs two or more distinct sources, got {list(self.sources)}')
        if not self.timeout_s > 0:
            raise ConfigError(f'silence timeout must be > 0 s, got {self.timeout_s!r}')
        self.sources = tuple(self.sources)
        self.wanted = self.sources[0]
        self.forwarded = dict.fromkeys(self.sources, 0)
        self._reported_silent = set(self.sources)

    @property
    def episode(self) -> int:
        return self._obs_gate.episode

    def on_observation(self, received: ReceivedObservation) -> str:
        """Gate on a newer observation (older ones are ignored); return the sub-policy wanted.

        A new ``run`` id (the env node restarted) starts a new episode, as a new episode number does.
        """
        episode, seq, run = received.episode, received.seq, received.run
        new_episode = self._obs_gate.is_new_episode(episode) or run != self._obs_gate.run
        if self._obs_gate.admit(episode, seq, run):
            if new_episode:
                self.gate.reset()
                self._last_forwarded = -1
            chosen = self.gate.choose(received.obs)
            if chosen not in self.sources:
                raise ConfigError(f'the gate chose {chosen!r}, which is not one of {list(self.sources)}')
            self.wanted = chosen
        return self.wanted

    def on_action(self, source: str, episode: int, obs_seq: int, now_s: float) -> Decision:
        """Record that ``source`` spoke at ``now_s`` and decide whether to forward its action."""
        if source not in self.sources:
            return Decision(False, Reason.UNKNOWN_SOURCE, self.active(now_s))
        self._heard[source] = now_s
        active = self.active(now_s)
        if episode != self.episode:
            return Decision(False, Reason.OTHER_EPISODE, active)
        if source != active:
            return Decision(False, Reason.INACTIVE, active)
        if obs_seq <= self._last_forwarded:
            return Decision(False, Reason.STALE, active)
        self._last_forwarded = obs_seq
        self.forwarded[source] += 1
        return Decision(True, Reason.FORWARDED, active)

    def fresh(self, source: str, now_s: float) -> bool:
        """``source`` has spoken within the timeout (never having spoken is silence)."""
        heard = self._heard.get(source)
        return heard is not None and now_s - heard <= self.timeout_s

    def active(self, now_s: float) -> str:
        """The wanted sub-policy if fresh, else the first fresh one in fallback order, else the wanted one."""
        if self.fresh(self.wanted, now_s):
            return self.wanted
        return next((s for s in self.sources if self.fresh(s, now_s)), self.wanted)

    def silence_changes(self, now_s: float) -> list[tuple[str, bool]]:
        """``(source, silent)`` for each sub-policy whose freshness changed since the last call.

        Every source starts silent, so its first action reports ``(source, False)``.
        """
        changes = []
        for source in self.sources:
            silent = not self.fresh(source, now_s)
            if silent != (source in self._reported_silent):
                changes.append((source, silent))
                (self._reported_silent.add if silent else self._reported_silent.discard)(source)
        return changes


def make_arbiter(env: str, sources: Sequence[str], timeout_s: float,
                 gating: Mapping[str, Any] | None = None) -> Arbiter:
    """An arbiter for ``env``'s gating rule over ``sources`` (fallback order)."""
    return Arbiter(make_gate(env, gating), tuple(sources), timeout_s)
