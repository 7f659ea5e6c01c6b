"""A model planner's answer time: one ``act`` call at batch 1, one torch thread, against its own base policy's.

The live policy node spends this time between an observation's arrival and its plan's publication, and virtual
time assumes the profile's ``compute_ms`` for it. A planner whose call takes longer than that arrives later live
than in training (``calf eval --backend ros`` reports the live figure as ``policy_compute_ms``). The base
policy's call, measured in the same rounds, is the baseline: ``planner / base`` is what planning costs on this
host. Rounds alternate base and planner calls, so load from other work falls on both; the figures are medians
over rounds of each round's median. With ``--feedback`` the planner is also timed with feedback plans (a
continuous base only). Without ``--policy`` it trains the parity test's CartPole planner first (about a minute).

    python bench/bench_planner_act.py [--policy DIR] [--network wifi_normal] [--rounds 7] [--calls 200] [--feedback]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from live_bench import parity_policy
from parity_recipes import train_parity_planner

from calf_agent.checkpoint import load_checkpoint
from calf_agent.plan_agent import PlanningAgent
from calf_agent.planner import with_feedback
from calf_core.profiles import load_profile


@contextmanager
def planner_dir(policy: Path | None) -> Iterator[Path]:
    """``policy`` if given, else the parity test's planner (H = 8 over its CartPole policy, fitted behind
    wifi_degraded on 20,000 transitions) in a temporary directory that lasts as long as the ``with``."""
    if policy is not None:
        yield policy
        return
    with parity_policy(None) as base, tempfile.TemporaryDirectory() as tmp:
        yield train_parity_planner(base, Path(tmp) / 'cartpole_planner')


def call_ms(act: Callable[[int], None], calls: int) -> list[float]:
    """Each of ``calls`` calls of ``act(k)``, in milliseconds."""
    times = []
    for k in range(calls):
        start = time.perf_counter()
        act(k)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def timed_calls(agent: PlanningAgent, obs: np.ndarray) -> dict[str, Callable[[int], None]]:
    """One ``act`` per key: the base policy's, and the planner's at tick ``2 k`` with the plan of four ticks
    before applied (so an adaptive lead has round trips to read), its plans kept between calls."""
    state = None

    def plan(k: int) -> None:
        nonlocal state
        _, state = agent.act(obs, state, deterministic=True, seq=[2 * k], applied_seq=[2 * k - 4])

    return {'base': lambda k: agent.base.act(obs, None, deterministic=True), 'planner': plan}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--policy', type=Path, help='a model planner checkpoint (default: the parity test\'s)')
    parser.add_argument('--network', default='wifi_normal', help='the profile whose compute_ms to compare with')
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--calls', type=int, default=200, help='calls of each kind per round')
    parser.add_argument('--feedback', action='store_true', help='also time the planner with feedback plans')
    args = parser.parse_args()
    torch.set_num_threads(1)
    assumed = load_profile(args.network).compute_ms
    with planner_dir(args.policy) as path, tempfile.TemporaryDirectory() as tmp:
        agent, _ = load_checkpoint(path)
        if not isinstance(agent, PlanningAgent):
            raise SystemExit(f'bench_planner_act: {path} is not a model planner checkpoint (calf train --planner model)')
        obs = np.random.default_rng(0).normal(0.0, 0.05, (1, agent.obs_dim)).astype(np.float32)
        calls = timed_calls(agent, obs)
        if args.feedback:
            feedback, _ = load_checkpoint(with_feedback(path, Path(tmp) / 'feedback'))
            calls['feedback planner'] = timed_calls(feedback, obs)['planner']
        rounds: dict[str, list[list[float]]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, act in calls.items():
                rounds[name].append(call_ms(act, args.calls))
    print(f'planner act bench: {path}, H = {agent.plan_horizon}, batch 1, 1 torch thread, {args.rounds} rounds '
          f'of {args.calls} calls each; medians over rounds')
    base_p50 = statistics.median(statistics.median(r) for r in rounds['base'])
    for name, per_round in rounds.items():
        p50 = statistics.median(statistics.median(r) for r in per_round)
        p95 = statistics.median(float(np.percentile(r, 95)) for r in per_round)
        print(f'  {name:17s} p50 {p50:7.3f} ms  p95 {p95:7.3f} ms  {p50 / base_p50:6.1f}x the base policy')
    print(f'  {args.network} assumes compute_ms {assumed:g}: a profile for this planner should state at least '
          'its p50 (calf eval --backend ros reports the live figure)')


if __name__ == '__main__':
    main()
