"""Node parameters that a run sets on several nodes, declared once: their defaults and meaning.

Pure (no rclpy): the nodes' ``PARAMETERS`` tables take these rows (``shared``), and
``calf_bringup.run_options`` takes the run options' defaults and help from them.
"""
from __future__ import annotations

from typing import Any

SHARED: dict[str, tuple[Any, str]] = {
    'seed': (0, "seed of the node's random streams: the env's first reset (later episodes continue it), the "
                "network models' generator"),
    'time_scale': (1.0, 'run this many times faster than real time: the env divides its tick period (dt) by it, a '
                        'shim every model delay, the arbiter its silence timeout'),
}


def shared(*names: str) -> dict[str, tuple[Any, str]]:
    """The ``SHARED`` rows ``names``, as a node's ``PARAMETERS`` table holds them."""
    return {name: SHARED[name] for name in names}
