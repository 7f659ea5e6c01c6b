"""Box actions under the timing rules: plans by tick index, hold zero, validation at on_action, Pendulum."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from robot_task import Wheel
from test_networked_env import fixed_link

from calf_core.envs import make_networked_env
from calf_core.link import Link
from calf_core.models import BernoulliLoss
from calf_core.networked_env import NetworkedEnv
from calf_core.profiles import load_profile
from calf_core.task_spec import HoldMode, TaskSpec
from calf_core.timing import SMALL_ACTION, BoxBounds, FeedbackPlan, Stepper, Verdict

WHEEL_ZERO = TaskSpec('wheel', 0.01, hold=HoldMode.ZERO)


def test_continuous_plans_run_by_tick_index_then_hold_zero() -> None:
    """Fixed 1 tick up and 1 down (H = 4): plan k's element j runs at tick k + 1 + j; a silent policy stops."""
    inner = Wheel()
    env = NetworkedEnv(inner, WHEEL_ZERO, fixed_link(10), fixed_link(10), plan_horizon=4)
    assert env.action_space.shape == (4, 1)
    env.reset(seed=0)
    env.step(np.array([[0.1], [0.2], [0.3], [0.4]], np.float32))  # answers obs 0, arrives at tick 2
    env.downlink = Link([BernoulliLoss(p=1.0)], np.random.default_rng(0))  # then the policy falls silent
    for _ in range(4):
        env.step(np.full((4, 1), 0.9, np.float32))
    assert inner.applied[:6] == pytest.approx([0.0, 0.2, 0.3, 0.4, 0.0, 0.0])
    # tick 1: the initial zero; ticks 2-4: elements 1-3 (element 0 was meant for tick 1); then zero


def test_hold_last_repeats_the_last_continuous_action_and_actions_are_clipped_to_the_bounds() -> None:
    inner = Wheel()
    env = NetworkedEnv(inner, TaskSpec('wheel', 0.01, hold=HoldMode.LAST), fixed_link(0), fixed_link(0))
    env.reset(seed=0)
    env.step(np.array([5.0], np.float32))  # beyond the bound 1: the agent side clips it
    env.downlink = Link([BernoulliLoss(p=1.0)], np.random.default_rng(0))
    env.step(np.array([0.5], np.float32))
    env.step(np.array([0.5], np.float32))
    assert inner.applied[:3] == pytest.approx([1.0, 1.0, 1.0])


def test_a_nan_action_reaches_the_env_side_and_is_refused_there_while_the_last_action_holds() -> None:
    """The agent side clips what it can; a NaN passes the clip, and the env refuses and counts the plan."""
    inner = Wheel()
    env = NetworkedEnv(inner, TaskSpec('wheel', 0.01, hold=HoldMode.LAST), fixed_link(0), fixed_link(0),
                       plan_horizon=2)
    env.reset(seed=0)
    env.step(np.array([[0.5], [0.6]], np.float32))
    env.step(np.array([[np.nan], [0.2]], np.float32))
    env.step(np.array([[5.0], [-5.0]], np.float32))  # finite, beyond the bounds: clipped and applied
    assert inner.applied == pytest.approx([0.5, 0.6, 1.0])  # tick 2: the first plan's element 1
    assert env.stepper._summary.rejected == 1


@pytest.mark.parametrize('plan', [[np.array([np.nan], np.float32)], [np.array([1.5], np.float32)],
                                  [np.zeros(2, np.float32)], [], [3]])
def test_stepper_refuses_and_counts_invalid_continuous_plans(plan: list) -> None:
    stepper = Stepper(Wheel(), WHEEL_ZERO)
    stepper.reset(0.0)
    assert stepper.on_action(0, 0, plan, 0.001) is Verdict.INVALID
    assert stepper.on_action(0, 0, [np.array([0.5], np.float32)], 0.002) is Verdict.ACCEPTED
    stepper.tick(0.01)
    assert stepper.finish().rejected == 1


@pytest.mark.parametrize('size', [1, SMALL_ACTION + 1])  # checked on Python floats, then with numpy
def test_box_bounds_take_finite_values_within_the_bounds_only(size: int) -> None:
    half_open = BoxBounds(np.full(size, -1.0, np.float32), np.full(size, np.inf, np.float32))
    for value, inside in [(0.5, True), (-1.0, True), (1e30, True), (-1.5, False), (np.nan, False), (np.inf, False),
                          (-np.inf, False)]:
        action = np.zeros(size, np.float32)
        action[-1] = value
        assert half_open.contains(action) is inside, value
        assert half_open.contains(action.reshape(1, size)) is inside, value  # a plan of one action


def test_hold_zero_is_refused_for_discrete_actions() -> None:
    with pytest.raises(Exception, match='hold zero is for continuous'):
        Stepper(gym.make('CartPole-v1'), TaskSpec('cartpole', 0.02, hold=HoldMode.ZERO))


class Recorder(gym.Wrapper):
    """Remembers the physics state at reset and every action applied."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.start, self.applied = self.env.unwrapped.state.copy(), []
        return obs, info

    def step(self, action):
        self.applied.append(np.array(action, dtype=np.float32))
        return self.env.step(action)


@pytest.mark.parametrize('up_ms, down_ms, lag_ticks', [(0, 0, 1), (25, 25, 1), (50, 50, 2), (75, 50, 3)])
def test_pendulum_in_virtual_time_equals_the_bare_env_stepped_with_the_delayed_torques(
        up_ms: float, down_ms: float, lag_ticks: int) -> None:
    """Parity on a continuous env: behind fixed delays, NetworkedEnv on Pendulum-v1 (dt 50 ms) applies the
    torque answering observation k at tick k + lag (zero before the first arrives), and a bare Pendulum
    replayed with those torques from the same start passes through exactly the observations the agent saw."""
    inner = Recorder(gym.make('Pendulum-v1'))
    env = make_networked_env('Pendulum-v1', load_profile('sim_clean'), seed=0, env=inner,
                             links=(fixed_link(up_ms), fixed_link(down_ms)))
    obs, info = env.reset(seed=3)
    seen, torques, done = {info['obs_seq']: obs}, [], False
    while not done:
        torques.append(np.array([2.0 * np.sin(5.0 * obs[2])], np.float32))  # depends on the state seen
        obs, _, terminated, truncated, info = env.step(torques[-1])
        seen[info['obs_seq']] = obs
        done = terminated or truncated
    keys = list(seen)
    assert keys[:-1] == list(range(len(keys) - 1)) and keys[-1] == 200, 'each observation once, in order'
    expected = ([np.zeros(1, np.float32)] * (lag_ticks - 1) + torques)[:200]
    np.testing.assert_array_equal(np.asarray(inner.applied), np.asarray(expected))
    bare = gym.make('Pendulum-v1')
    bare.reset(seed=0)
    bare.unwrapped.state = inner.start.copy()
    replay = [bare.unwrapped._get_obs()] + [bare.step(torque)[0] for torque in expected]
    np.testing.assert_allclose(np.asarray(list(seen.values())), np.asarray(replay, np.float32)[keys],
                               rtol=0, atol=1e-6)


def test_pendulum_passes_the_env_checker_and_is_deterministic_per_seed() -> None:
    check_env(make_networked_env('Pendulum-v1', load_profile('wifi_normal'), seed=0), skip_render_check=True)
    returns = []
    for _ in range(2):
        env = make_networked_env('Pendulum-v1', load_profile('wifi_degraded'), seed=7)
        env.reset(seed=7)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, info = env.step(np.array([0.5], np.float32))
            total += reward
            done = terminated or truncated
        returns.append(total)
        assert info['ticks_held'] > 0 and np.isfinite(total)
    assert returns[0] == returns[1]


def test_a_feedback_plan_corrects_each_element_by_the_observation_the_env_sees_as_it_applies_it() -> None:
    """The wheel observes its tick count and the plan predicted 0 for every element: its element at tick t
    applies u + 0.1 (t - 1), t - 1 being what the env observed at the tick before, within the bounds. Held ticks
    get no feedback."""
    inner = Wheel()
    env = NetworkedEnv(inner, WHEEL_ZERO, fixed_link(10), fixed_link(10), plan_horizon=4)
    env.reset(seed=0)
    gains = np.full((4, 1, 1), 0.1, np.float32)
    plan = FeedbackPlan(np.array([[0.1], [0.2], [0.3], [0.95]], np.float32), gains, np.zeros((4, 1), np.float32))
    env.step(plan)  # answers obs 0, arrives at tick 2: elements 1-3 run at ticks 2-4
    env.downlink = Link([BernoulliLoss(p=1.0)], np.random.default_rng(0))
    for _ in range(4):
        env.step(np.full((4, 1), 0.9, np.float32))
    assert inner.applied[:6] == pytest.approx([0.0, 0.2 + 0.1, 0.3 + 0.2, 1.0, 0.0, 0.0])  # 0.95 + 0.3: clipped


def test_hold_last_after_a_feedback_plan_repeats_its_last_element_uncorrected() -> None:
    """A held tick applies no feedback: under hold last it repeats the plan's last element as sent (0.4), which
    is what a model planner's rollout assumes, not the corrected action applied at the tick before (0.4 + 0.3)."""
    inner = Wheel()
    env = NetworkedEnv(inner, TaskSpec('wheel', 0.01, hold=HoldMode.LAST), fixed_link(10), fixed_link(10),
                       plan_horizon=4)
    env.reset(seed=0)
    plan = FeedbackPlan(np.array([[0.1], [0.2], [0.3], [0.4]], np.float32), np.full((4, 1, 1), 0.1, np.float32),
                        np.zeros((4, 1), np.float32))
    env.step(plan)  # answers obs 0, arrives at tick 2: elements 1-3 run at ticks 2-4
    env.downlink = Link([BernoulliLoss(p=1.0)], np.random.default_rng(0))
    for _ in range(4):
        env.step(np.full((4, 1), 0.9, np.float32))
    assert inner.applied[:6] == pytest.approx([0.0, 0.2 + 0.1, 0.3 + 0.2, 0.4 + 0.3, 0.4, 0.4])


@pytest.mark.parametrize('feedback', [(np.zeros((2, 1, 2), np.float32), np.zeros((2, 1), np.float32)),  # obs size
                                      (np.zeros((1, 1, 1), np.float32), np.zeros((1, 1), np.float32)),  # plan length
                                      (np.full((2, 1, 1), np.nan, np.float32), np.zeros((2, 1), np.float32)),
                                      (np.zeros((2, 1, 1), np.float32),), 'gains'])
def test_feedback_that_does_not_fit_its_plan_is_refused_with_the_plan(feedback: object) -> None:
    stepper = Stepper(Wheel(), WHEEL_ZERO)
    stepper.reset(0.0)
    plan = [np.array([0.1], np.float32), np.array([0.2], np.float32)]
    assert stepper.on_action(0, 0, plan, 0.001, feedback=feedback) is Verdict.INVALID
    assert stepper.on_action(0, 0, plan, 0.001, feedback=(np.zeros((2, 1, 1)), np.zeros((2, 1)))) is Verdict.ACCEPTED


def test_a_discrete_plan_with_feedback_is_refused() -> None:
    stepper = Stepper(gym.make('CartPole-v1'), TaskSpec('cartpole', 0.02))
    stepper.reset(0.0, seed=0)
    feedback = (np.zeros((1, 1, 4), np.float32), np.zeros((1, 4), np.float32))
    assert stepper.on_action(0, 0, [1], 0.001, feedback=feedback) is Verdict.INVALID
