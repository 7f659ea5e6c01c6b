"""Exceptions raised by calf_agent."""
from __future__ import annotations

from calf_core.errors import CalfError


class CheckpointError(CalfError):
    """A checkpoint directory is missing, unreadable or does not match its metadata."""
