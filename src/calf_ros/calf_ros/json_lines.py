"""A file a node appends JSON objects to, one per line and flushed at once, so that a reader can follow it as
it grows (``calf eval --backend ros`` reads the env node's ``results_file`` and the eval monitor's ``out_file``
this way: no DDS discovery between them)."""
from __future__ import annotations

import json
from typing import Any

from calf_core.errors import ConfigError


class JsonLinesWriter:
    """``path`` opened for appending; a path that cannot be written is a ConfigError naming ``parameter``."""

    def __init__(self, path: str, parameter: str) -> None:
        try:
            self._file = open(path, 'a', encoding='utf-8')  # noqa: SIM115 - open for the node's life, see close
        except OSError as err:
            raise ConfigError(f'{parameter} {path!r} cannot be written: {err.strerror}') from None

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + '\n')
        self._file.flush()

    def close(self) -> None:
        self._file.close()
