"""The QoS profiles CALF uses, in one place.

Observations and actions are time-critical: best effort, keep the newest few, volatile. The
shim's own impairments stand in for the network; the middleware should not retransmit late data.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from calf_core.errors import ConfigError

_RELIABILITY = {'best_effort': ReliabilityPolicy.BEST_EFFORT, 'reliable': ReliabilityPolicy.RELIABLE}
_DURABILITY = {'volatile': DurabilityPolicy.VOLATILE, 'transient_local': DurabilityPolicy.TRANSIENT_LOCAL}


@dataclass(frozen=True)
class QosConfig:
    """A QoS choice as plain values, as declared in node parameters."""

    reliability: str = 'best_effort'
    durability: str = 'volatile'
    depth: int = 10

    def profile(self) -> QoSProfile:
        if self.reliability not in _RELIABILITY:
            raise ConfigError(f'qos reliability must be one of {sorted(_RELIABILITY)}, got {self.reliability!r}')
        if self.durability not in _DURABILITY:
            raise ConfigError(f'qos durability must be one of {sorted(_DURABILITY)}, got {self.durability!r}')
        if self.depth < 1:
            raise ConfigError(f'qos depth must be >= 1, got {self.depth}')
        return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=self.depth,
                          reliability=_RELIABILITY[self.reliability], durability=_DURABILITY[self.durability])


STREAM = QosConfig()
"""Observations and actions: best effort, newest 10."""

RESULTS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100,
                     reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""Episode results, link stats and trace samples: reliable, so that evaluation counts every episode, and
transient local, so that a subscriber whose discovery completes late (a monitor started beside a launch,
an evaluation on a loaded host) still gets the last 100. Volatile subscribers stay compatible."""

_FIELDS = tuple(f.name for f in fields(QosConfig))
MAX_DEPTH = 10_000
"""Deepest history a configured QoS may keep (messages per topic)."""


def parse_qos(value: Any, defaults: QosConfig = STREAM) -> QosConfig:
    """`{reliability, durability, depth}`, each optional (missing ones from `defaults`)."""
    if not isinstance(value, dict) or set(value) - set(_FIELDS):
        raise ConfigError(f'qos must be a mapping with keys among {", ".join(_FIELDS)}, got {_short(value)}')
    qos = replace(defaults, **value)
    if not isinstance(qos.reliability, str) or qos.reliability not in _RELIABILITY:
        raise ConfigError(f'qos reliability must be one of {", ".join(_RELIABILITY)}, got {_short(qos.reliability)}')
    if not isinstance(qos.durability, str) or qos.durability not in _DURABILITY:
        raise ConfigError(f'qos durability must be one of {", ".join(_DURABILITY)}, got {_short(qos.durability)}')
    if isinstance(qos.depth, bool) or not isinstance(qos.depth, int) or not 1 <= qos.depth <= MAX_DEPTH:
        raise ConfigError(f'qos depth must be an integer in [1, {MAX_DEPTH}], got {_short(qos.depth)}')
    return qos


def _short(value: Any) -> str:
    """A value for an error message, at most 60 characters."""
    text = f'an integer of {value.bit_length()} bits' if isinstance(value, int) and value.bit_length() > 64 \
        else repr(value)
    return text if len(text) <= 60 else text[:57] + '...'


def mirror_qos(offered: Sequence[tuple[str, str]], depth: int = 10) -> QosConfig:
    """The QoS that matches every discovered publisher, given as (reliability, durability) names.

    Reliable only if all of them are reliable, transient_local only if all of them are, so that
    the subscription matches each of them and the relayed topic offers what the originals offered.
    """
    if not offered:
        raise ValueError('mirror_qos needs at least one publisher')
    reliable = all(reliability == 'reliable' for reliability, _ in offered)
    durable = all(durability == 'transient_local' for _, durability in offered)
    return QosConfig('reliable' if reliable else 'best_effort', 'transient_local' if durable else 'volatile', depth)

WEIGHTS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=64, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""Weights chunks: reliable, so that a chunk lost on the way is resent and a message completes; transient
local, so that a worker whose subscription matches after the send still gets the newest weights; the last
64 chunks (1 MiB at the default chunk size, several CartPole weight messages), so that a stalled link never
queues more than that and a newer message replaces an older one."""

BATCHES = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=64, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.VOLATILE)
"""Trajectory batch chunks: reliable, since one lost chunk wastes the whole batch; volatile, since a batch
is worth nothing to a learner that was not there when it was collected; keep-last 64, so that a slow or
dead learner never blocks a worker or grows its memory: the oldest unacknowledged chunks are overwritten."""
