"""``calf run``: start a deployment mode's node graph as processes, without the launch system."""
from __future__ import annotations

import argparse
from pathlib import Path

from calf_agent.hierarchy import GRAPHS
from calf_bringup.graph import IMPAIR, MODES, ROLES, build_graph, impair_graph
from calf_bringup.runner import run_graph
from calf_core.envs import parse_start_plan
from calf_core.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('run', help='run the node graph of a deployment mode (same graph as the launch files)')
    parser.add_argument('mode', choices=(*MODES, IMPAIR),
                        help='local_sim, sim_net (through the shim), edge_sim, or impair (the generic shim on the '
                             'topics of an existing stack, see --config)')
    parser.add_argument('--config', type=Path, help='impair: relay config YAML (topics, types, directions, profiles)')
    parser.add_argument('--trace-bag', type=Path,
                        help='impair: record every relayed message\'s delay or loss into this new rosbag2 directory')
    parser.add_argument('--role', choices=ROLES, default='all',
                        help='edge: env (+ shim); desktop: policy; all: both on this machine')
    parser.add_argument('--network', default='sim_clean', help='shim profile name or YAML path')
    parser.add_argument('--policy', type=Path, help='checkpoint directory from calf train (needed unless --role edge)')
    parser.add_argument('--env', default='cartpole', help='cartpole or minigrid')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--domain-id', type=int, help='ROS_DOMAIN_ID of every node (default: inherited)')
    parser.add_argument('--discovery', help='localhost|subnet|off|system_default, a Fast DDS XML profile, or peers:IP,IP,... (static peers)')
    parser.add_argument('--time-scale', type=float, default=1.0, help='run this many times faster than real time')
    parser.add_argument('--episodes', type=int, default=0, help='stop after this many episodes (0: run until Ctrl-C)')
    parser.add_argument('--start-plan', type=_start_plan,
                        help='actions the env cycles until the first plan arrives, e.g. [0,1] (default: the '
                             '--policy checkpoint\'s start plan, else hold the initial action)')
    parser.add_argument('--graph', choices=GRAPHS, default='flat_desktop',
                        help='where the policy runs: flat_desktop, flat_edge, or hierarchical (--policy from '
                             'calf train-hierarchy)')
    parser.set_defaults(func=run)


def _start_plan(text: str) -> tuple[int, ...]:
    try:
        return parse_start_plan(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def run(args: argparse.Namespace) -> int:
    if args.mode == IMPAIR:
        return run_graph(impair_graph(args.config, args.seed, args.time_scale, args.discovery, args.trace_bag),
                         args.domain_id)
    specs = build_graph(args.mode, args.role, args.network, args.policy, args.env, args.seed, args.time_scale,
                        args.episodes, args.discovery, args.graph, args.start_plan)
    return run_graph(specs, args.domain_id)
