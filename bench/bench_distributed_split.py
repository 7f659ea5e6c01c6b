"""Where a distributed CartPole run spends its time: one worker batch (8 envs x 32 steps, sim_clean)
against one learner update on it (cartpole_defaults: 20 epochs), plus encoding and decoding, medians of
repeats in one process (encoding includes the frame's HMAC and its check). Usage: python bench/bench_distributed_split.py"""
from __future__ import annotations

import secrets
import time

import numpy as np
import torch

from calf_agent.dist.ppo import LagConfig, update_on_batch
from calf_agent.dist.wire import Opener, Sealer, snapshot
from calf_agent.dist.worker import RolloutWorker
from calf_agent.policies import MlpAgent
from calf_agent.trainer import cartpole_defaults

CONFIG = {'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline',
          'representation': {'frames': 1, 'actions': 0, 'obs_age': False}, 'plan_horizon': 1, 'num_steps': 32}


def median_ms(fn, repeats: int = 15) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main() -> None:
    torch.set_num_threads(1)
    agent = MlpAgent(4, 2)
    key = secrets.token_bytes(32)
    worker = RolloutWorker('w0', 'cartpole', key, 8, seed=0)
    worker.apply(snapshot(agent, 0, 1, 'w0', CONFIG))
    batch = worker.collect(32)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5)
    ppo, rng = cartpole_defaults().ppo, np.random.default_rng(0)
    weights = snapshot(agent, 1, 1, 'w0', CONFIG)
    rows = {'collect one batch (256 env steps)': median_ms(lambda: worker.collect(32)),
            'learner update on it (20 epochs)': median_ms(lambda: update_on_batch(agent, optimizer, batch, ppo,
                                                                                LagConfig(), rng)),
            'encode + decode the batch': median_ms(lambda: Opener(key).decode(Sealer(key, 'w0').encode(batch), 'w0')),
            'encode + decode the weights': median_ms(lambda: Opener(key).decode(Sealer(key, 'l').encode(weights), 'l'))}
    for name, ms in rows.items():
        print(f'{name}: {ms:.1f} ms')


if __name__ == '__main__':
    main()
