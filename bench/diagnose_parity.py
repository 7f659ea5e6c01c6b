"""Per-tick logs of one policy under one profile in both worlds: what each tick applied, and why.

Virtual time: ``NetworkedEnv`` (its ``tick_listener``) driven by ``PolicyRunner``, the policy node's
decisions without ROS. Live: ``calf eval --backend ros`` at time scale 1, with a listener in its domain
on the env's observations (each carries the obs_seq and element of the action applied at its tick), the
observations reaching the policy, and the actions it sends. Printed per world: returns, the share of
ticks held and the runs they come in (a stall's footprint: 100 ms held 5 ticks of 20 ms, or 4), the age of the
applied action (tick - the obs_seq it answered), decisions per tick; live, the env's start-to-start tick period,
the observations that reached the policy less than ``--burst-ms`` apart (a burst) with those it answered, and
where a round trip's time goes: from each observation's stamp (its tick) to DDS's receipt of it beyond the shim
(the policy's input), to the policy's answer (its Action's stamp) and to DDS's receipt of that answer beyond the
shim (the env's input), all on this machine's steady clock; virtual time spends uplink + compute_ms + downlink.

    python bench/diagnose_parity.py --policy DIR --network wifi_normal [--episodes 20] [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from calf_agent.checkpoint import load_checkpoint
from calf_agent.policy_runner import PolicyRunner
from calf_core.envs import make_networked_env
from calf_core.profiles import load_profile
from calf_core.timing import ReceivedObservation, applied_facts
from calf_ros.arrival import age_s
from calf_ros.scheduling import raise_priority


def sim_log(policy: Path, network: str, episodes: int, seed: int) -> dict:
    """Ticks ``(episode, tick, applied_obs_seq, applied_index)``, decisions ``(episode, obs_seq)`` and returns."""
    _, meta = load_checkpoint(policy)
    env = make_networked_env(meta['env'], load_profile(network), seed=seed, plan_horizon=int(meta.get('plan_horizon', 1)))
    runner = PolicyRunner.from_checkpoint(policy)
    ticks: list[tuple[int, int, int, int]] = []
    decisions: list[tuple[int, int]] = []
    env.tick_listener = lambda r: ticks.append((r.episode, r.seq, *applied_facts(r)))
    returns = []
    for index in range(episodes):
        obs, info = env.reset(seed=seed + index)
        episode, total, done = env.stepper.episode, 0.0, False
        while not done:
            plan = runner.on_observation(ReceivedObservation(episode, info['obs_seq'], obs,
                                                             applied_obs_seq=info['applied_obs_seq'],
                                                             applied_index=info['applied_index']))
            decisions.append((episode, info['obs_seq']))
            obs, reward, terminated, truncated, info = env.step(plan if len(plan) > 1 else plan[0])
            total += reward
            done = terminated or truncated
        returns.append(total)
    return {'ticks': ticks, 'decisions': decisions, 'returns': returns, 'arrivals': []}


def live_log(policy: Path, network: str, episodes: int, seed: int, domain: int) -> dict:
    """The same logs from the live graph, read off its topics (``arrivals``: (episode, seq, receive ns) at the
    policy's input); ``returns`` from ``calf eval``'s report."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from calf_msgs.msg import Action, Observation

    raise_priority()  # as the nodes do: at normal priority a busy host bunches this listener's receive times
    context = Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node('diagnose_parity', context=context)
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT)
    log: dict = {'ticks': [], 'decisions': [], 'arrivals': [], 'stamps': [], 'sent': {}, 'answered': {},
                 'applied': {}}

    def stamp_ns(m: Observation | Action) -> int:
        return m.header.stamp.sec * 10**9 + m.header.stamp.nanosec

    def received_ns(info: dict) -> int:  # when DDS received it, on the steady clock (the stamps' clock)
        return time.monotonic_ns() - int(age_s(info) * 1e9)

    def on_tick(m: Observation) -> None:
        log['ticks'].append((m.episode, m.seq, m.applied_obs_seq, m.applied_index))
        log['stamps'].append(stamp_ns(m))
        log['sent'][m.episode, m.seq] = stamp_ns(m)

    def on_decision(m: Action) -> None:
        log['decisions'].append((m.episode, m.obs_seq))
        log['answered'][m.episode, m.obs_seq] = stamp_ns(m)

    node.create_subscription(Observation, '/calf/edge/observation', on_tick, qos)
    node.create_subscription(Observation, '/calf/desktop/observation', lambda m, info: log['arrivals'].append(
        (m.episode, m.seq, received_ns(info))), qos)
    node.create_subscription(Action, '/calf/desktop/action', on_decision, qos)
    node.create_subscription(Action, '/calf/edge/action', lambda m, info: log['applied'].setdefault(
        (m.episode, m.obs_seq), received_ns(info)), qos)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    argv = [sys.executable, '-m', 'calf_bringup.cli', 'eval', '--policy', str(policy), '--network', network,
            '--backend', 'ros', '--episodes', str(episodes), '--seed', str(seed), '--time-scale', '1', '--json',
            '--domain-id', str(domain)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=os.environ)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    if done.returncode:
        sys.exit(f'calf eval --backend ros failed: {done.stderr[-2000:]}')
    log['returns'] = json.loads(done.stdout)['returns']
    log['stderr'] = done.stderr
    return log


def hops(log: dict, counted: set[int]) -> None:
    """p50 / p95 of each leg of the live round trip (ms), over the observations answered and applied."""
    reached = {(episode, seq): ns for episode, seq, ns in log['arrivals']}
    keys = [k for k in log['applied'] if k[0] in counted and k in log['sent'] and k in reached and k in log['answered']]
    if not keys:
        return
    legs = {'tick -> policy input (uplink)': [reached[k] - log['sent'][k] for k in keys],
            'policy input -> its answer (compute)': [log['answered'][k] - reached[k] for k in keys],
            'answer -> env input (downlink)': [log['applied'][k] - log['answered'][k] for k in keys],
            'tick -> env input (E2E)': [log['applied'][k] - log['sent'][k] for k in keys]}
    print(f'  where the round trip goes ({len(keys)} answers), ms p50 / p95: ' + '; '.join(
        f'{leg} {np.median(v) / 1e6:.2f} / {np.percentile(v, 95) / 1e6:.2f}' for leg, v in legs.items()))


def summary(name: str, log: dict, burst_ms: float) -> None:
    """Print what one world's ticks applied, over the episodes in which some action was applied (the first of
    those dropped: in the live graph it may be a warm-up one)."""
    driven = sorted({e for e, _, seq, _ in log['ticks'] if seq >= 0})
    counted = set(driven[1:]) if name == 'live' else set(driven)
    ticks = [t for t in log['ticks'] if t[0] in counted and t[1] > 0]
    held = sum(index < 0 for *_, index in ticks)
    ages = Counter(tick - seq for _, tick, seq, index in ticks if index >= 0)
    decisions = [d for d in log['decisions'] if d[0] in counted]
    print(f'{name}: returns mean {np.mean(log["returns"]):.1f} (sd {np.std(log["returns"]):.1f}, '
          f'n {len(log["returns"])}), ticks {len(ticks)}, held {held / max(len(ticks), 1):.1%}, '
          f'decisions per tick {len(decisions) / max(len(ticks), 1):.3f}')
    print('  returns, sorted: ' + ' '.join(f'{r:g}' for r in sorted(log['returns'])))
    total = sum(ages.values()) or 1
    runs, gaps, run, gap = Counter(), Counter(), 0, 0
    for _, tick, _, index in ticks:
        if index < 0 and tick > 1:
            if run == 0 and gap:
                gaps[gap] += 1
            run, gap = run + 1, 0
        else:
            if run:
                runs[run] += 1
            run, gap = 0, gap + 1
    print(f'  runs of held ticks (length: count): {dict(sorted(runs.items()))}; ticks between runs: '
          f'{dict(sorted(gaps.items()))}')
    print('  age of the applied action (ticks: share): ' +
          ', '.join(f'{age}: {n / total:.1%}' for age, n in sorted(ages.items())[:8]))
    if log.get('stamps'):
        periods = np.diff(np.asarray(log['stamps'], dtype=np.int64)) / 1e6
        missed = re.findall(r'(\d+) of (\d+) tick deadlines missed', log['stderr'])
        print(f'  tick start-to-start (ms): p50 {np.median(periods):.2f}, p99 {np.percentile(periods, 99):.2f}, '
              f'max {periods.max():.2f}; env node: {missed[-1][0] if missed else "?"} of '
              f'{missed[-1][1] if missed else "?"} deadlines missed')
    if log.get('applied'):
        hops(log, counted)
    if log['arrivals']:
        answered = defaultdict(set)
        for episode, seq in log['decisions']:
            answered[episode].add(seq)
        arrivals = sorted((a for a in log['arrivals'] if a[0] in counted), key=lambda a: a[2])
        bursts, burst = [], [arrivals[0]] if arrivals else []
        for previous, current in zip(arrivals, arrivals[1:]):
            if current[2] - previous[2] < burst_ms * 1e6 and current[0] == previous[0]:
                burst.append(current)
            else:
                if len(burst) > 1:
                    bursts.append(burst)
                burst = [current]
        took = Counter()
        for burst in bursts:
            hit = tuple(i for i, (episode, seq, _) in enumerate(burst) if seq in answered[episode])
            took['oldest' if hit == (0,) else 'newest' if hit == (len(burst) - 1,) else
                 'oldest and newest' if hit == (0, len(burst) - 1) else str(hit)] += 1
        gaps = [(b[-1][2] - b[0][2]) / 1e6 for b in bursts]
        print(f'  bursts at the policy (arrivals < {burst_ms:g} ms apart): {len(bursts)}, sizes '
              f'{dict(Counter(len(b) for b in bursts))}, spread p50 {np.median(gaps) if gaps else 0:.2f} ms; '
              f'answered: {dict(took)}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--policy', type=Path, required=True)
    parser.add_argument('--network', default='wifi_normal')
    parser.add_argument('--episodes', type=int, default=20)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--burst-ms', type=float, default=1.0)
    parser.add_argument('--world', choices=('both', 'sim', 'live'), default='both')
    args = parser.parse_args()
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    domain = int(os.environ.get('ROS_DOMAIN_ID', 1 + os.getpid() % 100))
    if args.world in ('both', 'sim'):
        summary('sim', sim_log(args.policy, args.network, args.episodes, args.seed), args.burst_ms)
    if args.world in ('both', 'live'):
        summary('live', live_log(args.policy, args.network, args.episodes, args.seed, domain), args.burst_ms)


if __name__ == '__main__':
    main()
