"""``calf eval``: evaluate a checkpoint under a network profile, in virtual time or over DDS."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from calf_agent.graph_sim import evaluate_graph_sim
from calf_agent.hierarchy import GRAPHS
from calf_core.profiles import load_profile


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('eval', help='evaluate a policy under a network profile')
    parser.add_argument('--policy', type=Path, required=True,
                        help='checkpoint directory from calf train (hierarchical: from calf train-hierarchy)')
    parser.add_argument('--network', default='sim_clean', help='profile name, YAML path or trace bag')
    parser.add_argument('--mode', choices=('sim', 'ros'), default='sim',
                        help='sim: virtual time (NetworkedEnv); ros: env node, shim and policy node over DDS')
    parser.add_argument('--episodes', type=int, default=50)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--time-scale', type=float, default=1.0,
                        help='ros mode: run the graph this many times faster than real time; latencies are '
                             'reported in the profile\'s units')
    parser.add_argument('--graph', choices=GRAPHS, default='flat_desktop',
                        help='flat_desktop: the policy across the network; flat_edge: beside the env (no network); '
                             'hierarchical: edge sub-policies and arbiter beside the env, desktop ones across it')
    parser.add_argument('--json', action='store_true', help='print one JSON object')
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.mode == 'ros':
        from calf_bringup.ros_eval import (
            evaluate_ros,  # imports rclpy: only when the graph is wanted
        )

        report = evaluate_ros(args.policy, args.network, args.episodes, args.seed, args.time_scale, sys.stderr,
                              graph=args.graph)
    else:
        report = {**evaluate_graph_sim(args.graph, args.policy, load_profile(args.network), args.episodes, args.seed),
                  'time_scale': None}  # virtual time: no wall clock to scale
    if args.json:
        print(json.dumps(report))
    else:
        e2e = report['e2e_latency_ms']
        print(f"{report['network']} ({report['mode']}): return {report['mean_return']:.1f} ± "
              f"{report['std_return']:.1f} over {report['episodes']} episodes, success "
              f"{report['success_rate']:.0%}, E2E p50 {e2e['p50']} ms p95 {e2e['p95']} ms")
    return 0
