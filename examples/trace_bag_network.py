"""A recorded trace bag as the network: the env replays the delays and losses measured on a real link.

    python examples/trace_bag_network.py results/traces/wifi_degraded_live --env Pendulum-v1

Runs a simple damping controller for a few episodes and prints the end-to-end latency the env side
measured (the trace's delays plus the policy's compute time) and the messages the trace lost.
"""
from __future__ import annotations

import argparse
import json

import gymnasium as gym
import numpy as np

import calf_core


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('bag', help='a trace bag directory or .mcap file (calf trace record / the generic shim)')
    parser.add_argument('--env', default='Pendulum-v1')
    parser.add_argument('--episodes', type=int, default=3)
    args = parser.parse_args(argv)
    env = calf_core.wrap(gym.make(args.env), network=args.bag, seed=0)
    e2e_ms, lost, returns = [], 0, []
    for episode in range(args.episodes):
        obs, _ = env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            torque = np.clip([-2.0 * obs[2]], -2.0, 2.0).astype(np.float32)  # damp the angular velocity
            obs, reward, terminated, truncated, info = env.step(torque)
            total, done = total + float(reward), terminated or truncated
            e2e_ms.extend(info['e2e_ms'])
        lost += info['obs_lost'] + info['actions_lost']
        returns.append(total)
    result = {'episodes': args.episodes, 'mean_return': float(np.mean(returns)), 'e2e_samples': len(e2e_ms),
              'e2e_p50_ms': float(np.percentile(e2e_ms, 50)), 'e2e_p95_ms': float(np.percentile(e2e_ms, 95)),
              'messages_lost': int(lost)}
    print(json.dumps(result))
    return result


if __name__ == '__main__':
    main()
