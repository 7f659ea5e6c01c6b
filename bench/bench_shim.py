"""Release-time accuracy of the shim node at a sustained message rate, and the latency it adds.

The shim runs in its own process with a fixed-delay profile (20 ms each way). This process
publishes Observations at ``--rate`` Hz to both ``edge/observation`` (through the shim) and
``direct/observation`` (no shim), and receives both. Measured per run:

- release error: the shim's actual publish time minus the release time its Relay planned
  (CLOCK_MONOTONIC, in the shim process);
- shim path: DDS reception time minus send stamp minus the configured delay;
- direct path: DDS reception time minus send stamp;
- added latency: p50 shim path minus p50 direct path (target <= 1 ms);
- median release error: p50 of the shim path, the message's delay beyond the configured one
  (target <= 2 ms; tests/test_shim_node.py and tests/test_generic_shim.py assert only the
  behaviour: in order, never early, the configured delay and not another).

Receive-side times are the reader's DDS reception timestamps and stamps are wall-clock times
of the same host, so that this process's own executor lag is not charged to the shim. Every
topic keeps the newest 100 messages (the shim's edge_depth and desktop_depth too), which
covers 100 ms of backlog at 1,000 msg/s. The first second is warm-up.

    python bench/bench_shim.py [--rate 1000] [--seconds 10] [--repeats 3] [--delay-ms 20] [--realtime-priority 0]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

TARGET_MS = 1.0
MEDIAN_TARGET_MS = 2.0
DEPTH = 100


class RunResult(NamedTuple):
    release_err_ms: np.ndarray  # shim publish time - planned release time
    shim_excess_ms: np.ndarray  # receive - stamp - configured delay, via the shim
    direct_ms: np.ndarray  # receive - stamp, direct
    sent: int
    lost_shim: int
    lost_direct: int


def timed(send: Callable[[bytes], None], times_s: list[float]) -> Callable[[bytes], None]:
    """Wrap a send function so that it records the monotonic time of every call."""
    def timed_send(data: bytes) -> None:
        times_s.append(time.monotonic_ns() / 1e9)
        send(data)
    return timed_send


def run_shim(profile: str, priority: int, ready: Any, stop: Any, conn: Any) -> None:
    """Child process: an instrumented ShimNode; sends (planned, published) uplink times when stopped."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from calf_shim.shim_node import ShimNode, request_realtime

    rclpy.init()
    params = {'network': profile, 'realtime_priority': priority, 'edge_depth': DEPTH, 'desktop_depth': DEPTH}
    node = ShimNode(parameter_overrides=[Parameter(name, value=value) for name, value in params.items()])
    planned: list[float] = []
    published: list[float] = []
    (relay, send), downlink = node.releaser.outputs
    submit = relay.submit

    def recording_submit(now_s: float, item: bytes, size_bytes: int) -> list[float]:
        releases = submit(now_s, item, size_bytes)
        planned.extend(releases)
        return releases

    relay.submit = recording_submit
    node.releaser.outputs = ((relay, timed(send, published)), downlink)
    request_realtime(node, threading.get_native_id(), 'executor')  # as shim_node.main() does
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    ready.set()
    try:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.1)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    conn.send((planned, published))


def send_loop(pubs: list[Any], msg_type: type, rate: float, n: int) -> None:
    """Publish n messages at `rate` Hz on each publisher, stamped just before each publish."""
    from calf_ros.conversions import time_msg

    start = time.monotonic() + 0.05
    for i in range(n):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        for pub in pubs:
            msg = msg_type(seq=i)
            msg.header.stamp = time_msg(time.time_ns())
            pub.publish(msg)


def run_once(profile: str, delay_ms: float, rate: float, seconds: float, priority: int) -> RunResult:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from calf_msgs.msg import Observation
    from calf_ros.conversions import time_ns
    from calf_ros.qos import QosConfig

    ctx = mp.get_context('spawn')
    ready, stop = ctx.Event(), ctx.Event()
    parent_conn, child_conn = ctx.Pipe()
    child = ctx.Process(target=run_shim, args=(profile, priority, ready, stop, child_conn))
    child.start()
    rclpy.init()
    node = rclpy.create_node('bench_shim')
    arrivals: dict[str, dict[int, float]] = {'shim': {}, 'direct': {}}

    def receiver(path: str) -> Callable[[Observation, dict], None]:
        def on_msg(msg: Observation, info: dict) -> None:
            arrivals[path][msg.seq] = (info['received_timestamp'] - time_ns(msg.header.stamp)) / 1e6
        return on_msg

    qos = QosConfig(depth=DEPTH).profile()
    pubs = [node.create_publisher(Observation, topic, qos) for topic in ('edge/observation', 'direct/observation')]
    node.create_subscription(Observation, 'desktop/observation', receiver('shim'), qos)
    node.create_subscription(Observation, 'direct/observation', receiver('direct'), qos)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        ready.wait(60)
        spin_until(executor, lambda: pubs[0].get_subscription_count() > 0
                   and node.count_publishers('desktop/observation') > 0, 30.0)
        n, warm = int(rate * (seconds + 1)), int(rate)
        sender = threading.Thread(target=send_loop, args=(pubs, Observation, rate, n))
        sender.start()
        spin_until(executor, lambda: not sender.is_alive(), seconds + 60.0)
        spin_until(executor, lambda: min(map(len, arrivals.values())) >= n, 1.0 + 2 * delay_ms / 1e3)
        sender.join()
    finally:
        stop.set()
        planned, published = parent_conn.recv()
        child.join()
        node.destroy_node()
        rclpy.try_shutdown()
    measured = range(warm, n)
    shim = np.array([arrivals['shim'][s] - delay_ms for s in measured if s in arrivals['shim']])
    direct = np.array([arrivals['direct'][s] for s in measured if s in arrivals['direct']])
    k = min(len(planned), len(published))
    release_err = (np.array(published[warm:k]) - np.array(planned[warm:k])) * 1e3
    sent = len(measured)
    return RunResult(release_err, shim, direct, sent, sent - len(shim), sent - len(direct))


def spin_until(executor: Any, condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.01)
    return condition()


def pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float('nan')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rate', type=float, default=1000.0)
    parser.add_argument('--seconds', type=float, default=10.0)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--delay-ms', type=float, default=20.0)
    parser.add_argument('--realtime-priority', type=int, default=0, help="the shim's realtime_priority parameter")
    args = parser.parse_args()
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / 'bench_fixed.yaml'
        profile.write_text(f'reorder: false\nuplink:\n  - {{model: fixed_delay, latency_ms: {args.delay_ms}}}\n'
                           'downlink: same\n')
        runs = [run_once(str(profile), args.delay_ms, args.rate, args.seconds, args.realtime_priority)
                for _ in range(args.repeats)]
    rows = {
        'release error (publish - planned)': [r.release_err_ms for r in runs],
        f'shim path (recv - stamp - {args.delay_ms:g} ms)': [r.shim_excess_ms for r in runs],
        'direct path (recv - stamp)': [r.direct_ms for r in runs],
    }
    print(f'shim bench: {args.rate:g} msg/s for {args.seconds:g} s (+1 s warm-up), fixed {args.delay_ms:g} ms, '
          f'{args.repeats} runs, realtime_priority {args.realtime_priority}, '
          f'load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians over runs, ms')
    print(f'{"metric":<40} {"p50":>8} {"p99":>8} {"max":>8}')
    for name, samples in rows.items():
        p50, p99, top = (statistics.median(pct(s, q) for s in samples) for q in (50, 99, 100))
        print(f'{name:<40} {p50:8.3f} {p99:8.3f} {top:8.3f}')
    added = statistics.median(pct(r.shim_excess_ms, 50) - pct(r.direct_ms, 50) for r in runs)
    release_p99 = statistics.median(pct(r.release_err_ms, 99) for r in runs)
    print(f'{"shim added p50 latency vs direct":<40} {added:8.3f}   ratio to {TARGET_MS:g} ms target: '
          f'{added / TARGET_MS:.2f}')
    print(f'{"release error p99":<40} {release_p99:8.3f}   ratio to {TARGET_MS:g} ms target: '
          f'{release_p99 / TARGET_MS:.2f}')
    median = statistics.median(pct(r.shim_excess_ms, 50) for r in runs)
    print(f'{"median release error (shim path p50)":<40} {median:8.3f}   ratio to {MEDIAN_TARGET_MS:g} ms target: '
          f'{median / MEDIAN_TARGET_MS:.2f}')
    print('lost per run (shim / direct): ' + ', '.join(f'{r.lost_shim}/{r.lost_direct} of {r.sent}' for r in runs))


if __name__ == '__main__':
    main()
