"""``calf eval``: evaluate a checkpoint under a network profile, in virtual time or over DDS."""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from pathlib import Path
from typing import Any, TextIO

from calf_agent.hierarchy import EDGE_NETWORK, PLACEMENTS
from calf_bringup.cli_args import MAX_EPISODES, count, number
from calf_bringup.cmd_profile import E2E_DEFINITIONS, e2e_report
from calf_core.errors import ConfigError
from calf_core.network import resolve_network
from calf_core.profiles import sample_e2e

MAX_DOMAIN_ID = 232  # ROS 2 domain ids are 0..232
PRIVATE_DOMAINS = (1, 101)  # a random private domain is drawn from this range (valid on Linux hosts)
E2E_REFERENCE_SAMPLES = 20_000
BACKENDS = ('sim', 'ros')
SLOW_COMPUTE_RATIO, SLOW_COMPUTE_MARGIN_MS = 1.5, 1.0  # a measured compute p50 beyond both is worth a warning


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('eval', help='evaluate a policy under a network profile')
    parser.add_argument('--policy', type=Path, required=True,
                        help='checkpoint directory from calf train (hierarchical: from calf train-hierarchy)')
    parser.add_argument('--network', default='sim_clean', help='profile name, YAML path or trace bag')
    parser.add_argument('--backend', choices=BACKENDS,
                        help='sim: virtual time (NetworkedEnv); ros: env node, shim and policy node over DDS '
                             '(default sim)')
    parser.add_argument('--mode', choices=BACKENDS, help='deprecated alias of --backend')
    parser.add_argument('--episodes', type=count(1, MAX_EPISODES), default=50)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--time-scale', type=number(0, 1000, low_open=True), default=1.0,
                        help='ros backend: run the graph this many times faster than real time; latencies are '
                             'reported in the profile\'s units')
    parser.add_argument('--placement', choices=PLACEMENTS,
                        help='where the policy runs. flat_desktop: across the network (default); flat_edge: beside '
                             'the env (no network); hierarchical: edge sub-policies and arbiter beside the env, '
                             'desktop ones across it')
    parser.add_argument('--graph', choices=PLACEMENTS, help='deprecated alias of --placement')
    parser.add_argument('--domain-id', type=int,
                        help='ros backend: ROS_DOMAIN_ID of the graph (default: $ROS_DOMAIN_ID if set, else a random '
                             'private domain); the domain used is printed')
    parser.add_argument('--json', action='store_true', help='print one JSON object')
    parser.set_defaults(func=run)


def choose_domain(domain_id: int | None, environ: dict[str, str], log: TextIO) -> int:
    """--domain-id, else ROS_DOMAIN_ID, else a random private domain; print which and why."""
    if domain_id is not None:
        chosen, source = domain_id, '--domain-id'
    elif environ.get('ROS_DOMAIN_ID', '').strip():
        text, source = environ['ROS_DOMAIN_ID'].strip(), 'ROS_DOMAIN_ID'
        if not text.isdigit():
            raise ConfigError(f'ROS_DOMAIN_ID must be an integer in 0..{MAX_DOMAIN_ID}, got {text!r}')
        chosen = int(text)
    else:
        chosen, source = random.SystemRandom().randint(*PRIVATE_DOMAINS), 'random private domain'
    if not 0 <= chosen <= MAX_DOMAIN_ID:
        raise ConfigError(f'{source}: the ROS domain id must be in 0..{MAX_DOMAIN_ID}, got {chosen}')
    print(f'[calf] ROS domain {chosen} ({source})', file=log)
    return chosen


def with_e2e_definitions(report: dict[str, Any], network: str, placement: str, seed: int) -> dict[str, Any]:
    """Name what the measured E2E figure is, and add the profile's all-messages figure beside it."""
    profile = resolve_network(EDGE_NETWORK if placement == 'flat_edge' else network)
    reference = e2e_report(sample_e2e(profile, n=E2E_REFERENCE_SAMPLES, seed=seed))['all_messages']
    return {**report, 'e2e_latency_ms': {**report['e2e_latency_ms'], 'definition': E2E_DEFINITIONS['acted_on']},
            'e2e_all_messages_ms': {**reference, 'definition': 'sampled from the profile (calf profile show): '
                                    + E2E_DEFINITIONS['all_messages']}}


def slow_compute_warning(report: dict[str, Any]) -> str | None:
    """A warning when the live policy took much longer to answer than the profile's ``compute_ms`` assumes (more
    than ``SLOW_COMPUTE_RATIO`` times and ``SLOW_COMPUTE_MARGIN_MS`` more): virtual time, which trains and
    evaluates with the profile's figure, then counts every answer as earlier than it arrives live."""
    compute = report['policy_compute_ms']
    if compute['p50'] is None:  # virtual time measures no compute
        return None
    measured, assumed = compute['p50'], compute['profile_assumes']
    if measured <= max(SLOW_COMPUTE_RATIO * assumed, assumed + SLOW_COMPUTE_MARGIN_MS):
        return None
    return (f'calf eval: warning: the policy took {measured:.1f} ms to answer at p50, and the profile assumes '
            f'{assumed:g} ms (compute_ms): virtual time counts its answers as earlier than they arrive here; '
            f'set compute_ms: {math.ceil(measured)} in the profile you train and evaluate with')


def renamed(args: argparse.Namespace, new: str, old: str, default: str) -> str:
    """Option ``new``, else its deprecated alias ``old`` (which warns, as calf run's --graph does), else ``default``."""
    value, alias = getattr(args, new), getattr(args, old)
    if alias is not None:
        print(f'calf eval: warning: --{old} is deprecated: use --{new} (the old name goes in the next release)',
              file=sys.stderr)
    return next((v for v in (value, alias) if v is not None), default)


def run(args: argparse.Namespace) -> int:
    backend = renamed(args, 'backend', 'mode', 'sim')
    placement = renamed(args, 'placement', 'graph', 'flat_desktop')
    if backend == 'ros':
        from calf_bringup.ros_eval import (
            evaluate_ros,  # imports rclpy: only when the graph is wanted
        )

        domain = choose_domain(args.domain_id, dict(os.environ), sys.stderr)
        report = evaluate_ros(args.policy, args.network, args.episodes, args.seed, args.time_scale, sys.stderr,
                              placement=placement, domain_id=domain, progress=True)
    else:
        from calf_agent.placement_sim import evaluate_placement_sim  # torch: not on the ros backend's way

        report = {**evaluate_placement_sim(placement, args.policy, resolve_network(args.network), args.episodes,
                                           args.seed, progress=True),
                  'time_scale': None}  # virtual time: no wall clock to scale
    report = with_e2e_definitions(report, args.network, placement, args.seed)
    report['placement'] = placement  # 'graph' repeats it for readers of the previous release
    warning = slow_compute_warning(report)
    if warning:
        print(warning, file=sys.stderr)
    if args.json:
        print(json.dumps(report))
    else:
        e2e, every = report['e2e_latency_ms'], report['e2e_all_messages_ms']
        print(f"{report['network']} ({report['backend']}): return {report['mean_return']:.1f} ± "
              f"{report['std_return']:.1f} over {report['episodes']} episodes, success "
              f"{report['success_rate']:.0%}")
        print(f"  E2E acted-on observations (measured) p50 {e2e['p50']} ms p95 {e2e['p95']} ms; "
              f"all messages (profile) p50 {every['p50']:.1f} ms p95 {every['p95']:.1f} ms")
        compute = report['policy_compute_ms']
        if compute['samples']:  # measured live only
            print(f"  policy compute (measured) p50 {compute['p50']} ms p95 {compute['p95']} ms; the profile "
                  f"assumes {compute['profile_assumes']:g} ms")
    return 0
