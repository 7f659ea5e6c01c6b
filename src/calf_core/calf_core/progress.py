"""Progress bars: whether one shows, the bar itself, and a step count for a parent process to read.

Every command's bars come from here. A bar goes to stderr and shows when stderr is a terminal, so
logs and CI stay clean; ``--progress`` (``CALF_PROGRESS=1``) shows bars anyway, ``CALF_PROGRESS=0``
hides them. A caller passing ``allowed=False`` (``--quiet``, a cell of an experiment) never shows one.
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm import tqdm

ENV = 'CALF_PROGRESS'
"""``1``: show bars even when stderr is not a terminal; ``0``: never show them."""
FILE_ENV = 'CALF_PROGRESS_FILE'
"""When set, training writes ``DONE TOTAL`` (env steps) to this file as it goes (see ``report``)."""
POLL_S = 0.5
"""How often ``watching`` reads the file."""


def enabled(allowed: bool = True) -> bool:
    """Whether a bar shows: ``allowed``, and CALF_PROGRESS=1 or (unless it is 0) stderr is a terminal."""
    setting = os.environ.get(ENV, '').strip()
    if not allowed or setting == '0':
        return False
    return setting == '1' or (sys.stderr is not None and sys.stderr.isatty())


def bar(total: float | None, unit: str, desc: str | None = None, allowed: bool = True, initial: float = 0,
        iterable: Iterable[Any] | None = None) -> tqdm:
    """A tqdm bar on stderr (over ``iterable``, if given), disabled unless ``enabled(allowed)``; its ETA is tqdm's."""
    return tqdm(iterable, total=total, unit=unit, desc=desc, initial=initial, disable=not enabled(allowed),
                file=sys.stderr, dynamic_ncols=True, mininterval=0.5)


def report(done: int, total: int) -> None:
    """Write ``done`` of ``total`` steps to the file CALF_PROGRESS_FILE names, if any (replaced whole)."""
    path = os.environ.get(FILE_ENV)
    if not path:
        return
    temp = f'{path}.{os.getpid()}.tmp'
    try:
        Path(temp).write_text(f'{int(done)} {int(total)}\n')
        os.replace(temp, path)
    except OSError:  # progress is best effort: a full disk must not stop the training
        pass


def read_report(path: Path) -> tuple[int, int] | None:
    """``(done, total)`` from a file ``report`` wrote, or None if it is absent or unreadable."""
    try:
        done, total = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return None
    return (done, total) if total > 0 else None


@contextmanager
def watching(path: Path, unit: str, desc: str | None = None, allowed: bool = True) -> Iterator[None]:
    """While the block runs, the processes it starts report their steps to ``path`` (CALF_PROGRESS_FILE) and
    a bar here shows them, with an ETA; the file is removed afterwards."""
    previous = os.environ.get(FILE_ENV)
    os.environ[FILE_ENV] = str(path)
    stop = threading.Event()

    def follow() -> None:
        with bar(None, unit, desc) as shown:
            while not stop.wait(POLL_S):
                found = read_report(path)
                if found:
                    shown.total = found[1]
                    shown.update(max(0, found[0] - shown.n))

    thread = threading.Thread(target=follow, daemon=True) if enabled(allowed) else None
    if thread:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if thread:
            thread.join()
        if previous is None:
            os.environ.pop(FILE_ENV, None)
        else:
            os.environ[FILE_ENV] = previous
        path.unlink(missing_ok=True)
