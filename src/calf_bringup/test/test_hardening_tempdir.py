"""Temp-file trust (class 8): generated DDS peer profiles live in a private 0700 directory of this user,
and a directory that someone else could have prepared (other owner, open mode, symlink) is refused."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from calf_bringup.discovery import private_dir, write_static_peers
from calf_core.errors import ConfigError


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    monkeypatch.delenv('XDG_RUNTIME_DIR', raising=False)
    return tmp_path


def test_the_directory_is_created_private(tmp_root: Path) -> None:
    path = private_dir()
    assert path == tmp_root / f'calf-{os.getuid()}'
    info = os.lstat(path)
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
    profile = write_static_peers(('10.0.0.1',))
    assert profile.parent == path and '10.0.0.1' in profile.read_text()


def test_the_runtime_dir_is_preferred_when_private(tmp_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = tmp_root / 'run-user'
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv('XDG_RUNTIME_DIR', str(runtime))
    assert private_dir() == runtime / 'calf'
    runtime.chmod(0o755)  # not private: fall back to the temp dir
    assert private_dir() == tmp_root / f'calf-{os.getuid()}'


@pytest.mark.parametrize('mode', [0o777, 0o775, 0o1777, 0o757, 0o720])
def test_a_directory_others_could_write_into_is_refused(tmp_root: Path, mode: int) -> None:
    path = tmp_root / f'calf-{os.getuid()}'
    path.mkdir()
    path.chmod(mode)
    with pytest.raises(ConfigError, match='is not a private directory') as info:
        write_static_peers(('10.0.0.1',))
    assert '\n' not in str(info.value)
    assert list(path.iterdir()) == [], 'nothing was written into it'


@pytest.mark.parametrize('mode', [0o755, 0o750, 0o711, 0o701])
def test_an_own_directory_only_readable_by_others_is_closed_and_used(tmp_root: Path, mode: int) -> None:
    path = tmp_root / f'calf-{os.getuid()}'
    path.mkdir()
    path.chmod(mode)
    assert write_static_peers(('10.0.0.1',)).parent == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_a_symlink_is_refused(tmp_root: Path) -> None:
    target = tmp_root / 'elsewhere'
    target.mkdir(mode=0o700)
    (tmp_root / f'calf-{os.getuid()}').symlink_to(target)
    with pytest.raises(ConfigError, match='is not a private directory'):
        write_static_peers(('10.0.0.1',))
    assert list(target.iterdir()) == []


def test_a_file_in_its_place_is_refused(tmp_root: Path) -> None:
    (tmp_root / f'calf-{os.getuid()}').write_text('not a directory')
    with pytest.raises(ConfigError, match='is not a private directory'):
        private_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason='needs root to give the directory to another user')
def test_a_directory_of_another_user_is_refused(tmp_root: Path) -> None:
    path = tmp_root / f'calf-{os.getuid()}'
    path.mkdir(mode=0o700)
    os.chown(path, 65534, 65534)  # nobody
    with pytest.raises(ConfigError, match='is not a private directory'):
        private_dir()


def test_a_tampered_profile_is_rewritten(tmp_root: Path) -> None:
    profile = write_static_peers(('10.0.0.1',))
    profile.write_text('<profiles>tampered</profiles>')
    assert write_static_peers(('10.0.0.1',)) == profile
    assert 'tampered' not in profile.read_text() and '10.0.0.1' in profile.read_text()
