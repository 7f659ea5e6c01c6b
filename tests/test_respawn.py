"""Respawn over DDS: kill the policy node of a live sim_net graph, and see the env keep ticking and
a new policy process come back and act, under ``calf run --respawn true`` and ``ros2 launch ...
respawn:=true`` (skipped, naming what is missing, where ``ros2 launch`` is not installed).

The policy is a freshly initialised agent: these tests are about restarting nodes, not learning.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from ros_helpers import PrivateNode, sigint_as_in_a_terminal, untrained_cartpole_policy

from calf_bringup.launch_tools import missing_launch_tools
from calf_msgs.msg import Action, Observation
from calf_ros.qos import STREAM

pytestmark = [pytest.mark.ros, pytest.mark.slow]
SCALE = '4'
TIMEOUT_S = 60.0
ACTS = 5  # actions that show a policy process is answering


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return untrained_cartpole_policy(tmp_path_factory.mktemp('ckpt') / 'cartpole')


class Traffic(PrivateNode):
    """The env's observations and the policy's actions of a sim_net graph, seen from a private context."""

    def __init__(self) -> None:
        super().__init__('respawn_test')
        self.observations: list[Observation] = []
        self.actions: list[Action] = []
        self.node.create_subscription(Observation, '/calf/edge/observation', self.observations.append,
                                      STREAM.profile())
        self.node.create_subscription(Action, '/calf/desktop/action', self.actions.append, STREAM.profile())

    def until(self, condition: Callable[[], bool], timeout_s: float = TIMEOUT_S) -> bool:
        return super().until(condition, timeout_s)


def kill_the_policy_and_see_it_return(traffic: Traffic, output: Callable[[], str], policy_pid: Callable[[], int],
                                      restarted: Callable[[], bool]) -> None:
    """SIGKILL the policy once it acts; the env goes on (same run, rising seq) and a new policy acts."""
    assert traffic.until(lambda: len(traffic.actions) >= ACTS), output()
    old = policy_pid()
    os.kill(old, signal.SIGKILL)
    actions_at_kill, observations_at_kill = len(traffic.actions), len(traffic.observations)
    assert traffic.until(restarted), output()
    assert policy_pid() != old, output()
    assert traffic.until(lambda: len(traffic.actions) >= actions_at_kill + ACTS), output()
    ticked = traffic.observations[observations_at_kill:]
    assert len(ticked) >= ACTS and len({obs.run for obs in traffic.observations}) == 1, output()
    assert (ticked[-1].episode, ticked[-1].seq) > (ticked[0].episode, ticked[0].seq)


class CalfRun:
    """``calf run sim_net --respawn true ...``, its output gathered line by line."""

    def __init__(self, checkpoint: Path) -> None:
        argv = [sys.executable, '-m', 'calf_bringup.cli', 'run', 'sim_net', '--policy', str(checkpoint),
                '--network', 'wifi_normal', '--time-scale', SCALE, '--respawn', 'true', '--respawn-delay', '0.5']
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        stdin=subprocess.DEVNULL, preexec_fn=sigint_as_in_a_terminal)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout or ()), daemon=True)
        self.reader.start()

    def output(self) -> str:
        return ''.join(self.lines)

    def policy_pid(self) -> int:
        """The pid of the newest policy process, as the runner announced it."""
        return int(re.findall(r'policy (?:started again )?\(pid (\d+)\)', self.output())[-1])


def test_calf_run_respawn_brings_a_killed_policy_back_while_the_env_ticks(checkpoint: Path) -> None:
    traffic, run = Traffic(), CalfRun(checkpoint)
    try:
        kill_the_policy_and_see_it_return(traffic, run.output, run.policy_pid,
                                          lambda: '[calf] policy started again' in run.output())
        assert '[calf] policy was killed by SIGKILL: starting it again' in run.output()
        assert 'starting it again in 0.5 s (restart 1 of 5)' in run.output()
        assert '[calf] env ' not in run.output() and run.process.poll() is None
    finally:
        traffic.close()
        run.process.send_signal(signal.SIGINT)
        code = run.process.wait(30)
        run.reader.join(5)
    assert code == 130 and '[calf] policy stopped with code' in run.output(), run.output()


def test_launch_respawn_brings_a_killed_policy_back_while_the_env_ticks(checkpoint: Path, tmp_path: Path) -> None:
    missing = missing_launch_tools(command=True)
    if missing is not None:
        pytest.skip(str(missing))
    from test_launch_system import Launch
    traffic = Traffic()
    launch = Launch(tmp_path, 'sim_net.launch.py', policy=str(checkpoint), network='wifi_normal', time_scale=SCALE,
                    respawn='true', respawn_delay='0.5')

    def policy_pid() -> int:
        return int(re.findall(r'\[policy_node-\d+\]: process started with pid \[(\d+)\]', launch.output())[-1])

    try:
        kill_the_policy_and_see_it_return(
            traffic, launch.output, policy_pid,
            lambda: len(re.findall(r'\[policy_node-\d+\]: process started', launch.output())) == 2)
        assert 'policy exited with code -9: starting it again in 0.5 s (restart 1 of 5)' in launch.output()
        assert launch.process.poll() is None
    finally:
        traffic.close()
        code = launch.interrupt() if launch.process.poll() is None else launch.process.returncode
        if launch.survivors():
            launch.kill()
    assert code == 0, launch.output()


def test_launch_respawn_still_ends_when_the_env_finishes(checkpoint: Path, tmp_path: Path) -> None:
    """Launch's respawn restarts any exit; a node that finishes with code 0 must end the launch instead."""
    missing = missing_launch_tools(command=True)
    if missing is not None:
        pytest.skip(str(missing))
    from test_launch_system import Launch
    launch = Launch(tmp_path, 'sim_net.launch.py', policy=str(checkpoint), network='wifi_normal', time_scale=SCALE,
                    episodes='2', respawn='true', respawn_delay='0.5')
    try:
        assert launch.wait() == 0, launch.output()
    finally:
        if launch.survivors():
            launch.kill()
    out = launch.output()
    assert 'env finished (exit code 0): stopping the launch' in out
    assert len(re.findall(r'\[env_node-\d+\]: process started', out)) == 1, out
