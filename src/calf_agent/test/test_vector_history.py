"""VectorHistoryWrapper: the features HistoryFeatures gives per env, on the vector path and over a SyncVectorEnv."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from calf_agent.regimes import FAST_PATH_MIN_ENVS, default_representation, vec_env_factory
from calf_agent.representation import HistoryFeatures, HistoryWrapper, Representation, VectorHistoryWrapper
from calf_agent.trainer import executed_elements
from calf_core.envs import make_networked_env
from calf_core.profiles import Profile, load_profile, profile_from_dict
from calf_core.vector_networked import EnvBatch, VectorNetworkedCartPole, VectorNetworkedEnv

REP = Representation(frames=3, actions=2, obs_age=True)


def fixed(up_ms: float, down_ms: float, compute_ms: float) -> Profile:
    return profile_from_dict({'compute_ms': compute_ms, 'reorder': False,
                              'uplink': [{'model': 'fixed_delay', 'latency_ms': up_ms}],
                              'downlink': [{'model': 'fixed_delay', 'latency_ms': down_ms}]}, 'fixed')


def plans(rng: np.random.Generator, obs: np.ndarray, horizon: int) -> np.ndarray:
    """Mostly a balancing controller on the newest frame, sometimes random, so episodes both last and end."""
    first = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
    first = np.where(rng.random(len(obs)) < 0.3, rng.integers(2, size=len(obs)), first)
    plan = np.stack([first] + [1 - first] * (horizon - 1), axis=1)
    return plan[:, 0] if horizon == 1 else plan


@pytest.mark.parametrize('profile, horizon', [
    (load_profile('full_net_aware'), 1),
    (load_profile('full_net_aware'), 3),
    (fixed(700, 0, 0.0), 1),  # episodes end before their first decision
], ids=['full_net_aware', 'full_net_aware-plans-of-3', 'late-first-observation'])
@pytest.mark.slow
def test_rows_equal_history_features_fed_the_same_observations(profile: Profile, horizon: int) -> None:
    n, steps = 6, 300
    raw = VectorNetworkedCartPole(n, profile, plan_horizon=horizon)
    wrapped = VectorHistoryWrapper(VectorNetworkedCartPole(n, profile, plan_horizon=horizon), REP)
    assert wrapped.single_observation_space.shape == (REP.feature_size(4, 2),)
    assert wrapped.observation_space.shape == (n, REP.feature_size(4, 2))
    histories = [HistoryFeatures(REP, 4, 2) for _ in range(n)]
    obs, info = raw.reset(seed=5)
    features, _ = wrapped.reset(seed=5)
    for i, history in enumerate(histories):
        np.testing.assert_array_equal(features[i], history.reset(obs[i], info['obs_age_ms'][i] / 1e3))
    rng, ended = np.random.default_rng(0), 0
    for step in range(steps):
        action = plans(rng, obs, horizon)
        obs, _, terminated, truncated, info = raw.step(action)
        features, _, term_w, trunc_w, info_w = wrapped.step(action)
        assert np.array_equal(terminated, term_w) and np.array_equal(truncated, trunc_w)
        assert features.shape == (n, REP.feature_size(4, 2)) and features.dtype == np.float32
        sent = np.asarray(action).reshape(n, -1)[:, 0]
        for i, history in enumerate(histories):
            where = f'env {i}, step {step}'
            if terminated[i] or truncated[i]:
                ended += 1
                final = history.update(info['final_obs'][i], sent[i], info['final_info']['obs_age_ms'][i] / 1e3)
                np.testing.assert_array_equal(info_w['final_obs'][i], final, err_msg=where)
                expected = history.reset(obs[i], info['obs_age_ms'][i] / 1e3)
            else:
                assert info_w['final_obs'][i] is None if 'final_obs' in info_w else True
                expected = history.update(obs[i], sent[i], info['obs_age_ms'][i] / 1e3)
            np.testing.assert_array_equal(features[i], expected, err_msg=where)
    assert ended > n


@pytest.mark.slow
def test_fast_path_features_equal_the_sync_vector_env_path_under_fixed_delays() -> None:
    """Fixed links make NetworkedEnv and the fast path agree exactly, so their features must too."""
    n, steps, profile = 3, 400, fixed(25, 25, 1.0)
    sync = vec_env_factory('cartpole', profile, REP, seed=0, fast=False)(n)
    fast = vec_env_factory('cartpole', profile, REP, seed=0, fast=True)(n)
    features_s, _ = sync.reset(seed=list(range(n)))
    features_f, _ = fast.reset(seed=[int(np.random.default_rng(i).integers(2**31)) for i in range(n)])
    np.testing.assert_array_equal(features_f, features_s)
    rng, ended = np.random.default_rng(1), 0
    for _ in range(steps):
        action = plans(rng, features_s[:, 8:12], 1)  # the newest of three frames
        features_s, reward_s, term_s, trunc_s, info_s = sync.step(action)
        features_f, reward_f, term_f, trunc_f, info_f = fast.step(action)
        assert np.array_equal(reward_f, reward_s) and np.array_equal(term_f | trunc_f, term_s | trunc_s)
        np.testing.assert_array_equal(features_f, features_s)
        for i in np.flatnonzero(term_s | trunc_s):
            np.testing.assert_array_equal(info_f['final_obs'][i], info_s['final_obs'][i])
            ended += 1
    assert ended > n
    sync.close()


@pytest.mark.parametrize('env', ['cartpole', 'Pendulum-v1'])
@pytest.mark.slow
def test_sync_path_features_equal_a_history_wrapper_per_env(env: str) -> None:
    """Below the vector path, one VectorHistoryWrapper over a SyncVectorEnv of NetworkedEnvs gives every row what a
    HistoryWrapper around each env gave, step for step: features, rewards and final observations."""
    n, profile = 3, load_profile('wifi_degraded')
    rep = default_representation(env, profile)  # frames, actions and the delay state
    factory = vec_env_factory(env, profile, rep, seed=2, fast=False)
    batched = factory(n)
    per_env = gym.vector.SyncVectorEnv(
        [lambda i=i: HistoryWrapper(make_networked_env(env, profile, seed=2000 + i), rep) for i in range(n)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    features_b, _ = batched.reset(seed=5)
    features_p, _ = per_env.reset(seed=5)
    np.testing.assert_array_equal(features_b, features_p)
    batched.action_space.seed(0)
    ended = 0
    for step in range(300):
        action = batched.action_space.sample()
        features_b, reward_b, term_b, trunc_b, info_b = batched.step(action)
        features_p, reward_p, term_p, trunc_p, info_p = per_env.step(action)
        np.testing.assert_array_equal(features_b, features_p, err_msg=f'step {step}')
        assert np.array_equal(reward_b, reward_p) and np.array_equal(term_b | trunc_b, term_p | trunc_p)
        for i in np.flatnonzero(term_p | trunc_p):
            np.testing.assert_array_equal(info_b['final_obs'][i], info_p['final_obs'][i])
            ended += 1
    assert ended >= n
    batched.close()
    per_env.close()


def test_factory_picks_the_vector_path_for_many_envs_behind_any_profile() -> None:
    rep, profile = Representation(frames=2, actions=1), load_profile('full_net_aware')
    auto = vec_env_factory('cartpole', profile, rep, seed=0)
    envs = auto(FAST_PATH_MIN_ENVS)
    assert isinstance(envs, VectorHistoryWrapper) and isinstance(envs.env, VectorNetworkedCartPole)
    assert isinstance(auto(FAST_PATH_MIN_ENVS - 1).env, gym.vector.SyncVectorEnv)  # fewer envs: the faster path
    assert isinstance(vec_env_factory('cartpole', profile, rep, seed=0, fast=True)(2), VectorHistoryWrapper)
    assert isinstance(vec_env_factory('cartpole', profile, rep, seed=0, fast=False)(64).env, gym.vector.SyncVectorEnv)
    stalls = vec_env_factory('cartpole', load_profile('wifi_degraded'), rep, seed=0, fast=True)(2)
    assert isinstance(stalls, VectorHistoryWrapper) and isinstance(stalls.env, VectorNetworkedCartPole)
    inner = vec_env_factory('cartpole', profile, rep, seed=0, fast=True, make_inner=lambda: gym.make('CartPole-v1'))(2)
    assert isinstance(inner.env, VectorNetworkedEnv) and isinstance(inner.env.batch, EnvBatch)
    pendulum = vec_env_factory('Pendulum-v1', load_profile('wifi_degraded'), rep, seed=0)(FAST_PATH_MIN_ENVS)
    assert isinstance(pendulum.env, VectorNetworkedEnv) and isinstance(pendulum.env.batch, EnvBatch)
    features, _ = pendulum.reset(seed=0)
    _, reward, _, _, info = pendulum.step(np.zeros((FAST_PATH_MIN_ENVS, 1), np.float32))
    assert features.shape[0] == reward.shape[0] == FAST_PATH_MIN_ENVS and (info['ticks'] >= 1).all()


def test_plan_policies_get_executed_masks_on_the_fast_path() -> None:
    envs = vec_env_factory('cartpole', load_profile('full_net_aware'), Representation(frames=2, actions=1),
                           seed=0, plan_horizon=3, fast=True)(8)
    assert isinstance(envs, VectorHistoryWrapper)
    envs.reset(seed=0)
    marked, finals = 0, 0
    for _ in range(80):
        *_, terminated, truncated, info = envs.step(np.zeros((8, 3), np.int64))
        executed = executed_elements(info)
        assert executed.shape == (8, 4, 3) and executed.dtype == np.uint8
        marked += int(executed.sum())
        finals += int((terminated | truncated).sum())
    assert marked > 0 and finals > 0, 'pushing left runs plan elements and ends episodes'
