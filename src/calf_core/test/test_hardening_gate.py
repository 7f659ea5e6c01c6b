"""Forged observations (class 7, policy side): one observation with a far-future episode or an unseen run
id cannot wedge the ObservationGate; such observations are counted as anomalies."""
from __future__ import annotations

from calf_core.timing import CONFIRMATIONS, MAX_EPISODE_JUMP, MAX_SEQ_JUMP, ObservationGate

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


def test_a_forged_huge_seq_does_not_wedge_the_episode() -> None:
    gate = ObservationGate()
    live(gate, 2, range(10))
    assert not gate.admit(2, 2 ** 64 - 1, RUN)
    assert all(live(gate, 2, range(10, 20)))
    assert gate.anomalies == {'seq_jump': 1}


def test_forged_seq_and_episode_together_cannot_take_over() -> None:
    """The combined attack: a huge seq, then far episodes with random rising seqs."""
    import numpy as np
    rng = np.random.default_rng(0)
    gate = ObservationGate()
    live(gate, 1, range(5))
    for k in range(300):
        gate.admit(int(rng.choice([1, 2 ** 32 - 1, int(rng.integers(0, 2 ** 32))])),
                   int(rng.integers(0, 2 ** 63)), RUN)
        assert gate.admit(1, 5 + k, RUN), f'the real env is followed (forgery {k})'
    assert gate.episode == 1


def test_the_first_observations_of_a_newer_episode_are_plausible_even_after_losses() -> None:
    gate = ObservationGate()
    live(gate, 0, range(3))
    assert gate.admit(3, 250, RUN), 'three episodes lost and 250 ticks of the fourth: still plausible'
    assert not gate.admit(3, 250 + MAX_SEQ_JUMP + 1, RUN)


def test_forgeries_that_took_the_gate_far_ahead_are_left_after_confirmations() -> None:
    """Three forged observations with the env's run id, far ahead and continuing each other, take the gate; the
    real env's observations, all older now, take it back once they have confirmed each other."""
    gate = ObservationGate()
    assert all(live(gate, 0, range(5)))
    assert live(gate, 2 ** 32 - 1, range(CONFIRMATIONS)) == [False] * (CONFIRMATIONS - 1) + [True]
    real = live(gate, 0, range(5, 5 + CONFIRMATIONS + 3))
    assert real == [False] * (CONFIRMATIONS - 1) + [True] * 4, 'the real env is followed again'
    assert (gate.episode, gate.last_seq) == (0, 5 + CONFIRMATIONS + 2)
    assert gate.anomalies['rewind'] == 1


def test_late_and_duplicated_observations_of_the_stream_never_rewind() -> None:
    gate = ObservationGate()
    assert all(live(gate, 1, range(20)))
    for seq in (19, 19, 15, 16, 17, 18, 19, 10, 11, 12):  # duplicates, then late ones continuing each other
        assert not gate.admit(1, seq, RUN)
    assert not gate.admit(0, 300, RUN) and not gate.admit(0, 301, RUN) and not gate.admit(0, 302, RUN), \
        'the previous episode, late: the gate follows it'
    assert (gate.episode, gate.last_seq) == (1, 19) and 'rewind' not in gate.anomalies
    assert gate.admit(1, 20, RUN)
