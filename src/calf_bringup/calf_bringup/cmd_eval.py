"""``calf eval``: evaluate a checkpoint under a network profile, in virtual time or over DDS."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from calf_agent.evaluate import evaluate_sim
from calf_shim.profiles import load_profile


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('eval', help='evaluate a policy under a network profile')
    parser.add_argument('--policy', type=Path, required=True, help='checkpoint directory from calf train')
    parser.add_argument('--network', default='sim_clean', help='profile name, YAML path or trace bag')
    parser.add_argument('--mode', choices=('sim', 'ros'), default='sim')
    parser.add_argument('--episodes', type=int, default=50)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--json', action='store_true', help='print one JSON object')
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    profile = load_profile(args.network)
    report = evaluate_sim(args.policy, profile, args.episodes, args.seed)
    if args.json:
        print(json.dumps(report))
    else:
        e2e = report['e2e_latency_ms']
        print(f"{report['network']} ({report['mode']}): return {report['mean_return']:.1f} ± "
              f"{report['std_return']:.1f} over {report['episodes']} episodes, success "
              f"{report['success_rate']:.0%}, E2E p50 {e2e['p50']} ms p95 {e2e['p95']} ms")
    return 0
