"""The manual's examples run: every shell and Python block of the guides (docs/*.md) and the README.

Convention, for whoever writes a page:

- Shell commands go in ```` ```bash ```` blocks, Python in ```` ```python ```` blocks. Both run, as written:
  each page's bash blocks, in page order, as one ``bash -eo pipefail`` script in a fresh working
  directory (with ``env.sh``, ``src``, ``results``, ``examples`` and ``bench`` linked in from the repository),
  and each page's Python blocks, in page order, as one script in a fresh interpreter, so a block may use
  what an earlier block on its page made.
- ``<!-- slow -->`` on the line above a block: it trains or runs the live graph, so its page runs in the slow
  tier (``make test``, not ``make test-fast``). Keep such blocks on a tiny budget (``--steps 2048``).
- ``<!-- not-run: REASON -->`` on the line above a block: it cannot run on one development machine (a Pi, a
  second host, a real cluster, a ROS 2 install, a robot stack, or a budget of minutes to hours); REASON
  says which, in words.
- Data and output go in ```` ```yaml ````, ```` ```json ```` or ```` ```text ```` blocks, which do not run;
  YAML and JSON blocks must parse. Any other block language is refused, so nothing escapes the rule.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / 'docs').glob('*.md')) + [ROOT / 'README.md']
RUNS = ('bash', 'python')
DATA = ('yaml', 'json', 'text')
LINKED = ('env.sh', 'src', 'results', 'examples', 'bench')
FENCE = re.compile(r'^( *)```(\S*)\s*$')
MARKER = re.compile(r'^\s*<!--\s*(slow|not-run:(.*?))\s*-->\s*$')


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: its language, code, first line and marker (``''``, ``slow`` or ``not-run``)."""

    page: Path
    line: int
    lang: str
    code: str
    marker: str
    reason: str


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order, with the marker on the line above each."""
    lines = page.read_text(encoding='utf-8').split('\n')
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, lang = opening.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == indent + '```'), None)
        assert end is not None, f'{page.name}:{i + 1}: a fence that never closes'
        code = '\n'.join(line[len(indent):] for line in lines[i + 1:end]) + '\n'
        above = MARKER.match(lines[i - 1]) if i else None
        marker = '' if above is None else ('slow' if above.group(1) == 'slow' else 'not-run')
        found.append(Block(page, i + 1, lang, code, marker, (above.group(2) or '').strip() if above else ''))
        i = end + 1
    return found


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang in RUNS and b.marker != 'not-run']


def page_param(page: Path) -> pytest.param:
    slow = any(b.marker == 'slow' for b in runnable(page))
    return pytest.param(page, id=page.name, marks=[pytest.mark.slow, pytest.mark.timeout(1800)] if slow else [])


def test_every_block_follows_the_convention() -> None:
    """A block runs, is data, or says why it cannot run here."""
    bad = []
    for page in PAGES:
        for b in blocks(page):
            where = f'{page.relative_to(ROOT)}:{b.line}'
            if b.lang not in RUNS + DATA:
                bad.append(f'{where}: block language {b.lang or "(none)"!r}: use bash, python, yaml, json or text')
            elif b.marker and b.lang not in RUNS:
                bad.append(f'{where}: a {b.marker} marker on a {b.lang} block, which never runs')
            elif b.marker == 'not-run' and len(b.reason.split()) < 3:
                bad.append(f'{where}: not-run needs its reason in words, got {b.reason!r}')
    assert not bad, '\n'.join(bad)
    assert sum(len(runnable(p)) for p in PAGES) >= 10, 'the guides should hold examples that run'


def test_data_blocks_parse() -> None:
    """YAML and JSON examples are valid documents."""
    for page in PAGES:
        for b in blocks(page):
            if b.lang == 'yaml':
                yaml.safe_load(b.code)
            elif b.lang == 'json':
                json.loads(b.code)


def test_the_convention_is_checked(tmp_path: Path) -> None:
    """The parser sees markers, reasons, indented fences and unknown languages (a page of its own)."""
    sample = ('intro\n<!-- not-run: needs a Pi -->\n```bash\nros2 launch x\n```\n\n<!-- slow -->\n```python\n'
              'print(1)\n```\n1. step\n\n   ```bash\n   echo hi\n   ```\n```sh\nls\n```\n')
    page = tmp_path / 'sample.md'
    page.write_text(sample, encoding='utf-8')
    got = [(b.lang, b.marker, b.reason, b.code) for b in blocks(page)]
    assert got == [('bash', 'not-run', 'needs a Pi', 'ros2 launch x\n'), ('python', 'slow', '', 'print(1)\n'),
                   ('bash', '', '', 'echo hi\n'), ('sh', '', '', 'ls\n')]


def _workdir(tmp_path: Path) -> Path:
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


@pytest.mark.parametrize('page', [page_param(p) for p in PAGES if runnable(p)])
@pytest.mark.slow
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    """The page's bash blocks run as one script, then its Python blocks as one script; both exit 0."""
    work = _workdir(tmp_path)
    env = {**os.environ, 'PYTHONDONTWRITEBYTECODE': '1', 'MPLBACKEND': 'Agg'}
    todo = runnable(page)
    shell = ''.join(f'# {page.name}:{b.line}\n{b.code}' for b in todo if b.lang == 'bash')
    python = ''.join(f'# {page.name}:{b.line}\n{b.code}' for b in todo if b.lang == 'python')
    for command, source in ((['bash', '-eo', 'pipefail', '-c'], shell), ([sys.executable, '-c'], python)):
        if not source:
            continue
        done = subprocess.run([*command, source], cwd=work, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=1700)
        assert done.returncode == 0, (f'{page.name}: the {command[0]} blocks failed (exit {done.returncode})\n'
                                      f'--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}')
