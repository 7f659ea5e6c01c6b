"""Reading CALF's YAML files: one place, so that every file gets the same one-line errors."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from calf_core.errors import ConfigError


def read_yaml(path: Path, what: str) -> Any:
    """Parse a YAML file; a missing file or a syntax error is a one-line ConfigError naming `what`."""
    try:
        return yaml.safe_load(path.read_text(encoding='utf-8'))
    except OSError as err:
        raise ConfigError(f'cannot read {what} {str(path)!r}: {err.strerror}') from None
    except yaml.YAMLError as err:
        raise ConfigError(f'{what} {str(path)!r} is not valid YAML: {" ".join(str(err).split())}') from None
