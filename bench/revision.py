"""The packages of this repository as they are at another git revision, for benches that measure it in the same run."""
from __future__ import annotations

import atexit
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pythonpath_at(rev: str, packages: tuple[str, ...] = ('calf_core',)) -> dict[str, str]:
    """The environment of a worker process that imports ``packages`` (of ``src/``) as they are at ``rev``: the
    packages are extracted from git into a temporary folder, put first on ``PYTHONPATH`` and removed when this
    process exits."""
    paths = [f'src/{package}/{package}' for package in packages]
    archive = subprocess.run(['git', 'archive', rev, *paths], cwd=ROOT, check=True, capture_output=True).stdout
    tree = Path(tempfile.mkdtemp(prefix='calf_at_'))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter='data')
    first = [str(tree / 'src' / package) for package in packages]
    return {**os.environ, 'PYTHONPATH': os.pathsep.join([*first, os.environ.get('PYTHONPATH', '')])}
