"""Hostile traffic against running nodes (classes 1 and 7): oversized plans and out-of-bounds continuous actions
are refused at the env's edge, counted and logged while episodes go on; one forged observation cannot silence
the policy; under a flood, the shim's counters account for every message sent."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from message_flood import run_flood
from rcl_interfaces.msg import Log
from ros_helpers import new_context
from test_env_policy_nodes import Graph, Probe, env_node, linked, policy_node

from calf_agent.checkpoint import save_checkpoint
from calf_agent.policies import MlpAgent
from calf_core.timing import Verdict
from calf_msgs.msg import Action, Observation
from calf_ros.qos import RESULTS

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


@pytest.mark.slow
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


def test_an_out_of_bounds_continuous_action_is_rejected_counted_and_logged(graph: Graph) -> None:
    probe = graph.add(Probe(graph.context, 'h3', observe=True))
    logs: list[str] = []
    probe.create_subscription(Log, '/rosout', lambda log: logs.append(log.msg), RESULTS)
    env = env_node(graph, 'h3', env='Pendulum-v1', stats_period_s=0.2)  # actions in [-2, 2]
    assert graph.until(lambda: probe.observations and linked(probe.action_pub, env), 30.0)
    for _ in range(50):  # best effort: repeat until one arrives
        last = probe.observations[-1]
        probe.action_pub.publish(Action(episode=last.episode, obs_seq=last.seq, continuous=[1e30]))
        if graph.until(lambda: env.rejected > 0, 0.2):
            break
    assert env.rejected > 0 and env.rejected == env.verdicts[Verdict.INVALID]
    assert graph.until(lambda: probe.stats and probe.stats[-1].rejected == env.rejected, 10.0)
    assert graph.until(lambda: any('outside the action space Box(-2.0, 2.0' in line for line in logs), 10.0), logs


@pytest.mark.slow
@pytest.mark.parametrize('target', ['shim', 'env'])
def test_the_counters_account_for_every_message_of_a_flood(target: str) -> None:
    """Seconds of Observations into the shim (Actions into the env) as fast as a publisher sends them: most never
    reach the node's callback (its KEEP_LAST history of 10 is overwritten), and each is counted in received or
    dropped_middleware."""
    context = new_context()
    try:
        report = run_flood(context, target, seconds=3.0)
    finally:
        context.try_shutdown()
    assert report['settled'] and report['sent'] > 1000, report
    assert 0.99 * report['sent'] <= report['accounted'] <= 1.01 * report['sent'], report
    assert report['rejected'] == 0 and report['received'] > 0, report
