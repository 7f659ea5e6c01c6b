"""The env side's start plan: a policy-free action cycle run until the first plan of an episode arrives."""
from __future__ import annotations

import numpy as np
import pytest
from test_timing import DISCRETE_7, TickCounterEnv, task

from calf_core.errors import ConfigError
from calf_core.link import Link
from calf_core.models import FixedDelay
from calf_core.networked_env import NetworkedEnv
from calf_core.timing import HoldMode, PlanExecutor, Stepper, Verdict


def test_start_plan_cycles_by_tick_until_the_first_plan_then_plans_rule() -> None:
    ex = PlanExecutor(task(initial_action=0, start_plan=(1, 2)), DISCRETE_7)
    assert [ex.action_for_tick(t).action for t in range(1, 6)] == [1, 2, 1, 2, 1]
    assert ex.action_for_tick(6) == (2, -1, -1, True)
    assert ex.offer(3, [0, 0, 1]) is Verdict.ACCEPTED
    assert [ex.action_for_tick(t).action for t in range(7, 10)] == [1, 1, 1]  # plan ran out: hold its last
    ex.reset()
    assert [ex.action_for_tick(t).action for t in (1, 2)] == [1, 2]


def test_start_plan_overrides_the_noop_hold_only_before_the_first_plan() -> None:
    ex = PlanExecutor(task(HoldMode.NOOP, initial_action=0, noop_action=0, start_plan=(2,)), DISCRETE_7)
    assert ex.action_for_tick(1).action == 2
    ex.offer(1, [1])
    assert [ex.action_for_tick(t).action for t in (2, 3)] == [1, 0]


def test_stepper_rejects_a_start_plan_outside_the_action_space() -> None:
    with pytest.raises(ConfigError, match=r'task test: start_plan 3 is not an action in 0..2'):
        Stepper(TickCounterEnv(), task(start_plan=(0, 3)))


def test_networked_env_runs_the_start_plan_while_the_first_action_travels() -> None:
    """Fixed 2 ticks up and 2 down: the first plan arrives at tick 4, so ticks 1-3 run the start plan."""
    dt = 0.02
    inner = TickCounterEnv(length=12)
    links = [Link([FixedDelay(latency_ms=2 * dt * 1e3)], np.random.default_rng(0)) for _ in range(2)]
    env = NetworkedEnv(inner, task(start_plan=(1, 2)), *links, plan_horizon=8, seed=0)
    env.reset(seed=0)
    for plan in ([0] * 8, [1] * 8, [1] * 8):
        env.step(plan)
    assert inner.applied[:5] == [1, 2, 1, 0, 1]  # then element 3 of the plans for observations 0 and 1
