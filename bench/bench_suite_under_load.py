"""The whole test suite on a fresh clone, with CPU-bound processes beside it, as a busy robot computer would run it.

Each run clones the repository's ``--rev`` into ``--clone-into`` (removed first: every run starts fresh), runs
``--command`` there (``make test`` by default, set-up included) while ``--load N`` busy processes run beside it
(``live_bench.cpu_load``), and samples the load average every 15 s. It prints one line a run and appends it, as
JSON, to ``--record``: the revision, the exit code, pytest's summary line, the minutes taken and the load average
seen (min / median / max), and ``--note``. Runs stop at the first failure, since the goal is consecutive passes.

    python bench/bench_suite_under_load.py [--load 4] [--runs 3] [--rev HEAD] [--command "make test"]
        [--clone-into DIR] [--record FILE] [--note TEXT]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from live_bench import cpu_load

REPO = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r'^=+ (.*(passed|failed|error).*) in [\d.]+s', re.MULTILINE)


def sample_load(stop: threading.Event, samples: list[float], every_s: float = 15.0) -> None:
    """Append the 1-minute load average to ``samples`` every ``every_s`` until ``stop`` is set."""
    while not stop.wait(every_s):
        samples.append(os.getloadavg()[0])


def one_run(rev: str, command: str, clone: Path, log: Path) -> dict[str, object]:
    """Clone ``rev`` into ``clone`` afresh and run ``command`` there; its output goes to ``log``."""
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(['git', 'clone', '-q', str(REPO), str(clone)], check=True)
    subprocess.run(['git', '-C', str(clone), 'checkout', '-q', rev], check=True)
    samples: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_load, args=(stop, samples), daemon=True)
    started = time.monotonic()
    sampler.start()
    with log.open('w') as out:
        code = subprocess.run(['bash', '-c', command], cwd=clone, stdout=out, stderr=subprocess.STDOUT).returncode
    stop.set()
    sampler.join()
    found = SUMMARY.findall(log.read_text(errors='replace'))
    return {'rev': subprocess.run(['git', '-C', str(clone), 'rev-parse', '--short', 'HEAD'], capture_output=True,
                                  text=True, check=True).stdout.strip(),
            'command': command, 'exit_code': code, 'summary': found[-1][0] if found else '',
            'minutes': round((time.monotonic() - started) / 60, 1),
            'load_min_median_max': [round(f(samples), 1) for f in (min, statistics.median, max)] if samples else [],
            'log': str(log)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--load', type=int, default=4, help='CPU-bound processes beside the suite')
    parser.add_argument('--runs', type=int, default=3, help='runs in a row; the first failure ends them')
    parser.add_argument('--rev', default='HEAD', help='the revision of this repository to clone')
    parser.add_argument('--command', default='make test', help='what to run in the clone (bash -c)')
    parser.add_argument('--clone-into', type=Path, help='where to clone (default: a temporary folder)')
    parser.add_argument('--record', type=Path, default=Path('suite_under_load.jsonl'), help='runs appended here')
    parser.add_argument('--note', default='', help='kept with each run: what else ran beside it, for one')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clone = args.clone_into or Path(tmp) / 'clone'
        with cpu_load(args.load, limit_s=24 * 3600):
            for index in range(args.runs):
                stamp = time.strftime('%Y-%m-%d %H:%M')
                log = args.record.resolve().with_suffix(f'.{stamp.replace(" ", "T")}.run{index + 1}.log')
                run = {'load': args.load, 'note': args.note, 'date': stamp,
                       **one_run(args.rev, args.command, clone.resolve(), log)}
                print(json.dumps(run), flush=True)
                with args.record.open('a') as record:
                    record.write(json.dumps(run) + '\n')
                if run['exit_code'] != 0:
                    break


if __name__ == '__main__':
    main()
