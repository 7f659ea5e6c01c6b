"""Sim-ros latency agreement: E2E p50/p95 of ``calf eval --backend ros`` against ``--backend sim``.

One policy, one profile, the same episodes and seed through both backends, the ros graph at time
scale 1 (the live pipeline's own ~3 ms per round trip would be multiplied by a larger scale).
tests/test_graph_system.py::test_parity_of_sim_and_ros_evaluation asserts the behaviour (the
returns agree, the live graph pays at least the modelled delays); this bench measures how close
the latencies come, which depends on the host's load. ``--load N`` runs N CPU-bound processes beside
the graph for the whole ros evaluation (as a busy robot computer would; each stops by itself after
``--load-limit-s`` at the latest, and all are stopped at the end). Missed tick deadlines are the env
node's (its last episode line), as a share of its ticks. The policy's compute p50 (``Action.compute_ms``,
live) stands beside the profile's ``compute_ms``, which virtual time assumes: their difference is part of the
live E2E that no timing rule can remove. Without ``--policy`` it trains the test's
policy first (PPO, 20,000 steps under sim_clean, about 10 s).

    python bench/bench_parity.py [--policy DIR] [--network wifi_normal] [--episodes 20] [--repeats 1] [--load 4]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from live_bench import cpu_load, parity_policy

GOALS = {0: (0.02, 0.15), 4: (0.05, 0.10)}  # --load: |ros / sim - 1| of E2E p50 and p95 (the goals)
MISSED_GOAL = 0.005  # share of tick deadlines missed
# the env node's line after each episode: "... held 0, 3 of 1234 tick deadlines missed"
MISSED = re.compile(r'(\d+) of (\d+) tick deadlines missed')
COUNT_STARTS = re.compile(r'\[(\d+\.\d+)\] \[[\w.]*env\]: policy heard after .* episode 0 of the count starts')
STARTUP_GOAL_S = 10.0  # from calf eval's start to the start of the first counted episode


def evaluate(policy: Path, network: str, backend: str, episodes: int, seed: int) -> dict:
    """``calf eval``'s JSON report; for the ros backend with ``missed`` and ``ticks`` from the env node's log
    and ``startup_s``, from the command's start to the first counted episode's (the log's wall-clock stamps)."""
    started = time.time()
    argv = [sys.executable, '-m', 'calf_bringup.cli', 'eval', '--policy', str(policy), '--network', network,
            '--backend', backend, '--episodes', str(episodes), '--seed', str(seed), '--time-scale', '1', '--json']
    done = subprocess.run(argv, capture_output=True, text=True, env=os.environ)
    if done.returncode:
        sys.exit(f'bench_parity: calf eval --backend {backend} failed: {done.stderr.strip()[-2000:]}')
    report = json.loads(done.stdout)
    counts = MISSED.findall(done.stderr)
    if backend == 'ros' and counts:
        report['missed'], report['ticks'] = map(int, counts[-1])
    starts = COUNT_STARTS.findall(done.stderr)
    if backend == 'ros' and starts:
        report['startup_s'] = float(starts[-1]) - started
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--policy', type=Path, help='checkpoint directory (default: train the test\'s policy)')
    parser.add_argument('--network', default='wifi_normal', help='a profile name or file (delay_only: fixed 25 ms)')
    parser.add_argument('--episodes', type=int, default=20)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--repeats', type=int, default=1)
    parser.add_argument('--load', type=int, default=0, help='CPU-bound processes beside the graph')
    parser.add_argument('--load-limit-s', type=float, default=1800.0, help='each load process ends after this')
    args = parser.parse_args()
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    with parity_policy(args.policy) as policy:
        sim = evaluate(policy, args.network, 'sim', args.episodes, args.seed)
        load_before = os.getloadavg()[0]
        with cpu_load(args.load, args.load_limit_s):
            ros_runs = [evaluate(policy, args.network, 'ros', args.episodes, args.seed) for _ in range(args.repeats)]
            load_after = os.getloadavg()[0]
    goal_p50, goal_p95 = GOALS.get(args.load, GOALS[4])
    print(f'parity bench: {args.network}, {args.episodes} episodes, {args.repeats} ros run(s) at time scale 1, '
          f'--load {args.load}, load average {load_before:.1f} before / {load_after:.1f} during the ros runs on '
          f'{os.cpu_count()} CPUs; medians over runs')
    print(f'{"":<18}{"sim":>10}{"ros":>10}{"ros / sim":>12}   goal')
    for q, goal in (('p50', goal_p50), ('p95', goal_p95)):
        ros = statistics.median(r['e2e_latency_ms'][q] for r in ros_runs)
        ratio = ros / sim['e2e_latency_ms'][q]
        verdict = 'met' if abs(ratio - 1) <= goal else 'NOT met'
        print(f'{"E2E " + q + " (ms)":<18}{sim["e2e_latency_ms"][q]:>10.1f}{ros:>10.1f}{ratio:>12.3f}   '
              f'within {goal:.0%}: {verdict}')
    compute = statistics.median(r['policy_compute_ms']['p50'] for r in ros_runs)
    assumed = ros_runs[0]['policy_compute_ms']['profile_assumes']
    print(f'{"compute p50 (ms)":<18}{assumed:>10.1f}{compute:>10.1f}{compute / assumed if assumed else math.inf:>12.3f}'
          f'   none (sim: the profile\'s compute_ms; ros: the policy\'s own, {compute - assumed:+.1f} ms of the E2E)')
    timed = [r for r in ros_runs if 'ticks' in r]
    if timed:
        missed = statistics.median(r['missed'] / r['ticks'] for r in timed)
        verdict = 'met' if missed < MISSED_GOAL else 'NOT met'
        print(f'{"missed deadlines":<18}{0:>10.2%}{missed:>10.2%}{"":>12}   below {MISSED_GOAL:.1%}: {verdict}')
    started = [r['startup_s'] for r in ros_runs if 'startup_s' in r]
    if started:
        verdict = 'met' if statistics.median(started) <= STARTUP_GOAL_S else 'NOT met'
        print(f'{"first count (s)":<18}{"":>10}{statistics.median(started):>10.1f}{"":>12}   '
              f'within {STARTUP_GOAL_S:g} s: {verdict}')
    ros_return = statistics.median(r['mean_return'] for r in ros_runs)
    low_sim, high_sim = confidence_interval(sim['returns'])
    overlap = [low_sim <= high and low <= high_sim for low, high in (confidence_interval(r['returns']) for r in ros_runs)]
    print(f'{"mean return":<18}{sim["mean_return"]:>10.1f}{ros_return:>10.1f}{"":>12}   95 % intervals overlap '
          f'(the parity test\'s check): {"met" if all(overlap) else "NOT met"} in {sum(overlap)} of {len(overlap)}')


def confidence_interval(returns: list[float]) -> tuple[float, float]:
    """95 % confidence interval of the mean (normal approximation), as the parity test computes it."""
    half = 1.96 * statistics.stdev(returns) / len(returns) ** 0.5
    return statistics.fmean(returns) - half, statistics.fmean(returns) + half


if __name__ == '__main__':
    main()
