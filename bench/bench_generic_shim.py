"""Throughput of the generic shim: 1 kB messages relayed through a zero-delay profile (target >= 2,000 msg/s).

The generic shim runs in its own process, pinned to CPU 0, relaying ``std_msgs/UInt8MultiArray``
(1,000 data bytes, about 1 kB serialized) from ``/bench/in`` to ``/bench/out`` as raw bytes. This
process, pinned to the other CPUs, publishes pre-serialized messages at each offered ``--rates``
value for ``--seconds`` (after a 1 s warm-up) and counts what arrives. Per run:

- achieved: messages that arrived from the window / window length (msg/s);
- loss: 1 - arrived / sent over the window (both sides best effort, depth 100: a shim that cannot
  keep up loses messages rather than slowing the sender down);
- shim CPU: the shim process's CPU time over the window / window length (1.0 = one core busy).

    python bench/bench_generic_shim.py [--rates 2000 4000] [--seconds 5] [--repeats 3]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

TARGET = 2000.0  # msg/s
PAYLOAD = 1000  # bytes of UInt8MultiArray.data
WARM_UP_S = 1.0
DRAIN_S = 0.5
CONFIG = ('- {in_topic: /bench/in, out_topic: /bench/out, type: std_msgs/msg/UInt8MultiArray, direction: uplink,\n'
          '   profile: zero.yaml, qos: {reliability: best_effort, depth: 100}}\n')


class RunResult(NamedTuple):
    offered: float  # msg/s
    achieved: float  # msg/s
    loss: float  # fraction of the window's messages
    shim_cpu: float  # cores


def run_shim(config: str, ready: Any, stop: Any, conn: Any) -> None:
    """Child process: the generic shim on CPU 0; answers each 'mark' with its CPU time so far."""
    os.sched_setaffinity(0, {0})
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from calf_shim.generic_shim_node import GenericShimNode

    rclpy.init()
    node = GenericShimNode(parameter_overrides=[Parameter('config', value=config)])
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    ready.set()
    try:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.05)
            if conn.poll():
                conn.recv()
                conn.send(time.process_time())
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def send_loop(publish: Any, data: bytes, rate: float, n: int) -> None:
    """Publish n messages at `rate` per second on average (catching up when late)."""
    start = time.monotonic()
    for i in range(n):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        publish(data)


def run_once(config: str, rate: float, seconds: float) -> RunResult:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.serialization import serialize_message
    from std_msgs.msg import UInt8MultiArray

    from calf_ros.qos import QosConfig

    ctx = mp.get_context('spawn')
    ready, stop = ctx.Event(), ctx.Event()
    parent_conn, child_conn = ctx.Pipe()
    child = ctx.Process(target=run_shim, args=(config, ready, stop, child_conn))
    child.start()
    rclpy.init()
    node = rclpy.create_node('bench_generic_shim')
    qos = QosConfig(depth=100).profile()
    pub = node.create_publisher(UInt8MultiArray, '/bench/in', qos)
    arrived = [0]
    node.create_subscription(UInt8MultiArray, '/bench/out', lambda data: arrived.__setitem__(0, arrived[0] + 1),
                             qos, raw=True)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    data = serialize_message(UInt8MultiArray(data=bytes(PAYLOAD)))

    def phase(n: int) -> None:
        sender = threading.Thread(target=send_loop, args=(pub.publish, data, rate, n))
        sender.start()
        spin_until(executor, lambda: not sender.is_alive(), n / rate + 60.0)
        sender.join()

    def cpu_mark() -> float:
        parent_conn.send('mark')
        return parent_conn.recv()

    try:
        ready.wait(60)
        spin_until(executor, lambda: pub.get_subscription_count() > 0 and node.count_publishers('/bench/out') > 0,
                   30.0)
        phase(int(rate * WARM_UP_S))
        spin_until(executor, lambda: False, DRAIN_S)
        before, cpu_before = arrived[0], cpu_mark()
        n = int(rate * seconds)
        phase(n)
        spin_until(executor, lambda: arrived[0] - before >= n, DRAIN_S)
        got, cpu_used = arrived[0] - before, cpu_mark() - cpu_before
    finally:
        stop.set()
        child.join()
        node.destroy_node()
        rclpy.try_shutdown()
    return RunResult(rate, got / seconds, 1.0 - got / n, cpu_used / seconds)


def spin_until(executor: Any, condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.01)
    return condition()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rates', type=float, nargs='+', default=[TARGET], help='offered rates, msg/s')
    parser.add_argument('--seconds', type=float, default=5.0)
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    cpus = os.sched_getaffinity(0)
    if len(cpus) > 1:
        os.sched_setaffinity(0, cpus - {0})  # the shim has CPU 0 to itself (apart from other processes)
    print(f'generic shim bench: UInt8MultiArray of {PAYLOAD} bytes, zero-delay profile, {args.seconds:g} s per run '
          f'(+{WARM_UP_S:g} s warm-up), {args.repeats} runs, shim pinned to CPU 0, load average '
          f'{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians over runs')
    print(f'{"offered msg/s":>14} {"achieved msg/s":>15} {"loss %":>8} {"shim CPU":>9} {"ratio to target":>16}')
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / 'zero.yaml').write_text('uplink: []\ndownlink: same\n')
        config = Path(tmp) / 'relay.yaml'
        config.write_text(CONFIG)
        for rate in args.rates:
            runs = [run_once(str(config), rate, args.seconds) for _ in range(args.repeats)]
            achieved = statistics.median(r.achieved for r in runs)
            print(f'{rate:14.0f} {achieved:15.0f} {statistics.median(r.loss for r in runs) * 100:8.2f} '
                  f'{statistics.median(r.shim_cpu for r in runs):9.2f} {achieved / TARGET:16.2f}')


if __name__ == '__main__':
    main()
