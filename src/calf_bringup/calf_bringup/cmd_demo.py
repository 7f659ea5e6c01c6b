"""``calf demo``: the main job, network-aware training and deployment on one machine.

Trains (or reuses) a baseline and a full-regime CartPole policy, and a model planner (plans of 16
actions) over the baseline. Evaluates each on a clean link in virtual time, then deploys each
through the live Mode 2 graph (env node, shim node, policy node over DDS) under ``wifi_degraded``
and prints one table.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from calf_agent.evaluate import evaluate_sim
from calf_agent.planner import SINGLE_MODEL, train_planner
from calf_agent.regimes import regime_profile, train_policy
from calf_bringup.cli_args import MAX_EPISODES, count
from calf_bringup.ros_eval import evaluate_ros
from calf_core.atomic import check_out_parent
from calf_core.network import resolve_network

DEMO_REGIMES = {'baseline': 60_000, 'full': 160_000}
"""Regime -> PPO steps: enough for a clean 500 and a clearly network-aware policy."""
PLANS = 'plans'  # the model planner over the baseline policy, for the full regime's network
PLAN_HORIZON = 16


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('demo', help='train baseline and network-aware CartPole and deploy both over DDS')
    parser.add_argument('--out', type=Path, default=Path('demo_out'), help='where the policies are kept')
    parser.add_argument('--network', default='wifi_degraded', help='deployment profile for the live graph')
    parser.add_argument('--episodes', type=count(1, MAX_EPISODES), default=5, help='live-graph episodes per policy')
    parser.add_argument('--retrain', action='store_true', help='train again even if policies exist')
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_out_parent(args.out, 'demo directory')  # the trainings create it
    rows = []
    for regime in (*DEMO_REGIMES, PLANS):
        policy = args.out / regime
        if args.retrain or not (policy / 'meta.json').is_file():
            train(regime, args.out)
        else:
            print(f'[demo] reusing {policy} (pass --retrain to train again)')
        print(f'[demo] {regime}: sim_clean and {args.network} in virtual time, 50 episodes each')
        clean = evaluate_sim(policy, resolve_network('sim_clean'), episodes=50, seed=100)
        sim = evaluate_sim(policy, resolve_network(args.network), episodes=50, seed=100)
        print(f'[demo] {regime}: {args.network} through the live graph over DDS, {args.episodes} episodes')
        live = evaluate_ros(policy, args.network, episodes=args.episodes, seed=100, time_scale=1.0)
        rows.append((regime, clean, sim, live))
    print_table(rows, args.network)
    return 0


def train(regime: str, out: Path) -> None:
    """Train the demo's ``regime`` policy (or the planner over the baseline) into ``out / regime``."""
    if regime == PLANS:
        print(f'[demo] fitting a dynamics model for plans of {PLAN_HORIZON} actions over the baseline policy')
        train_planner(out / 'baseline', out / PLANS, regime_profile('full'), PLAN_HORIZON, seed=0,
                      cfg=SINGLE_MODEL)  # CartPole's dynamics need no ensemble: minutes less
        return
    steps = DEMO_REGIMES[regime]
    print(f'[demo] training the {regime} policy under {regime_profile(regime)} ({steps} steps)')
    train_policy('cartpole', regime_profile(regime), seed=0, out_dir=out / regime, steps=steps, regime=regime)


def print_table(rows: list[tuple[str, dict, dict, dict]], network: str) -> None:
    header = (f'{"policy":<10}{"sim_clean":>14}{network + " (sim)":>24}{network + " (live DDS)":>28}'
              f'{"live E2E p50/p95 ms":>24}')
    print('\n' + header + '\n' + '-' * len(header))
    for regime, clean, sim, live in rows:
        e2e = live['e2e_latency_ms']
        print(f'{regime:<10}{_cell(clean):>14}{_cell(sim):>24}{_cell(live):>28}'
              f'{_num(e2e["p50"]) + " / " + _num(e2e["p95"]):>24}')
    print('\nReturns are mean ± std of CartPole episode return (max 500); E2E latency is measured on the env side.')


def _cell(report: dict) -> str:
    return f'{report["mean_return"]:.0f} ± {report["std_return"]:.0f}'


def _num(value: float | None) -> str:
    return '-' if value is None else f'{value:.1f}'
