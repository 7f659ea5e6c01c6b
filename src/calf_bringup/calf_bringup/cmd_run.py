"""``calf run``: start a deployment mode's node graph as processes, without the launch system.

Its flags are the run options (``calf_bringup.run_options``), the same table as the launch files' arguments.
Nothing here imports torch: the nodes start first, and the check that the policy acts in the env's action
space (which loads the checkpoint) runs while they start; a mismatch stops them, in one line.
"""
from __future__ import annotations

import argparse
import sys
from functools import partial

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
    respawn = Respawn(options.respawn_retries, options.respawn_delay) if options.respawn else None
    checked = options.policy and options.mode != IMPAIR and options.placement != 'hierarchical' and options.role == 'all'
    return run_graph(build_graph(options), options.domain_id, respawn=respawn,
                     after_start=partial(_check_policy, options) if checked else None)


def _check_policy(options: RunOptions) -> None:
    """The policy checkpoint acts in the env's action space (else CheckpointError, one line)."""
    from calf_agent.policy_runner import check_policy_env  # torch: after the nodes started

    check_policy_env(options.policy, options.env)
