"""The packages of this repository as they are at another git revision, for benches that measure it in the same run."""
from __future__ import annotations

import atexit
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

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


def module_at(rev: str, path: str) -> ModuleType:
    """The module in file ``path`` (of this repository) as it is at ``rev``, imported in this process beside today's
    packages (which its imports get); its copy is removed when this process exits."""
    source = subprocess.run(['git', 'show', f'{rev}:{path}'], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    folder = Path(tempfile.mkdtemp(prefix='calf_at_'))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    file = folder / Path(path).name
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(f'{Path(path).stem}_at_{rev}', file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module
