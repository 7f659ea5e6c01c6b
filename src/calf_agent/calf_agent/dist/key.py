"""The key a learner and its workers share: every distributed-training frame carries an HMAC under it.

A key is 32 random bytes written as 64 hex digits, in a file only its owner may read (mode 0600).
``calf train --workers`` creates ``<out>/dist.key`` unless ``--key FILE`` or ``CALF_DIST_KEY`` gives
one; a remote worker reads a copy (``calf worker --key FILE``) or ``CALF_DIST_KEY`` (the hex digits).
Nodes are given the key file's path, never the key: ROS parameters are readable by the whole domain.
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from calf_core.errors import ConfigError

KEY_ENV = 'CALF_DIST_KEY'
KEY_FILE = 'dist.key'
"""The key ``calf train --workers`` creates in its output directory."""
KEY_BYTES = 32
_MAX_FILE_BYTES = 1024


def create_key(path: Path) -> Path:
    """Write a new random key to ``path`` (mode 0600) unless a key file is already there; ``path``."""
    path.parent.mkdir(exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        read_key_file(path)  # an existing key is kept, if it is a good one
        return path
    with os.fdopen(fd, 'w') as file:
        file.write(secrets.token_hex(KEY_BYTES) + '\n')
    return path


def parse_key(text: str, where: str) -> bytes:
    """The key written in ``text`` (hex digits, at least 32 bytes); ConfigError naming ``where``."""
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        key = b''
    if len(key) < KEY_BYTES:
        raise ConfigError(f'{where} is not a key of at least {2 * KEY_BYTES} hex digits: create one with '
                          f'calf train --workers, or python -c "import secrets; print(secrets.token_hex(32))"')
    return key


def read_key_file(path: Path) -> bytes:
    """The key in ``path``; ConfigError if it is missing, readable by others, or no key."""
    try:
        info = path.stat()
    except OSError:
        raise ConfigError(f'key file {path} does not exist: copy the learner\'s key file (its --out/{KEY_FILE}) '
                          f'here, or set {KEY_ENV}') from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_FILE_BYTES:
        raise ConfigError(f'key file {path} is not a small regular file: give the learner\'s {KEY_FILE}')
    if info.st_mode & 0o077:
        raise ConfigError(f'key file {path} is readable by other users (mode {stat.S_IMODE(info.st_mode):o}): '
                          f'chmod 600 {path}')
    return parse_key(path.read_text(errors='replace'), f'key file {path}')


def load_key(key_file: str) -> bytes:
    """The key from ``key_file`` if given, else from ``CALF_DIST_KEY``; ConfigError if neither has one."""
    if key_file:
        return read_key_file(Path(key_file))
    if os.environ.get(KEY_ENV):
        return parse_key(os.environ[KEY_ENV], KEY_ENV)
    raise ConfigError(f'no distributed-training key: pass --key FILE (the learner\'s --out/{KEY_FILE}) or set '
                      f'{KEY_ENV}')
