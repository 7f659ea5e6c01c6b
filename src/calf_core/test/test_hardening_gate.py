"""Forged observations (class 7, policy side): one observation with a far-future episode or an unseen run
id cannot wedge the ObservationGate; such observations are counted as anomalies."""
from __future__ import annotations

from calf_core.timing import CONFIRMATIONS, MAX_EPISODE_JUMP, ObservationGate

RUN = 1234


def live(gate: ObservationGate, episode: int, seqs: range, run: int = RUN) -> list[bool]:
    return [gate.admit(episode, s, run) for s in seqs]


def test_one_forged_far_episode_changes_nothing() -> None:
    gate = ObservationGate()
    assert all(live(gate, 0, range(5)))
    assert not gate.admit(2 ** 32 - 1, 0, RUN)
    assert all(live(gate, 0, range(5, 10))), 'the real episode goes on'
    assert all(live(gate, 1, range(0, 3))), 'and so does the next one'
    assert gate.anomalies == {'episode_jump': 1}


def test_repeated_forgeries_interleaved_with_the_real_env_never_take_over() -> None:
    gate = ObservationGate()
    for s in range(200):
        assert gate.admit(3, s, RUN)
        assert not gate.admit(2 ** 32 - 1, s, RUN)
    assert gate.episode == 3 and gate.anomalies['episode_jump'] == 200


def test_a_real_far_jump_is_followed_after_confirmations() -> None:
    """An env that ran on while the policy was away: its new episode is taken once confirmed."""
    gate = ObservationGate()
    live(gate, 0, range(3))
    far = MAX_EPISODE_JUMP + 50
    assert live(gate, far, range(CONFIRMATIONS + 2)) == [False] * (CONFIRMATIONS - 1) + [True] * 3
    assert gate.episode == far


def test_jumps_within_the_bound_and_restarts_are_followed_at_once() -> None:
    gate = ObservationGate()
    assert gate.admit(0, 0, RUN) and gate.admit(MAX_EPISODE_JUMP, 0, RUN)
    assert gate.admit(0, 0, run=99), 'a new run id: the env restarted'
    assert gate.anomalies == {'run_change': 1}


def test_a_forged_run_id_is_left_at_the_next_real_observation() -> None:
    gate = ObservationGate()
    live(gate, 4, range(10))
    assert gate.admit(2 ** 32 - 1, 2 ** 64 - 1, run=666)  # followed: it looks like a restart
    assert gate.admit(4, 10, RUN), 'the real env is followed again at once'
    assert all(live(gate, 4, range(11, 20)))
    assert gate.anomalies == {'run_change': 2}


def test_confirmations_need_rising_seq_and_reset_when_the_current_episode_speaks() -> None:
    gate = ObservationGate()
    live(gate, 0, range(2))
    far = 10 ** 6
    assert not gate.admit(far, 5, RUN) and not gate.admit(far, 5, RUN) and not gate.admit(far, 4, RUN)
    assert not gate.admit(far, 6, RUN)
    assert gate.admit(0, 2, RUN)  # the current episode is alive: the count starts again
    assert not gate.admit(far, 7, RUN) and not gate.admit(far, 8, RUN)
    assert gate.admit(far, 9, RUN)
