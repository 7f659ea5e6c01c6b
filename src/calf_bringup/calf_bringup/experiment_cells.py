"""Running an experiment's cells: where they run, resume, retries, progress and per-cell logs.

A cell is one training run followed by its evaluations. Its outputs are files under ``OUT/cache/``
(a checkpoint folder, one JSON report per evaluation); a cell whose reports all exist is finished,
so rerunning the same command with the same ``--out`` skips it. Cells run on an executor: a local
process pool (the default) or Ray tasks (``calf_bringup.experiment_ray``). A cell that fails is
retried once; a cell that fails twice is reported as failed with its error while the rest complete.
Each attempt's output goes to ``OUT/logs/TABLE/CELL.log``. The progress bar counts cells, the
running ones by the env steps they have trained (reported through ``OUT/logs/TABLE/CELL.progress``
when the cell's process can write there: not on a Ray cluster without ``--shared-out``).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import shutil
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from calf_core import progress as progress_bars

ATTEMPTS = 2  # a cell that fails this many times is reported as failed
CPUS_PER_CELL = 1  # each cell trains with one torch thread; a Ray task declares as many CPUs
POLL_S = 1.0  # how often the bar reads the running cells' progress while none finishes
TRAINED_SHARE = 0.9  # of a cell's work, its training (the rest: its evaluations)

CellFn = Callable[[Path], dict[str, Any]]  # cache folder -> {report key: report}


@dataclass(frozen=True)
class Cell:
    """One unit of work: ``run(cache)`` writes ``outputs`` (paths relative to the cache)."""

    key: str
    run: CellFn
    outputs: tuple[str, ...]
    inputs: tuple[str, ...] = ()  # cache folders the cell reuses if they exist (its own or a dependency's)
    after: str | None = None  # the key of a cell that must finish first


@dataclass
class CellOutcome:
    status: str  # 'done', 'cached' or 'failed'
    reports: dict[str, Any] = field(default_factory=dict)
    error: str = ''
    attempts: int = 0
    seconds: float = 0.0  # wall-clock of the last attempt
    cpu_seconds: float = 0.0  # CPU time of the last attempt: its wall-clock on a core of its own
    node: str = ''

    def summary(self) -> dict[str, Any]:
        return {'status': self.status, 'attempts': self.attempts, 'seconds': round(self.seconds, 2),
                'cpu_seconds': round(self.cpu_seconds, 2), 'node': self.node, **({'error': self.error} if self.error else {})}


class Executor(Protocol):
    """Where cells run. ``ships_files``: a cell works in a private folder and returns its files."""

    slots: int
    ships_files: bool

    def submit(self, fn: Callable[..., dict[str, Any]], *args: Any) -> Any: ...

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, dict[str, Any] | BaseException]]:
        """The handles that finished, waiting at most ``timeout`` seconds for one (none if none did)."""
        ...

    def close(self) -> None: ...


def execute_cell(run: CellFn, cache: str | None, inputs: dict[str, bytes], threads: int,
                 progress_file: str | None = None) -> dict[str, Any]:
    """Run one cell in a worker; never raises for the cell's own errors.

    With ``cache`` (shared storage) the cell writes there. Without it, the cell works in a temporary
    folder seeded with ``inputs`` and returns every file it wrote, so that they reach the head. Its
    training reports its env steps to ``progress_file``, if given (``calf_core.progress.report``).
    """
    import torch
    torch.set_num_threads(threads)
    if progress_file:
        os.environ[progress_bars.FILE_ENV] = progress_file
    else:
        os.environ.pop(progress_bars.FILE_ENV, None)
    started, cpu, log = time.monotonic(), time.process_time(), io.StringIO()
    result: dict[str, Any] = {'node': platform.node(), 'pid': os.getpid(), 'error': ''}
    with contextlib.ExitStack() as stack:
        folder = Path(cache) if cache else Path(stack.enter_context(_tempdir()))
        _unpack(folder, inputs)
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                run(folder)
            except Exception:  # noqa: BLE001 - the cell's error is its result
                result['error'] = traceback.format_exc()
        if not cache and not result['error']:
            result['files'] = {p: data for p, data in _pack(folder).items() if p not in inputs}
    result.update(log=log.getvalue(), seconds=time.monotonic() - started, cpu_seconds=time.process_time() - cpu)
    return result


@contextlib.contextmanager
def _tempdir() -> Any:
    import tempfile
    with tempfile.TemporaryDirectory(prefix='calf-cell-') as name:
        yield name


def _pack(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob('*')) if p.is_file()}


def _unpack(folder: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def store_files(cache: Path, files: dict[str, bytes]) -> None:
    """Write a cell's returned files into the head's cache; folders and reports appear atomically,
    checkpoint folders before the reports that mark the cell finished."""
    groups: dict[str, dict[str, bytes]] = {}
    for rel, data in files.items():
        parts = rel.split('/')
        top = '/'.join(parts[:2])
        groups.setdefault(top, {})['/'.join(parts[2:])] = data
    for top in sorted(groups, key=lambda t: t in files):  # folders first, then single files
        final, members = cache / top, groups[top]
        partial = final.with_name(f'{final.name}.partial{os.getpid()}')
        final.parent.mkdir(parents=True, exist_ok=True)
        if top in files:
            partial.write_bytes(files[top])
            os.replace(partial, final)
        elif not final.exists():
            shutil.rmtree(partial, ignore_errors=True)
            _unpack(partial, members)
            partial.rename(final)


class LocalExecutor:
    """A process pool on this machine, one cell per worker; the cells write the cache directly."""

    ships_files = False

    def __init__(self, workers: int) -> None:
        self.slots = workers
        self._pool = ProcessPoolExecutor(workers)

    def submit(self, fn: Callable[..., dict[str, Any]], *args: Any) -> Future:
        return self._pool.submit(fn, *args)

    def wait(self, handles: list[Future], timeout: float) -> list[tuple[Future, dict[str, Any] | BaseException]]:
        finished, _ = wait(handles, timeout, return_when=FIRST_COMPLETED)
        results = [(f, f.exception() or f.result()) for f in finished]
        if any(isinstance(r, BrokenProcessPool) for _, r in results):  # a worker was killed: start afresh
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = ProcessPoolExecutor(self.slots)
        return results

    def close(self) -> None:
        self._pool.shutdown()


def run_cells(cells: list[Cell], executor: Executor, cache: Path, logs: Path, desc: str) -> dict[str, CellOutcome]:
    """Run every unfinished cell, retrying each once; return every cell's outcome by key.

    Cells start in list order as slots free up, each once the cell it waits for (``after``) has finished."""
    logs.mkdir(parents=True, exist_ok=True)
    outcomes = {c.key: CellOutcome('cached', _reports(cache, c)) for c in cells if _finished(cache, c)}
    waiting = [c for c in cells if c.key not in outcomes]
    in_flight: dict[Any, tuple[Cell, int]] = {}
    with progress_bars.bar(len(cells), 'cell', desc, initial=len(outcomes)) as bar:
        bar.bar_format = '{l_bar}{bar}| {n:.2f}/{total_fmt} cells [{elapsed}<{remaining}, {rate_fmt}{postfix}]'
        def show() -> None:
            failed = sum(o.status == 'failed' for o in outcomes.values())
            steps = [r for r in (progress_bars.read_report(_progress_file(logs, c)) for c, _ in in_flight.values()) if r]
            shares = sum(TRAINED_SHARE * min(done / total, 1.0) for done, total in steps)
            bar.update(max(0.0, len(outcomes) + shares - bar.n))  # the ETA is tqdm's, from this rate
            bar.set_postfix(running=min(len(in_flight), executor.slots), done=len(outcomes) - failed, failed=failed,
                            **({'steps': f'{sum(d for d, _ in steps)}/{sum(t for _, t in steps)}'} if steps else {}),
                            refresh=False)
            bar.refresh()

        def submit(cell: Cell, attempt: int) -> None:
            shared = None if executor.ships_files else str(cache.resolve())
            inputs = _read_inputs(cache, cell) if executor.ships_files else {}
            reports = None if executor.ships_files else str(_progress_file(logs, cell).resolve())
            handle = executor.submit(execute_cell, cell.run, shared, inputs, CPUS_PER_CELL, reports)
            in_flight[handle] = (cell, attempt)

        while waiting or in_flight:
            for cell in [c for c in waiting if c.after is None or c.after in outcomes]:
                if cell.after and outcomes[cell.after].status == 'failed':
                    waiting.remove(cell)
                    outcomes[cell.key] = CellOutcome('failed', error=f'needs cell {cell.after}, which failed')
                elif len(in_flight) < executor.slots:  # a slot at a time: a cell that waited keeps its place
                    waiting.remove(cell)
                    submit(cell, 1)
            show()
            for handle, result in executor.wait(list(in_flight), POLL_S) if in_flight else ():
                cell, attempt = in_flight.pop(handle)
                _progress_file(logs, cell).unlink(missing_ok=True)
                if isinstance(result, BaseException):
                    result = {'error': f'{type(result).__name__}: {result}', 'log': '', 'node': '', 'seconds': 0.0}
                _append_log(logs / f'{cell.key}.log', attempt, result)
                if not result['error'] and executor.ships_files:
                    store_files(cache, result['files'])
                if not result['error'] and _finished(cache, cell):
                    outcomes[cell.key] = CellOutcome('done', _reports(cache, cell), attempts=attempt,
                                                     seconds=result['seconds'], cpu_seconds=result['cpu_seconds'],
                                                     node=result['node'])
                elif attempt < ATTEMPTS:
                    submit(cell, attempt + 1)
                    continue
                else:
                    error = result['error'] or 'finished without writing its reports'
                    outcomes[cell.key] = CellOutcome('failed', error=error.strip().splitlines()[-1],
                                                     attempts=attempt, node=result['node'])
            show()
    return outcomes


def _progress_file(logs: Path, cell: Cell) -> Path:
    return logs / f'{cell.key}.progress'


def _finished(cache: Path, cell: Cell) -> bool:
    return all((cache / rel).is_file() for rel in cell.outputs)


def _reports(cache: Path, cell: Cell) -> dict[str, Any]:
    return {Path(rel).name.removesuffix('.json'): json.loads((cache / rel).read_text()) for rel in cell.outputs}


def _read_inputs(cache: Path, cell: Cell) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for rel in (*cell.inputs, *cell.outputs):
        path = cache / rel
        if path.is_file():
            files[rel] = path.read_bytes()
        elif path.is_dir():
            files.update({f'{rel}/{k}': v for k, v in _pack(path).items()})
    return files


def _append_log(path: Path, attempt: int, result: dict[str, Any]) -> None:
    status = 'failed' if result['error'] else 'done'
    head = (f'=== attempt {attempt} on {result["node"] or "?"} (pid {result.get("pid", "?")}): {status} '
            f'in {result["seconds"]:.1f} s ===\n')
    with path.open('a') as handle:
        handle.write(head + result['log'] + result['error'] + ('\n' if result['error'] else ''))
