"""Helpers for tests that talk over DDS: private contexts and waiting on events, never on sleeps."""
from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rclpy
import torch
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter

from calf_agent.checkpoint import save_checkpoint
from calf_agent.policies import MlpAgent


def spin_until(executor: SingleThreadedExecutor, condition: Callable[[], bool], timeout_s: float) -> bool:
    """Spin ``executor`` until ``condition()`` holds or ``timeout_s`` passes; return whether it held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        executor.spin_once(timeout_sec=0.05)
    return condition()


def new_context(domain_id: int | None = None) -> Context:
    """A fresh rclpy context, in ``domain_id`` (None: ROS_DOMAIN_ID)."""
    context = Context()
    rclpy.init(context=context, domain_id=domain_id)
    return context


def shut_down(executor: SingleThreadedExecutor, context: Context, *nodes: object) -> None:
    """Remove and destroy ``nodes`` (``None`` entries are skipped), then stop the executor and context."""
    for node in nodes:
        if node is not None:
            executor.remove_node(node)
            node.destroy_node()
    executor.shutdown()
    context.try_shutdown()


class PrivateNode:
    """One node on a private context, spun by ``until`` while a test waits, with the nodes under test that
    ``host`` starts beside it; ``close`` (or a ``with``) ends them all."""

    def __init__(self, name: str) -> None:
        self.context = new_context()
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.hosted: list[Node] = []

    def host(self, node_type: Callable[..., Node], **params: Any) -> Node:
        """A ``node_type`` started on this context with ``params`` as its parameters, spun by ``until``."""
        node = node_type(context=self.context, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
        self.executor.add_node(node)
        self.hosted.append(node)
        return node

    def until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        return spin_until(self.executor, condition, timeout_s)

    def close(self) -> None:
        shut_down(self.executor, self.context, *self.hosted, self.node)

    def __enter__(self) -> PrivateNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Lines:
    """A text stream (a ``Graph``'s output, a child's stdout) that keeps each line written to it, and can wait
    for one."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()

    def write(self, text: str) -> None:
        with self._cond:
            self.lines.extend(line for line in text.split('\n') if line)
            self._cond.notify_all()

    def flush(self) -> None:
        pass

    def has(self, text: str) -> bool:
        """Whether a line holds ``text``."""
        with self._cond:
            return any(text in line for line in self.lines)

    def wait_for(self, line: str, timeout_s: float = 30.0) -> bool:
        """Wait for the exact ``line``; whether it came within ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: line in self.lines, timeout_s)

    def wait_for_prefix(self, prefix: str, timeout_s: float = 30.0) -> bool:
        """Wait for a line starting with ``prefix``; whether it came within ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: any(line.startswith(prefix) for line in self.lines), timeout_s)


def write_profile(tmp_path: Path, name: str, uplink: list[dict], downlink: list[dict] | str = 'same') -> str:
    """A link profile ``name``.yaml in ``tmp_path``, in order (no reordering); its path."""
    path = tmp_path / f'{name}.yaml'
    path.write_text(f'reorder: false\nuplink: {uplink}\ndownlink: {downlink}\n')
    return str(path)


def untrained_cartpole_policy(out: Path) -> Path:
    """A freshly initialised CartPole MLP policy saved in ``out``, for tests about nodes, not learning."""
    torch.manual_seed(0)
    return save_checkpoint(out, MlpAgent(4, 2), {'env': 'cartpole', 'representation': {'frames': 1, 'actions': 0}})


def sigint_as_in_a_terminal() -> None:
    """A child's ``preexec_fn``: SIGINT at its default, as in a shell. A test run started in the background
    ignores SIGINT, children inherit that, and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
