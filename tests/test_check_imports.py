"""scripts/check_imports.py: the project's modules import one another without cycles, imports inside functions
included; a cycle is found however deep the import sits."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / 'scripts' / 'check_imports.py'


def run(src: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *([str(src)] if src else [])], capture_output=True,
                          text=True, timeout=120)


def package(src: Path, name: str, modules: dict[str, str]) -> None:
    """A package ``src/name/name/`` holding ``modules`` (module name -> source)."""
    pkg = src / name / name
    pkg.mkdir(parents=True)
    (pkg / '__init__.py').write_text('')
    for module, source in modules.items():
        (pkg / f'{module}.py').write_text(source)


@pytest.mark.slow
def test_the_project_has_no_import_cycle() -> None:
    done = run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'no import cycles among' in done.stdout


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    package(tmp_path, 'pa', {
        'a': 'from pa.b import f\n',
        'b': 'def f():\n    from pa import c  # inside a function\n    return c\n',
        'c': 'import pa.a\n',
        'free': 'from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pa import a\n',
    })
    package(tmp_path, 'pb', {'x': 'from . import y\n', 'y': 'from .x import nothing\n'})
    done = run(tmp_path)
    assert done.returncode == 1
    cycles = [line for line in done.stdout.splitlines() if line.startswith('import cycle, error')]
    assert len(cycles) == 2, done.stdout
    assert 'pa.a (line 1) -> pa.b (line 2) -> pa.c (line 1) -> pa.a' in cycles[0]
    assert 'pb.x' in cycles[1] and 'pb.y' in cycles[1]
    assert 'pa.free' not in done.stdout  # TYPE_CHECKING imports never run
