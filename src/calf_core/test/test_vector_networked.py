"""The vector fast path follows NetworkedEnv: exactly under deterministic links, in distribution otherwise."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from scipy import stats

import calf_core
from calf_core.envs import env_spec, make_env, make_networked_env
from calf_core.errors import ConfigTypeError
from calf_core.profiles import Profile, load_profile, profile_from_dict
from calf_core.vector_networked import EnvBatch, VectorNetworkedCartPole, VectorNetworkedEnv

TRACE_UP = {'model': 'trace_replay', 'delays_ms': [5.0, 45.0, 12.0, 70.0, 3.0, 28.0, 0.0],
            'lost': [False, False, True, False, False, False, False]}
TRACE_DOWN = {'model': 'trace_replay', 'delays_ms': [15.0, 2.0, 33.0, 8.0, 61.0],
              'lost': [False, True, False, False, False]}


PILE_UP = {'model': 'trace_replay', 'delays_ms': [0.0, 60.0, 0.0, 0.0, 0.0, 0.0]}
"""FIFO behind it, observations 1-4 (and 7-10, ...) reach the policy at one instant."""


def pile_up(compute_ms: float) -> Profile:
    return profile_from_dict({'compute_ms': compute_ms, 'reorder': False, 'uplink': [PILE_UP],
                              'downlink': [{'model': 'fixed_delay', 'latency_ms': 5.0}]}, 'pile_up')


def fixed(up_ms: float, down_ms: float, compute_ms: float) -> Profile:
    return profile_from_dict({'compute_ms': compute_ms, 'reorder': False,
                              'uplink': [{'model': 'fixed_delay', 'latency_ms': up_ms}] if up_ms else [],
                              'downlink': [{'model': 'fixed_delay', 'latency_ms': down_ms}]}, 'fixed')


def bandwidth_bound() -> Profile:
    """Fixed delays behind a link too slow for one observation a tick: queueing delay and tail drops, deterministic."""
    slow = [{'model': 'fixed_delay', 'latency_ms': 4.0}, {'model': 'bandwidth', 'rate_kbps': 24, 'queue_packets': 2}]
    return profile_from_dict({'compute_ms': 2.0, 'reorder': False, 'uplink': slow,
                              'downlink': [{'model': 'fixed_delay', 'latency_ms': 6.0}]}, 'bandwidth')


def traced(reorder: bool) -> Profile:
    return profile_from_dict({'compute_ms': 3.0, 'reorder': reorder, 'uplink': [TRACE_UP],
                              'downlink': [TRACE_DOWN]}, 'traced')


def policy(obs: np.ndarray, env: int, step: int, horizon: int) -> list[int]:
    """A deterministic plan per env: a good controller, a poor one, and a fixed pattern."""
    if env == 0:
        first = int(obs[2] + 0.5 * obs[3] + 0.01 * obs[0] + 0.1 * obs[1] > 0)
    elif env == 1:
        first = int(obs[2] > 0.05)
    else:
        first = (step // 6) % 2
    return [first, 1 - first, first][:horizon] if horizon > 1 else [first]


def scalar_info(info: dict) -> tuple:
    return (info['ticks'], info['obs_seq'], info['applied_obs_seq'], info['applied_index'], info['obs_age_ms'],
            info['obs_lost'], info['actions_lost'], tuple(info['e2e_ms']), info['executed'].tolist())


def vector_info(info: dict, i: int) -> tuple:
    e2e = tuple(info['e2e_ms'][info['e2e_env'] == i])
    return (info['ticks'][i], info['obs_seq'][i], info['applied_obs_seq'][i], info['applied_index'][i],
            info['obs_age_ms'][i], info['obs_lost'][i], info['actions_lost'][i], e2e, info['executed'][i].tolist())


@pytest.mark.parametrize('profile, horizon, start_plan', [
    (fixed(0, 0, 0.0), 1, ()),
    (fixed(700, 0, 0.0), 1, ()),  # episodes end before their first decision
    (fixed(25, 25, 1.0), 1, ()),
    (fixed(30, 25, 5.0), 1, (0, 1)),
    (fixed(45, 10, 12.0), 3, ()),
    (traced(reorder=True), 1, ()),
    (traced(reorder=False), 2, ()),
    (pile_up(0.0), 1, ()),
    (pile_up(30.0), 2, ()),  # piles up while the policy is busy too
    (bandwidth_bound(), 1, ()),  # a per-env fallback stage: queueing and tail drops
], ids=['ideal', 'late-first-observation', 'delay-only', 'start-plan', 'plans-of-3', 'trace-reordering',
        'trace-fifo-plans-of-2', 'fifo-pile-up', 'fifo-pile-up-busy', 'bandwidth-fallback'])
@pytest.mark.slow
def test_same_ticks_rewards_and_decisions_as_networked_env(profile: Profile, horizon: int,
                                                           start_plan: tuple[int, ...]) -> None:
    n, steps = 3, 600
    scalar = [make_networked_env('cartpole', profile, seed=i, plan_horizon=horizon, start_plan=start_plan)
              for i in range(n)]
    vector = VectorNetworkedCartPole(n, profile, plan_horizon=horizon, start_plan=start_plan)
    env_seeds = [int(np.random.default_rng(i).integers(2**31)) for i in range(n)]  # NetworkedEnv's CartPole seeds
    obs_s, infos_s = zip(*(env.reset(seed=i) for i, env in enumerate(scalar)))
    obs_s = list(obs_s)
    obs_v, info_v = vector.reset(seed=env_seeds)
    for i in range(n):
        assert np.array_equal(obs_v[i], obs_s[i]) and vector_info(info_v, i) == scalar_info(infos_s[i])
    endings = {'terminated': 0, 'truncated': 0}
    for step in range(steps):
        plans = [policy(obs_s[i], i, step, horizon) for i in range(n)]
        obs_v, reward_v, term_v, trunc_v, info_v = vector.step(np.array(plans).reshape(vector.action_space.shape))
        for i, env in enumerate(scalar):
            obs, reward, terminated, truncated, info = env.step(plans[i] if horizon > 1 else plans[i][0])
            where = f'env {i}, step {step}'
            assert (reward_v[i], term_v[i], trunc_v[i]) == (reward, terminated, truncated), where
            if terminated or truncated:
                endings['terminated' if terminated else 'truncated'] += 1
                assert np.array_equal(info_v['final_obs'][i], obs), where
                final = {**info_v['final_info'], 'e2e_ms': info_v['e2e_ms'], 'e2e_env': info_v['e2e_env']}
                assert vector_info(final, i) == scalar_info(info), where
                assert (final['success'][i], final['ticks_held'][i]) == (info['success'], info['ticks_held']), where
                obs, info = env.reset()
            else:
                assert vector_info(info_v, i) == scalar_info(info), where
            assert np.array_equal(obs_v[i], obs), where
            obs_s[i] = obs
    assert endings['terminated'] > 0
    if not profile.uplink:
        assert endings['truncated'] > 0


def box_plan(obs: np.ndarray, env: int, step: int, horizon: int) -> np.ndarray:
    """A deterministic Box plan per env, sometimes beyond the bounds (clipped on the policy side)."""
    first = 3.0 * np.tanh(obs[1] + 0.3 * obs[-1]) if env != 2 else (-2.5 if (step // 5) % 2 else 2.5)
    return np.array([[first], [-first / 2], [first / 3]][:horizon], np.float32)


@pytest.mark.parametrize('env_id, profile, horizon', [
    ('Pendulum-v1', fixed(30, 25, 5.0), 1),
    ('Pendulum-v1', traced(reorder=False), 2),
    ('Pendulum-v1', pile_up(30.0), 3),
    ('Pendulum-v1', bandwidth_bound(), 1),
    ('CartPole-v1', traced(reorder=True), 2),
    ('CartPole-v1', pile_up(0.0), 1),
], ids=['box-delay-only', 'box-trace-fifo-plans-of-2', 'box-fifo-pile-up-busy-plans-of-3', 'box-bandwidth',
        'discrete-env-trace-plans-of-2', 'discrete-env-fifo-pile-up'])
@pytest.mark.slow
def test_any_env_follows_networked_env_step_for_step(env_id: str, profile: Profile, horizon: int) -> None:
    """VectorNetworkedEnv over gymnasium's own envs (a Box and a Discrete one) matches NetworkedEnv exactly."""
    n, steps = 3, 300
    scalar = [make_networked_env(env_id, profile, seed=i, plan_horizon=horizon) for i in range(n)]
    vector = VectorNetworkedEnv(EnvBatch([make_env(env_id) for _ in range(n)]), env_spec(env_id),
                                scalar[0].env.observation_space, scalar[0].env.action_space, profile, horizon)
    env_seeds = [int(np.random.default_rng(i).integers(2**31)) for i in range(n)]
    obs_s = [env.reset(seed=i)[0] for i, env in enumerate(scalar)]
    obs_v, _ = vector.reset(seed=env_seeds)
    box = env_id == 'Pendulum-v1'
    endings = 0
    for step in range(steps):
        plans = [box_plan(obs_s[i], i, step, horizon) if box else policy(obs_s[i], i, step, horizon) for i in range(n)]
        obs_v, reward_v, term_v, trunc_v, info_v = vector.step(np.array(plans).reshape(vector.action_space.shape))
        for i, env in enumerate(scalar):
            action = plans[i] if horizon > 1 else plans[i][0]
            obs, reward, terminated, truncated, info = env.step(action)
            where = f'env {i}, step {step}'
            assert (reward_v[i], term_v[i], trunc_v[i]) == (reward, terminated, truncated), where
            if terminated or truncated:
                endings += 1
                final = {**info_v['final_info'], 'e2e_ms': info_v['e2e_ms'], 'e2e_env': info_v['e2e_env']}
                assert np.array_equal(info_v['final_obs'][i], obs) and vector_info(final, i) == scalar_info(info), where
                assert (final['success'][i], final['ticks_held'][i]) == (info['success'], info['ticks_held']), where
                obs, info = env.reset()
            else:
                assert vector_info(info_v, i) == scalar_info(info), where
            assert np.array_equal(obs_v[i], obs), where
            obs_s[i] = obs
    assert endings > 0


def test_of_observations_arriving_at_one_instant_the_policy_keeps_the_newest() -> None:
    """Observations 1-4 reach the policy together at 80 ms: it decides on 4, as NetworkedEnv does."""
    env = VectorNetworkedCartPole(2, pile_up(0.0))
    _, info = env.reset(seed=0)
    seqs = [info['obs_seq'].tolist()]
    for step in range(4):
        seqs.append(env.step(np.full(2, step % 2))[4]['obs_seq'].tolist())
    assert seqs == [[0, 0], [4, 4], [5, 5], [6, 6], [10, 10]]


@pytest.mark.parametrize('up_ms', [45.0, 11_000.0])  # observation 0 arrives after 2 ticks, after the episode
@pytest.mark.slow
def test_an_episodes_ticks_and_rewards_add_up_exactly_once(up_ms: float) -> None:
    """Per env and episode, the ticks in reset's (or the restart's) info, the steps' infos and the final info,
    and the rewards of the steps, sum to the CartPole steps the episode took, each counted once."""
    n = 3
    env = VectorNetworkedCartPole(n, fixed(up_ms, 10.0, 1.0))
    own: list[list[int]] = [[] for _ in range(n)]  # CartPole steps per finished episode, counted at the physics
    running = np.zeros(n, np.int64)
    step_physics, reset_physics = env.cartpole.step, env.cartpole.reset

    def counted_step(idx: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        running[idx] += 1
        return step_physics(idx, action)

    def counted_reset(idx: np.ndarray) -> np.ndarray:
        for i in idx:
            own[i].append(int(running[i]))
        running[idx] = 0
        return reset_physics(idx)

    env.cartpole.step, env.cartpole.reset = counted_step, counted_reset
    obs, info = env.reset(seed=0)
    ticks, rewards = info['ticks'].copy(), np.zeros(n)
    reported: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for _ in range(300):
        obs, reward, terminated, truncated, info = env.step((obs[:, 2] > 0).astype(np.int64))
        rewards += reward
        done = terminated | truncated
        ticks += np.where(done, info['final_info']['ticks'], info['ticks']) if done.any() else info['ticks']
        for i in np.flatnonzero(done):
            reported[i].append((int(ticks[i]), float(rewards[i])))
            ticks[i], rewards[i] = info['ticks'][i], 0.0  # the next episode's reset info
    for i in range(n):
        assert len(reported[i]) >= 2
        assert [t for t, _ in reported[i]] == [r for _, r in reported[i]] == own[i][1:len(reported[i]) + 1]


def run_scalar(profile: Profile, n: int, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ticks per decision, e2e latencies and each env's share of observations lost, over ``steps`` decisions of
    ``n`` envs."""
    ticks, e2e, lost = [], [], np.zeros(n)
    for i in range(n):
        env = make_networked_env('cartpole', profile, seed=100 + i)
        obs, _ = env.reset(seed=100 + i)
        env_ticks = 0
        for _ in range(steps):
            obs, _, terminated, truncated, info = env.step(int(obs[2] + 0.5 * obs[3] > 0))
            ticks.append(info['ticks'])
            env_ticks += info['ticks']
            e2e.extend(info['e2e_ms'])
            if terminated or truncated:
                lost[i] += info['obs_lost']
                obs, _ = env.reset()
        lost[i] = (lost[i] + info['obs_lost']) / env_ticks
    return np.array(ticks), np.array(e2e), lost


def run_vector(profile: Profile, n: int, steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``run_scalar`` through the vector env."""
    env = VectorNetworkedCartPole(n, profile)
    obs, _ = env.reset(seed=11)
    ticks, e2e, lost = [], [], np.zeros(n)
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step((obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64))
        done = terminated | truncated  # their info is the next episode's reset info: take the final one
        ticks.append(np.where(done, info['final_info']['ticks'], info['ticks']) if done.any() else info['ticks'])
        e2e.append(info['e2e_ms'])
        if done.any():
            lost[done] += info['final_info']['obs_lost'][done]
    return np.concatenate(ticks), np.concatenate(e2e), (lost + info['obs_lost']) / np.sum(ticks, axis=0)


DUPLICATING = profile_from_dict({'compute_ms': 1.0, 'reorder': True, 'uplink': [
    {'model': 'lognormal_delay', 'median_ms': 15, 'sigma': 0.5}, {'model': 'duplicate', 'p': 0.3, 'extra_delay_ms': 7},
    {'model': 'gilbert_elliott', 'p_good_to_bad': 0.05, 'p_bad_to_good': 0.3, 'loss_good': 0.0, 'loss_bad': 0.5}],
    'downlink': [{'model': 'duplicate', 'p': 0.5, 'extra_delay_ms': 3},
                 {'model': 'drifting_delay', 'level_ms': {'dist': 'uniform', 'low': 5, 'high': 40},
                  'hold_ms': 20}]}, 'duplicating')
"""Duplicates (a Gilbert-Elliott stage behind one sees two copies of a message) and a drifting delay (its level
held for one tick: a longer hold correlates the latencies, and the KS test below assumes independent ones)."""


@pytest.mark.parametrize('profile', [load_profile('full_net_aware'), load_profile('wifi_normal'),
                                     load_profile('wifi_degraded'), load_profile('shared_outage'), DUPLICATING],
                         ids=['full_net_aware', 'wifi_normal', 'wifi_degraded', 'shared_outage', 'duplicating'])
@pytest.mark.slow
def test_random_profiles_give_the_same_distributions(profile: Profile) -> None:
    ticks_s, e2e_s, lost_s = run_scalar(profile, 64, 100)
    ticks_v, e2e_v, lost_v = run_vector(profile, 64, 100)
    for k in range(4):  # share of decisions after 0, 1, 2 and 3 ticks
        assert np.mean(ticks_v == k) == pytest.approx(np.mean(ticks_s == k), abs=0.03), k
    assert ticks_v.mean() == pytest.approx(ticks_s.mean(), rel=0.03)
    assert stats.ks_2samp(e2e_s, e2e_v).pvalue > 1e-3
    # each env's share of observations lost: bursts make it vary from env to env, so the envs are the samples
    assert stats.ttest_ind(lost_s, lost_v, equal_var=False).pvalue > 1e-3
    assert lost_v.mean() == pytest.approx(lost_s.mean(), abs=0.02)


def test_vector_env_api_and_autoreset() -> None:
    env = VectorNetworkedCartPole(8, load_profile('full_net_aware'), plan_horizon=2)
    obs, info = env.reset(seed=0)
    assert obs.shape == (8, 4) and obs.dtype == np.float32 and env.observation_space.contains(obs)
    assert env.metadata['autoreset_mode'].name == 'SAME_STEP'
    assert env.action_space.shape == (8, 2)
    ended = 0
    for _ in range(60):
        obs, reward, terminated, truncated, info = env.step(np.zeros((8, 2), dtype=np.int64))
        assert obs.shape == (8, 4) and reward.shape == (8,) and info['executed'].shape == (8, 3, 2)
        done = terminated | truncated
        if done.any():
            assert np.array_equal(info['_final_obs'], done)
            ended += int(done.sum())
    assert ended > 0, 'always pushing left ends episodes'
    obs_a, _ = VectorNetworkedCartPole(4, load_profile('full_net_aware')).reset(seed=3)
    obs_b, _ = VectorNetworkedCartPole(4, load_profile('full_net_aware')).reset(seed=3)
    assert np.array_equal(obs_a, obs_b)


def test_actions_other_than_0_or_1_are_refused() -> None:
    with pytest.raises(ValueError, match='actions are 0 to 1'):
        env = VectorNetworkedCartPole(2, load_profile('sim_clean'))
        env.reset(seed=0)
        env.step(np.array([0, 2]))


def test_links_run_on_across_autoresets() -> None:
    """Each env's trace position carries over its episode boundaries, as NetworkedEnv's does."""
    profile = profile_from_dict({'compute_ms': 0.0, 'uplink': [
        {'model': 'trace_replay', 'delays_ms': [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]}], 'downlink': []}, 'trace')
    env = VectorNetworkedCartPole(2, profile)
    _, info = env.reset(seed=0)
    first_ages = [info['obs_age_ms'][0]]
    while len(first_ages) < 8:
        _, _, terminated, truncated, info = env.step(np.zeros(2, np.int64))
        if terminated[0] or truncated[0]:
            first_ages.append(info['obs_age_ms'][0])
    assert len(set(np.round(first_ages, 6))) > 3, first_ages  # a restarting trace would always give 1.0


@pytest.mark.parametrize('model', [
    {'model': 'gamma_delay', 'mean_ms': 20, 'std_ms': 10},
    {'model': 'lognormal_delay', 'median_ms': 10, 'sigma': 0.5},
    {'model': 'stall', 'duration_ms': {'dist': 'uniform', 'low': 150, 'high': 300}, 'gap_ms': 500},
    {'model': 'bandwidth', 'rate_kbps': 10, 'queue_packets': 1},
    {'model': 'duplicate', 'p': 0.5, 'extra_delay_ms': 1},
    {'model': 'drifting_delay', 'level_ms': {'dist': 'uniform', 'low': 5, 'high': 40}, 'hold_ms': 200},
], ids=lambda model: model['model'])
@pytest.mark.slow
def test_every_model_runs_in_the_vector_env(model: dict) -> None:
    """No profile is refused; a fallback stage keeps its state per env (a stall delays, a slow link drops)."""
    profile = profile_from_dict({'reorder': {'uplink': True}, 'uplink': [model], 'downlink': []}, 'one')
    env = VectorNetworkedCartPole(4, profile)
    env.reset(seed=0)
    ticks, lost = [], 0
    for step in range(300):
        obs, _, _, _, info = env.step(np.full(4, step % 2, np.int64))
        assert obs.shape == (4, 4)
        ticks.append(info['ticks'])
        lost += int(info['obs_lost'].sum())
    if model['model'] == 'stall':
        assert np.max(ticks) >= 7  # a stall of >= 150 ms: no observation reaches the agent for 7 ticks
    if model['model'] == 'bandwidth':
        assert lost > 0  # 80-byte observations every 20 ms through 10 kbit/s: the queue overflows


def test_a_heavy_tail_beyond_the_event_horizon_is_never_delivered() -> None:
    """A draw of years (a lognormal at the schema's largest sigma) neither overflows nor arrives."""
    profile = profile_from_dict({'uplink': [{'model': 'lognormal_delay', 'median_ms': 60000, 'sigma': 5}],
                                 'downlink': []}, 'tail')
    env = VectorNetworkedCartPole(4, profile)
    env.reset(seed=0)
    ages = [env.step(np.zeros(4, np.int64))[4]['obs_age_ms'] for _ in range(3)]
    assert all(np.all((a >= 0) & np.isfinite(a)) for a in ages)


def test_gym_make_vec_builds_one_vector_env_for_any_env() -> None:
    """``gym.make_vec('calf/Networked-v0')`` is a VectorNetworkedEnv under a profile with stalls; sync mode stays."""
    envs = gym.make_vec(calf_core.ENV_ID, num_envs=4, env='Pendulum-v1', network='wifi_degraded', seed=3)
    assert isinstance(envs, VectorNetworkedEnv) and envs.single_action_space.shape == (1,)
    obs, info = envs.reset()
    assert obs.shape == (4, 3) and obs.dtype == np.float32 and (info['ticks'] == 0).all()
    ticks = 0
    for _ in range(50):
        obs, reward, _, _, info = envs.step(np.full((4, 1), 5.0))  # beyond the bounds: clipped
        assert reward.shape == (4,) and np.isfinite(reward).all()
        ticks += int(info['ticks'].sum())
    assert ticks >= 200
    with pytest.raises(ValueError, match='finite'):
        envs.step(np.full((4, 1), np.nan))
    envs.close()
    sync = gym.make_vec(calf_core.ENV_ID, num_envs=2, env='CartPole-v1', network='sim_clean', vectorization_mode='sync')
    assert isinstance(sync, gym.vector.SyncVectorEnv)
    sync.close()
    with pytest.raises(ConfigTypeError, match='env must be an env name') as error:
        calf_core.api.make_vec(2, env=gym.make('CartPole-v1'))
    assert '\n' not in str(error.value)


def test_envs_in_worker_processes_step_as_in_this_process() -> None:
    """``make_vec(workers=2)`` (ProcessEnvBatch) gives the same run as the envs stepped in this process."""
    runs = []
    for workers in (0, 2):
        envs = calf_core.api.make_vec(5, env='Pendulum-v1', network='wifi_degraded', seed=4, workers=workers)
        obs, _ = envs.reset(seed=9)
        trace = [obs]
        for step in range(120):
            obs, reward, terminated, truncated, info = envs.step(np.sin(obs[:, 1:2] + step))
            trace += [obs, reward, info['ticks'], info['e2e_ms'], truncated]
        envs.close()
        runs.append(trace)
    assert len(runs[0]) == len(runs[1]) and all(np.array_equal(a, b) for a, b in zip(*runs))


def test_a_worker_that_cannot_build_its_env_is_one_error() -> None:
    from calf_core.env_workers import ProcessEnvBatch

    def broken() -> gym.Env:
        raise ValueError('no robot attached')

    with pytest.raises(RuntimeError, match='no robot attached'):
        ProcessEnvBatch([lambda: gym.make('Pendulum-v1'), broken], workers=2)
