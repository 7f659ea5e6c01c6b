"""What chunk tags cost: cutting a frame into tagged chunks (``wire.split``) and checking and joining them
(``wire.Reassembler``), per chunk and per MB, against sealing and opening the frame itself (``Sealer.encode``,
``Opener.decode``: its own HMAC, safetensors, zstd for weights). Frames: one CartPole worker batch (8 envs x
32 steps), one CartPole snapshot, and a 4 MiB weights-sized blob; chunks of 16 KiB (DDS) and 1 MiB (Ray).
Medians of repeats in one process, one thread.

Usage: python bench/bench_chunk_tags.py [--repeats 31]
"""
from __future__ import annotations

import argparse
import hmac
import secrets
import time
from collections.abc import Callable

import numpy as np
import torch

from calf_agent.dist.wire import CHUNK_BYTES, Kind, Opener, Reassembler, Sealer, snapshot, split
from calf_agent.dist.worker import RolloutWorker
from calf_agent.policies import MlpAgent

CONFIG = {'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline',
          'representation': {'frames': 1, 'actions': 0, 'obs_age': False}, 'plan_horizon': 1, 'num_steps': 32}
RAY_CHUNK_BYTES = 1 << 20


def median_us(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e6 * float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=31)
    args = parser.parse_args()
    torch.set_num_threads(1)
    key = secrets.token_bytes(32)
    worker = RolloutWorker('w0', 'cartpole', key, 8, seed=0)
    worker.apply(snapshot(MlpAgent(4, 2), 0, 1, 'w0', CONFIG))
    batch, weights = worker.collect(32), snapshot(MlpAgent(4, 2), 1, 1, 'w0', CONFIG)
    frames = {'batch': (Sealer(key, 'w0').encode(batch), Kind.BATCH),
              'snapshot': (Sealer(key, 'learner').encode(weights), Kind.WEIGHTS),
              '4 MiB blob': (secrets.token_bytes(4 << 20), Kind.WEIGHTS)}
    print('| frame | bytes | chunk size | chunks | split (tag) µs/chunk | check + join µs/chunk | '
          'HMAC alone µs/chunk | split + join MB/s | frame seal + open µs |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|---:|')
    sealed = {'batch': lambda: Opener(key).decode(Sealer(key, 'w0').encode(batch), 'w0'),
              'snapshot': lambda: Opener(key).decode(Sealer(key, 'learner').encode(weights), 'learner')}
    for name, (frame, kind) in frames.items():
        frame_us = f'{median_us(sealed[name], args.repeats):.0f}' if name in sealed else '-'
        for chunk_bytes in (CHUNK_BYTES, RAY_CHUNK_BYTES):
            print(f'| {name} | {len(frame):,} | {chunk_bytes:,} | {row(frame, kind, chunk_bytes, key, args.repeats)} '
                  f'| {frame_us} |')


def row(frame: bytes, kind: Kind, chunk_bytes: int, key: bytes, repeats: int) -> str:
    """Chunks, µs per chunk to split, to check and join, and of the HMAC alone, and MB/s through both."""
    messages = [split(frame, kind, 'w0', i, key, chunk_bytes) for i in range(1, repeats + 1)]  # one id per join
    pending = iter(messages)

    def join() -> None:
        joiner = Reassembler(key)
        assert [joiner.add(chunk, 0.0) for chunk in next(pending)][-1] == frame

    pieces = [frame[i:i + chunk_bytes] for i in range(0, len(frame), chunk_bytes)]
    split_us = median_us(lambda: split(frame, kind, 'w0', 1, key, chunk_bytes), repeats)
    join_us = median_us(join, repeats)
    mac_us = median_us(lambda: [hmac.digest(key, bytes(40) + piece, 'sha256') for piece in pieces], repeats)
    n = len(pieces)
    return (f'{n} | {split_us / n:.1f} | {join_us / n:.1f} | {mac_us / n:.1f} | '
            f'{len(frame) / (split_us + join_us):.0f}')


if __name__ == '__main__':
    main()
