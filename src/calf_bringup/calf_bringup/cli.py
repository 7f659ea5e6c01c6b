"""The ``calf`` command: one entry point for training, evaluation, profiles and the node graph."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from calf_bringup import (
    cmd_demo,
    cmd_eval,
    cmd_experiment,
    cmd_profile,
    cmd_run,
    cmd_trace,
    cmd_train,
    cmd_train_hierarchy,
    cmd_worker,
)
from calf_bringup.cli_args import CalfParser
from calf_core.errors import CalfError

COMMANDS = (cmd_train, cmd_train_hierarchy, cmd_eval, cmd_profile, cmd_run, cmd_demo, cmd_experiment, cmd_trace,
            cmd_worker)


def build_parser() -> argparse.ArgumentParser:
    parser = CalfParser(prog='calf', description='Communication-Aware Learning Framework')
    sub = parser.add_subparsers(dest='command', required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CalfError as err:
        print(f'calf {args.command}: error: {err}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f'calf {args.command}: interrupted', file=sys.stderr)
        return 130


if __name__ == '__main__':
    sys.exit(main())
