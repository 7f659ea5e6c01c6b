"""The ``calf`` command: one entry point for training, evaluation, profiles and the node graph."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Iterable, Sequence

from calf_bringup.cli_args import CalfParser
from calf_core import progress
from calf_core.errors import CalfError

COMMANDS = {'train': 'cmd_train', 'train-hierarchy': 'cmd_train_hierarchy', 'eval': 'cmd_eval',
            'profile': 'cmd_profile', 'run': 'cmd_run', 'demo': 'cmd_demo', 'experiment': 'cmd_experiment',
            'trace': 'cmd_trace', 'worker': 'cmd_worker'}
"""Each command's module, imported only when its command is parsed: ``calf run`` starts its nodes without
the other commands' imports (torch's among them), which took most of its start-up on a busy host."""


def build_parser(commands: Iterable[str] = COMMANDS) -> argparse.ArgumentParser:
    parser = CalfParser(prog='calf', description='Communication-Aware Learning Framework')
    sub = parser.add_subparsers(dest='command', required=True)
    for name in commands:
        importlib.import_module(f'calf_bringup.{COMMANDS[name]}').register(sub)
    for command_parser in sub.choices.values():
        command_parser.add_argument('--progress', action='store_true',
                                    help='show progress bars on stderr even when it is not a terminal')
    return parser


def import_from_working_directory() -> None:
    """Let ``--env mymodule:make_env`` find modules in the working directory, as ``python -m`` does.

    The directory also goes first on the ``PYTHONPATH`` of the nodes that ``calf`` starts.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    inherited = os.environ.get('PYTHONPATH', '')
    if cwd not in inherited.split(os.pathsep):
        os.environ['PYTHONPATH'] = os.pathsep.join(p for p in (cwd, inherited) if p)


def main(argv: Sequence[str] | None = None) -> int:
    import_from_working_directory()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[:1] if argv[:1] and argv[0] in COMMANDS else COMMANDS).parse_args(argv)
    if args.progress:  # for this process and the ones it starts (calf_core.progress decides)
        os.environ[progress.ENV] = '1'
    try:
        return int(args.func(args) or 0)
    except CalfError as err:  # one line, whatever the message holds (user code may raise a CalfError too)
        print(f'calf {args.command}: error: {" ".join(str(err).split())}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f'calf {args.command}: interrupted', file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (calf profile list | head): stop quietly, as shell tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141


if __name__ == '__main__':
    sys.exit(main())
