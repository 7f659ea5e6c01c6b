"""Argument types with bounds for the ``calf`` command: a value out of range is one line, exit 2.

``CalfParser`` prints argparse's errors as one line (``calf eval: error: argument --episodes:
must be >= 1, got 0``) instead of the usage block, and exits 2 like every ConfigError.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn

MAX_EPISODES = 1_000_000
MAX_SECONDS = 7 * 24 * 3600.0
MAX_STEPS = 10_000_000_000
MAX_ENVS = 1024


class CalfParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f'{self.prog}: error: {" ".join(message.split())} (see {self.prog} --help)\n')


def count(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f'must be an integer, got {text[:40]!r}') from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f'must be in [{low}, {high}], got {value}')
        return value
    parse.__name__ = 'integer'
    return parse


def number(low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite float in [low, high] (or (low, high] with ``low_open``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f'must be a number, got {text[:40]!r}') from None
        above = value > low if low_open else value >= low
        if not (math.isfinite(value) and above and value <= high):
            raise argparse.ArgumentTypeError(f'must be in {"(" if low_open else "["}{low:g}, {high:g}], got {text[:40]}')
        return value
    parse.__name__ = 'number'
    return parse
