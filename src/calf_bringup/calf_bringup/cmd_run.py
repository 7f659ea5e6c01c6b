"""``calf run``: start a deployment mode's node graph as processes, without the launch system.

Its flags are the run options (``calf_bringup.run_options``), the same table as the launch files' arguments.
"""
from __future__ import annotations

import argparse
import sys

from calf_agent.policy_runner import check_policy_env
from calf_bringup.graph import build_graph
from calf_bringup.run_options import IMPAIR, MODES, RunOptions, add_arguments
from calf_bringup.runner import Respawn, run_graph


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('run', help='run the node graph of a deployment mode (same graph as the launch files)')
    parser.add_argument('mode', choices=(*MODES, IMPAIR),
                        help='local_sim, sim_net (through the shim), edge_sim, or impair (the generic shim on the '
                             'topics of an existing stack, see --config)')
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = RunOptions.from_args(args)
    for note in options.warnings:
        print(f'calf run: warning: {note}', file=sys.stderr)
    if options.policy and options.mode != IMPAIR and options.placement != 'hierarchical' and options.role == 'all':
        check_policy_env(options.policy, options.env)
    respawn = Respawn(options.respawn_retries, options.respawn_delay) if options.respawn else None
    return run_graph(build_graph(options), options.domain_id, respawn=respawn)
