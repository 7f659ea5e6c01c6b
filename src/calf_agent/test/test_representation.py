"""Frame stack, action history and the optional observation-age feature."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from calf_agent.policies import MlpAgent
from calf_agent.policy_runner import PolicyRunner
from calf_agent.representation import HistoryFeatures, HistoryWrapper, ObsFacts, Representation, remembered_actions
from calf_core.envs import make_networked_env
from calf_core.profiles import load_profile
from calf_core.timing import ReceivedObservation


def test_default_representation_is_unchanged() -> None:
    rep = Representation(frames=2, actions=1)
    assert rep.as_dict() == {'frames': 2, 'actions': 1}
    assert rep.feature_size(obs_size=4, n_actions=2) == 10
    history = HistoryFeatures(rep, obs_size=1, n_actions=2)
    np.testing.assert_array_equal(history.reset(np.array([1.0])), [1.0, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(history.update(np.array([2.0]), 1), [1.0, 2.0, 0.0, 1.0])


def test_obs_age_is_appended_in_seconds() -> None:
    rep = Representation(frames=2, actions=1, obs_age=True)
    assert Representation(**rep.as_dict()) == rep
    assert rep.feature_size(obs_size=4, n_actions=2) == 11
    history = HistoryFeatures(rep, obs_size=1, n_actions=2)
    np.testing.assert_allclose(history.reset(np.array([1.0]), age_s=0.0), [1.0, 1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(history.update(np.array([2.0]), 1, age_s=0.045), [1.0, 2.0, 0.0, 1.0, 0.045])
    with pytest.raises(ValueError, match='age_s'):
        history.update(np.array([3.0]), 0)
    with pytest.raises(ValueError, match='obs_age'):
        Representation(obs_age=1)  # type: ignore[arg-type]


def test_wrapper_reads_the_age_from_networked_env() -> None:
    """Under delay_only (25 ms each way) every observation is 25 ms old when the agent decides on it."""
    env = HistoryWrapper(make_networked_env('cartpole', load_profile('delay_only'), seed=0),
                         Representation(frames=2, obs_age=True))
    assert env.observation_space.shape == (9,)
    features, _ = env.reset(seed=0)
    ages = [features[-1]]
    for _ in range(5):
        features, *_ = env.step(0)
        ages.append(features[-1])
    np.testing.assert_allclose(ages, 0.025, rtol=1e-6)


class RecordingAgent(MlpAgent):
    """A real MLP agent that keeps the features it is asked to act on."""

    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__(obs_dim, n_actions)
        self.inputs: list[np.ndarray] = []

    def act(self, obs: np.ndarray, state: None = None, deterministic: bool = False, seq: Any = None,
            applied_seq: Any = None) -> tuple[np.ndarray, None]:
        self.inputs.append(np.array(obs))
        return super().act(obs, state, deterministic, seq, applied_seq)


def facts(seq: int, applied_obs_seq: int, applied_index: int) -> ObsFacts:
    return ObsFacts(seq, applied_obs_seq, applied_index)


def test_delay_state_says_which_sent_actions_are_in_flight() -> None:
    """Features: frames, one-hot actions (newest first), in-flight flags, frame gaps, applied delay, held."""
    rep = Representation(frames=2, actions=2, delay_state=True)
    assert Representation(**rep.as_dict()) == rep and rep.extra_size == 2 + 1 + 2
    history = HistoryFeatures(rep, obs_size=1, n_actions=2)
    np.testing.assert_allclose(history.reset(np.array([1.0]), facts=facts(0, -1, -1)),
                               [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    # obs 2 arrives (obs 1 was lost); the action for obs 0 (1) is in flight, the env holds its initial action
    np.testing.assert_allclose(history.update(np.array([2.0]), 1, facts=facts(2, -1, -1)),
                               [1, 2, 0, 1, 0, 0, 1, 0, 0.2, 0, 1])
    # obs 5: the env applies element 0 of the plan for obs 0; the action for obs 2 (0) is still in flight
    np.testing.assert_allclose(history.update(np.array([5.0]), 0, facts=facts(5, 0, 0)),
                               [2, 5, 1, 0, 0, 1, 1, 0, 0.3, 0.5, 0])
    with pytest.raises(ValueError, match='delay state'):
        history.update(np.array([6.0]), 1)


def test_the_policy_node_builds_the_training_features() -> None:
    """PolicyRunner, fed the observation facts a message carries, gives the agent exactly the features
    HistoryWrapper gives it in training, step for step, under a jittery lossy link."""
    rep = Representation(frames=3, actions=3, delay_state=True)
    env = HistoryWrapper(make_networked_env('cartpole', load_profile('full_net_aware'), seed=3), rep)
    agent = RecordingAgent(env.observation_space.shape[0], 2)
    runner = PolicyRunner(agent, {'env': 'cartpole', 'representation': rep.as_dict()})
    inputs = []
    for episode in range(10):
        features, info = env.reset(seed=episode)
        terminated = truncated = False
        while not (terminated or truncated):
            newest = features[2 * 4:3 * 4]  # the raw observation: the last frame of the stack
            action = runner.on_observation(ReceivedObservation(
                episode, info['obs_seq'], newest, applied_obs_seq=info['applied_obs_seq'],
                applied_index=info['applied_index']))
            inputs.append(features)
            features, _, terminated, truncated, info = env.step(action[0])
    assert len(inputs) > 50 and any(f[-1] == 1.0 for f in inputs) and any(f[-3] > 0 for f in inputs)
    np.testing.assert_array_equal(np.stack(agent.inputs), np.stack(inputs))


def test_the_action_history_remembers_the_plan_element_expected_to_run() -> None:
    plans = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)
    np.testing.assert_array_equal(remembered_actions(plans, 2, True, 3, element=2), plans[:, 2])
    np.testing.assert_array_equal(remembered_actions(plans, 2, True, 3, element=9), plans[:, 3])  # past the end: last
    np.testing.assert_array_equal(remembered_actions([[5, 6, 7]], 1, False, 2, element=1), [6])
    assert Representation(frames=2, actions=1, history_element=3).as_dict()['history_element'] == 3
    assert 'history_element' not in Representation(frames=2, actions=1).as_dict()  # older readers load it
