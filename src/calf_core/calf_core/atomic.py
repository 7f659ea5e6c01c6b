"""Atomic file writes: a reader sees the old file or the new one, never a torn mix.

Each write goes to a temporary file beside the target, is flushed to disk, then renamed over
the target (``os.replace`` is atomic on POSIX). A crash leaves at most a ``.*.tmp`` file behind.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from calf_core.errors import ConfigError


def write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically."""
    with replacing(path, 'wb') as stream:
        stream.write(data)


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` by UTF-8 ``text`` atomically."""
    write_bytes(path, text.encode('utf-8'))


@contextlib.contextmanager
def replacing(path: Path, mode: str = 'w', **open_args: object) -> Iterator[IO]:
    """Open a temporary file that replaces ``path`` when the block ends without an exception.

    If the block raises (or the process dies), ``path`` keeps its old content and the temporary
    file is removed (or, after a kill, left as ``.<name>.*.tmp``).
    """
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, mode, **open_args) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_dir(path.parent)


@contextlib.contextmanager
def staged(path: Path, data: bytes) -> Iterator[Path]:
    """A temporary file beside ``path`` holding ``data`` (on disk), for the block to rename over ``path``
    with ``os.replace`` when it chooses; removed when the block ends if it is still there.

    Several staged files let a caller write everything before it replaces anything.
    """
    path = Path(path)
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, 'wb') as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        yield Path(tmp)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def check_out_parent(path: Path, what: str = 'output directory') -> Path:
    """``path``, whose parent must already exist (else a one-line ConfigError naming what to create).

    Commands call it before any work, so that a mistyped ``--out`` fails at once and creates nothing.
    """
    path = Path(path).expanduser()
    if not path.parent.is_dir():
        raise ConfigError(f'the parent of {what} {str(path)!r} does not exist: create {str(path.parent)!r} first')
    return path


def make_out_dir(path: Path, what: str = 'output directory') -> Path:
    """Create ``path`` itself (it may exist); its parent must already exist (one-line ConfigError)."""
    path = check_out_parent(path, what)
    try:
        path.mkdir(exist_ok=True)
    except FileExistsError:
        raise ConfigError(f'{what} {str(path)!r} exists and is not a directory: choose another path') from None
    except OSError as err:
        raise ConfigError(f'cannot create {what} {str(path)!r}: {err.strerror}') from None
    return path


def _temp_beside(path: Path) -> tuple[int, str]:
    """A new ``.<name>.*.tmp`` file (mode 0644) in ``path``'s directory: its descriptor and path."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f'.{path.name}.', suffix='.tmp', dir=path.parent)
    except OSError as err:
        raise ConfigError(f'cannot write {str(path)!r}: {err.strerror} (its directory must exist and be writable)'
                          ) from None
    os.fchmod(fd, 0o644)
    return fd, tmp


def sync_dir(directory: Path) -> None:
    """Flush a directory entry change (the rename) to disk, where the OS allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
