"""NetworkedEnv follows DESIGN.md's timing rules exactly, in virtual time."""
from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from calf_env.envs import make_env, make_networked_env
from calf_shim.link import Link
from calf_shim.models import BernoulliLoss, FixedDelay
from calf_shim.networked_env import NetworkedEnv
from calf_shim.profiles import load_profile
from test_timing import TickCounterEnv

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
    env = NetworkedEnv(inner, fixed_link(up_ms), fixed_link(down_ms), DT)
    run_seq_policy(env, 100)
    applied = inner.applied
    assert applied[:lag_ticks] == [0] * lag_ticks, 'the initial action is held until the first action arrives'
    expected = [(tick - lag_ticks) % 3 for tick in range(lag_ticks + 1, 41)]
    assert applied[lag_ticks:] == expected


def test_reward_is_summed_over_the_ticks_between_decisions() -> None:
    inner = TickCounterEnv(length=30)
    env = NetworkedEnv(inner, fixed_link(50), fixed_link(0), DT)
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


def test_e2e_latency_is_uplink_plus_compute_plus_downlink() -> None:
    env = NetworkedEnv(TickCounterEnv(length=20), fixed_link(7), fixed_link(11), DT, compute_ms=2.0)
    infos = run_seq_policy(env, 100)
    e2e = np.concatenate([i['e2e_ms'] for i in infos])
    assert len(e2e) >= 18
    np.testing.assert_allclose(e2e, 20.0, atol=1e-6)
    np.testing.assert_allclose(infos[-1]['episode_e2e_ms'], 20.0, atol=1e-6)


def test_lost_observations_hold_the_last_action() -> None:
    inner = TickCounterEnv(length=200)
    uplink = Link([BernoulliLoss(p=0.5)], np.random.default_rng(1))
    env = NetworkedEnv(inner, uplink, fixed_link(0), DT)
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


def test_env_checker_passes_for_cartpole_and_minigrid() -> None:
    check_env(make_networked_env('cartpole', load_profile('wifi_normal'), seed=0), skip_render_check=True)
    check_env(make_networked_env('minigrid', load_profile('wifi_normal'), seed=0), skip_render_check=True)


def test_minigrid_takes_noops_without_fresh_actions() -> None:
    env = make_networked_env('minigrid', load_profile('delay_only'), seed=0)
    env.reset(seed=0)
    _, _, _, _, info = env.step(2)
    assert info['ticks'] >= 1
    assert make_env('minigrid').observation_space.shape == (147,)
