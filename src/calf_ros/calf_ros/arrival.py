"""When a message reached this process: when DDS received it, not when its callback ran. Pure, no rclpy.

An executor takes a message some time after DDS received it (its wake-up, another callback, the GIL): that
lag is the receiving process's, not the network's, and virtual time has none. ``age_s`` is how long ago DDS
received a message (its MessageInfo's ``received_timestamp``, on the wall clock), clamped to
``[0, MAX_AGE_S]`` against wall-clock steps; a caller takes it from its own clock's now (the shim's release
times, the env node's arrival of an action).
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

MAX_AGE_S = 0.5  # bound on DDS-to-callback backdating, against wall-clock steps


def age_s(info: Mapping[str, Any]) -> float:
    """Seconds since DDS received the message of ``info`` (0 when the middleware gives no receive time)."""
    received_ns = info.get('received_timestamp', 0)
    if not received_ns:
        return 0.0
    return min(max((time.time_ns() - received_ns) / 1e9, 0.0), MAX_AGE_S)
