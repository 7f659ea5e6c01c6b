"""Feedback plans against open-loop plans: each model planner evaluated twice behind one network, same episodes.

For every planner given, ``calf eval --backend sim``'s evaluation runs it as saved (open loop unless it was trained
with ``--feedback-plans``) and as ``calf_agent.planner.with_feedback`` makes it: the same model, base and lead
rule, each plan element carrying the base's gains at its predicted state (``PlanningAgent``). Prints each planner's
mean return both ways, then the mean ± sample std across planners (one per seed), and each as a share of
``--reference`` (a clean-link return) when given.

    python bench/compare_feedback_plans.py --policy PLAN_S0 PLAN_S1 PLAN_S2 --network wifi_degraded --episodes 20
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from calf_agent.evaluate import evaluate_sim
from calf_agent.planner import with_feedback
from calf_core.network import resolve_network


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--policy', type=Path, nargs='+', required=True, help='model planners over continuous bases')
    parser.add_argument('--network', default='wifi_degraded')
    parser.add_argument('--episodes', type=int, default=20)
    parser.add_argument('--seed', type=int, default=100, help='the first episode\'s env seed')
    parser.add_argument('--reference', type=float, help='a clean-link return, for percentages')
    args = parser.parse_args()
    profile = resolve_network(args.network)
    means: dict[str, list[float]] = {'open loop': [], 'feedback': []}
    with tempfile.TemporaryDirectory(prefix='calf_feedback_') as scratch:
        for index, planner in enumerate(args.policy):
            twin = with_feedback(planner, Path(scratch) / str(index))
            for name, checkpoint in (('open loop', planner), ('feedback', twin)):
                report = evaluate_sim(checkpoint, profile, args.episodes, args.seed)
                means[name].append(report['mean_return'])
                print(f'{planner} {name:>9}: {report["mean_return"]:8.1f}  per episode '
                      f'{np.round(report["returns"]).astype(int).tolist()}', flush=True)
    for name, values in means.items():
        share = f' ({np.mean(values) / args.reference:.0%} of {args.reference:g})' if args.reference else ''
        spread = np.std(values, ddof=1) if len(values) > 1 else 0.0
        print(f'{name:>9} behind {args.network}: {np.mean(values):8.1f} ± {spread:6.1f} across '
              f'{len(values)} planners{share}')


if __name__ == '__main__':
    main()
