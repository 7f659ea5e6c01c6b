"""MiddlewareLosses: the gaps in each publisher's DDS sequence numbers, counted exactly and boundedly."""
from __future__ import annotations

from calf_ros.losses import MAX_GAP, UNSUPPORTED, MiddlewareLosses


def info(writer: int, seq: int | None) -> dict:
    return {'publication_sequence_number': seq, 'publisher_gid': {'data': [writer] * 16}}


def test_gaps_are_counted_per_publisher_from_its_first_sample() -> None:
    losses = MiddlewareLosses()
    for writer, seq in [(1, 5), (2, 1), (1, 6), (1, 9), (2, 4), (1, 10)]:
        losses.on_message(info(writer, seq))
    assert losses.gaps == 2 + 2 and losses.count == 4  # 7, 8 of writer 1; 2, 3 of writer 2; not 1-4 of writer 1


def test_a_late_sample_fills_a_gap_and_a_forged_jump_counts_nothing() -> None:
    losses = MiddlewareLosses()
    for seq in (1, 4, 3, 4 + MAX_GAP + 2, 5):
        losses.on_message(info(1, seq))
    assert (losses.gaps, losses.anomalies) == (1, 1)


def test_without_sequence_numbers_the_reported_losses_count() -> None:
    losses = MiddlewareLosses()
    for seq in (None, UNSUPPORTED, UNSUPPORTED):
        losses.on_message(info(1, seq))
    losses.on_message({'publication_sequence_number': 3, 'publisher_gid': None})
    losses.on_reported(5)
    losses.on_reported(-2)  # a wrapped middleware counter adds nothing
    assert (losses.gaps, losses.reported, losses.count) == (0, 5, 5)


def test_writers_are_bounded_and_a_forgotten_one_starts_again() -> None:
    losses = MiddlewareLosses(max_writers=2)
    for writer, seq in [(1, 1), (2, 1), (3, 1), (1, 10), (3, 3)]:  # writer 3 pushes out writer 1
        losses.on_message(info(writer, seq))
    assert losses.gaps == 1  # writer 3's seq 2; writer 1 starts again at 10
