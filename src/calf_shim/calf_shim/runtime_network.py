"""Which profiles a running shim may switch to when its ``network`` parameter is set.

Anyone on the DDS domain can call a node's set_parameters service, so a runtime change may only
name a built-in profile or a YAML file inside the operator's ``profile_dir``: the shim never opens
a path it was not configured to trust, and its error replies name the problem, not file content.
"""
from __future__ import annotations

import os
from pathlib import Path

from calf_core.errors import ConfigError
from calf_core.profiles import available_profiles


def check_runtime_network(value: object, profile_dir: str) -> str:
    """``value`` if a running shim may load it; ConfigError (one line, no file content) otherwise."""
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise ConfigError('network must be a profile name or a YAML path')
    if value in available_profiles():
        return value
    if Path(value).suffix not in ('.yaml', '.yml'):
        raise ConfigError(f'unknown network profile {value[:80]!r} (available: {", ".join(available_profiles())})')
    if not profile_dir:
        raise ConfigError('this shim takes only built-in profile names at runtime: start it with '
                          '-p profile_dir:=DIR to allow the YAML files in DIR')
    root = os.path.realpath(profile_dir)
    path = os.path.realpath(os.path.join(root, value))
    if os.path.commonpath([root, path]) != root:
        raise ConfigError(f'{value[:80]!r} is not inside profile_dir {profile_dir!r}: only its profiles may be loaded')
    return path
