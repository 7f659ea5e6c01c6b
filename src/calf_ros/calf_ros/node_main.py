"""The one ``main`` shape of every CALF node: clean stop on SIGINT/SIGTERM, one-line errors.

rclpy's own signal handlers shut the context down while callbacks may still be running, which
makes a stopping node fail inside the executor now and then. Here a signal only sets a flag: the
spin loop ends, then the node is destroyed and rclpy shut down, in that order. The flag is set up
before rclpy starts, and a stop during start-up (a KeyboardInterrupt that got in first, or a context
shut down from outside) ends the node like a signal does, without a traceback. A node's imports run
before ``run_node``: a SIGINT then is Python's KeyboardInterrupt, which is why ``calf run`` stops nodes
with SIGTERM. Jazzy-compatible (explicit init and try/finally, no context manager).

The nodes of the live loop (env, shim, policy) pass ``realtime=True``: before rclpy starts, the
process's threads move ahead of normal processes (``calf_ros.scheduling.raise_priority``: SCHED_FIFO where
permitted, else nice -10); every thread started later (DDS, ticks) inherits it, so a busy host's CPU-bound
processes no longer delay a tick, a relay or an answer by their time slices. After
start-up every node freezes the objects it has (``gc.freeze``): a full collection over torch's and
rclpy's import-time objects took 0.1-1 s, which a collection in the loop would add to a tick.
"""
from __future__ import annotations

import gc
import signal
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from calf_core.errors import CalfError
from calf_ros.scheduling import raise_priority

N = TypeVar('N', bound=Node)
def run_node(name: str, make_node: Callable[[], N], args: list[str] | None = None,
             finished: Callable[[N], bool] = lambda node: False,
             error: Callable[[N], str | None] = lambda node: None, realtime: bool = False) -> int:
    """Spin ``make_node()`` until a signal or ``finished(node)``; exit 0, 1 (``error(node)``) or 2 (CalfError).
    ``realtime``: the node is part of the live loop (``raise_priority``)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    node: N | None = None
    try:
        scheduling = raise_priority() if realtime else None
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        node = make_node()
        gc.freeze()  # start-up's objects are never collected: a full collection no longer walks them
        if scheduling:
            node.get_logger().info(f'scheduling: {scheduling}')
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        while not stop.is_set() and not finished(node):
            executor.spin_once(timeout_sec=0.05)
        message = error(node)
        if message:
            print(f'{name}: error: {message}', file=sys.stderr)
            return 1
        return 0
    except CalfError as err:
        print(f'{name}: error: {err}', file=sys.stderr)
        return 2
    except (KeyboardInterrupt, ExternalShutdownException):
        return 0
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
