"""User-code fuzz, fast seeded tier: generated ``--env`` entry points and ``calf_core.wrap`` arguments are
each accepted (wrapped, reset and stepped) or refused with one CalfError line, never a traceback or an
escaped ``SystemExit``; run in a memory-limited process. The long mode: ``python tests/user_fuzz.py``."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

LIMIT_BYTES = 4 << 30


def test_user_entry_points_and_wrap_arguments_are_accepted_or_refused_in_one_line(tmp_path: Path) -> None:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))

    done = subprocess.run([sys.executable, str(Path(__file__).with_name('user_fuzz.py')), '--cases', '40', '--seed', '0',
                           '--workdir', str(tmp_path)], capture_output=True, text=True, timeout=240,
                          preexec_fn=limit, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tally = json.loads(done.stdout)['tally']
    for kind in ('entry', 'wrap'):  # the fuzz reaches both outcomes of each kind
        assert tally.get(f'{kind}/ok', 0) > 0 and tally.get(f'{kind}/refused', 0) > 0, tally
