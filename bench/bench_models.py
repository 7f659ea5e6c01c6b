"""Cost of the pure network models: Link.transmit calls per second for each profile's uplink.

    python bench/bench_models.py [--messages 100000]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from calf_core.profiles import available_profiles, load_profile


def transmits_per_s(name: str, messages: int) -> float:
    uplink, _ = load_profile(name).make_links(np.random.default_rng(0))
    start = time.perf_counter()
    for k in range(messages):
        uplink.transmit(k * 0.02)
    return messages / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--messages', type=int, default=100_000)
    args = parser.parse_args()
    for name in available_profiles():
        print(f'{name:16s} {transmits_per_s(name, args.messages):12,.0f} transmits/s')


if __name__ == '__main__':
    main()
