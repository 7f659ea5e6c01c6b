"""NetworkedEnv follows the timing rules of ``calf_core.timing`` exactly, in virtual time."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from test_timing import TickCounterEnv, task

import calf_core
from calf_core.envs import env_spec, make_env, make_networked_env
from calf_core.link import Link
from calf_core.models import BernoulliLoss, FixedDelay, TraceReplay
from calf_core.networked_env import NetworkedEnv
from calf_core.profiles import Profile, load_profile, profile_from_dict

DT = 0.02


def fixed_link(ms: float) -> Link:
    return Link([FixedDelay(latency_ms=ms)] if ms else [], np.random.default_rng(0))


def run_seq_policy(env: NetworkedEnv, steps: int) -> list[dict]:
    """Act with the observed tick count modulo 3, so that each applied action names its source."""
    obs, info = env.reset(seed=0)
    infos = [info]
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(int(obs[0]) % 3)
        infos.append(info)
        if terminated or truncated:
            break
    return infos


@pytest.mark.parametrize('up_ms, down_ms, lag_ticks', [(0, 0, 1), (10, 10, 1), (20, 20, 2), (30, 25, 3),
                                                        (40, 40, 4)])
def test_fixed_delays_apply_the_action_from_lag_ticks_earlier(up_ms: float, down_ms: float,
                                                               lag_ticks: int) -> None:
    inner = TickCounterEnv(length=40)
    env = NetworkedEnv(inner, task(), fixed_link(up_ms), fixed_link(down_ms))
    run_seq_policy(env, 100)
    applied = inner.applied
    assert applied[:lag_ticks] == [0] * lag_ticks, 'the initial action is held until the first action arrives'
    expected = [(tick - lag_ticks) % 3 for tick in range(lag_ticks + 1, 41)]
    assert applied[lag_ticks:] == expected


def test_reward_is_summed_over_the_ticks_between_decisions() -> None:
    inner = TickCounterEnv(length=30)
    env = NetworkedEnv(inner, task(), fixed_link(50), fixed_link(0))
    obs, _ = env.reset(seed=0)
    assert obs[0] == 0
    total, ticks = 0.0, 0
    terminated = truncated = False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(1)
        total += reward
        ticks += info['ticks']
        assert reward == info['ticks']
    assert (total, ticks) == (30.0, 30)


PILE_UP_MS = [0.0, 60.0, 0.0, 0.0, 0.0, 0.0]
"""Uplink delays per observation (looped): a FIFO link delivers observations 1-4, then 7-10, together."""


def test_of_observations_arriving_at_one_instant_the_agent_keeps_the_newest() -> None:
    """Observation 1 is held 60 ms and a FIFO link holds 2-4 behind it: all four reach the agent at 80 ms.
    It decides once, on 4 (as a policy node's depth-1 subscription keeps the newest), never on 1-3."""
    uplink = Link([TraceReplay(PILE_UP_MS)], np.random.default_rng(0), reorder=False)
    env = NetworkedEnv(TickCounterEnv(length=40), task(), uplink, fixed_link(0))
    infos = run_seq_policy(env, 5)
    assert [i['obs_seq'] for i in infos] == [0, 4, 5, 6, 10, 11]
    assert [i['ticks'] for i in infos[1:]] == [4, 1, 1, 4, 1]
    assert [i['obs_age_ms'] for i in infos[1:]] == pytest.approx([0.0] * 5, abs=1e-6)


@pytest.mark.parametrize('uplink_ms', [120.0, 11_000.0])  # observation 0 arrives after 2 ticks, after the episode
def test_an_episodes_ticks_and_rewards_add_up_exactly_once(uplink_ms: float) -> None:
    """Reset's info and every step's info count each tick of an episode once, and the steps' rewards sum
    to the episode's return, as the inner env's own statistics record them (Pendulum, 200 ticks of 50 ms)."""
    inner = gym.wrappers.RecordEpisodeStatistics(gym.make('Pendulum-v1'))
    profile = profile_from_dict({'compute_ms': 1.0, 'uplink': [{'model': 'fixed_delay', 'latency_ms': uplink_ms}],
                                 'downlink': [{'model': 'fixed_delay', 'latency_ms': 10.0}]}, 'late')
    env = calf_core.wrap(inner, network=profile, seed=0)
    env.action_space.seed(0)
    counted = []
    for _ in range(3):
        _, info = env.reset()
        ticks, total, done = info['ticks'], 0.0, False
        while not done:
            _, reward, terminated, truncated, info = env.step(env.action_space.sample())
            ticks, total, done = ticks + info['ticks'], total + reward, terminated or truncated
        counted.append((ticks, total))
    assert [t for t, _ in counted] == list(inner.length_queue) == [200] * 3
    assert [r for _, r in counted] == pytest.approx(list(inner.return_queue), abs=1e-3)


def test_e2e_latency_is_uplink_plus_compute_plus_downlink() -> None:
    env = NetworkedEnv(TickCounterEnv(length=20), task(), fixed_link(7), fixed_link(11), compute_ms=2.0)
    infos = run_seq_policy(env, 100)
    e2e = np.concatenate([i['e2e_ms'] for i in infos])
    assert len(e2e) >= 18
    np.testing.assert_allclose(e2e, 20.0, atol=1e-6)
    np.testing.assert_allclose(infos[-1]['episode_e2e_ms'], 20.0, atol=1e-6)


def test_lost_observations_hold_the_last_action() -> None:
    inner = TickCounterEnv(length=200)
    uplink = Link([BernoulliLoss(p=0.5)], np.random.default_rng(1))
    env = NetworkedEnv(inner, task(), uplink, fixed_link(0))
    infos = run_seq_policy(env, 400)
    assert infos[-1]['obs_lost'] > 50
    ticks = [i['ticks'] for i in infos[1:]]
    assert max(ticks) > 1 and sum(ticks) == 200
    acted_on = [i['obs_seq'] for i in infos[:-1]]
    for tick, action in enumerate(inner.applied, start=1):
        newest = max(seq for seq in acted_on if seq < tick)
        assert action == newest % 3, f'tick {tick} should hold the action from observation {newest}'


def test_same_seed_same_trajectory_and_reset_clears_in_flight_messages() -> None:
    profile = load_profile('full_net_aware')

    def returns(seed: int) -> list[tuple[float, int]]:
        env = make_networked_env('cartpole', profile, seed=seed)
        out = []
        for episode in range(3):
            obs, _ = env.reset(seed=seed + episode)
            done, total, steps = False, 0.0, 0
            while not done:
                obs, reward, terminated, truncated, _ = env.step(int(obs[2] > 0))
                total += reward
                steps += 1
                done = terminated or truncated
            out.append((total, steps))
        return out

    assert returns(3) == returns(3)
    assert returns(3) != returns(4)


def test_unseeded_resets_continue_the_seeded_generators() -> None:
    """Episodes after reset() without a seed (as vector envs autoreset) are still fixed by the first seed."""
    def lengths(seed: int) -> list[int]:
        env = make_networked_env('cartpole', load_profile('full_net_aware'), seed=seed)
        env.reset(seed=seed)
        out, steps = [], 0
        while len(out) < 5:
            _, _, terminated, truncated, _ = env.step(steps % 2)
            steps += 1
            if terminated or truncated:
                out.append(steps)
                env.reset()
        return out

    assert lengths(5) == lengths(5)
    assert lengths(5) != lengths(6)


def test_networked_env_is_a_wrapper_whose_unwrapped_is_the_users_env() -> None:
    inner = gym.make('Pendulum-v1')
    env = calf_core.wrap(inner, network='wifi_normal')
    assert isinstance(env, gym.Wrapper) and env.env is inner and env.unwrapped is inner.unwrapped
    assert type(env.unwrapped).__name__ == 'PendulumEnv' and env.spec is None
    made = gym.make(calf_core.ENV_ID, env='Pendulum-v1', network='wifi_normal')
    assert type(made.unwrapped).__name__ == 'PendulumEnv' and made.get_wrapper_attr('task').name == 'Pendulum-v1'
    assert made.spec.id == calf_core.ENV_ID and made.spec.kwargs['network'] == 'wifi_normal'


@pytest.mark.parametrize('make', [lambda: calf_core.wrap(gym.make('Pendulum-v1'), network='wifi_degraded'),
                                  lambda: gym.make(calf_core.ENV_ID, env='Pendulum-v1', network='wifi_normal'),
                                  lambda: calf_core.wrap(gym.make('CartPole-v1'), network='wifi_normal', plan_horizon=3)],
                         ids=['wrap', 'gym.make', 'plans'])
def test_gymnasium_and_sb3_env_checkers_pass_on_the_wrapper(make) -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    check_env(make())  # gym.make's env has a spec: the checker remakes it from that
    sb3_check_env(make())


def test_env_checker_passes_for_cartpole_and_minigrid() -> None:
    check_env(make_networked_env('cartpole', load_profile('wifi_normal'), seed=0), skip_render_check=True)
    check_env(make_networked_env('minigrid', load_profile('wifi_normal'), seed=0), skip_render_check=True)


def test_minigrid_takes_noops_without_fresh_actions() -> None:
    env = make_networked_env('minigrid', load_profile('delay_only'), seed=0)
    env.reset(seed=0)
    _, _, _, _, info = env.step(2)
    assert info['ticks'] >= 1
    assert make_env('minigrid').observation_space.shape == (147,)


def run_reactive(env: NetworkedEnv, episodes: int) -> str:
    """Forward when the cell ahead is empty or the goal, else turn left; one letter per episode:
    S (reached the goal), C (crashed) or T (time limit)."""
    front = (3 * 7 + 5) * 3  # the object type of the cell ahead in the flat 7x7x3 view
    letters = ''
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        terminated = truncated = False
        while not (terminated or truncated):
            obs, _, terminated, truncated, info = env.step(2 if obs[front] in (1, 8) else 0)
        letters += 'S' if info['success'] else 'C' if terminated else 'T'
    return letters


def test_minigrid_dynamic_crashes_a_reactive_policy_only_when_its_actions_are_late() -> None:
    """Fresh views: moving forward only into free cells never collides. Two ticks late (60 ms each way at
    80 ms ticks), the held and stale forwards run into walls and balls."""
    def run(one_way_ms: float) -> str:
        return run_reactive(NetworkedEnv(make_env('minigrid_dynamic'), env_spec('minigrid_dynamic'),
                                         fixed_link(one_way_ms), fixed_link(one_way_ms)), 20)

    assert run(0) == 'S' * 20
    assert run(60).count('C') >= 15


def run_plans(env: NetworkedEnv, steps: int) -> list[np.ndarray]:
    """Send constant plans; return each info's ``executed`` matrix (index 0: reset, i: step i)."""
    _, info = env.reset(seed=0)
    executed = [info['executed']]
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(np.ones(env.plan_horizon, dtype=np.int64))
        executed.append(info['executed'])
        if terminated or truncated:
            break
    return executed


@pytest.mark.parametrize('up_ms, down_ms, first_step, lag, index', [
    (0, 0, 1, 0, 0),  # the plan answers tick k and runs at tick k + 1, before the next decision
    (30, 25, 2, 1, 2),  # 3-tick delay: obs k decided at k + 1.5, plan[2] runs at k + 3, one decision later
    (40, 40, 2, 1, 3),  # 4-tick delay: plan[3] runs at k + 4, one decision later
])
def test_executed_mask_names_the_plan_and_element_each_step_ran(up_ms: float, down_ms: float, first_step: int,
                                                                lag: int, index: int) -> None:
    env = NetworkedEnv(TickCounterEnv(length=30), task(), fixed_link(up_ms), fixed_link(down_ms), plan_horizon=4)
    executed = run_plans(env, 100)
    expected = np.zeros((5, 4), dtype=np.uint8)
    expected[lag, index] = 1
    assert all(e.shape == (5, 4) and e.dtype == np.uint8 for e in executed)
    assert not any(e.any() for e in executed[:first_step]), 'no plan has run before the first one arrives'
    for step, e in enumerate(executed[first_step:], start=first_step):
        np.testing.assert_array_equal(e, expected, err_msg=f'step {step}')


def test_executed_mask_reports_a_plan_that_outlives_lost_successors() -> None:
    inner = TickCounterEnv(length=12)
    env = NetworkedEnv(inner, task(), fixed_link(0), fixed_link(0), plan_horizon=4)
    env.reset(seed=0)
    env.step(np.array([1, 2, 1, 2]))
    env.downlink = Link([BernoulliLoss(p=1.0)], np.random.default_rng(0))  # every later plan is lost
    masks = [env.step(np.zeros(4, dtype=np.int64))[4]['executed'] for _ in range(4)]
    assert inner.applied[:5] == [1, 2, 1, 2, 2], 'plan 0 runs out at tick 4, then its last element is held'
    assert [list(zip(*np.nonzero(m))) for m in masks] == [[(1, 1)], [(2, 2)], [(3, 3)], []]


def stall_profile(period_ms: float = 700.0) -> Profile:
    return profile_from_dict({'compute_ms': 1.0, 'uplink': [
        {'model': 'fixed_delay', 'latency_ms': 2.0},
        {'model': 'stall', 'mode': 'periodic', 'period_ms': period_ms, 'duration_ms': 100.0}],
        'downlink': [{'model': 'fixed_delay', 'latency_ms': 2.0}]}, 'periodic_stall')


def first_stall_ticks(env: NetworkedEnv, episodes: int, seeded: bool) -> list[int]:
    """Per episode, the tick of the first decision after a stall: a step of more than 3 ticks (one without
    a stall), while the stall held the observations in between."""
    out = []
    for episode in range(episodes):
        obs, info = env.reset(seed=episode if seeded else None)
        first, done = None, False
        while not done:
            obs, _, terminated, truncated, info = env.step(int(obs[2] + 0.5 * obs[3] > 0))
            done = terminated or truncated
            if first is None and not done and info['ticks'] > 3:
                first = info['obs_seq']
        out.append(first)
    return out


@pytest.mark.parametrize('seeded', [False, True])
def test_a_periodic_stall_does_not_lock_to_the_episode_start(seeded: bool) -> None:
    """The link runs on across episodes: the first stall lands at a different tick in each episode,
    seeded or not (before, every episode stalled at the same tick)."""
    env = make_networked_env('cartpole', stall_profile(), seed=0)
    ticks = first_stall_ticks(env, 12, seeded)
    assert None not in ticks and len(set(ticks)) >= 6, ticks
    assert max(ticks) - min(ticks) >= 15, ticks  # spread over the 35-tick period


def test_link_clock_runs_on_across_episodes() -> None:
    """A trace keeps its position across an episode boundary and a seeded reset; the FIFO order too."""
    profile = profile_from_dict({'compute_ms': 0.0, 'uplink': [
        {'model': 'trace_replay', 'delays_ms': [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]}], 'downlink': []}, 'trace')
    env = make_networked_env('cartpole', profile, seed=0, env=TickCounterEnv(3))
    ages = []
    for episode in range(3):
        _, info = env.reset(seed=episode if episode == 2 else None)
        ages.append(round(info['obs_age_ms'], 6))
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(0)
            done = terminated or truncated
    assert ages == [1.0, 4.0, 7.0]  # 3 observations per episode cross the link (the last one ends it)
