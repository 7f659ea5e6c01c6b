"""The QoS profiles CALF uses, in one place.

Observations and actions are time-critical: best effort, keep the newest few, volatile. The
shim's own impairments stand in for the network; the middleware should not retransmit late data.
"""
from __future__ import annotations

from dataclasses import dataclass

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from calf_shim.errors import ConfigError

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
                                  reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
"""Episode results and link stats: reliable, so that evaluation counts every episode."""
