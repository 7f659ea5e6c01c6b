"""Exact sequences for the shared timing rules (PlanExecutor, Stepper, ObservationGate)."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from calf_core.task_spec import SuccessRule, TaskSpec
from calf_core.timing import HoldMode, ObservationGate, PlanExecutor, Stepper, Verdict, keep_newest

DISCRETE_7 = gym.spaces.Discrete(7)


def task(hold: HoldMode = HoldMode.LAST, **fields) -> TaskSpec:
    """A test task ticking every 20 ms."""
    return TaskSpec('test', 0.02, hold=hold, **fields)


class TickCounterEnv(gym.Env):
    """Observation = tick count; remembers every action applied. Ends after ``length`` ticks."""

    def __init__(self, length: int = 50) -> None:
        self.observation_space = gym.spaces.Box(0, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.length = length
        self.applied: list[int] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.applied = []
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.applied.append(int(action))
        ticks = len(self.applied)
        return np.array([ticks], np.float32), 1.0, False, ticks >= self.length, {}


def test_single_action_is_held_until_a_newer_one_arrives() -> None:
    ex = PlanExecutor(task(initial_action=0), DISCRETE_7)
    assert ex.action_for_tick(1).action == 0
    assert ex.offer(0, [2]) is Verdict.ACCEPTED
    applied = [ex.action_for_tick(t) for t in (2, 3, 4)]
    assert [a.action for a in applied] == [2, 2, 2]
    assert [a.held for a in applied] == [False, True, True]


def test_noop_hold_applies_a_late_action_once() -> None:
    ex = PlanExecutor(task(HoldMode.NOOP, initial_action=6, noop_action=6), DISCRETE_7)
    ex.offer(0, [2])
    assert [ex.action_for_tick(t).action for t in (4, 5, 6)] == [2, 6, 6]


def test_plan_elements_apply_by_tick_index() -> None:
    """Fixed 3-tick delay, H = 8: at tick k+4 the env applies plan[3] of the plan from observation k."""
    ex = PlanExecutor(task(initial_action=0), DISCRETE_7)
    k = 10
    plan = [1, 2, 1, 2, 0, 0, 1, 1]
    ex.offer(k, plan)
    assert ex.action_for_tick(k + 4) == (plan[3], k, 3, False)
    assert [ex.action_for_tick(t).action for t in range(k + 5, k + 9)] == plan[4:8]
    held = ex.action_for_tick(k + 9)
    assert held.held and held.action == plan[-1]


def test_stale_plans_are_discarded() -> None:
    ex = PlanExecutor(task(initial_action=0), DISCRETE_7)
    assert ex.offer(5, [1]) is Verdict.ACCEPTED
    assert ex.offer(3, [2]) is Verdict.STALE
    assert ex.offer(5, [2]) is Verdict.DUPLICATE
    assert ex.action_for_tick(6).action == 1


def test_stepper_measures_e2e_on_env_side_and_rejects_bad_actions() -> None:
    stepper = Stepper(TickCounterEnv(), task(success=SuccessRule.GOAL))
    first = stepper.reset(0.0, seed=0)
    assert (first.seq, first.episode, first.stamp_s) == (0, 0, 0.0)
    assert stepper.on_action(0, 0, [1], 0.013) is Verdict.ACCEPTED
    assert stepper.on_action(0, 0, [7], 0.014) is Verdict.INVALID
    assert stepper.on_action(0, 3, [1], 0.014) is Verdict.OTHER_EPISODE
    assert stepper.on_action(99, 0, [1], 0.014) is Verdict.UNKNOWN_OBSERVATION
    record = stepper.tick(0.02)
    assert record.applied.action == 1 and record.seq == 1
    assert stepper.e2e_ms == pytest.approx([13.0])
    assert stepper.finish().rejected == 1


def test_stepper_knows_the_stamps_of_its_last_stamp_memory_observations_only() -> None:
    """An action answering an observation not yet emitted, or older than the last ``stamp_memory``, is unknown."""
    stepper = Stepper(TickCounterEnv(length=50), task(), stamp_memory=4)
    stepper.reset(0.0)
    for tick in range(1, 7):
        stepper.tick(tick * 0.02)
    assert stepper.on_action(-1, 0, [1], 0.13) is Verdict.UNKNOWN_OBSERVATION
    assert stepper.on_action(2, 0, [1], 0.13) is Verdict.UNKNOWN_OBSERVATION  # 3..6 remembered
    assert stepper.on_action(7, 0, [1], 0.13) is Verdict.UNKNOWN_OBSERVATION  # not emitted yet
    assert stepper.on_action(3, 0, [1], 0.13) is Verdict.ACCEPTED
    assert stepper.on_action(6, 0, [2], 0.135) is Verdict.ACCEPTED
    assert stepper.e2e_ms == pytest.approx([130.0 - 60.0, 135.0 - 120.0])


def test_stepper_episode_ends_and_requires_reset() -> None:
    stepper = Stepper(TickCounterEnv(length=3), task(success=SuccessRule.TIME_LIMIT))
    stepper.reset(0.0)
    records = [stepper.tick(0.02 * t) for t in (1, 2, 3)]
    assert records[-1].truncated and stepper.done
    summary = stepper.finish()
    assert (summary.length, summary.episode_return, summary.success, summary.ticks_held) == (3, 3.0, True, 3)
    with pytest.raises(RuntimeError):
        stepper.tick(0.08)
    assert stepper.reset(0.1).episode == 1


def test_gate_admits_only_newer_observations_and_env_restarts() -> None:
    gate = ObservationGate()
    assert [gate.admit(0, s) for s in (0, 2, 1, 2, 3)] == [True, True, False, False, True]
    assert gate.admit(1, 0)
    assert not gate.admit(0, 5), 'a late observation of an older episode is skipped'
    assert gate.admit(0, 3, run=7), 'an env side that restarted (new run id) is followed at once'
    assert not gate.admit(0, 2, run=7)


def test_keep_newest_picks_the_newest_of_one_instant_per_policy() -> None:
    """One burst as a list (NetworkedEnv), or one row per policy with -1 for empty slots (the vector env)."""
    assert keep_newest([7, 9, 8]) == 1
    rows = np.array([[3, 5, -1, 4], [-1, -1, 2, -1], [11, 10, 12, 12]])
    assert keep_newest(rows).tolist() == [1, 2, 2]
