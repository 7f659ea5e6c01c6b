"""Run a node graph as plain processes, without the launch system (``calf run``, ``calf eval --backend ros``).

Each node runs in its own process group, so that a Ctrl-C in the terminal reaches only this
runner, which then stops every node the same way: SIGTERM, a bounded wait, then SIGKILL. SIGTERM,
not SIGINT: a node still importing its modules dies of it quietly, where SIGINT would print a
KeyboardInterrupt traceback; a running node stops cleanly on either (``calf_ros.node_main``).
On Linux each node also gets SIGTERM when the runner dies, even by SIGKILL (``PR_SET_PDEATHSIG``,
set by ``_in_child`` in the child before it runs the node): no node outlives its runner.
The kernel sends it when the thread that started the node ends, so start nodes from the thread
that waits for them (``calf run`` starts them from its main thread). A node of the live loop
(``NodeSpec.realtime``) starts ahead of normal processes (``calf_ros.scheduling.raise_priority``, in the
child before the node's program runs): on a busy host its imports, most of its start-up, no longer wait
behind the CPU-bound processes.
Output is forwarded line by line with a ``[name]`` prefix.

By default a run ends when any node exits. With ``Respawn``, a node that fails (an exit code
other than 0, or a signal) is started again after a delay, a bounded number of times; a node that
finishes with code 0 (the env after ``episodes:=N``) still ends the run.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple, TextIO

from ament_index_python.packages import PackageNotFoundError, get_package_prefix

from calf_bringup.graph import NodeSpec, command_line
from calf_core.errors import ConfigError
from calf_ros.scheduling import raise_priority

STOP_TIMEOUT_S = 10.0
TAIL_LINES = 40
STOP_SIGNAL = signal.SIGTERM
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class NodeExit(NamedTuple):
    name: str
    code: int  # negative: killed by that signal
    stopped: bool  # True when the runner stopped it, False when it exited on its own


class Respawn(NamedTuple):
    """Start a failed node again after ``delay_s`` seconds, at most ``retries`` times per node."""

    retries: int
    delay_s: float


class _Child:
    """One running node: its process, the thread that forwards its output, its last lines."""

    def __init__(self, spec: NodeSpec, process: subprocess.Popen) -> None:
        self.spec, self.process = spec, process
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.stopped = False  # the runner stopped it
        self.finished = False  # it exited and its output was read to the end
        self.reader: threading.Thread | None = None


class Graph:
    """Start ``specs`` as processes on entry, stop them all on exit.

    ``with Graph(specs) as graph: graph.wait_for_exit('env', 60)``. ``output`` receives every
    node's lines (None: keep only each node's last lines, see ``tail``).
    """

    def __init__(self, specs: Iterable[NodeSpec], domain_id: int | None = None, output: TextIO | None = sys.stdout,
                 install_root: Path | str | None = None, stop_timeout_s: float = STOP_TIMEOUT_S) -> None:
        self.specs = list(specs)
        self.domain_id, self.output = domain_id, output
        self.install_root, self.stop_timeout_s = install_root, stop_timeout_s
        self.exits: list[NodeExit] = []
        self.restarts: list[NodeExit] = []  # the failures after which a node was started again
        self._children: dict[str, _Child] = {}
        self._lock = threading.Condition()

    def __enter__(self) -> Graph:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start every node of ``specs``; on a failure, stop the ones already started and re-raise."""
        try:
            for spec in self.specs:
                self._start(spec)
        except BaseException:
            self.stop()
            raise

    def _start(self, spec: NodeSpec) -> None:
        if spec.name in self._children:
            raise ConfigError(f'two nodes are named {spec.name!r}: node names must be unique')
        argv = command_line(spec, self.install_root or _install_root(spec.package))
        if not os.access(argv[0], os.X_OK):
            raise ConfigError(f'node executable {argv[0]} not found: run scripts/bootstrap.sh (colcon build)')
        env = {**os.environ, **spec.additional_env, 'PYTHONUNBUFFERED': '1'}
        if self.domain_id is not None:
            env['ROS_DOMAIN_ID'] = str(self.domain_id)
        process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, errors='replace', process_group=0,
                                   preexec_fn=_in_child(spec.realtime))
        child = self._children[spec.name] = _Child(spec, process)
        child.reader = threading.Thread(target=self._forward, args=(child,), name=f'out-{spec.name}', daemon=True)
        child.reader.start()

    def restart(self, name: str) -> None:
        """Start node ``name`` again, after its process has exited; its failure goes to ``restarts``."""
        child = self._child(name)
        if child.process.poll() is None:
            raise RuntimeError(f'{name} is still running')
        if child.reader is not None:
            child.reader.join()
        self.restarts.append(NodeExit(name, child.process.returncode, False))
        del self._children[name]
        self._start(child.spec)
        self._say(f'[calf] {name} started again (pid {self._children[name].process.pid})')

    def pids(self) -> dict[str, int]:
        """The process id of every node, by name."""
        return {name: child.process.pid for name, child in self._children.items()}

    def _forward(self, child: _Child) -> None:
        """Copy the node's output with a ``[name]`` prefix until it closes, then record its exit."""
        assert child.process.stdout is not None
        for line in child.process.stdout:
            child.tail.append(line.rstrip('\n'))
            self._say(f'[{child.spec.name}] {line.rstrip()}')
        child.process.wait()
        with self._lock:
            child.finished = True
            self._lock.notify_all()

    def _say(self, text: str) -> None:
        if self.output is not None:
            with self._lock:
                print(text, file=self.output, flush=True)

    def say_why(self, name: str, then: str = 'stopping the other nodes') -> None:
        """Tell which node ``name`` exited, and why (finished, or failed with its last line), and ``then`` what."""
        code = self.returncode(name)
        if code == 0:
            self._say(f'[calf] {name} finished: {then}')
        elif code is not None and code < 0:
            self._say(f'[calf] {name} was killed by {_signal_name(-code)}: {then}')
        else:
            last = next((line for line in reversed(self.tail(name)) if line.strip()), 'no output')
            self._say(f'[calf] {name} failed with code {code} ({last}): {then}')

    def returncode(self, name: str) -> int | None:
        """The exit code of node ``name``, or None while it runs."""
        return self._child(name).process.poll()

    def tail(self, name: str) -> list[str]:
        """The last lines node ``name`` printed."""
        return list(self._child(name).tail)

    def wait_for_exit(self, name: str, timeout: float | None = None) -> int | None:
        """Wait until node ``name`` exits; its exit code, or None on timeout."""
        try:
            return self._child(name).process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def wait_any(self, timeout: float | None = None) -> str | None:
        """Wait until some node has exited; its name, or None on timeout."""
        def exited() -> str | None:
            return next((name for name, child in self._children.items() if child.finished), None)

        with self._lock:
            self._lock.wait_for(lambda: exited() is not None, timeout)
        return exited()

    def stop(self) -> list[NodeExit]:
        """SIGTERM every running node, SIGKILL those still running after the timeout; report each exit."""
        running = [child for child in self._children.values() if child.process.poll() is None]
        for child in running:
            child.stopped = True
            _signal_group(child.process, STOP_SIGNAL)
        try:
            self._wait_all(running, self.stop_timeout_s)
        except KeyboardInterrupt:
            self._say('[calf] interrupted again: killing the nodes')
        for child in running:
            if child.process.poll() is None:
                self._say(f'[calf] {child.spec.name} ignored {STOP_SIGNAL.name} for {self.stop_timeout_s:g} s: '
                          f'SIGKILL')
                _signal_group(child.process, signal.SIGKILL)
        self._wait_all(running, None)
        self._record_exits()
        return self.exits

    def _wait_all(self, children: list[_Child], timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        for child in children:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                child.process.wait(remaining)
            except subprocess.TimeoutExpired:
                return
            if child.reader is not None:
                child.reader.join(remaining)

    def _record_exits(self) -> None:
        reported = {exit_.name for exit_ in self.exits}
        for name, child in self._children.items():
            if name not in reported:
                exit_ = NodeExit(name, child.process.returncode, child.stopped)
                self.exits.append(exit_)
                how = 'stopped' if exit_.stopped else 'exited'
                self._say(f'[calf] {name} {how} with code {exit_.code}')

    def _child(self, name: str) -> _Child:
        try:
            return self._children[name]
        except KeyError:
            raise ConfigError(f'no node {name!r} in this graph (nodes: {", ".join(self._children)})') from None


def run_graph(specs: list[NodeSpec], domain_id: int | None = None, output: TextIO = sys.stdout,
              respawn: Respawn | None = None, after_start: Callable[[], None] | None = None) -> int:
    """Run until a node exits (with ``respawn``: finishes, or fails once more than allowed) or
    Ctrl-C / SIGTERM arrives, then stop them all. ``after_start`` runs once every node has started (a check
    that need not delay them); what it raises stops the nodes and propagates.

    Returns 0 when no node failed on its own at the end (restarted failures are reported, not
    counted), else 1. Ctrl-C and SIGTERM raise KeyboardInterrupt once every node has been stopped.
    """
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with Graph(specs, domain_id, output) as graph:
            running = ', '.join(f'{name} (pid {pid})' for name, pid in graph.pids().items())
            print(f'[calf] running {running}; Ctrl-C stops them', file=output, flush=True)
            if after_start is not None:
                after_start()
            while (ended := graph.wait_any()) is not None:
                if not _restarts(graph, ended, respawn):
                    graph.say_why(ended)
                    break
    finally:
        signal.signal(signal.SIGTERM, previous)
    return int(any(exit_.code != 0 and not exit_.stopped for exit_ in graph.exits))


def _restarts(graph: Graph, name: str, respawn: Respawn | None) -> bool:
    """Start the failed node ``name`` again when ``respawn`` allows it (saying why and when); False otherwise."""
    if respawn is None or graph.returncode(name) == 0:
        return False
    done = sum(exit_.name == name for exit_ in graph.restarts)
    if done >= respawn.retries:
        graph.say_why(name, f'restarted {done} times already, stopping the other nodes')
        return False
    graph.say_why(name, f'starting it again in {respawn.delay_s:g} s (restart {done + 1} of {respawn.retries})')
    threading.Event().wait(respawn.delay_s)
    graph.restart(name)
    return True


def _install_root(package: str) -> Path:
    """The colcon install directory holding ``package`` (``<root>/<package>/lib/<package>``)."""
    try:
        return Path(get_package_prefix(package)).parent
    except PackageNotFoundError:
        raise ConfigError(f'package {package!r} is not installed: run scripts/bootstrap.sh and source env.sh') \
            from None


def _in_child(realtime: bool) -> Callable[[], None] | None:
    """What the child runs before the node: on Linux, ask for SIGTERM when this process dies (and take it at
    once if this process is already gone: it died between the fork and the request); for a ``realtime``
    node, raise its priority (``raise_priority``)."""
    if not sys.platform.startswith('linux'):
        return raise_priority if realtime else None
    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def request() -> None:
        prctl(PR_SET_PDEATHSIG, int(STOP_SIGNAL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), STOP_SIGNAL)
        if realtime:
            raise_priority()

    return request


def _signal_group(process: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f'signal {number}'


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
