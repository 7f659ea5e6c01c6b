"""Hostile traffic against running nodes (classes 1 and 7): oversized plans are refused at the env's edge
and counted while episodes go on; one forged observation cannot silence the policy."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_env_policy_nodes import Graph, Probe, env_node, linked, policy_node

from calf_agent.checkpoint import save_checkpoint
from calf_agent.policies import MlpAgent
from calf_core.timing import Verdict
from calf_msgs.msg import Action, Observation

pytestmark = pytest.mark.ros


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return save_checkpoint(tmp_path_factory.mktemp('ckpt') / 'cartpole', MlpAgent(4, 2),
                           {'env': 'cartpole', 'representation': {'frames': 1, 'actions': 0}})


@pytest.fixture
def graph() -> Graph:
    graph = Graph()
    yield graph
    graph.close()


def test_huge_plans_are_refused_counted_and_episodes_go_on(graph: Graph, checkpoint: Path) -> None:
    probe = graph.add(Probe(graph.context, 'h1', observe=True))
    env = env_node(graph, 'h1', stats_period_s=0.2)
    policy_node(graph, 'h1', checkpoint)
    assert graph.until(lambda: probe.observations and linked(probe.action_pub, env))
    for _ in range(30):  # 10^5-element plans for the current observation: 800 kB each
        last = probe.observations[-1]
        probe.action_pub.publish(Action(episode=last.episode, obs_seq=last.seq, discrete=0,
                                        discrete_plan=[0] * 100_000))
        graph.executor.spin_once(timeout_sec=0.01)
    # best effort: a fragmented 800 kB message may be lost on the way; every one that arrives is refused
    assert graph.until(lambda: env.rejected > 0 and env.verdicts[Verdict.INVALID] == 0, 30.0)
    done = len(probe.results)
    assert graph.until(lambda: len(probe.results) >= done + 2, 60.0)
    assert graph.until(lambda: probe.stats and probe.stats[-1].rejected == env.rejected > 0, 10.0)
    assert env.rejected <= 30
    assert sum(r.actions_applied for r in probe.results[done:]) > 0, 'the policy still drives the env'
    assert all(0 <= s.dropped_middleware < 2 ** 63 for s in probe.stats)


def test_one_forged_observation_does_not_silence_the_policy(graph: Graph, checkpoint: Path) -> None:
    probe = graph.add(Probe(graph.context, 'h2', observe=True))
    env_node(graph, 'h2')
    policy = policy_node(graph, 'h2', checkpoint)
    assert graph.until(lambda: probe.actions and linked(probe.obs_pub, policy), 30.0)
    real = probe.observations[-1]
    forged = Observation(seq=0, episode=2 ** 32 - 1, run=real.run, data=[0.0] * 4, shape=[4])
    for _ in range(50):  # best effort: repeat the same forgery until one arrives
        probe.obs_pub.publish(forged)
        if graph.until(lambda: policy.runner.anomalies.get('episode_jump'), 0.2):
            break
    assert policy.runner.anomalies.get('episode_jump')
    acted, done = policy.acted, len(probe.results)
    assert graph.until(lambda: policy.acted > acted + 20 and len(probe.results) > done, 60.0)
    assert sum(r.actions_applied for r in probe.results[done:]) > 0
    assert not [a for a in probe.actions if a.episode == 2 ** 32 - 1], 'the forgery was never answered'
