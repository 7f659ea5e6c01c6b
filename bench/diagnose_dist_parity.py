"""One-worker distributed training against single-process ``calf train``, in one process, with a chosen lag.

    python bench/diagnose_dist_parity.py --env InvertedPendulum-v5 --seed 0 --out DIR [--lag 1] [--exact] [--single]

The real ``Learner`` and ``RolloutWorker`` pass their chunks to each other directly (no DDS): the worker
collects one batch, the learner trains on it and sends weights, the worker applies them ``--lag`` batches
later (0: before its next batch, so that every batch is trained on by the version that collected it).
``--exact`` sends every weights message as a full snapshot (the learner node's ``kl_bound`` 0), else int8
deltas. The learning rate anneals over ``--budget`` env steps, as ``calf train`` on the task's budget; a run
stops at ``--until`` env steps or once its 20-episode return reaches ``--target``. With ``--single``,
``calf train``'s trainer runs the same budget and stop. Prints the env steps to the target, the updates' mean
ρ (1 when on-policy) and the largest absolute difference between the learner's weights and the worker's
copy; writes ``parity.json`` (one row per update) into ``--out``.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import secrets
from collections import deque
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from calf_agent.dist.learner import Learner, LearnerConfig, Outgoing
from calf_agent.dist.learner_node import PARAMETERS, learner_config
from calf_agent.dist.worker import RolloutWorker
from calf_agent.regimes import default_representation, regime_profile, train_defaults, vec_env_factory
from calf_agent.training import train
from calf_core.network import resolve_network


def learner_cfg(env: str, budget: int, seed: int, out: Path, exact: bool, key: bytes) -> LearnerConfig:
    """What ``calf train --regime baseline --workers 1`` gives its learner node, with ``key``."""
    params = {**{name: default for name, (default, _) in PARAMETERS.items()}, 'out': str(out), 'env': env,
              'network': regime_profile('baseline'), 'regime': 'baseline', 'steps': budget, 'seed': seed,
              'eval_every': 10 * budget, 'kl_bound': 0.0 if exact else PARAMETERS['kl_bound'][0], 'key_file': ''}
    os.environ['CALF_DIST_KEY'] = key.hex()
    try:
        return learner_config(params)
    finally:
        del os.environ['CALF_DIST_KEY']


def distributed(env: str, budget: int, until: int, target: float, seed: int, out: Path, lag: int, exact: bool
                ) -> list[dict[str, float]]:
    """A one-worker run whose weights arrive ``lag`` batches late; one row per update."""
    key = secrets.token_bytes(32)
    cfg = learner_cfg(env, budget, seed, out, exact, key)
    learner = Learner(cfg, log=lambda line: None)
    worker = RolloutWorker('w0', env, key, cfg.train.num_envs, seed * 100 + 1, network=cfg.env_config['network'])
    for chunk in worker.hello():
        learner.receive(chunk, 0.0)
    late: deque[list[Outgoing]] = deque()
    rows: list[dict[str, float]] = []
    for out_ in learner.step():
        worker.receive(out_.chunk, 0.0)
    while not learner.done and learner.env_steps < until:
        for chunk in worker.next_batch(int(cfg.env_config['num_steps'])):
            learner.receive(chunk, 0.0)
        late.append(learner.step())
        while len(late) > lag:
            for out_ in late.popleft():
                worker.receive(out_.chunk, 0.0)
        theirs = worker.agent.state_dict()
        error = max(float((v.double() - theirs[k].double()).abs().max())
                    for k, v in learner.agent.state_dict().items() if v.is_floating_point())
        with open(out / 'progress.csv') as file:
            last = list(csv.DictReader(file))[-1]
        rows.append({'env_steps': learner.env_steps, 'return': float(last['episodic_return']),
                     'rho_mean': float(last['rho_mean']), 'approx_kl': float(last['approx_kl']),
                     'lag': float(last['lag']), 'weights_max_abs_error': error})
        if rows[-1]['return'] >= target:
            break
    learner.close()
    worker.close()
    return rows


def single(env: str, budget: int, until: int, target: float, seed: int, out: Path) -> list[dict[str, float]]:
    """``calf train --regime baseline`` (PPO) on the same budget and stop; one row per update."""
    profile = resolve_network(regime_profile('baseline'))
    rep = default_representation(env, profile)
    meta = {'env': env, 'regime': 'baseline', 'network': profile.name, 'representation': rep.as_dict(),
            'plan_horizon': 1}
    cfg = replace(train_defaults(env, 'ppo'), seed=seed, total_steps=budget, stop_return=target, meta=meta)
    train(cfg, vec_env_factory(env, profile, rep, seed, 1), out, progress=False)
    with open(out / 'progress.csv') as file:
        return [{'env_steps': float(r['global_step']), 'return': float(r['episodic_return'])}
                for r in csv.DictReader(file) if float(r['global_step']) <= until]


def first_at(rows: list[dict[str, float]], target: float) -> float | None:
    return next((r['env_steps'] for r in rows if r['return'] >= target), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--env', default='InvertedPendulum-v5')
    parser.add_argument('--budget', type=int, default=0, help='env steps the learning rate anneals over (0: the '
                                                              'task\'s calf train budget)')
    parser.add_argument('--until', type=int, default=100_000, help='stop here')
    parser.add_argument('--target', type=float, default=950.0)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--lag', type=int, default=0, help='batches the weights arrive late')
    parser.add_argument('--exact', action='store_true', help='full snapshots, no int8 deltas')
    parser.add_argument('--single', action='store_true', help='also train single-process')
    parser.add_argument('--out', type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    budget = args.budget or train_defaults(args.env, 'ppo').total_steps
    args.out.mkdir(parents=True, exist_ok=True)
    report = {'distributed': distributed(args.env, budget, args.until, args.target, args.seed, args.out / 'dist',
                                         args.lag, args.exact)}
    if args.single:
        report['single'] = single(args.env, budget, args.until, args.target, args.seed, args.out / 'single')
    for name, rows in report.items():
        line = f'{name}: {args.target:g} at {first_at(rows, args.target)} env steps (last {rows[-1]["return"]:.1f} ' \
               f'at {rows[-1]["env_steps"]:.0f})'
        if 'rho_mean' in rows[0]:
            line += (f'; rho_mean median {np.median([r["rho_mean"] for r in rows]):.4f}, lag '
                     f'{sorted({r["lag"] for r in rows})}; weights max abs error median '
                     f'{np.median([r["weights_max_abs_error"] for r in rows]):.2e}, max '
                     f'{max(r["weights_max_abs_error"] for r in rows):.2e}')
        print(line)
    (args.out / 'parity.json').write_text(json.dumps({'args': {k: str(v) for k, v in vars(args).items()}, **report},
                                                     indent=1) + '\n')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
