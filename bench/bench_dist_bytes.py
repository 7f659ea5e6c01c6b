"""Bytes per weights message of distributed training: full snapshots on every update against deltas.

A learner and 4 workers exchange real frames in memory (no DDS) for a few rounds of ``--sync every``,
the learner configured as ``calf train --workers`` configures it (``learner_node.learner_config``), once
per weights encoding: ``snapshot`` (every message a full float32 snapshot: ``kl_bound`` 0) and each delta
precision. Bytes are those of the chunks sent (frame header, HMAC tag, compressed payload); "after the
first weights" leaves out each worker's first message, a snapshot under every encoding, and "vs
snapshots" compares those.
Usage: python bench/bench_dist_bytes.py [--envs cartpole InvertedPendulum-v5] [--rounds 6] [--seed 0]
"""
from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import replace

import torch

from calf_agent.dist.delta import PRECISIONS
from calf_agent.dist.key import KEY_ENV
from calf_agent.dist.learner import Learner
from calf_agent.dist.learner_node import PARAMETERS, learner_config
from calf_agent.dist.worker import RolloutWorker
from calf_agent.regimes import train_defaults

KEY = bytes(range(32))


def run(env: str, encoding: str, rounds: int, seed: int, workers: int = 4) -> dict[str, float]:
    """Weight bytes and messages of ``rounds`` batches per worker under ``--sync every``."""
    params = {name: default for name, (default, _) in PARAMETERS.items()}
    with tempfile.TemporaryDirectory() as out:
        params.update(env=env, network='sim_clean', regime='baseline', out=out, seed=seed, eval_every=10**9,
                      precision=encoding if encoding in PRECISIONS else 'fp16')
        cfg = replace(learner_config(params), kl_bound=0.0 if encoding == 'snapshot' else 1e-3)
        learner = Learner(cfg, log=lambda line: None)
        envs = train_defaults(env, 'ppo').num_envs
        pool = {f'w{i}': RolloutWorker(f'w{i}', env, KEY, envs, seed=100 * seed + i) for i in range(workers)}
        for worker in pool.values():
            for chunk in worker.hello():
                learner.receive(chunk, 0.0)
        num_steps = int(cfg.env_config['num_steps'])
        first: tuple[int, int] | None = None  # bytes and messages of each worker's first snapshot
        for _ in range(rounds + 1):
            while True:
                for out_ in learner.step():
                    pool[out_.target].receive(out_.chunk, 0.0)
                if not learner.queue:
                    break
            first = first or (learner.sent.bytes, learner.sent.messages)
            for worker in pool.values():
                for chunk in worker.next_batch(num_steps):
                    learner.receive(chunk, 0.0)
        refused = sum(sum(w.reassembler.refused.values()) for w in pool.values())
        summary = learner.summary()['weights_messages']
        later = (learner.sent.bytes - first[0]) / max(1, learner.sent.messages - first[1])
        return {'bytes': learner.sent.bytes, 'messages': learner.sent.messages, 'refused': refused, 'later': later,
                'snapshots': summary['snapshots'], 'deltas': summary['deltas'],
                'snapshots_for_kl': summary['snapshots_for_kl'], 'fine_deltas': summary['fine_deltas']}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--envs', nargs='+', default=['cartpole', 'InvertedPendulum-v5'])
    parser.add_argument('--encodings', nargs='+', default=['snapshot', *PRECISIONS])
    parser.add_argument('--rounds', type=int, default=6)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ[KEY_ENV] = KEY.hex()
    print('| env | weights | messages (snapshots / deltas / of them finer / snapshots for KL) | bytes | bytes per '
          'message | after the first weights | vs snapshots | refused by workers |')
    print('|---|---|---|---|---|---|---|---|')
    for env in args.envs:
        base = None
        for encoding in args.encodings:
            r = run(env, encoding, args.rounds, args.seed)
            per = r['bytes'] / r['messages']
            base = base or r['later']
            print(f'| {env} | {encoding} | {r["messages"]} ({r["snapshots"]} / {r["deltas"]} / {r["fine_deltas"]} / '
                  f'{r["snapshots_for_kl"]}) | {r["bytes"]:,} | {per:,.0f} | {r["later"]:,.0f} | '
                  f'{base / r["later"]:.1f}x | {r["refused"]} |', flush=True)


if __name__ == '__main__':
    main()
