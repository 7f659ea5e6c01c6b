"""The exceptions CALF raises on purpose; each message is one line naming the value and the remedy."""
from __future__ import annotations

from typing import Any


class CalfError(Exception):
    """Base class for every error CALF raises on purpose."""


class ConfigError(CalfError, ValueError):
    """A parameter, stage spec, profile or user env is invalid; the message names the value.

    A ValueError, so that library callers (``calf_core.wrap``) can catch it as Python's usual
    bad-argument error.
    """


class ConfigTypeError(ConfigError, TypeError):
    """An argument of the wrong type (``wrap(42)``): a ConfigError that is also a TypeError."""


class MessageError(CalfError):
    """A received message is malformed or out of range; the message says which field."""


class TraceError(CalfError):
    """A trace bag is missing, unreadable, truncated or holds no trace; the message names the bag."""


def shown(value: Any, limit: int = 60) -> str:
    """``value`` for an error message: its repr on one line, cut to ``limit`` characters (a giant
    integer is shown by its size, so that no value makes a message long or slow)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f'an integer of {value.bit_length()} bits'
    text = ' '.join(repr(value).split())
    return text if len(text) <= limit else text[:limit - 3] + '...'
