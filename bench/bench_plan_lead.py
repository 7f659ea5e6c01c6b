"""The model planner's two start-up choices on Wi-Fi-D: the rollout lead, and the env's start plan.

Fits one planner per lead over the same base checkpoint and plays each with and without the start
plan (without: the env holds its initial action until the first plan arrives), in virtual time.

    python bench/bench_plan_lead.py --base results/plans_run/cache/train/cartpole-sim_clean-h1-200000steps-seed0
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from diagnose_plan_failures import run_episode

from calf_agent.checkpoint import load_checkpoint
from calf_agent.planner import train_planner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--base', required=True)
    parser.add_argument('--network', default='wifi_degraded')
    parser.add_argument('--leads', type=int, nargs='+', default=[0, 3, 5, 7])
    parser.add_argument('--episodes', type=int, default=50)
    parser.add_argument('--seed', type=int, default=10_000)
    args = parser.parse_args()
    print(f'{"lead":>5}{"with start plan":>18}{"without":>10}   ({args.network}, {args.episodes} episodes, mean return)')
    with tempfile.TemporaryDirectory() as out:
        for lead in args.leads:
            train_planner(args.base, Path(out) / str(lead), 'full_net_aware', 16, 0, lead=lead, progress=False)
            agent, meta = load_checkpoint(Path(out) / str(lead))
            means = [np.mean([len(run_episode(agent, variant, args.network, args.seed + k))
                              for k in range(args.episodes)])
                     for variant in (meta, {**meta, 'start_plan': []})]
            print(f'{lead:>5}{means[0]:>18.1f}{means[1]:>10.1f}')


if __name__ == '__main__':
    main()
