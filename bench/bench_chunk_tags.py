"""What chunk tags cost: cutting a frame into tagged chunks (``wire.split``) and checking and joining them
(``wire.Reassembler``), per chunk, against the HMAC alone and against sealing and opening the frame itself
(``Sealer.encode`` + ``Opener.decode``: its own HMAC, safetensors, zstd for weights). With ``--before REV``
also the chunk path of ``wire.py`` at git revision REV (untagged chunks before format 3), timed in the same
rounds, and the overhead per chunk. Frames: one CartPole worker batch (8 envs x 32 steps), one CartPole
snapshot, and a 4 MiB weights-sized blob; chunks of 16 KiB (DDS) and 1 MiB (Ray). Medians of repeats in
one process, one thread.

Usage: python bench/bench_chunk_tags.py [--repeats 101] [--before 4feb83c]
"""
from __future__ import annotations

import argparse
import hmac
import secrets
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
from bench_distributed_split import CONFIG, median_ms

from calf_agent.dist import wire
from calf_agent.dist.wire import CHUNK_BYTES, Kind, Opener, Reassembler, Sealer, snapshot, split
from calf_agent.dist.worker import RolloutWorker
from calf_agent.policies import MlpAgent
from calf_bringup.distributed_ray import RAY_CHUNK_BYTES


def wire_at(rev: str) -> types.ModuleType:
    """``wire.py`` as it was at git revision ``rev`` of this repository."""
    path = Path(wire.__file__).resolve()
    root = subprocess.run(['git', 'rev-parse', '--show-toplevel'], cwd=path.parent, capture_output=True, text=True,
                          check=True).stdout.strip()
    source = subprocess.run(['git', 'show', f'{rev}:{path.relative_to(root)}'], cwd=root, capture_output=True,
                            text=True, check=True).stdout
    module = sys.modules[f'wire_{rev}'] = types.ModuleType(f'wire_{rev}')  # dataclasses look their module up
    exec(compile(source, f'{rev}:wire.py', 'exec'), module.__dict__)  # this repository's own code
    return module


def row(frame: bytes, kind: Kind, chunk_bytes: int, key: bytes, repeats: int, before: types.ModuleType | None) -> str:
    """Chunks; µs per chunk to split, to check and join, of the HMAC alone; MB/s; and against ``before``."""
    view = memoryview(frame)
    pieces = [view[i:i + chunk_bytes] for i in range(0, len(frame), chunk_bytes)]
    times: dict[str, list[float]] = {'split': [], 'join': [], 'hmac': [], 'before': []}
    for message_id in range(1, repeats + 1):
        start = time.perf_counter()
        chunks = split(frame, kind, 'w0', message_id, key, chunk_bytes)
        joined = time.perf_counter()
        joiner = Reassembler(key)
        assert [joiner.add(chunk, 0.0) for chunk in chunks][-1] == frame
        hashed = time.perf_counter()
        for piece in pieces:
            hmac.new(key, bytes(40), 'sha256').update(piece)
        end = time.perf_counter()
        times['split'].append(joined - start)
        times['join'].append(hashed - joined)
        times['hmac'].append(end - hashed)
        if before is not None:
            old = before.Reassembler()
            start = time.perf_counter()
            assert [old.add(chunk, 0.0) for chunk in before.split(frame, kind, 'w0', message_id, chunk_bytes)][-1] \
                == frame
            times['before'].append(time.perf_counter() - start)
    n = len(pieces)
    us = {name: 1e6 * float(np.median(values)) / n if values else 0.0 for name, values in times.items()}
    cells = (f'{n} | {us["split"]:.1f} | {us["join"]:.1f} | {us["hmac"]:.1f} | '
             f'{len(frame) / n / (us["split"] + us["join"]):.0f}')
    if before is not None:
        tagged_us = us['split'] + us['join']
        cells += f' | {us["before"]:.1f} | {tagged_us - us["before"]:+.1f} | {tagged_us / us["before"]:.1f}x'
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=101)
    parser.add_argument('--before', default='', help='git revision whose (untagged) chunk path to time alongside')
    args = parser.parse_args()
    torch.set_num_threads(1)
    before = wire_at(args.before) if args.before else None
    key = secrets.token_bytes(32)
    worker = RolloutWorker('w0', 'cartpole', key, 8, seed=0)
    worker.apply(snapshot(MlpAgent(4, 2), 0, 1, 'w0', CONFIG))
    batch, weights = worker.collect(32), snapshot(MlpAgent(4, 2), 1, 1, 'w0', CONFIG)
    frames = {'batch': (Sealer(key, 'w0').encode(batch), Kind.BATCH),
              'snapshot': (Sealer(key, 'learner').encode(weights), Kind.WEIGHTS),
              '4 MiB blob': (secrets.token_bytes(4 << 20), Kind.WEIGHTS)}
    sealed = {'batch': lambda: Opener(key).decode(Sealer(key, 'w0').encode(batch), 'w0'),
              'snapshot': lambda: Opener(key).decode(Sealer(key, 'learner').encode(weights), 'learner')}
    extra = (f' untagged ({args.before}) split + join µs/chunk | overhead µs/chunk | tagged / untagged |'
             if before else '')
    print('| frame | bytes | chunk size | chunks | split (tag) µs/chunk | check + join µs/chunk | '
          f'HMAC alone µs/chunk | split + join MB/s |{extra} frame seal + open µs |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|' + '---:|' * (3 * bool(before)) + '---:|')
    for name, (frame, kind) in frames.items():
        frame_us = '-'
        if name in sealed:
            frame_us = f'{1e3 * median_ms(sealed[name], args.repeats):.0f}'
        for chunk_bytes in (CHUNK_BYTES, RAY_CHUNK_BYTES):
            print(f'| {name} | {len(frame):,} | {chunk_bytes:,} | '
                  f'{row(frame, kind, chunk_bytes, key, args.repeats, before)} | {frame_us} |')


if __name__ == '__main__':
    main()
