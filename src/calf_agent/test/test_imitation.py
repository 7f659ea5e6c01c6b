"""Imitation behind the link: labels come from the states where the env applied each plan element, and a
DAgger student of a clean-link expert keeps its return behind a degraded link."""
from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from calf_agent.checkpoint import save_checkpoint
from calf_agent.evaluate import evaluate_sim
from calf_agent.gaussian import GaussianAgent
from calf_agent.imitation import Expert, PlanRoller, StudentRollout, sim_state, train_student
from calf_agent.regimes import delay_ticks, first_element, train_policy
from calf_agent.representation import HistoryFeatures, Representation
from calf_core.envs import make_env, make_networked_env
from calf_core.errors import ConfigError
from calf_core.profiles import load_profile


class AppliedLog(gym.Wrapper):
    """Records each step's action and the observation it was applied to."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps: list[tuple[np.ndarray, np.ndarray]] = []
        self._obs: np.ndarray | None = None

    def reset(self, **kwargs):
        self._obs, info = self.env.reset(**kwargs)
        return self._obs, info

    def step(self, action):
        self.steps.append((np.array(self._obs, np.float32), np.array(action, np.float32)))
        self._obs, *rest = self.env.step(action)
        return (self._obs, *rest)


@pytest.mark.parametrize('network', ['delay_only', 'wifi_degraded'])
def test_each_applied_element_is_labelled_with_the_state_it_was_applied_in(network: str) -> None:
    inner = AppliedLog(make_env('Pendulum-v1'))
    env = make_networked_env('Pendulum-v1', load_profile(network), seed=3, plan_horizon=3, env=inner)
    rollout = StudentRollout(env, HistoryFeatures(Representation(frames=2, actions=2), 3, 1, continuous=True))
    rollout.start(seed=5)
    rng, plans, decisions = np.random.default_rng(0), {}, []
    for _ in range(120):
        plan = rng.uniform(-2, 2, (3, 1)).astype(np.float32)
        plans[rollout.seq] = plan
        if rollout.act(plan):
            break
        decisions += rollout.harvest(ended=False)
    decisions += rollout.harvest(ended=True)
    labelled = [(d.seq, element, state) for d in decisions for element, state in zip(d.elements, d.states)]
    assert len(labelled) > 60
    applied = {tuple(action.ravel()): obs for obs, action in inner.steps}
    for seq, element, state in labelled:
        np.testing.assert_array_equal(applied[tuple(plans[seq][element].ravel())], state)
    assert len({seq for seq, _, _ in labelled}) == len(decisions)  # one Decision per answered observation
    if network == 'delay_only':  # 51 ms on a 50 ms tick: a plan's first element arrives too late to run
        assert {element for _, element, _ in labelled} == {1}


def test_a_rolled_plan_meets_the_states_the_env_meets() -> None:
    env = make_env('InvertedDoublePendulum-v5')
    env.reset(seed=4)
    rng = np.random.default_rng(1)
    for _ in range(3):
        obs, *_ = env.step(rng.uniform(-0.3, 0.3, 1).astype(np.float32))
    start, plan = sim_state(env), rng.uniform(-0.3, 0.3, (5, 1)).astype(np.float32)
    met = [np.asarray(obs, np.float32)]
    for action in plan[1:-1]:
        met.append(np.asarray(env.step(action)[0], np.float32))
    rolled = PlanRoller('InvertedDoublePendulum-v5').states(start, met[0], plan, first=1)
    assert len(rolled) == 4  # elements 1, 2, 3, 4
    np.testing.assert_allclose(np.stack(rolled), np.stack(met), atol=1e-5)
    assert sim_state(make_env('Pendulum-v1')) is None  # not a MujocoEnv: applied elements only


def test_whole_plans_are_labelled_from_their_first_applied_element_on() -> None:
    env = make_networked_env('InvertedPendulum-v5', load_profile('wifi_normal'), seed=2, plan_horizon=4)
    rollout = StudentRollout(env, HistoryFeatures(Representation(frames=2, actions=2), 4, 1, continuous=True),
                             whole_plans=True)
    roller = PlanRoller('InvertedPendulum-v5')
    rollout.start(seed=5)
    rng, decisions = np.random.default_rng(0), []
    for _ in range(150):
        ended = rollout.act(rng.uniform(-0.2, 0.2, (4, 1)).astype(np.float32))
        decisions += rollout.harvest(ended)
        if ended:
            rollout.start(seed=int(rng.integers(1000)))
    applied = [dict(zip(d.elements, d.states)) for d in decisions]
    for decision in decisions:
        decision.whole_plan(roller)
    firsts = {d.elements[0] for d in decisions}
    assert 0 in firsts and len(firsts) > 1  # late plans start further in
    whole = [d for d in decisions if len(d.elements) == 4 - d.elements[0]]
    assert len(whole) > 0.8 * len(decisions)  # the rest ended the episode on the way
    for decision, ran in zip(decisions, applied):  # the elements that ran meet the states the roller finds
        rolled = dict(zip(decision.elements, decision.states))
        for element, state in ran.items():
            np.testing.assert_allclose(rolled[element], state, atol=1e-4)


def test_single_actions_take_no_simulator_snapshots() -> None:
    env = make_networked_env('InvertedPendulum-v5', load_profile('wifi_normal'), seed=2)
    rollout = StudentRollout(env, HistoryFeatures(Representation(frames=2, actions=2), 4, 1, continuous=True))
    rollout.start(seed=5)
    decisions = []
    for _ in range(40):
        ended = rollout.act(np.zeros(1, np.float32))
        decisions += rollout.harvest(ended)
        if ended:
            rollout.start(seed=6)
    assert decisions and all(d.start is None for d in decisions)  # no whole-plan labels: no snapshot per tick


@pytest.mark.parametrize('network, expected', [('results/profiles/constant_2_ticks_50ms.yaml', 2),
                                               ('results/profiles/constant_5_ticks_50ms.yaml', 5),
                                               ('wifi_normal', 0), ('sim_clean', 0)])
def test_the_history_keeps_the_element_that_runs_first_behind_the_typical_delay(network: str, expected: int) -> None:
    d, _ = delay_ticks(load_profile(network), 0.05)
    assert first_element(d, 8) == expected  # constant k ticks: the element answering tick t runs at t + 1 + k
    assert first_element(d, 2) == min(expected, 1)


def save_policy(out: Path, env: str, rep: Representation) -> Path:
    space = make_env(env).action_space
    agent = GaussianAgent(rep.feature_size(int(np.prod(make_env(env).observation_space.shape)), 1), 1,
                          space.low, space.high)
    return save_checkpoint(out, agent, {'env': env, 'representation': rep.as_dict(), 'plan_horizon': 1})


def test_an_expert_must_act_on_the_state_alone(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='must act on the state alone'):
        Expert(save_policy(tmp_path / 'full', 'Pendulum-v1', Representation(frames=2, actions=1)), 'Pendulum-v1')
    with pytest.raises(ConfigError, match='trained on Pendulum-v1, not InvertedPendulum-v5'):
        Expert(save_policy(tmp_path / 'base', 'Pendulum-v1', Representation()), 'InvertedPendulum-v5')


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two trainings, slow on a loaded machine
def test_a_dagger_student_keeps_the_experts_return_behind_a_degraded_link(tmp_path: Path) -> None:
    expert = train_policy('InvertedPendulum-v5', 'sim_clean', 0, tmp_path / 'expert', steps=30_000,
                          regime='baseline', progress=False)
    assert expert.mean_return > 200
    student = train_student(tmp_path / 'expert', 'InvertedPendulum-v5', 'wifi_degraded', 0, tmp_path / 'student',
                            steps=20_000, progress=False)
    assert student.global_steps >= 20_000
    degraded = load_profile('wifi_degraded')
    before = evaluate_sim(tmp_path / 'expert', degraded, episodes=10, seed=100)['mean_return']
    after = evaluate_sim(tmp_path / 'student', degraded, episodes=10, seed=100)['mean_return']
    assert after > max(3 * before, 300), (before, after)
    meta = json.loads((tmp_path / 'student' / 'meta.json').read_text())
    assert meta['method'] == 'dagger' and meta['representation']['delay_state']
