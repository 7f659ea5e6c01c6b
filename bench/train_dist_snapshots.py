"""``calf train --workers N`` with every weights message a full float32 snapshot: the baseline of the byte goal.

    python bench/train_dist_snapshots.py --out RUNS/NAME --env cartpole --workers 4 --envs 2 --steps 150000 \
        --eval-every 4096 --stop-return 475 --seed 0 [--learner-network wifi_degraded]

The same learner and worker processes and parameters as ``calf train --regime baseline --workers N`` (the
task's defaults, ``--sync every``), with the learner node's ``kl_bound`` at 0 (no delta is ever close enough,
so every send is a snapshot). Writes the same files as ``calf train --workers``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from calf_agent.dist.key import create_key
from calf_agent.regimes import regime_profile, train_defaults
from calf_bringup.distributed import run_training, training_graph


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', type=Path, required=True)
    parser.add_argument('--env', default='cartpole')
    parser.add_argument('--workers', type=int, default=4)
    parser.add_argument('--envs', type=int, default=0, help='envs per worker; 0: the task\'s calf train envs')
    parser.add_argument('--steps', type=int, default=0, help='0: the task\'s calf train budget')
    parser.add_argument('--eval-every', type=int, default=10_000)
    parser.add_argument('--stop-return', type=float, default=0.0)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--learner-network')
    parser.add_argument('--domain-id', type=int, help='ROS_DOMAIN_ID of the processes (default: inherited)')
    args = parser.parse_args()
    defaults = train_defaults(args.env, 'ppo')
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    key = create_key(out / 'dist.key')
    params = {'out': str(out), 'env': args.env, 'network': regime_profile('baseline'), 'regime': 'baseline',
              'steps': args.steps or defaults.total_steps, 'seed': args.seed, 'sync': 'every',
              'eval_every': args.eval_every, 'stop_return': args.stop_return, 'kl_bound': 0.0}
    specs = training_graph(params, args.workers, args.envs or defaults.num_envs, args.seed, args.learner_network, out,
                           str(key))
    return run_training(specs, args.domain_id)


if __name__ == '__main__':
    raise SystemExit(main())
