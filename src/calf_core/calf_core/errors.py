"""Exceptions raised by calf_shim."""
from __future__ import annotations


class CalfError(Exception):
    """Base class for every error CALF raises on purpose."""


class ConfigError(CalfError):
    """A parameter, stage spec or profile is invalid; the message names the value."""


class MessageError(CalfError):
    """A received message is malformed or out of range; the message says which field."""


class TraceError(CalfError):
    """A trace bag is missing, unreadable, truncated or holds no trace; the message names the bag."""
