"""Bounds shared by files, messages and counters: one home, so that every edge refuses the same sizes."""
from __future__ import annotations

MAX_PLAN_HORIZON = 1024
"""Most actions in one plan (an Action's discrete_plan) and in a checkpoint's plan horizon."""
MAX_OBS_VALUES = 1 << 20
"""Most values in one observation (an Observation's data) and in a checkpoint's observation size."""
MAX_ACTIONS = 4096
"""Most actions of a Discrete action space, and most values of a continuous action, a policy emits."""
U64_MAX = (1 << 64) - 1
"""Largest value of a uint64 message field (LinkStats counters)."""


def saturate(value: int, high: int = U64_MAX) -> int:
    """``value`` clamped to [0, high]: a published counter never overflows its field or goes negative."""
    return min(max(int(value), 0), high)


def add_count(total: int, change: int) -> int:
    """``total + change`` for a running count: a negative change (a wrapped middleware counter) adds
    nothing, and the sum saturates at ``U64_MAX``."""
    return saturate(total + max(int(change), 0))
