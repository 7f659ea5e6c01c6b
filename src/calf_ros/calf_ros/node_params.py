"""Node parameters: declared from one table, read once, bad values reported on one line."""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import ParameterException
from rclpy.node import Node

from calf_core.errors import ConfigError


def declare_parameters(node: Node, table: Mapping[str, tuple[Any, str]], dynamic: Collection[str] = (),
                       writable: Collection[str] = ()) -> dict[str, Any]:
    """Declare each ``name: (default, description)`` of ``table`` on ``node`` and return the values.

    Names in ``dynamic`` accept any type (``-p time_scale:=4`` as well as 4.0); names in ``writable``
    may change at runtime, the others are read-only. A value of the wrong type raises ConfigError.
    """
    try:
        return {name: node.declare_parameter(name, default, ParameterDescriptor(
            description=text, read_only=name not in writable, dynamic_typing=name in dynamic)).value
            for name, (default, text) in table.items()}
    except ParameterException as err:
        raise ConfigError(' '.join(str(err).split())) from None


def positive_number(name: str, value: Any) -> float:
    """``value`` as a float if it is a number > 0, else a ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f'{name} must be a number > 0, got {value!r}')
    return float(value)
