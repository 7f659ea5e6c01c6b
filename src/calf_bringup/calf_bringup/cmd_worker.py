"""``calf worker``: a rollout worker joining a learner (``calf train --workers``) from another host."""
from __future__ import annotations

import argparse
from pathlib import Path

from calf_agent.dist.key import KEY_ENV, KEY_FILE, load_key
from calf_bringup.cli_args import MAX_ENVS, count
from calf_bringup.distributed import worker_graph
from calf_bringup.runner import run_graph
from calf_core.envs import add_env_arguments, resolve_env_arg


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('worker', help='run a rollout worker for a learner on another host')
    parser.add_argument('--learner', required=True, metavar='IP|localhost',
                        help='the learner\'s host; discovery uses static peers to it unless --discovery is given')
    parser.add_argument('--discovery', help='localhost, subnet, off, system_default, a Fast DDS XML profile, or '
                                            'peers:IP,IP,... (as calf run edge_sim)')
    add_env_arguments(parser)
    parser.add_argument('--network', metavar='PROFILE',
                        help='a network profile file the learner may name besides the built-in profiles (as the '
                             'learner\'s --network, the same string)')
    parser.add_argument('--key', metavar='FILE', help=f'the learner\'s key file (its --out/{KEY_FILE}, mode 0600); '
                                                      f'default: the key in {KEY_ENV}')
    parser.add_argument('--id', default='', help='worker id, a name token (default: <hostname>_<pid>)')
    parser.add_argument('--envs', type=count(1, MAX_ENVS), default=8, help='envs this worker steps (default 8)')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--domain-id', type=int, help='ROS_DOMAIN_ID (default: inherited)')
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    env = resolve_env_arg(args.env, args.env_spec)
    key_file = str(Path(args.key).resolve()) if args.key else ''
    specs = worker_graph(args.learner, args.discovery, args.id, args.envs, args.seed, env, args.network or '',
                         key_file)
    load_key(key_file)  # a missing or loose key fails here, on one line
    return run_graph(specs, args.domain_id)
