"""Can forged observations wedge the policy's ObservationGate? The message fuzz's forgeries replayed against it.

Each run feeds a gate a live env's stream (one observation a tick, episodes of 10 ticks, run id fixed) with
``--hostile`` forged observations before each tick for the first ``--fuzz-ticks`` ticks, made by the message
fuzz's own generator (``tests/message_fuzz.py``: the env's run id and episode half the time, random or
boundary values otherwise), then ``--after`` ticks of the env alone. A run is wedged if the gate has not
admitted the env's observations for more than 50 ticks at its end. With ``--against REV`` the gate of
``calf_core/timing.py`` at git revision REV is replayed too, on the same forgeries.

    python bench/diagnose_gate_fuzz.py [--seeds 100] [--against REV]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from revision import module_at

from calf_core.timing import ObservationGate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tests'))
from message_fuzz import hostile_observation  # noqa: E402

RUN = 880727065
WEDGED_TICKS = 50


def ticks_unfollowed(gate: Any, seed: int, hostile: int, fuzz_ticks: int, after: int) -> int:
    """Ticks since the gate last admitted the env's observation, at the end of one run."""
    rng = np.random.default_rng(seed)
    episode = seq = last = 0
    for tick in range(fuzz_ticks + after):
        for _ in range(hostile if tick < fuzz_ticks else 0):
            msg = hostile_observation(rng, RUN, episode)
            gate.admit(msg.episode, msg.seq, msg.run)
        if gate.admit(episode, seq, RUN):
            last = tick
        episode, seq = (episode + 1, 0) if seq == 9 else (episode, seq + 1)
    return fuzz_ticks + after - 1 - last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seeds', type=int, default=100)
    parser.add_argument('--hostile', type=int, nargs='+', default=[1, 2], help='forgeries before each tick')
    parser.add_argument('--fuzz-ticks', type=int, default=3000)
    parser.add_argument('--after', type=int, default=1000)
    parser.add_argument('--against', metavar='REV')
    args = parser.parse_args()
    gates = {'now': ObservationGate}
    if args.against:
        gates[f'@{args.against}'] = module_at(args.against, 'src/calf_core/calf_core/timing.py').ObservationGate
    for name, gate in gates.items():
        runs = [ticks_unfollowed(gate(), seed, k, args.fuzz_ticks, args.after)
                for seed in range(args.seeds) for k in args.hostile]
        wedged = sum(ticks > WEDGED_TICKS for ticks in runs)
        print(f'{name:<12} wedged at the end: {wedged} of {len(runs)} runs', flush=True)


if __name__ == '__main__':
    main()
