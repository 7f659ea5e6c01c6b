"""How the links draw their random numbers in blocks: each generator's block is its own, and Gilbert-Elliott
in time loses messages with its states' probabilities, alone and shared by both directions."""
from __future__ import annotations

import numpy as np
import pytest

from calf_core.link import DrawBuffer
from calf_core.models import GilbertElliottInTime
from calf_core.profiles import profile_from_dict

GE = {'model': 'gilbert_elliott', 'mean_good_ms': 300.0, 'mean_bad_ms': 200.0, 'loss_good': 0.2, 'loss_bad': 0.7}


def test_a_buffer_switching_between_two_generators_hands_out_each_ones_stream_in_order() -> None:
    """A shared stage takes from the uplink's and the downlink's generators in turn: each gets its own values in
    the order its generator draws them, none skipped."""
    buffer = DrawBuffer(lambda rng, n: rng.random(n))
    up, down = np.random.default_rng(1), np.random.default_rng(2)
    taken = [(buffer.take(up), buffer.take(down)) for _ in range(300)]
    assert [a for a, _ in taken] == np.random.default_rng(1).random(384)[:300].tolist()
    assert [b for _, b in taken] == np.random.default_rng(2).random(384)[:300].tolist()
    third = np.random.default_rng(3)  # a new generator (a reseed) starts its own block
    assert buffer.take(third) == np.random.default_rng(3).random(1)[0]


def losses_by_state(stage: GilbertElliottInTime, times: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    """The fraction of messages lost in bad spells and in good ones, a message met at each time."""
    bad, lost = [], []
    for t in times.tolist():
        bad.append(stage.windows.release(t, t, rng) > t)  # the state at t, as ``at`` finds it
        lost.append(stage.at(t, t, rng) is None)
    bad_a, lost_a = np.array(bad), np.array(lost)
    return float(lost_a[bad_a].mean()), float(lost_a[~bad_a].mean())


def test_gilbert_elliott_in_time_loses_with_each_states_probability() -> None:
    params = {k: v for k, v in GE.items() if k != 'model'}
    stage = GilbertElliottInTime(**params)
    in_bad, in_good = losses_by_state(stage, np.arange(0.0, 600.0, 0.01), np.random.default_rng(0))
    assert in_bad == pytest.approx(0.7, abs=0.015) and in_good == pytest.approx(0.2, abs=0.015)


@pytest.mark.parametrize('shared', [False, True])
@pytest.mark.slow
def test_gilbert_elliott_in_time_loses_its_stationary_rate_each_way_and_a_seed_repeats_it(shared: bool) -> None:
    data = {'uplink': [], 'downlink': 'same', 'shared': [GE]} if shared else {'uplink': [GE], 'downlink': 'same'}

    def lost(seed: int) -> tuple[list[bool], list[bool]]:
        uplink, downlink = profile_from_dict(data, 'x').make_links(np.random.default_rng(seed))
        up, down = [], []
        for t in np.arange(0.0, 600.0, 0.01).tolist():
            up.append(not uplink.transmit(t))
            down.append(not downlink.transmit(t + 0.001))
        return up, down

    up, down = lost(0)
    rate = 0.4 * 0.7 + 0.6 * 0.2  # pi_bad = 200 / (200 + 300)
    assert np.mean(up) == pytest.approx(rate, abs=0.03) and np.mean(down) == pytest.approx(rate, abs=0.03)
    assert lost(0) == (up, down)
    assert lost(1) != (up, down)
