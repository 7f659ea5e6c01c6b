"""A SAC checkpoint in the nodes over DDS: the policy node plays Pendulum-v1 episodes with the env node, and the
adapter policy node writes its action into Twist fields; both act deterministically (the tanh of the mean, scaled
to the bounds)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from test_adapter_policy_node import JOINTS, OBSERVATION, drive, write_adapter
from test_env_policy_nodes import Graph, Probe, env_node, policy_node

from calf_agent.checkpoint import save_checkpoint
from calf_agent.sac import SacActor
from calf_bringup import cli

pytestmark = pytest.mark.ros


def constant_actor(obs_dim: int, unit: list[float], low: list[float], high: list[float]) -> SacActor:
    """A SAC actor whose mean is ``atanh(unit)`` whatever it observes, and whose sampled actions would spread."""
    torch.manual_seed(0)
    actor = SacActor(obs_dim, len(unit), low, high, hidden=(8,))
    with torch.no_grad():
        actor.mean.weight.zero_()
        actor.mean.bias.copy_(torch.atanh(torch.tensor(unit)))
        actor.log_std.bias.fill_(5.0)  # std near e^2: a sampled action would not be the mean's
    return actor


@pytest.fixture
def graph() -> Graph:
    graph = Graph()
    yield graph
    graph.close()


APPLIED = 100
"""Actions the env must apply before the test judges them: a sampled action (std near e^2 before the tanh) lands
within ``np.allclose`` of the mean's in none of them."""


@pytest.mark.slow
def test_a_sac_checkpoint_drives_the_policy_node_deterministically(graph: Graph, tmp_path: Path) -> None:
    """Pendulum-v1 episodes run until the env has applied ``APPLIED`` of the policy's actions (on a loaded host an
    episode's 200 real-time ticks may apply fewer: more episodes then); every action sent is the mean's."""
    ckpt = save_checkpoint(tmp_path / 'sac', constant_actor(3, [0.25], [-2.0], [2.0]),
                           {'env': 'Pendulum-v1', 'algo': 'sac', 'representation': {'frames': 1, 'actions': 0}})
    probe = graph.add(Probe(graph.context, 'sac'))
    policy = policy_node(graph, 'sac', ckpt)
    env_node(graph, 'sac', env='Pendulum-v1')  # episodes until the test ends

    def applied() -> int:
        return sum(r.actions_applied for r in probe.results)

    assert graph.until(lambda: applied() >= APPLIED, timeout_s=240.0), \
        f'{applied()} actions applied in {len(probe.results)} episodes'
    assert all(r.length == 200 and r.rejected == 0 for r in probe.results)
    sent = [list(a.continuous) for a in probe.actions]
    assert len(sent) >= APPLIED and policy.rejected == 0
    assert np.allclose(sent, 0.5)  # 0.25 of the way from 0 to the bound 2, every time


def test_a_sac_checkpoint_drives_the_adapter_policy_node(tmp_path: Path) -> None:
    actor = constant_actor(4, [0.5, -0.5], [-0.2, -1.0], [0.2, 1.0])
    ckpt = save_checkpoint(tmp_path / 'ckpt', actor, {'env': 'InvertedPendulum-v5', 'algo': 'sac'})
    twist = {'topic': '/sac/cmd_vel', 'type': 'geometry_msgs/msg/Twist', 'fields': ['linear.x', 'angular.z']}
    policy, received = drive(ckpt, write_adapter(tmp_path, {**JOINTS, 'topic': '/sac/joint_states'}, twist), '/sac')
    expected = actor.act(OBSERVATION, deterministic=True)[0][0]
    assert expected.tolist() == pytest.approx([0.1, -0.5])
    assert all((t.linear.x, t.angular.z) == pytest.approx(tuple(expected)) for t in received)
    assert policy.rejected == 0 and policy.acted >= 3


@pytest.mark.slow
def test_calf_eval_runs_a_sac_checkpoint_in_both_backends(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = save_checkpoint(tmp_path / 'sac', constant_actor(3, [0.25], [-2.0], [2.0]),
                           {'env': 'Pendulum-v1', 'algo': 'sac', 'representation': {'frames': 1, 'actions': 0}})
    common = ['eval', '--policy', str(ckpt), '--network', 'wifi_normal', '--episodes', '2', '--json']
    reports = {}
    for backend, extra in (('sim', []), ('ros', ['--time-scale', '4', '--domain-id', os.environ['ROS_DOMAIN_ID']])):
        assert cli.main([*common, '--backend', backend, *extra]) == 0
        reports[backend] = json.loads(capsys.readouterr().out)
    for backend, report in reports.items():
        assert (report['backend'], report['episodes'], report['mean_length']) == (backend, 2, 200.0)
        assert report['e2e_latency_ms']['p50'] > 0 and all(np.isfinite(report['returns']))
