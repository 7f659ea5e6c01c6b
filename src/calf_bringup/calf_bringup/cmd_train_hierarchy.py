"""``calf train-hierarchy``: train the sub-policies of a hierarchical policy graph."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from calf_agent.hierarchy import HIERARCHY_FILE
from calf_agent.hierarchy_train import train_hierarchy
from calf_agent.regimes import REGIMES
from calf_agent.subtasks import SUBTASKS
from calf_bringup.cli_args import MAX_STEPS, count
from calf_core.atomic import check_out_parent


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('train-hierarchy', help='train the sub-policies of a hierarchical policy graph')
    parser.add_argument('--env', choices=sorted(SUBTASKS), default='cartpole')
    parser.add_argument('--regime', choices=sorted(REGIMES), default='full',
                        help='network regime of the desktop sub-policies; edge ones train under sim_clean')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--steps', type=count(1, MAX_STEPS), help='environment decisions per sub-policy (default per env)')
    parser.add_argument('--out', type=Path, required=True,
                        help=f'directory for one checkpoint per sub-policy and {HIERARCHY_FILE}')
    parser.add_argument('--quiet', action='store_true', help='no progress bars')
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_out_parent(args.out, 'hierarchy directory')  # the trainings create it
    hierarchy, results = train_hierarchy(args.env, args.regime, args.seed, args.out, args.steps,
                                         progress=not args.quiet)
    print(json.dumps({'out': str(hierarchy.root), 'subpolicies': {
        name: {'steps': r.global_steps, 'mean_return': r.mean_return, 'wall_time_s': round(r.wall_time_s, 1)}
        for name, r in results.items()}}))
    return 0
