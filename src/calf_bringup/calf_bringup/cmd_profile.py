"""``calf profile show NAME``: sample a network profile's end-to-end latency and loss."""
from __future__ import annotations

import argparse
import json

from calf_core.profiles import available_profiles, load_profile, sample_e2e


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('profile', help='inspect network profiles')
    verbs = parser.add_subparsers(dest='verb', required=True)
    show = verbs.add_parser('show', help='sample a profile: E2E p50/p95/mean latency and loss')
    show.add_argument('name', help=f'profile name ({", ".join(available_profiles())}) or YAML path')
    show.add_argument('--samples', type=int, default=100_000, help='round trips to sample')
    show.add_argument('--seed', type=int, default=0)
    show.add_argument('--dt', type=float, default=0.02, help='spacing of observations (seconds)')
    show.add_argument('--json', action='store_true', help='machine-readable output')
    show.set_defaults(func=run)
    verbs.add_parser('list', help='list the bundled profiles').set_defaults(
        func=lambda args: print('\n'.join(available_profiles())))


def run(args: argparse.Namespace) -> int:
    profile = load_profile(args.name)
    stats = sample_e2e(profile, n=args.samples, seed=args.seed, dt_s=args.dt)
    report = {'network': profile.name, 'samples': stats.n, 'compute_ms': profile.compute_ms,
              'e2e_latency_ms': {'p50': stats.p50_ms, 'p95': stats.p95_ms, 'mean': stats.mean_ms},
              'obs_loss': stats.obs_loss, 'action_loss': stats.action_loss,
              'round_trip_loss': stats.round_trip_loss}
    if args.json:
        print(json.dumps(report))
    else:
        print(f'{profile.name}: {profile.description}')
        print(f'  E2E latency  p50 {stats.p50_ms:.1f} ms   p95 {stats.p95_ms:.1f} ms   mean {stats.mean_ms:.1f} ms')
        print(f'  loss         obs {stats.obs_loss:.1%}   action {stats.action_loss:.1%}   '
              f'round trip {stats.round_trip_loss:.1%}   ({stats.n} samples)')
    return 0
