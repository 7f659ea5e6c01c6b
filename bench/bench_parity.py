"""Sim-ros latency agreement: E2E p50/p95 of ``calf eval --backend ros`` against ``--backend sim`` (target 15 %).

One policy, one profile, the same episodes and seed through both backends, the ros graph at time
scale 1 (the live pipeline's own ~3 ms per round trip would be multiplied by a larger scale).
tests/test_graph_system.py::test_parity_of_sim_and_ros_evaluation asserts the behaviour (the
returns agree, the live graph pays at least the modelled delays); this bench measures how close
the latencies come, which depends on the host's load. Without ``--policy`` it trains the test's
policy first (PPO, 20,000 steps under sim_clean, about 10 s).

    python bench/bench_parity.py [--policy DIR] [--network wifi_normal] [--episodes 20] [--repeats 1]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET = 0.15  # |ros / sim - 1| of E2E p50 and p95


def evaluate(policy: Path, network: str, backend: str, episodes: int, seed: int) -> dict:
    argv = [sys.executable, '-m', 'calf_bringup.cli', 'eval', '--policy', str(policy), '--network', network,
            '--backend', backend, '--episodes', str(episodes), '--seed', str(seed), '--time-scale', '1', '--json']
    done = subprocess.run(argv, capture_output=True, text=True, check=True, env=os.environ)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--policy', type=Path, help='checkpoint directory (default: train the test\'s policy)')
    parser.add_argument('--network', default='wifi_normal')
    parser.add_argument('--episodes', type=int, default=20)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--repeats', type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault('ROS_DOMAIN_ID', str(1 + os.getpid() % 100))
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    with tempfile.TemporaryDirectory() as tmp:
        policy = args.policy
        if policy is None:
            from calf_agent.regimes import train_policy

            policy = Path(tmp) / 'cartpole_baseline'
            train_policy('cartpole', 'sim_clean', seed=0, out_dir=policy, steps=20_000, regime='baseline',
                         progress=False)
        sim = evaluate(policy, args.network, 'sim', args.episodes, args.seed)
        ros_runs = [evaluate(policy, args.network, 'ros', args.episodes, args.seed) for _ in range(args.repeats)]
    print(f'parity bench: {args.network}, {args.episodes} episodes, {args.repeats} ros run(s) at time scale 1, '
          f'load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians over runs')
    print(f'{"":<14}{"sim":>10}{"ros":>10}{"ros / sim":>12}   target: within {TARGET:.0%}')
    for q in ('p50', 'p95'):
        ros = statistics.median(r['e2e_latency_ms'][q] for r in ros_runs)
        ratio = ros / sim['e2e_latency_ms'][q]
        verdict = 'met' if abs(ratio - 1) <= TARGET else 'NOT met'
        print(f'{"E2E " + q + " (ms)":<14}{sim["e2e_latency_ms"][q]:>10.1f}{ros:>10.1f}{ratio:>12.2f}   {verdict}')
    ros_return = statistics.median(r['mean_return'] for r in ros_runs)
    print(f'{"mean return":<14}{sim["mean_return"]:>10.1f}{ros_return:>10.1f}')


if __name__ == '__main__':
    main()
