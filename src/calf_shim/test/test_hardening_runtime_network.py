"""The shim's runtime `network` parameter (class 7, shim side): only built-in names and files inside the
configured profile_dir; a refusal names the problem and never echoes a file's content."""
from __future__ import annotations

from pathlib import Path

import pytest

from calf_core.errors import ConfigError
from calf_shim.runtime_network import check_runtime_network


@pytest.fixture
def profile_dir(tmp_path: Path) -> Path:
    root = tmp_path / 'profiles'
    root.mkdir()
    (root / 'lab.yaml').write_text('name: lab\n')
    (tmp_path / 'secret.yaml').write_text('password: hunter2\n')
    (root / 'escape.yaml').symlink_to(tmp_path / 'secret.yaml')
    return root


def test_built_in_names_are_always_allowed(profile_dir: Path) -> None:
    assert check_runtime_network('wifi_normal', '') == 'wifi_normal'
    assert check_runtime_network('wifi_normal', str(profile_dir)) == 'wifi_normal'


def test_files_inside_the_profile_dir_are_allowed(profile_dir: Path) -> None:
    assert check_runtime_network('lab.yaml', str(profile_dir)) == str(profile_dir / 'lab.yaml')
    assert check_runtime_network(str(profile_dir / 'lab.yaml'), str(profile_dir)) == str(profile_dir / 'lab.yaml')


@pytest.mark.parametrize('value, message', [
    ('../secret.yaml', 'is not inside profile_dir'),
    ('escape.yaml', 'is not inside profile_dir'),  # a symlink out of the directory
    ('/etc/hosts.yaml', 'is not inside profile_dir'),
    ('/proc/self/environ', 'unknown network profile'),
    ('', 'must be a profile name'),
    ('x' * 5000 + '.yaml', 'must be a profile name'),
])
def test_paths_outside_the_profile_dir_are_refused(profile_dir: Path, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        check_runtime_network(value, str(profile_dir))
    assert 'hunter2' not in str(info.value) and len(str(info.value)) < 400


def test_without_a_profile_dir_no_file_is_allowed(profile_dir: Path) -> None:
    with pytest.raises(ConfigError, match='only built-in profile names'):
        check_runtime_network(str(profile_dir / 'lab.yaml'), '')
