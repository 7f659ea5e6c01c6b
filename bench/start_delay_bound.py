"""What a delay costs at the start of an episode alone: a clean-link policy whose first ``d`` ticks apply zero
(hold zero, as before a first answer arrives), then act with no delay at all.

Behind a constant delay of ``k`` ticks the first answer applies ``k`` ticks later than on a clean link, so even a
perfect predictor loses the ticks before it; this prints that loss for each ``d``, as a bound on what any row of a
``robots`` table can keep there. Episodes are seeded ``10,000 + 100 * i + episode`` for the i-th policy.

    python bench/start_delay_bound.py --policies $CACHE/robots/cache/train/Reacher-v5-sim_clean-h1-sac-100000steps-seed{0,1,2} \
        --delays 0 2 5 10 --episodes 20
"""
from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
import numpy as np

from calf_agent.checkpoint import load_checkpoint


def late_start_return(policy: Path, delay: int, episodes: int, seed: int) -> float:
    """Mean return of ``policy`` on its bare env when its first ``delay`` ticks apply zero torque."""
    agent, meta = load_checkpoint(policy)
    env = gym.make(meta['env'])
    if not isinstance(env.action_space, gym.spaces.Box):
        raise SystemExit(f'{policy}: a start delay holds zero torque, so it needs a Box action space')
    zero = np.zeros(env.action_space.shape, env.action_space.dtype)
    totals = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done, tick = 0.0, False, 0
        while not done:
            action = zero if tick < delay else agent.act(obs, deterministic=True)[0].reshape(zero.shape)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done, tick = total + float(reward), terminated or truncated, tick + 1
        totals.append(total)
    return float(np.mean(totals))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--policies', type=Path, nargs='+', required=True, help='clean-link checkpoints (one per seed)')
    parser.add_argument('--delays', type=int, nargs='+', default=[0, 2, 5, 10])
    parser.add_argument('--episodes', type=int, default=20)
    args = parser.parse_args()
    means = np.array([[late_start_return(p, d, args.episodes, 10_000 + 100 * i) for d in args.delays]
                      for i, p in enumerate(args.policies)])
    print('| first action late by | mean return per policy | mean | change from no delay |')
    print('|---|---|---|---|')
    base = means[:, 0].mean()
    for j, delay in enumerate(args.delays):
        change = 100 * (means[:, j].mean() - base) / abs(base)
        print(f'| {delay} ticks | {" / ".join(f"{m:.2f}" for m in means[:, j])} | {means[:, j].mean():.2f} '
              f'| {change:+.0f} % |')


if __name__ == '__main__':
    main()
