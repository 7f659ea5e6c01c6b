"""``calf eval --backend sim``'s speed against another git revision, on the same checkpoints, with the same reports.

For each checkpoint directory and profile, ``evaluate_sim`` runs ``--episodes`` episodes in this process and, with
``calf_core`` and ``calf_agent`` as they are at ``--against REV``, in a worker process right after it. Times are
CPU time, after a one-episode warm-up on each side; the ratio printed is the median over ``--repeats`` of the
worker's time over this process's. The two reports (returns, E2E samples, losses) must be equal: the bench
stops with exit code 1 where they differ.

    python bench/bench_eval_sim.py CHECKPOINT_DIR... --against REV [--networks wifi_normal outage_burst]
        [--episodes 20] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from revision import pythonpath_at

from calf_agent.evaluate import evaluate_sim
from calf_core.profiles import load_profile


def timed(policy_dir: str, network: str, episodes: int) -> tuple[float, str]:
    """(CPU seconds, the report as JSON) of one evaluation."""
    start = time.process_time()
    report = evaluate_sim(policy_dir, load_profile(network), episodes, seed=5, keep_samples=True)
    return time.process_time() - start, json.dumps(report, sort_keys=True)


def serve() -> None:
    """Worker: for each line ``DIR NETWORK EPISODES`` on stdin, the seconds and the report on one line of stdout."""
    for line in sys.stdin:
        policy_dir, network, episodes = line.split()
        seconds, report = timed(policy_dir, network, int(episodes))
        print(seconds, report, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('dirs', nargs='*', metavar='CHECKPOINT_DIR')
    parser.add_argument('--against', metavar='REV')
    parser.add_argument('--networks', nargs='+', default=['wifi_normal', 'outage_burst'])
    parser.add_argument('--episodes', type=int, default=20)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--serve', action='store_true', help=argparse.SUPPRESS)  # the --against worker
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    if not args.dirs or not args.against:
        parser.error('give checkpoint directories and --against REV')
    worker = subprocess.Popen([sys.executable, __file__, '--serve'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=pythonpath_at(args.against, ('calf_core', 'calf_agent')))
    assert worker.stdin is not None and worker.stdout is not None
    timed(args.dirs[0], args.networks[0], 1)  # warm-up: first-call costs land outside the measured runs, both sides
    worker.stdin.write(f'{args.dirs[0]} {args.networks[0]} 1\n')
    worker.stdin.flush()
    worker.stdout.readline()
    print(f'evaluate_sim, {args.episodes} episodes, CPU s, medians of {args.repeats}')
    print(f'{"checkpoint":<48}{"network":<14}{"now":>8}{"@" + args.against[:10]:>12}{"@/now":>8}')
    differ = False
    for policy_dir in args.dirs:
        for network in args.networks:
            runs = []
            for _ in range(args.repeats):
                now, report = timed(policy_dir, network, args.episodes)
                worker.stdin.write(f'{policy_dir} {network} {args.episodes}\n')
                worker.stdin.flush()
                seconds, old_report = worker.stdout.readline().split(' ', 1)
                differ |= old_report.strip() != report
                runs.append((now, float(seconds)))
            now, old = (statistics.median(run[i] for run in runs) for i in (0, 1))
            ratio = statistics.median(run[1] / run[0] for run in runs)
            name = Path(policy_dir).name[:46]
            print(f'{name:<48}{network:<14}{now:>8.3f}{old:>12.3f}{ratio:>7.2f}×', flush=True)
    worker.stdin.close()
    worker.wait()
    print('reports: ' + ('DIFFERENT' if differ else 'equal'))
    sys.exit(1 if differ else 0)


if __name__ == '__main__':
    main()
