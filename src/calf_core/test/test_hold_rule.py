"""The hold rule has one implementation (``timing.element_for_tick``): NetworkedEnv (``PlanExecutor``) and the vector
env apply the same action on every tick of the same arrivals: plans, late plans, holds, no-op and start plans."""
from __future__ import annotations

import itertools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from calf_core.envs import make_env, make_networked_env
from calf_core.profiles import Profile, profile_from_dict
from calf_core.task_spec import HoldMode, TaskSpec
from calf_core.timing import element_for_tick
from calf_core.vector_networked import EnvBatch, VectorNetworkedEnv


def test_the_rule_on_ints() -> None:
    # a plan of 3 answering observation 4, first used at tick 5: its elements at ticks 5, 6, 7, then held
    assert [element_for_tick(t, 4, 3, t == 5, 0) for t in range(5, 10)] == [0, 1, 2, -1, -1]
    # a late plan (all its ticks passed) runs its last element once, then holds
    assert [element_for_tick(t, 4, 3, t == 9, 0) for t in (9, 10)] == [2, -1]
    assert element_for_tick(9, 4, 3, False, 0) == -1  # not its first use: held
    # no plan yet: the start plan cycles from tick 1, or the tick is held without one
    assert [element_for_tick(t, -1, 3, True, 2) for t in range(1, 6)] == [0, 1, 0, 1, 0]
    assert element_for_tick(3, -1, 3, True, 0) == -1
    # a plan replaces the start plan
    assert element_for_tick(3, 2, 1, True, 2) == 0


def test_arrays_give_the_ints_answer_elementwise() -> None:
    rows = list(itertools.product(range(1, 12), range(-1, 11), (1, 2, 4), (False, True), (0, 1, 3)))
    rows = [(t, s, n, f, c) for t, s, n, f, c in rows if s < t]  # a plan answers an observation already emitted
    expected = [element_for_tick(*row) for row in rows]
    for plan_len, start_len in itertools.product((1, 2, 4), (0, 1, 3)):
        chosen = [i for i, row in enumerate(rows) if row[2:5:2] == (plan_len, start_len)]
        tick, seq, _, first, _ = (np.array(col) for col in zip(*(rows[i] for i in chosen)))
        got = element_for_tick(tick, seq, plan_len, first, start_len)
        assert got.tolist() == [expected[i] for i in chosen]


class ActionLog(gym.Wrapper):
    """Records every action the env is stepped with, as (episode, tick of the episode, action)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.log: list[tuple[int, int, Any]] = []
        self.episode, self.tick = -1, 0

    def reset(self, **kwargs: Any) -> Any:
        self.episode, self.tick = self.episode + 1, 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        self.tick += 1
        self.log.append((self.episode, self.tick, np.asarray(action).tolist()))
        return self.env.step(action)


def profile(uplink: dict, down_ms: list[float], compute_ms: float = 5.0) -> Profile:
    """A deterministic profile (both paths see one run): the downlink replays ``down_ms`` in turn."""
    return profile_from_dict({'compute_ms': compute_ms, 'reorder': False, 'uplink': [uplink],
                              'downlink': [{'model': 'trace_replay', 'delays_ms': down_ms}]}, 'hold')


SPARSE = {'model': 'trace_replay', 'delays_ms': [20.0] * 8, 'lost': [False] + [True] * 7}
"""One observation in 8 reaches the policy: a plan runs out before the next one comes."""
VARIED = profile(SPARSE, [10.0, 140.0, 20.0, 230.0, 30.0, 5.0, 95.0])
"""Pendulum's plans (50 ms ticks) arrive in time or late (all their ticks passed), and run out."""
LATE = profile({'model': 'fixed_delay', 'latency_ms': 60.0}, [60.0], compute_ms=10.0)
"""Every plan arrives after its two ticks have passed (130 ms): its last element runs once."""
SLOW_START = profile({'model': 'fixed_delay', 'latency_ms': 180.0}, [30.0, 260.0, 15.0])
"""The first plan of an episode arrives at tick 5 or later: the start plan runs until then."""
START = (1.5, 1.75)
NOOP = 1.9
INITIAL = 1.2


def code(decision: int, element: int, horizon: int) -> float:
    """A distinct action for every plan element (below any start plan or no-op value, never zero)."""
    return round(-1.9 + (decision * horizon + element) % 1800 * 0.001, 6)


def kinds(log: list[tuple[int, int, Any]], answers: dict[int, int], spec: TaskSpec, horizon: int) -> set[str]:
    """The kinds of tick in a Pendulum log whose plans were coded by ``code``; ``answers``: decision -> obs_seq."""
    found, previous = set(), None
    for _, tick, (value,) in log:
        value = round(value, 6)
        if value in START:
            kind = 'start'
        elif value in (NOOP, 0.0):
            kind = 'noop'
        elif value == INITIAL:
            kind = 'initial'
        elif value == previous:
            kind = 'held'
        else:
            decision, element = divmod(round((value + 1.9) / 0.001), horizon)
            kind = 'late' if element == horizon - 1 and tick - answers[decision] - 1 > element else 'plan'
        found.add(kind)
        previous = value
    return found


@pytest.mark.parametrize('hold, horizon, start_plan, network, want', [
    (HoldMode.LAST, 3, (), VARIED, {'plan', 'late', 'held', 'initial'}),
    (HoldMode.LAST, 2, (), LATE, {'late', 'initial'}),
    (HoldMode.ZERO, 2, (), VARIED, {'plan', 'late', 'noop'}),  # never the initial action: zero before a plan too
    (HoldMode.NOOP, 1, START, VARIED, {'plan', 'noop', 'start'}),
    (HoldMode.LAST, 2, START, SLOW_START, {'late', 'held', 'start'}),
], ids=['plans-late-plans-holds', 'late-plans', 'hold-zero', 'hold-noop-start-plan', 'start-plan-then-hold-last'])
@pytest.mark.slow
def test_both_paths_apply_the_same_action_on_every_tick(hold: HoldMode, horizon: int, start_plan: tuple,
                                                         network: Profile, want: set[str]) -> None:
    n, steps = 3, 250
    spec = TaskSpec('pendulum', 0.05, 'Pendulum-v1', hold=hold, noop_action=(NOOP,) if hold is HoldMode.NOOP else None,
                    initial_action=(INITIAL,), start_plan=tuple((a,) for a in start_plan))
    scalar = [make_networked_env('pendulum', network, seed=i, plan_horizon=horizon, task=spec,
                                 env=ActionLog(make_env('Pendulum-v1'))) for i in range(n)]
    batch = EnvBatch([ActionLog(make_env('Pendulum-v1')) for _ in range(n)])
    vector = VectorNetworkedEnv(batch, spec, scalar[0].env.observation_space, scalar[0].env.action_space, network, horizon)
    vector.reset(seed=0)
    answers: list[dict[int, int]] = [{} for _ in range(n)]
    seqs = [env.reset(seed=i)[1]['obs_seq'] for i, env in enumerate(scalar)]
    for step in range(steps):
        plans = np.array([[[code(n * step + i, j, horizon)] for j in range(horizon)] for i in range(n)], np.float32)
        vector.step(plans if horizon > 1 else plans[:, 0])
        for i, env in enumerate(scalar):
            answers[i][n * step + i] = seqs[i]
            _, _, terminated, truncated, info = env.step(plans[i] if horizon > 1 else plans[i, 0])
            seqs[i] = env.reset()[1]['obs_seq'] if terminated or truncated else info['obs_seq']
    for i, env in enumerate(scalar):
        log = env.env.log
        assert batch.envs[i].log == log, f'env {i}'
        assert len(log) >= steps and kinds(log, answers[i], spec, horizon) >= want, f'env {i}'


def test_discrete_no_op_and_start_plan_on_both_paths() -> None:
    """CartPole under hold noop (action 0) with a start plan of 1: the same actions, tick by tick."""
    n, horizon = 3, 2
    spec = TaskSpec('cartpole', 0.02, 'CartPole-v1', hold=HoldMode.NOOP, noop_action=0, start_plan=(1,))
    network = profile({'model': 'fixed_delay', 'latency_ms': 15.0}, [5.0, 70.0, 10.0, 45.0])
    scalar = [make_networked_env('cartpole', network, seed=i, plan_horizon=horizon, task=spec,
                                 env=ActionLog(make_env('CartPole-v1'))) for i in range(n)]
    batch = EnvBatch([ActionLog(make_env('CartPole-v1')) for _ in range(n)])
    vector = VectorNetworkedEnv(batch, spec, scalar[0].env.observation_space, scalar[0].env.action_space, network, horizon)
    vector.reset(seed=[int(np.random.default_rng(i).integers(2**31)) for i in range(n)])  # NetworkedEnv's env seeds
    for i, env in enumerate(scalar):
        env.reset(seed=i)
    held = 0
    for step in range(400):
        plans = np.array([[1, 1] if (step + i) % 3 else [1, 0] for i in range(n)])
        vector.step(plans)
        for i, env in enumerate(scalar):
            _, _, terminated, truncated, info = env.step(plans[i])
            if terminated or truncated:
                held += info['ticks_held']
                env.reset()
    for i, env in enumerate(scalar):
        assert batch.envs[i].log == env.env.log, f'env {i}'
    assert held > 0
