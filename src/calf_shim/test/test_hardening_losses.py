"""Losses under flood (class 5): observations lost before the shim are estimated from their sequence
numbers, read from the serialized bytes, and reported apart from the losses the middleware reports."""
from __future__ import annotations

import pytest
from rclpy.serialization import serialize_message

from calf_core.timing import MAX_SEQ_JUMP
from calf_msgs.msg import Observation
from calf_shim.seq_gaps import GapEstimator, read_observation_ids


@pytest.mark.parametrize('frame_id', ['', 'a', 'abc', 'abcdefg', 'x' * 13, 'ü' * 5])
def test_ids_are_read_from_the_bytes_whatever_the_frame_id(frame_id: str) -> None:
    msg = Observation(seq=2 ** 40 + 3, episode=7, run=2 ** 32 - 2, data=[1.0, 2.0])
    msg.header.frame_id = frame_id
    assert read_observation_ids(serialize_message(msg)) == (2 ** 32 - 2, 7, 2 ** 40 + 3)


@pytest.mark.parametrize('data', [b'', b'\x00\x01\x00\x00', b'\x00\x01\x00\x00' + b'\xff' * 12, b'\x00' * 15])
def test_short_or_damaged_bytes_give_no_ids(data: bytes) -> None:
    assert read_observation_ids(data) is None


def stream(estimator: GapEstimator, ids: list[tuple[int, int, int]]) -> int:
    for run, episode, seq in ids:
        estimator.observe(run, episode, seq)
    return estimator.lost


@pytest.mark.parametrize('ids, lost', [
    ([(1, 0, s) for s in range(10)], 0),
    ([(1, 0, s) for s in (0, 1, 4, 5, 9)], 5),
    ([(1, 0, s) for s in (0, 2, 1, 3)], 0),  # reordered: the late one fills the gap
    ([(1, 0, s) for s in (0, 1, 1, 2)], 0),  # duplicate
    ([(1, 0, 0), (1, 0, 1), (1, 1, 3), (1, 1, 4)], 3),  # a new episode first seen at seq 3
    ([(1, 0, 0), (1, 1, 0), (1, 0, 5), (1, 1, 1)], 0),  # a straggler of the old episode
    ([(1, 0, 0), (9, 0, 2)], 2),  # a restarted env
    ([(1, 0, 0), (1, 0, 2 ** 63), (1, 0, 1)], 0),  # a forged seq is an anomaly, not losses
])
def test_gap_estimates(ids: list[tuple[int, int, int]], lost: int) -> None:
    assert stream(GapEstimator(), ids) == lost


def test_a_huge_jump_is_counted_as_an_anomaly() -> None:
    estimator = GapEstimator()
    stream(estimator, [(1, 0, 0), (1, 0, MAX_SEQ_JUMP + 5)])
    assert (estimator.lost, estimator.anomalies) == (0, 1)


@pytest.mark.ros
def test_the_shim_reports_estimated_losses_apart_from_reported_ones() -> None:
    """Observations skipped by the sender (lost before the shim) show up in dropped_middleware_estimated."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from calf_msgs.msg import LinkStats
    from calf_ros.qos import RESULTS, QosConfig
    from calf_shim.shim_node import ShimNode

    context = rclpy.Context()
    rclpy.init(context=context)
    executor = SingleThreadedExecutor(context=context)
    shim = ShimNode(context=context, parameter_overrides=[Parameter('stats_period_s', value=0.1),
                                                          Parameter('edge_reliability', value='reliable'),
                                                          Parameter('edge_depth', value=100)])
    client = Node('gap_client', context=context)
    stats: list[LinkStats] = []
    client.create_subscription(LinkStats, 'shim/link_stats', stats.append, RESULTS)
    pub = client.create_publisher(Observation, 'edge/observation', QosConfig('reliable', 'volatile', 100).profile())
    for node in (shim, client):
        executor.add_node(node)
    try:
        def spin_until(condition, timeout_s: float = 15.0) -> bool:  # noqa: ANN001
            import time
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and not condition():
                executor.spin_once(timeout_sec=0.02)
            return condition()

        assert spin_until(lambda: pub.get_subscription_count() > 0)
        sent = [s for s in range(60) if s % 4 != 3]  # every fourth observation "lost" on the way: 15
        for seq in sent:
            pub.publish(Observation(run=5, episode=0, seq=seq, data=[0.0]))
            executor.spin_once(timeout_sec=0.001)

        def uplink() -> LinkStats | None:
            ups = [s for s in stats if s.direction == LinkStats.DIRECTION_UPLINK]
            return ups[-1] if ups else None

        assert spin_until(lambda: uplink() is not None and uplink().received == len(sent))
        up = uplink()
        assert up.dropped_middleware_estimated == 15 - (1 if sent[-1] < 59 else 0) and up.dropped_middleware == 0
        assert spin_until(lambda: any(s.direction == LinkStats.DIRECTION_DOWNLINK for s in stats))
        assert all(s.dropped_middleware_estimated == 0 for s in stats if s.direction == LinkStats.DIRECTION_DOWNLINK)
    finally:
        for node in (shim, client):
            executor.remove_node(node)
            node.destroy_node()
        executor.shutdown()
        context.try_shutdown()
