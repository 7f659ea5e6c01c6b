"""What the live-graph benches share: the parity test's policy, and CPU-bound processes beside the graph."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'tests'))  # the parity recipes live beside their tests

SPIN = 'import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n'


@contextmanager
def parity_policy(policy: Path | None) -> Iterator[Path]:
    """``policy`` if given, else the parity test's policy (PPO, 20,000 steps under sim_clean, about 10 s) trained
    into a temporary directory that lasts as long as the ``with``."""
    if policy is not None:
        yield policy
        return
    from parity_recipes import train_parity_policy

    with tempfile.TemporaryDirectory() as tmp:
        yield train_parity_policy(Path(tmp) / 'cartpole_baseline')


@contextmanager
def cpu_load(processes: int, limit_s: float) -> Iterator[None]:
    """``processes`` busy loops beside the caller, each ending by itself after ``limit_s``; stopped on exit."""
    spinners = [subprocess.Popen([sys.executable, '-c', SPIN.format(limit=limit_s)]) for _ in range(processes)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
