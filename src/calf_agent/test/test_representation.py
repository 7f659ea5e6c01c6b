"""Frame stack, action history and the optional observation-age feature."""
from __future__ import annotations

import numpy as np
import pytest

from calf_agent.representation import HistoryFeatures, HistoryWrapper, Representation
from calf_core.envs import make_networked_env
from calf_core.profiles import load_profile


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
