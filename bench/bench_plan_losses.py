"""Plan-learning variants on CartPole (issue 11): train one under a profile, evaluate on three links.

Variants (``--variant``):

- ``naive``: H independent heads, PPO loss on every element (the issue's baseline);
- ``masked``: independent heads, loss only on the elements the env executed (``info['executed']``);
- ``time``: masked loss with one time-conditioned head π(a | obs, j).

``--network`` trains under another profile or a profile YAML (default full_net_aware), e.g.
``bench/randomised_delay.yaml`` for randomised training delays. Prints one JSON line: the variant, the final windowed training return and the mean evaluation
return (deterministic actions) on sim_clean, wifi_normal and wifi_degraded.

    python bench/bench_plan_losses.py --variant masked [--horizon 16] [--seed 0] [--steps 200000] [--episodes 20]
        [--network full_net_aware]
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from calf_agent.evaluate import evaluate_sim
from calf_agent.regimes import train_policy
from calf_core.profiles import load_profile

VARIANTS = {'naive': (False, 'independent'), 'masked': (True, 'independent'), 'time': (True, 'time')}
PROFILES = ('sim_clean', 'wifi_normal', 'wifi_degraded')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--variant', choices=sorted(VARIANTS), default='masked')
    parser.add_argument('--horizon', type=int, default=16)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--steps', type=int, default=200_000)
    parser.add_argument('--episodes', type=int, default=20)
    parser.add_argument('--network', default='full_net_aware', help='training profile name or YAML path')
    args = parser.parse_args()
    mask, head = VARIANTS[args.variant]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        result = train_policy('cartpole', args.network, args.seed, out, steps=args.steps,
                              plan_horizon=args.horizon, progress=False, mask_unexecuted=mask, plan_head=head)
        evals = {name: round(evaluate_sim(out, load_profile(name), args.episodes, seed=10_000 + args.seed)
                             ['mean_return'], 1) for name in PROFILES}
    print(json.dumps({'variant': args.variant, 'network': args.network, 'horizon': args.horizon, 'seed': args.seed, 'steps': args.steps,
                      'episodes': args.episodes, 'train_return': round(result.mean_return, 1), **evals}))


if __name__ == '__main__':
    main()
