"""Message types named by strings such as ``geometry_msgs/msg/Twist``, as config files give them."""
from __future__ import annotations

import importlib
import re
from typing import Any

from calf_core.errors import ConfigError

_TYPE = re.compile(r'^([A-Za-z_]\w*)/(?:msg/)?([A-Z]\w*)$')


def normalise_type(text: Any) -> str:
    """`pkg/msg/Name` or `pkg/Name` -> `pkg/msg/Name`."""
    match = _TYPE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(f'type must look like pkg/msg/Name (e.g. geometry_msgs/msg/Twist), got {text!r}')
    return f'{match[1]}/msg/{match[2]}'


def resolve_type(type_name: str) -> type:
    """The message class named by `type_name` (any form `normalise_type` accepts)."""
    package, _, name = normalise_type(type_name).split('/')
    try:
        module = importlib.import_module(f'{package}.msg')
    except ImportError:
        raise ConfigError(f'unknown message type {type_name!r}: no message package {package!r} is installed') \
            from None
    msg_type = getattr(module, name, None)
    if not hasattr(msg_type, 'get_fields_and_field_types'):
        raise ConfigError(f'unknown message type {type_name!r}: package {package!r} has no message {name!r}')
    return msg_type
