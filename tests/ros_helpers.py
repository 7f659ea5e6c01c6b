"""Helpers for tests that talk over DDS: private contexts and waiting on events, never on sleeps."""
from __future__ import annotations

import time
from collections.abc import Callable

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor


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
