"""What a SAC or BPQL training snapshot (``calf_agent.train_state``) weighs and costs to write, at a budget's
full replay buffer: for each ``NETWORK:ALGO`` the loop of a run of ``--steps`` env steps is built, one
gradient step taken (so the optimisers hold state), the buffer marked full and the snapshot written into
``--out``; prints its size and write time (medians of ``--repeats``).

Usage: python bench/bench_train_state.py [--env HalfCheetah-v5] [--steps 200000] [--repeats 3]
           [--out /tmp/train_state_bench] [sim_clean:sac full_net_aware:sac full_net_aware:bpql]
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

from calf_agent import bpql_training, sac_training
from calf_agent.regimes import default_representation, train_defaults, vec_env_factory
from calf_agent.representation import HistoryWrapper
from calf_agent.seeding import seed_everything
from calf_agent.train_state import SNAPSHOT, ResumableLoop, Snapshots
from calf_core.envs import make_networked_env
from calf_core.network import resolve_network


def build_loop(env: str, network: str, algo: str, steps: int) -> ResumableLoop:
    """The training loop ``calf train --algo ALGO --network NETWORK --steps STEPS`` runs, one update taken,
    its buffer marked full."""
    profile = resolve_network(network)
    rep = default_representation(env, profile)
    cfg = replace(train_defaults(env, algo), total_steps=steps)
    rng = seed_everything(0)
    if algo == 'sac':
        envs = vec_env_factory(env, profile, rep, 0, 1)(1)
        actor = sac_training.build_actor(envs.single_observation_space, envs.single_action_space, cfg.hidden)
        loop: ResumableLoop = sac_training._Loop(cfg, actor, envs, rng)
    else:
        raw = [make_networked_env(env, profile, seed=0)]
        wrapped = [HistoryWrapper(raw[0], rep)]
        actor = sac_training.build_actor(wrapped[0].observation_space, raw[0].stepper.env.action_space, cfg.hidden)
        loop = bpql_training._Loop(cfg, actor, wrapped, raw, rng)
    loop.buffer.size = loop.buffer.capacity
    loop._update()
    return loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('runs', nargs='*', default=['sim_clean:sac', 'full_net_aware:sac', 'full_net_aware:bpql'])
    parser.add_argument('--env', default='HalfCheetah-v5')
    parser.add_argument('--steps', type=int, default=200_000)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--out', type=Path, default=Path('/tmp/train_state_bench'))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for run in args.runs:
        network, algo = run.split(':')
        loop = build_loop(args.env, network, algo, args.steps)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            Snapshots(args.out).write(*loop.snapshot([]), loop.global_step)
            times.append(time.perf_counter() - start)
        size = (args.out / SNAPSHOT).stat().st_size
        widths = {name: array.shape[1:] for name, array in loop.arrays().items()}
        print(f'{args.env} {network} {algo}: {loop.buffer.capacity} rows {widths}: {size / 1e6:.1f} MB, '
              f'written in {statistics.median(times):.2f} s (median of {args.repeats})')
        (args.out / SNAPSHOT).unlink()


if __name__ == '__main__':
    main()
