"""``calf demo``: the main job, network-aware training and deployment on one machine."""
from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('demo', help='train baseline and network-aware CartPole and compare them')
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print('calf demo: not built yet')
    return 0
