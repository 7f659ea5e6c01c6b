"""``calf worker``: a rollout worker joining a learner (``calf train --workers``) from another host."""
from __future__ import annotations

import argparse

from calf_bringup.distributed import worker_graph
from calf_bringup.runner import run_graph


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('worker', help='run a rollout worker for a learner on another host')
    parser.add_argument('--learner', required=True, metavar='IP|localhost',
                        help='the learner\'s host; discovery uses static peers to it unless --discovery is given')
    parser.add_argument('--discovery', help='localhost, subnet, off, system_default, a Fast DDS XML profile, or '
                                            'peers:IP,IP,... (as calf run edge_sim)')
    parser.add_argument('--id', default='', help='worker id, a name token (default: <hostname>_<pid>)')
    parser.add_argument('--envs', type=int, default=8, help='envs this worker steps (default 8)')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--domain-id', type=int, help='ROS_DOMAIN_ID (default: inherited)')
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_graph(worker_graph(args.learner, args.discovery, args.id, args.envs, args.seed), args.domain_id)
