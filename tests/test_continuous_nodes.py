"""A continuous task over DDS: the env node runs Pendulum-v1 and applies continuous Action plans.

A small policy in the test answers each observation with a torque plan; the env node applies it
under hold zero, refuses malformed or out-of-bounds actions and counts them, and keeps ticking.
"""
from __future__ import annotations

import numpy as np
import pytest
from test_env_policy_nodes import Graph, Probe, env_node, linked

from calf_core.timing import AppliedAction, FeedbackPlan, Verdict
from calf_msgs.msg import Observation
from calf_ros.conversions import msg_to_obs, plan_to_msg
from calf_ros.qos import STREAM

pytestmark = pytest.mark.ros


class TorquePolicy(Probe):
    """Answers every observation with a two-element plan of torques, -theta_dot clipped to [-2, 2]."""

    def __init__(self, graph: Graph, namespace: str) -> None:
        super().__init__(graph.context, namespace)
        self.answered = 0
        self.create_subscription(Observation, 'observation', self._on_obs, STREAM.profile())

    def _on_obs(self, msg: Observation) -> None:
        obs = msg_to_obs(msg, 3)
        if obs.terminated or obs.truncated:
            return
        torque = np.clip(-obs.obs[2:3], -2.0, 2.0).astype(np.float32)
        self.action_pub.publish(plan_to_msg(obs, [torque, torque], 'torque', 0.0, 0))
        self.answered += 1


class FeedbackPolicy(TorquePolicy):
    """Answers every observation with a plan of zero torques whose feedback is the whole control law: gains -1 on
    theta_dot, predicted observation zero, so the env applies -theta_dot of the tick before (within [-2, 2])."""

    def _on_obs(self, msg: Observation) -> None:
        obs = msg_to_obs(msg, 3)
        if obs.terminated or obs.truncated:
            return
        gains = np.zeros((2, 1, 3), np.float32)
        gains[:, 0, 2] = -1.0
        plan = FeedbackPlan(np.zeros((2, 1), np.float32), gains, np.zeros((2, 3), np.float32))
        self.action_pub.publish(plan_to_msg(obs, plan, 'feedback', 0.0, 0))
        self.answered += 1


@pytest.fixture
def graph() -> Graph:
    graph = Graph()
    yield graph
    graph.close()


@pytest.mark.slow
def test_the_env_node_applies_continuous_plans_and_refuses_bad_ones(graph: Graph) -> None:
    policy = graph.add(TorquePolicy(graph, 'pendulum'))
    env = env_node(graph, 'pendulum', env='Pendulum-v1', episodes=1)
    assert env.stepper.continuous and env.stepper.executor.noop_action.tolist() == [0.0]
    assert graph.until(lambda: policy.answered > 5)
    assert graph.until(lambda: linked(policy.action_pub, env))
    for bad in ([np.array([np.nan], np.float32)], [np.array([3.0], np.float32)]):  # NaN; beyond the bound 2
        before = env.rejected + env.verdicts[Verdict.INVALID]
        msg = plan_to_msg(msg_to_obs(_observation(env.stepper.tick_index, env.stepper.episode), 3), bad,
                          'bad', 0.0, 0)
        policy.action_pub.publish(msg)
        assert graph.until(lambda before=before: env.rejected + env.verdicts[Verdict.INVALID] > before)
    assert graph.until(lambda: env.finished.is_set() and len(policy.results) == 1, timeout_s=30.0)
    result = policy.results[0]
    assert result.length == 200 and result.actions_applied > 100
    assert result.rejected == 1  # out of bounds: refused by the stepper and counted in the episode
    assert env.rejected == 2  # NaN at the message edge, 3.0 by the stepper: each refusal counted once
    assert env.verdicts[Verdict.ACCEPTED] >= result.actions_applied


def _observation(seq: int, episode: int) -> Observation:
    return Observation(seq=seq, episode=episode, data=[1.0, 0.0, 0.0], shape=[3])


@pytest.mark.slow
def test_the_env_node_corrects_a_feedback_plan_by_its_own_observation(graph: Graph) -> None:
    """Action.feedback_* reach the stepper: each planned element applies its zero torque plus -theta_dot of the
    observation before its tick."""
    policy = graph.add(FeedbackPolicy(graph, 'pendulum'))
    env = env_node(graph, 'pendulum', env='Pendulum-v1', episodes=1)
    executor = env.stepper.executor
    planned = executor.action_for_tick
    applied: list[tuple[np.ndarray, AppliedAction]] = []
    executor.action_for_tick = lambda tick, obs=None: applied.append((obs, planned(tick, obs))) or applied[-1][1]
    assert graph.until(lambda: env.finished.is_set() and len(policy.results) == 1, timeout_s=30.0)
    from_plans = [(obs, action) for obs, action in applied if action.plan_seq >= 0 and not action.held]
    assert len(from_plans) > 100 and policy.results[0].rejected == env.rejected == 0
    for obs, action in from_plans:
        assert action.action == pytest.approx(np.clip(-obs[2:3], -2.0, 2.0), abs=1e-5)
    assert sum(abs(float(action.action[0])) > 0.01 for _, action in from_plans) > 50  # not zero torques held
