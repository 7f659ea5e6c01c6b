"""The arbiter: gating rules, forwarding on exact observation/action sequences, fallback on silence."""
from __future__ import annotations

import numpy as np
import pytest

from calf_agent.arbiter import (
    AGENT_CELL,
    DOOR,
    GOAL,
    KEY,
    Arbiter,
    CartPoleGate,
    DoorKeyGate,
    Reason,
    make_arbiter,
    make_gate,
)
from calf_agent.subtasks import make_subtask_env
from calf_core.errors import ConfigError
from calf_core.timing import ReceivedObservation

SOURCES = ('stabilise', 'recenter')
TIMEOUT = 0.2
UP = np.array([0.5, 0.1, 0.01, 0.1])  # pole upright and still: recenter
OFF = np.array([0.5, 0.1, 0.08, 0.1])  # pole leaning: stabilise


@pytest.mark.parametrize('obs, expected', [
    ([0.0, 0.0, 0.0, 0.0], 'recenter'),
    ([2.0, -1.5, 0.049, -0.49], 'recenter'),  # far off centre but upright: recentering is safe
    ([0.0, 0.0, 0.051, 0.0], 'stabilise'),
    ([0.0, 0.0, -0.06, 0.0], 'stabilise'),
    ([0.0, 0.0, 0.0, 0.51], 'stabilise'),
    ([0.0, 0.0, 0.0, -0.7], 'stabilise'),
])
def test_cartpole_gate_thresholds(obs: list[float], expected: str) -> None:
    assert CartPoleGate().choose(np.array(obs)) == expected


def cartpole_arbiter() -> Arbiter:
    return make_arbiter('cartpole', SOURCES, TIMEOUT)


def run(arbiter: Arbiter, events: list[tuple]) -> list[tuple[str, int, str]]:
    """Feed ``('obs', t, seq, obs)`` and ``('act', t, source, obs_seq)`` events (episode 0); return
    ``(source, obs_seq, reason)`` per action."""
    out = []
    for kind, t, *rest in events:
        if kind == 'obs':
            arbiter.on_observation(ReceivedObservation(0, rest[0], rest[1]))
        else:
            decision = arbiter.on_action(rest[0], 0, rest[1], t)
            out.append((rest[0], rest[1], decision.reason.value))
    return out


def test_switching_follows_the_gate_on_an_exact_sequence() -> None:
    """20 ms ticks; stabilise answers at once, recenter 50 ms later (observation 2.5 ticks old)."""
    events = [
        ('obs', 0.00, 0, UP), ('act', 0.001, 'stabilise', 0),
        ('obs', 0.02, 1, UP), ('act', 0.021, 'stabilise', 1),
        ('obs', 0.04, 2, UP), ('act', 0.041, 'stabilise', 2), ('act', 0.05, 'recenter', 0),
        ('obs', 0.06, 3, UP), ('act', 0.061, 'stabilise', 3), ('act', 0.07, 'recenter', 1),
        ('obs', 0.08, 4, OFF), ('act', 0.081, 'stabilise', 4), ('act', 0.09, 'recenter', 2),
        ('obs', 0.10, 5, UP), ('act', 0.101, 'stabilise', 5), ('act', 0.11, 'recenter', 3),
        ('act', 0.13, 'recenter', 4), ('act', 0.15, 'recenter', 5),
        ('obs', 0.16, 8, UP), ('act', 0.17, 'recenter', 6),
    ]
    assert run(cartpole_arbiter(), events) == [
        # recenter not heard yet: silent, so the first fresh source in fallback order drives
        ('stabilise', 0, 'forwarded'), ('stabilise', 1, 'forwarded'), ('stabilise', 2, 'forwarded'),
        ('recenter', 0, 'stale'),  # heard now, and wanted, but older than what the env applied
        ('stabilise', 3, 'inactive'), ('recenter', 1, 'stale'),
        ('stabilise', 4, 'forwarded'), ('recenter', 2, 'inactive'),  # the pole leans: stabilise
        ('stabilise', 5, 'inactive'), ('recenter', 3, 'stale'),  # upright again, recenter lags
        ('recenter', 4, 'stale'), ('recenter', 5, 'forwarded'), ('recenter', 6, 'forwarded'),
    ]


def test_a_silent_sub_policy_is_replaced_and_reported() -> None:
    arbiter = cartpole_arbiter()
    assert arbiter.silence_changes(0.0) == []  # everyone starts silent: nothing changed
    arbiter.on_observation(ReceivedObservation(0, 0, UP))
    assert arbiter.on_action('recenter', 0, 0, 0.00).forward
    assert arbiter.on_action('stabilise', 0, 1, 0.01).reason is Reason.INACTIVE
    assert arbiter.silence_changes(0.01) == [('stabilise', False), ('recenter', False)]
    arbiter.on_observation(ReceivedObservation(0, 5, UP))
    decision = arbiter.on_action('stabilise', 0, 5, TIMEOUT - 0.01)  # recenter spoke TIMEOUT - 0.01 ago
    assert decision.reason is Reason.INACTIVE and decision.active == 'recenter'
    decision = arbiter.on_action('stabilise', 0, 6, TIMEOUT + 0.01)  # now silent for longer than TIMEOUT
    assert decision.forward and decision.active == 'stabilise'
    assert arbiter.silence_changes(TIMEOUT + 0.01) == [('recenter', True)]
    assert arbiter.silence_changes(TIMEOUT + 0.02) == []  # reported once
    assert arbiter.on_action('recenter', 0, 7, TIMEOUT + 0.03).forward  # back: it drives again
    assert arbiter.silence_changes(TIMEOUT + 0.03) == [('recenter', False)]
    assert arbiter.forwarded == {'stabilise': 1, 'recenter': 2}


def test_when_the_edge_sub_policy_dies_the_remote_one_drives_even_when_not_wanted() -> None:
    arbiter = cartpole_arbiter()
    arbiter.on_observation(ReceivedObservation(0, 0, OFF))
    assert arbiter.on_action('stabilise', 0, 0, 0.0).forward
    assert arbiter.silence_changes(0.0) == [('stabilise', False)]
    assert not arbiter.on_action('recenter', 0, 1, 0.1).forward
    arbiter.on_observation(ReceivedObservation(0, 20, OFF))
    decision = arbiter.on_action('recenter', 0, 19, 0.3)
    assert decision.forward and decision.active == 'recenter' and arbiter.wanted == 'stabilise'
    assert arbiter.silence_changes(0.3) == [('stabilise', True), ('recenter', False)]


def test_episodes_and_unknown_sources() -> None:
    arbiter = cartpole_arbiter()
    arbiter.on_observation(ReceivedObservation(0, 0, UP))
    assert arbiter.on_action('recenter', 0, 9, 0.0).forward
    arbiter.on_observation(ReceivedObservation(1, 0, UP))  # new episode: sequence numbers start again
    assert arbiter.on_action('recenter', 0, 10, 0.01).reason is Reason.OTHER_EPISODE
    assert arbiter.on_action('recenter', 1, 0, 0.02).forward
    assert arbiter.on_action('planner', 1, 1, 0.03).reason is Reason.UNKNOWN_SOURCE
    arbiter.on_observation(ReceivedObservation(0, 7, OFF))  # an observation of an older episode does not gate
    assert arbiter.wanted == 'recenter' and arbiter.episode == 1
    arbiter.on_observation(ReceivedObservation(0, 0, OFF, run=7))  # the env node restarted: its episode 0 is new
    assert arbiter.wanted == 'stabilise' and arbiter.episode == 0
    assert arbiter.on_action('stabilise', 0, 0, 0.04).forward  # nothing forwarded yet in this episode


def view(cells: dict[tuple[int, int], tuple[int, int, int]]) -> np.ndarray:
    """A flat 7x7 MiniGrid view of empty cells (1, 0, 0) with ``cells`` set."""
    grid = np.zeros((7, 7, 3), dtype=np.float32)
    grid[..., 0] = 1
    for xy, cell in cells.items():
        grid[xy] = cell
    return grid.reshape(-1)


def test_doorkey_gate_remembers_the_door_until_seen_closed() -> None:
    gate = DoorKeyGate()
    closed_door, open_door, key = (DOOR, 4, 2), (DOOR, 4, 0), (KEY, 4, 0)
    steps = [(view({(3, 2): closed_door}), 'get_key'),
             (view({AGENT_CELL: key}), 'open_door'),
             (view({AGENT_CELL: key, (3, 5): open_door}), 'reach_goal'),
             (view({AGENT_CELL: key}), 'reach_goal'),  # door out of view: still known open
             (view({}), 'reach_goal'),  # key dropped after opening: the goal is next anyway
             (view({(3, 5): closed_door}), 'get_key'),  # closed again, no key
             (view({(1, 1): (GOAL, 1, 0)}), 'reach_goal')]
    assert [gate.choose(obs) for obs, _ in steps] == [expected for _, expected in steps]
    gate.reset()
    assert gate.choose(view({AGENT_CELL: key})) == 'open_door'


def test_doorkey_gate_on_real_views_of_the_subtask_start_states() -> None:
    gate = DoorKeyGate()
    for seed in range(5):
        assert gate.choose(make_subtask_env('minigrid', 'get_key').reset(seed=seed)[0]) == 'get_key'
        gate.reset()
        assert gate.choose(make_subtask_env('minigrid', 'open_door').reset(seed=seed)[0]) == 'open_door'
        gate.reset()


def test_invalid_configurations_are_config_errors() -> None:
    with pytest.raises(ConfigError, match='no gating rule for env'):
        make_gate('pong')
    with pytest.raises(ConfigError, match='invalid cartpole gating parameters'):
        make_gate('cartpole', {'angle': 0.1})
    with pytest.raises(ConfigError, match='thresholds must be > 0'):
        make_gate('cartpole', {'angle_rad': 0.0})
    with pytest.raises(ConfigError, match='two or more distinct sources'):
        make_arbiter('cartpole', ('stabilise', 'stabilise'), TIMEOUT)
    with pytest.raises(ConfigError, match='timeout must be > 0'):
        make_arbiter('cartpole', SOURCES, 0.0)
    arbiter = make_arbiter('cartpole', ('stabilise', 'other'), TIMEOUT)
    with pytest.raises(ConfigError, match="the gate chose 'recenter'"):
        arbiter.on_observation(ReceivedObservation(0, 0, UP))
    assert make_gate('cartpole', {'angle_rad': 0.1}).params() == {'angle_rad': 0.1, 'angular_velocity_rad_s': 0.5}
    assert make_gate('minigrid').params() == {}
