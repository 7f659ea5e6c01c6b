"""calf_msgs: generated types import, cross a process boundary over DDS, and reject bad field values."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.sample_messages import sample_messages
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from ros_helpers import new_context, spin_until

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_every_message_round_trips_between_processes() -> None:
    expected = sample_messages()
    publisher = subprocess.Popen([sys.executable, str(ROOT / 'tests/fixtures/publish_samples.py')])
    context = new_context()
    received: dict[str, object] = {}
    try:
        node = Node('calf_sample_listener', context=context)
        for name, msg in expected.items():
            node.create_subscription(type(msg), f'calf_test/{name}',
                                     lambda m, name=name: received.setdefault(name, m), 10)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        assert spin_until(executor, lambda: len(received) == len(expected), timeout_s=30.0), \
            f'only received {sorted(received)} from the peer process'
    finally:
        publisher.terminate()
        publisher.wait(timeout=10)
        context.try_shutdown()
    for name, msg in expected.items():
        assert received[name] == msg, name


def test_invalid_field_values_raise_clear_errors() -> None:
    from calf_msgs.msg import Action, Observation
    with pytest.raises(AssertionError, match='reward'):
        Observation(reward='fast')
    with pytest.raises(AssertionError, match='seq'):
        Observation(seq=-1)
    with pytest.raises(TypeError, match='integer'):
        Action(discrete_plan=[0.5])
    with pytest.raises(TypeError, match='real number'):
        Observation(data=['x'])


def test_message_constants_are_defined() -> None:
    from calf_msgs.msg import LinkStats, TraceSample
    assert (LinkStats.DIRECTION_UPLINK, LinkStats.DIRECTION_DOWNLINK, LinkStats.DIRECTION_END_TO_END) == (0, 1, 2)
    assert TraceSample.DIRECTION_DOWNLINK == 1


def test_every_console_script_exists_after_the_build() -> None:
    scripts = []
    for setup in sorted(ROOT.glob('src/*/setup.py')):
        package = setup.parent.name
        for line in setup.read_text().splitlines():
            if '= ' in line and ':main' in line:
                scripts.append((package, line.strip().strip("',").split(' = ')[0]))
    assert len(scripts) >= 4
    for package, name in scripts:
        path = ROOT / 'install' / package / 'lib' / package / name
        assert path.is_file(), f'{path} missing: run scripts/bootstrap.sh'
