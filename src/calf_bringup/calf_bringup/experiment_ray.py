"""Cells as Ray tasks (``calf experiment ... --cluster ray[:ADDRESS]``); Ray is imported only here.

Each cell is a task declaring ``CPUS_PER_CELL`` CPUs. Its checkpoint and reports travel back to the
head through Ray's object store (the default: a cluster needs no shared file system, and a cell's
files are tens of kilobytes), or, with ``shared=True``, the workers write them into ``--out``
directly, which every node must then mount at the same path.
"""
from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from calf_bringup.experiment_cells import CPUS_PER_CELL
from calf_core.errors import ConfigError
from calf_ros.scheduling import restore_ordinary_priority

INSTALL = 'pip install -r requirements-ray.lock'
DEFAULT_TOKEN = Path.home() / '.ray' / 'auth_token'
"""Where Ray looks for its authentication token last, and where it writes one for a cluster it starts."""
PROBE_TIMEOUT_S = 5.0
"""How long the head's address may take to accept a connection, then to answer as a gRPC server."""
HTTP2_PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + b'\x00\x00\x00\x04\x00\x00\x00\x00\x00'
"""A client's HTTP/2 connection preface and an empty SETTINGS frame: a gRPC server (Ray's GCS) answers
with its own SETTINGS frame (frame type 4, the fourth byte)."""


def parse_cluster(value: str) -> str:
    """``ray`` -> ``auto`` (an existing cluster), ``ray:local`` -> ``local``, ``ray:HOST:PORT`` -> ``HOST:PORT``."""
    kind, colon, address = value.partition(':')
    if kind != 'ray':
        raise ConfigError(f'--cluster {value!r}: expected ray, ray:local or ray:HOST:PORT')
    if colon and not address:
        raise ConfigError('--cluster ray: names no cluster: write ray:local (start one on this machine) or '
                          'ray:HOST:PORT (join the one there)')
    return address or 'auto'


class RayExecutor:
    """Cells as Ray tasks on the cluster at ``address`` (``auto``, ``local`` or ``HOST:PORT``)."""

    def __init__(self, address: str, shared: bool = False) -> None:
        ray = self._ray = connect(address)
        self.ships_files = not shared
        self.slots = max(1, int(ray.cluster_resources().get('CPU', 1) // CPUS_PER_CELL))
        # Retries are the scheduler's (experiment_cells.ATTEMPTS), the same as in the local pool.
        self._task = ray.remote(num_cpus=CPUS_PER_CELL, max_retries=0)(experiment_cell)

    def submit(self, fn: Callable[..., dict[str, Any]], *args: Any) -> Any:
        return self._task.remote(fn, *args)

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, dict[str, Any] | BaseException]]:
        ready, _ = self._ray.wait(handles, num_returns=1, timeout=timeout)
        results: list[tuple[Any, dict[str, Any] | BaseException]] = []
        for ref in ready:
            try:
                results.append((ref, self._ray.get(ref)))
            except self._ray.exceptions.RayError as err:  # the worker or its node died
                results.append((ref, err))
        return results

    def close(self) -> None:
        self._ray.shutdown()


def connect(address: str) -> Any:
    """Join (or, for ``local``, start) the Ray cluster at ``address``; the ``ray`` module. ConfigError says
    what to do when Ray is missing, nothing answers there or its token is refused."""
    if address == 'local':  # Ray's single-machine mode: every address on the loopback interface
        os.environ.setdefault('RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER', '0')
        os.environ.setdefault('RAY_worker_niceness', '0')  # Ray's default, 15, starves cells beside other work
    if address not in ('auto', 'local') and 'RAY_AUTH_MODE' not in os.environ and has_token():
        # `ray start --head` turns token authentication on when it finds a token, but Ray's client uses
        # one for an explicit address only with RAY_AUTH_MODE=token, which Ray reads when imported.
        os.environ['RAY_AUTH_MODE'] = 'token'
    try:
        import ray
    except ImportError:
        raise ConfigError(f'--cluster ray needs Ray, which is not installed: {INSTALL}') from None
    if address not in ('auto', 'local'):
        _probe(address)
    had_token = DEFAULT_TOKEN.is_file()
    try:  # a task's output goes to its log under --out, not to this terminal
        ray.init(address=None if address == 'local' else address, log_to_driver=False,
                 include_dashboard=False if address == 'local' else None)
    except (ConnectionError, ray.exceptions.AuthenticationError) as err:
        if 'InvalidAuthToken' not in f'{err} {err.__cause__}':
            raise ConfigError(f'cannot join the Ray cluster at {address!r} ({err}): start one with '
                              '`ray start --head`') from None
        what = "refused this machine's token" if has_token() else 'needs a token, which this machine has not'
        raise ConfigError(f'the Ray cluster at {address!r} uses token authentication and {what}: run '
                          f'`ray get-auth-token` on its head and put the output in {DEFAULT_TOKEN} '
                          '(or RAY_AUTH_TOKEN) on this machine') from None
    if not had_token and DEFAULT_TOKEN.is_file():
        print(f'Ray wrote a new authentication token to {DEFAULT_TOKEN}: it guards the cluster started here, '
              'and `ray start --head` on this machine will use it too', file=sys.stderr)
    return ray


def _probe(address: str) -> None:
    """Fail fast, with what to do, when nothing listens at ``HOST:PORT``, or something that is not a gRPC
    server (Ray itself retries for minutes). With ``RAY_USE_TLS`` the head speaks TLS: only the connection
    is checked."""
    host, _, port = address.rpartition(':')
    if not port.isdigit():
        raise ConfigError(f'--cluster ray:{address}: expected ray:HOST:PORT, e.g. ray:10.0.0.1:6379')
    try:
        sock = socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S)
    except OSError as err:
        raise ConfigError(f'no Ray cluster at {address!r} ({err.strerror or err}): start one with '
                          '`ray start --head` there, or use --cluster ray:local') from None
    with sock:
        if os.environ.get('RAY_USE_TLS', '0').lower() in ('1', 'true'):
            return
        try:
            sock.sendall(HTTP2_PREFACE)
            answer = sock.recv(9, socket.MSG_WAITALL)
        except OSError:  # a timeout, or a reset
            answer = b''
    if len(answer) < 9 or answer[3] != 4:
        raise ConfigError(f'what listens at {address!r} is not a Ray cluster (no gRPC answer within '
                          f'{PROBE_TIMEOUT_S:g} s): give the address `ray start --head` printed (port 6379 by '
                          'default)')


def has_token() -> bool:
    """Whether Ray finds an authentication token here: RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH names,
    or ~/.ray/auth_token."""
    if os.environ.get('RAY_AUTH_TOKEN', '').strip():
        return True
    path = os.environ.get('RAY_AUTH_TOKEN_PATH')
    token = Path(path).expanduser() if path else DEFAULT_TOKEN
    try:
        return bool(token.read_text().strip())
    except (OSError, UnicodeDecodeError):
        return False


def experiment_cell(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """The Ray task: its name is the worker's process title (`ray::experiment_cell`) while a cell runs. It runs
    at ordinary priority, not Ray's nice 15 (``calf_ros.scheduling.restore_ordinary_priority``); the cell's log says so
    where that is not permitted."""
    refused = restore_ordinary_priority()
    result = fn(*args)
    if refused:
        result['log'] = f'[calf] cell priority: {refused}\n{result.get("log", "")}'
    return result
