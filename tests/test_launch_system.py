"""``ros2 launch`` for real: each launch file runs as a user runs it, in this test run's private domain.

A launch of ``episodes:=3`` must play three counted episodes with real actions (read from the env node's
episode log lines: a DDS listener in this process does not always finish discovery before so short a run
ends; EpisodeResults over DDS are checked in test_env_policy_nodes.py and the parity tests), exit by
itself with code 0 and leave no node behind (its nodes share the launch's session, which is checked for
survivors). The policy is a freshly initialised agent: these tests are about the launch, not about
learning. Skipped, naming what is missing, where ``ros2 launch`` is not installed (README: launch bundle).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from ros_helpers import PrivateNode, sigint_as_in_a_terminal, untrained_cartpole_policy
from std_msgs.msg import String

from calf_bringup.launch_tools import missing_launch_tools

MISSING = missing_launch_tools(command=True)
pytestmark = [pytest.mark.ros, pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]
SCALE = '4'
TIMEOUT_S = 90.0


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return untrained_cartpole_policy(tmp_path_factory.mktemp('ckpt') / 'cartpole')


class Launch:
    """``ros2 launch calf_bringup FILE ARG:=VALUE ...`` in its own session, in this test's domain."""

    def __init__(self, tmp_path: Path, launch_file: str, **arguments: str) -> None:
        domain = os.environ['ROS_DOMAIN_ID']
        argv = ['ros2', 'launch', 'calf_bringup', launch_file, f'domain_id:={domain}', 'discovery:=localhost',
                *(f'{name}:={value}' for name, value in arguments.items())]
        self.log = tmp_path / f'{launch_file}.{len(list(tmp_path.glob("*.log")))}.log'
        with self.log.open('w') as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, preexec_fn=sigint_as_in_a_terminal)

    def wait(self, timeout_s: float = TIMEOUT_S) -> int:
        """Its exit code; on a timeout the whole session is killed and the test fails with the output."""
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f'{self.log.name} did not exit within {timeout_s:g} s:\n{self.output()}')

    def interrupt(self) -> int:
        """Ctrl-C, as in a terminal (SIGINT to the launch's process group); its exit code."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.wait(30.0)

    def output(self) -> str:
        return self.log.read_text()

    def survivors(self) -> list[str]:
        """Command lines of processes still in the launch's session."""
        found = []
        for stat in Path('/proc').glob('[0-9]*/stat'):
            try:
                fields = stat.read_text().rsplit(')', 1)[1].split()
                if int(fields[3]) == self.process.pid:
                    found.append((stat.parent / 'cmdline').read_text().replace('\0', ' '))
            except (OSError, IndexError, ValueError):
                continue
        return found

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


@pytest.fixture
def launches() -> Iterator[list[Launch]]:
    started: list[Launch] = []
    yield started
    for launch in started:
        if launch.process.poll() is None or launch.survivors():
            launch.kill()


EPISODE_LINE = re.compile(r'\[calf\.env\]: episode (\d+): return \S+, length \d+, e2e p50 (\S+) ms')


def assert_three_driven_episodes(launch: Launch) -> None:
    """The env counted episodes 0, 1 and 2, and in each one actions arrived (an E2E latency was measured)."""
    episodes = EPISODE_LINE.findall(launch.output())
    assert [int(k) for k, _ in episodes] == [0, 1, 2], launch.output()
    assert all(p50 != 'nan' for _, p50 in episodes), launch.output()


def test_sim_net_launch_plays_its_episodes_and_exits_by_itself(checkpoint: Path, tmp_path: Path,
                                                              launches: list[Launch]) -> None:
    launches.append(launch := Launch(tmp_path, 'sim_net.launch.py', policy=str(checkpoint),
                                     network='wifi_normal', episodes='3', time_scale=SCALE))
    assert launch.wait() == 0, launch.output()
    assert_three_driven_episodes(launch)
    out = launch.output()
    assert 'waiting for a policy' in out and 'env finished (exit code 0): stopping the launch' in out
    assert launch.survivors() == []


def test_edge_and_desktop_launches_find_each_other(checkpoint: Path, tmp_path: Path,
                                                   launches: list[Launch]) -> None:
    """The edge launch (env + shim) ends after its episodes; the desktop one (policy) serves until Ctrl-C."""
    common = {'network': 'delay_only', 'time_scale': SCALE}
    launches.append(edge := Launch(tmp_path, 'edge_sim.launch.py', role='edge', episodes='3', **common))
    launches.append(desktop := Launch(tmp_path, 'edge_sim.launch.py', role='desktop',
                                      policy=str(checkpoint), **common))
    assert edge.wait() == 0, edge.output() + desktop.output()
    assert_three_driven_episodes(edge)
    assert desktop.process.poll() is None, desktop.output()
    assert desktop.interrupt() == 0, desktop.output()
    assert edge.survivors() == [] and desktop.survivors() == []
    assert 'policy heard after' in edge.output() and '[policy_node-1]' in desktop.output()


def test_impair_launch_relays_a_configured_topic(tmp_path: Path, launches: list[Launch]) -> None:
    config = tmp_path / 'relay.yaml'
    config.write_text('- {in_topic: /chatter_raw, out_topic: /chatter, type: std_msgs/msg/String, '
                      'direction: uplink, profile: delay_only}\n')
    with PrivateNode('launch_test') as listener:
        received: list[String] = []
        listener.node.create_subscription(String, '/chatter', received.append, 10)
        publisher = listener.node.create_publisher(String, '/chatter_raw', 10)
        sent = iter(range(10**6))
        listener.node.create_timer(0.05, lambda: publisher.publish(String(data=f'hello {next(sent)}')))
        launches.append(launch := Launch(tmp_path, 'impair.launch.py', config=str(config), time_scale=SCALE))
        assert listener.until(lambda: len(received) >= 3, 60.0), launch.output()
        assert all(msg.data.startswith('hello ') for msg in received)
        assert launch.process.poll() is None, launch.output()
        assert launch.interrupt() == 0, launch.output()
    assert launch.survivors() == []


def test_impair_launch_without_config_names_the_launch_argument(tmp_path: Path, launches: list[Launch]) -> None:
    launches.append(launch := Launch(tmp_path, 'impair.launch.py'))
    assert launch.wait() == 1
    assert 'impair needs a relay config: pass config:=FILE.yaml' in launch.output()


def test_a_node_failing_at_start_up_ends_the_launch_naming_it(tmp_path: Path, launches: list[Launch]) -> None:
    launches.append(launch := Launch(tmp_path, 'sim_net.launch.py', policy=str(tmp_path / 'absent'),
                                     time_scale=SCALE))
    assert launch.wait() == 1
    out = launch.output()
    assert 'policy_node: error: no checkpoint at' in out
    assert 'policy exited with code 2 (its error is above): stopping the launch' in out
    assert launch.survivors() == []
