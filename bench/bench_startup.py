"""Live start-up: seconds from ``calf run sim_net`` to the first counted episode, at load 0 and ``--load N``.

Each run starts ``calf run sim_net --policy P --network delay_only`` in a fresh ROS domain and stamps every line
of its output: a node's line by its log stamp (wall clock, so that the runner's forwarding does not count),
the runner's by its arrival. The run ends at the env node's "episode 0 of the count starts" line (the start gate
opened: a policy was heard, so no start-up time is ever counted as policy performance). Phases, each from the
command's start: ``spawned`` (the runner's "[calf] running" line: the CLI's imports and checks), ``env`` /
``shim`` / ``policy`` (each node's first line: its imports and rclpy start; the policy's line comes once its
checkpoint is loaded), ``counted`` (the first counted episode starts: DDS discovery and the first answer).
``--load N`` runs N CPU-bound processes beside each run (``live_bench.cpu_load``). Medians over ``--repeats``.
Without ``--policy`` it trains the parity test's policy first (PPO, 20,000 steps under sim_clean).

    python bench/bench_startup.py [--policy DIR] [--loads 0 4] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench_parity import STARTUP_GOAL_S
from live_bench import cpu_load, parity_policy

PHASES = ('spawned', 'env', 'shim', 'policy', 'counted')
MARKS = {'spawned': '[calf] running', 'env': '[env] ', 'shim': '[shim] ', 'policy': '[policy] ',
         'counted': 'episode 0 of the count starts'}
TIMEOUT_S = 300.0
STAMP = re.compile(r'\] \[(\d+\.\d+)\] \[')  # a node's log line: [INFO] [1796209226.367109983] [calf.env]: ...


def start_up(policy: Path, domain: int) -> dict[str, float]:
    """One ``calf run``: the seconds from its start to the first line of each phase (``PHASES``)."""
    env = {**os.environ, 'ROS_DOMAIN_ID': str(domain), 'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST'}
    argv = ['calf', 'run', 'sim_net', '--policy', str(policy), '--network', 'delay_only']
    started = time.time()
    run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(TIMEOUT_S, run.kill)
    timer.start()
    seen: dict[str, float] = {}
    try:
        assert run.stdout is not None
        for line in run.stdout:
            stamp = STAMP.search(line)
            for phase, mark in MARKS.items():
                if phase not in seen and mark in line:
                    seen[phase] = (float(stamp.group(1)) if stamp else time.time()) - started
            if 'counted' in seen:
                break
    finally:
        timer.cancel()
        run.send_signal(signal.SIGINT)
        run.communicate()
    if 'counted' not in seen:
        sys.exit(f'bench_startup: calf run ended (code {run.returncode}) before an episode was counted')
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--policy', type=Path, help='checkpoint directory (default: train the parity test\'s policy)')
    parser.add_argument('--loads', type=int, nargs='+', default=[0, 4], help='CPU-bound processes beside the run')
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    with parity_policy(args.policy) as policy:
        print(f'start-up of calf run sim_net (delay_only), seconds from the command\'s start, medians of '
              f'{args.repeats} runs, {os.cpu_count()} CPUs')
        print(f'{"--load":>6}  {"load avg":>8}  ' + ''.join(f'{phase:>9}' for phase in PHASES) + '   runs (counted)')
        for load in args.loads:
            before = os.getloadavg()[0]
            with cpu_load(load, TIMEOUT_S * args.repeats):
                time.sleep(2.0 if load else 0.0)  # the busy processes are running before calf run starts
                runs = [start_up(policy, 1 + (os.getpid() + i) % 100) for i in range(args.repeats)]
            medians = [statistics.median(run.get(phase, float('nan')) for run in runs) for phase in PHASES]
            counted = statistics.median(run['counted'] for run in runs)
            verdict = 'met' if counted <= STARTUP_GOAL_S else 'NOT met'
            print(f'{load:>6}  {before:>8.1f}  ' + ''.join(f'{m:>9.1f}' for m in medians) + '   '
                  + ', '.join(f'{run["counted"]:.1f}' for run in runs)
                  + f'   within {STARTUP_GOAL_S:g} s: {verdict}', flush=True)


if __name__ == '__main__':
    main()
