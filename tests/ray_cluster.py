"""A real Ray cluster on this machine for tests: `ray start` nodes on a loopback address, torn down by pid.

Ray rewrites 127.0.0.1 to the machine's outward address when nodes may join, so the nodes use
127.0.0.2, another loopback address. Token authentication stays on, with a token private to the test.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HOST = '127.0.0.2'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process this user can read."""
    found = {}
    for entry in Path('/proc').iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / 'cmdline').read_bytes().replace(b'\0', b' ').decode(errors='replace')
                ppid = int((entry / 'stat').read_text().rsplit(')', 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            found[int(entry.name)] = (ppid, cmdline)
    return found


def _with_descendants(roots: set[int], procs: dict[int, tuple[int, str]]) -> set[int]:
    tree = set(roots)
    while True:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in tree} - tree
        if not more:
            return tree
        tree |= more


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def user_env(home: Path) -> dict[str, str]:
    """This process's environment as a user's shell has it: HOME set, no RAY_AUTH_* variables."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith('RAY_AUTH')},
            'HOME': str(home), 'RAY_USAGE_STATS_ENABLED': '0'}


class LocalRayCluster:
    """A head node and worker nodes, each started by `ray start` on ``HOST`` with its own ports."""

    def __init__(self, cpus_per_node: int = 1, home: Path | None = None) -> None:
        """With ``home``, the nodes start as a user starts them: that HOME, and no RAY_AUTH_* variables
        (Ray turns token authentication on when it finds ``home/.ray/auth_token``)."""
        self.cpus = cpus_per_node
        self.temp_dir = Path(tempfile.mkdtemp(prefix='calfray'))  # short: Ray's socket paths must fit
        self.port = free_port()
        self.address = f'{HOST}:{self.port}'
        if home is None:
            self.env = {**os.environ, 'RAY_USAGE_STATS_ENABLED': '0', 'RAY_AUTH_MODE': 'token',
                        'RAY_AUTH_TOKEN': secrets.token_hex(16)}
        else:
            self.env = user_env(home)
        self.node_ports: list[int] = []

    def _start(self, *args: str) -> int:
        node_port = free_port()
        cmd = ['ray', 'start', f'--node-ip-address={HOST}', f'--num-cpus={self.cpus}',
               '--object-store-memory=100000000', f'--node-manager-port={node_port}',
               f'--object-manager-port={free_port()}', f'--dashboard-agent-listen-port={free_port()}',
               f'--dashboard-agent-grpc-port={free_port()}', f'--runtime-env-agent-port={free_port()}',
               f'--metrics-export-port={free_port()}', *args]
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        self.node_ports.append(node_port)
        return node_port

    def start(self) -> LocalRayCluster:
        self._start('--head', f'--port={self.port}', f'--temp-dir={self.temp_dir}', '--include-dashboard=false',
                    f'--ray-client-server-port={free_port()}', '--disable-usage-stats')
        return self

    def add_node(self) -> int:
        """Join one more worker node; returns its node manager port, which names it."""
        return self._start(f'--address={self.address}')

    def raylet(self, node_port: int) -> int:
        procs = _processes()
        return next(pid for pid, (_, cmd) in procs.items()
                    if 'raylet' in cmd and f'--node_manager_port={node_port}' in cmd)

    def wait_for_cell(self, node_port: int, timeout: float = 120.0) -> int:
        """The pid of a Ray worker on that node while it runs a cell (process title ray::experiment_cell)."""
        raylet = self.raylet(node_port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            procs = _processes()
            for pid in _with_descendants({raylet}, procs):
                if procs[pid][1].startswith('ray::experiment_cell'):
                    return pid
            time.sleep(0.05)  # polling /proc: there is no event to wait on
        raise TimeoutError(f'no cell started on the node at port {node_port} within {timeout} s')

    def kill_node(self, node_port: int) -> None:
        """SIGKILL the node's raylet and everything it started: the node dies as if its machine failed."""
        _kill(_with_descendants({self.raylet(node_port)}, _processes()))

    def close(self) -> None:
        procs = _processes()
        mine = {pid for pid, (_, cmd) in procs.items() if str(self.temp_dir) in cmd}
        _kill(_with_descendants(mine, procs))
        shutil.rmtree(self.temp_dir, ignore_errors=True)
