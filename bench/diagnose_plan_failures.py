"""Why a plan policy's CartPole episodes end early: start transients, plans running out, or neither.

Runs a checkpoint in NetworkedEnv and, for every episode that ends before the time limit, reports
its length, the tick at which the first plan ran, how many of its last 15 ticks ran no plan element
(the start plan, or a hold after a plan ran out), and the longest such stretch. For comparison it
reports the share of such ticks after the first plan over all episodes. Episodes where plan
elements ran on every late tick failed through the plans' content: errors in the predicted states,
or a plan that answered an observation too old.

    python bench/diagnose_plan_failures.py --policy results/plans_run/cache/train/KEY --network wifi_degraded
"""
from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from calf_agent.checkpoint import load_checkpoint
from calf_core.envs import make_networked_env
from calf_core.network import resolve_network
from calf_core.timing import AppliedAction

WINDOW = 15


def run_episode(agent: Any, meta: dict, network: str, seed: int) -> list[AppliedAction]:
    """Play one episode; return the action applied on every tick."""
    env = make_networked_env(meta['env'], resolve_network(network), seed=seed,
                             plan_horizon=int(meta.get('plan_horizon', 1)),
                             start_plan=tuple(meta.get('start_plan', ())))
    applied: list[AppliedAction] = []
    tick = env.stepper.tick

    def recording_tick(now_s: float) -> Any:
        record = tick(now_s)
        applied.append(record.applied)
        return record

    env.stepper.tick = recording_tick  # type: ignore[method-assign]
    obs, info = env.reset(seed=seed)
    state, done = None, False
    while not done:
        plan, state = agent.act(obs, state, deterministic=True, seq=[info['obs_seq']])
        obs, _, terminated, truncated, info = env.step(plan[0])
        done = terminated or truncated
    return applied


def longest_run(flags: list[bool]) -> int:
    best = current = 0
    for flag in flags:
        current = current + 1 if flag else 0
        best = max(best, current)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--policy', required=True)
    parser.add_argument('--network', default='wifi_degraded')
    parser.add_argument('--episodes', type=int, default=100)
    parser.add_argument('--seed', type=int, default=20_000)
    args = parser.parse_args()
    agent, meta = load_checkpoint(args.policy)
    lengths, failures, after_first = [], [], []
    for episode in range(args.episodes):
        applied = run_episode(agent, meta, args.network, args.seed + episode)
        lengths.append(len(applied))
        unplanned = [a.index < 0 for a in applied]
        first = next((k + 1 for k, a in enumerate(applied) if a.index >= 0), None)
        after_first += unplanned[first or len(applied):]
        if len(applied) >= 500:
            continue
        failures.append({'length': len(applied), 'first_plan_tick': first,
                         f'unplanned_in_last_{WINDOW}': int(sum(unplanned[-WINDOW:])),
                         'longest_unplanned': longest_run(unplanned)})
    print(json.dumps({'policy': args.policy, 'network': args.network, 'episodes': args.episodes,
                      'mean_return': float(np.mean(lengths)),
                      'unplanned_share_after_first_plan': float(np.mean(after_first)) if after_first else 0.0,
                      'failures': failures}, indent=1))


if __name__ == '__main__':
    main()
