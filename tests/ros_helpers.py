"""Helpers for tests that talk over DDS: private contexts and waiting on events, never on sleeps."""
from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import rclpy
import torch
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor

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
    """One node on a private context, spun by ``until`` while a test waits; ``close`` (or a ``with``) ends it."""

    def __init__(self, name: str) -> None:
        self.context = new_context()
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        return spin_until(self.executor, condition, timeout_s)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)

    def __enter__(self) -> PrivateNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def untrained_cartpole_policy(out: Path) -> Path:
    """A freshly initialised CartPole MLP policy saved in ``out``, for tests about nodes, not learning."""
    torch.manual_seed(0)
    return save_checkpoint(out, MlpAgent(4, 2), {'env': 'cartpole', 'representation': {'frames': 1, 'actions': 0}})


def sigint_as_in_a_terminal() -> None:
    """A child's ``preexec_fn``: SIGINT at its default, as in a shell. A test run started in the background
    ignores SIGINT, children inherit that, and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
