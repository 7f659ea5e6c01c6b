"""Long fuzz runs (the tests run a short seeded tier of each).

- files: randomised profiles, relay configs, meta.json files and bags through their loaders, plus some
  through `calf` in a memory-limited process; every case must load or be refused with one line.
- messages: hostile messages of every CALF message type into a live env, policy and shim.
- flood: messages as fast as one publisher sends them into a live shim (or env node), and whether its
  counters account for each (received + dropped_middleware + rejected against sent).

    python bench/bench_fuzz.py files --cases 2000 --cli-cases 20 --seed 1
    python bench/bench_fuzz.py messages --messages 100000 --seed 1
    python bench/bench_fuzz.py flood --seconds 10 --target shim
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'tests'))  # the fuzz tools live beside their tests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('what', choices=('files', 'messages', 'flood'))
    parser.add_argument('--cases', type=int, default=2000, help='files: cases per kind')
    parser.add_argument('--cli-cases', type=int, default=20, help='files: cases per kind through `calf`')
    parser.add_argument('--messages', type=int, default=100_000)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--seconds', type=float, default=10.0, help='flood: seconds of flood')
    parser.add_argument('--target', choices=('shim', 'env'), default='shim', help='flood: the node flooded')
    args = parser.parse_args()
    if args.what == 'flood':
        from message_flood import main as flood
        return flood(['--target', args.target, '--seconds', str(args.seconds)])
    with tempfile.TemporaryDirectory() as tmp:
        if args.what == 'files':
            from file_fuzz import main as files
            return files(['--cases', str(args.cases), '--cli-cases', str(args.cli_cases), '--seed', str(args.seed),
                          '--workdir', tmp])
        import torch
        from message_fuzz import main as messages

        from calf_agent.checkpoint import save_checkpoint
        from calf_agent.policies import MlpAgent
        torch.manual_seed(0)
        policy = save_checkpoint(Path(tmp) / 'ckpt', MlpAgent(4, 2), {'env': 'cartpole'})
        return messages(['--policy', str(policy), '--messages', str(args.messages), '--seed', str(args.seed)])


if __name__ == '__main__':
    sys.exit(main())
