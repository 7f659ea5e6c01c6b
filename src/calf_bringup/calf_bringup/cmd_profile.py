"""``calf profile show|list|schema``: inspect network profiles and the profile schema."""
from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from calf_bringup.cli_args import count, number
from calf_core.network import resolve_network
from calf_core.profile_schema import STAGES, check_stage, json_schema, schema_text
from calf_core.profiles import E2EStats, Latency, Profile, available_profiles, sample_e2e
from calf_core.task_spec import MAX_DT_S, MIN_DT_S

E2E_DEFINITIONS = {
    'all_messages': 'every observation answered by an action compute_ms after it arrives: '
                    'action arrival - observation stamp, over every delivered round trip',
    'acted_on': 'as a CALF policy acts (only on observations newer than the last one it acted on, keeping the '
                'newest while computing): action arrival - observation stamp, over the actions that reach the '
                'env; the figure calf eval reports. Overtaken (slow) observations drop out, so it can run lower',
}
LINK_RULE = ('one continuous process: stalls, Gilbert-Elliott state, bandwidth queues and trace positions run on '
             'across episodes, started at a random phase')


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('profile', help='inspect network profiles')
    verbs = parser.add_subparsers(dest='verb', required=True)
    show = verbs.add_parser('show', help='a profile\'s stages with every default, and its sampled E2E latency '
                                         'and loss')
    show.add_argument('name', help=f'profile name ({", ".join(available_profiles())}) or YAML path')
    show.add_argument('--samples', type=count(1, 10_000_000), default=100_000, help='round trips to sample')
    show.add_argument('--seed', type=int, default=0)
    show.add_argument('--dt', type=number(MIN_DT_S, MAX_DT_S), default=0.02, help='spacing of observations (seconds)')
    show.add_argument('--json', action='store_true', help='machine-readable output')
    show.set_defaults(func=run)
    verbs.add_parser('list', help='list the bundled profiles').set_defaults(
        func=lambda args: print('\n'.join(available_profiles())))
    schema = verbs.add_parser('schema', help='every profile key and stage, with unit, default and bounds')
    schema.add_argument('--json', action='store_true', help='as a JSON Schema document')
    schema.set_defaults(func=lambda args: print(json.dumps(json_schema(), indent=1) if args.json else schema_text()))


def profile_report(profile: Profile) -> dict[str, Any]:
    """The profile as loaded: top-level values (and which are defaults), every stage with its defaults."""
    return {'network': profile.name, 'compute_ms': profile.compute_ms, 'reorder': profile.reorder._asdict(),
            'defaults_used': list(profile.defaults), 'link_state': LINK_RULE,
            'uplink': [_stage(spec) for spec in profile.uplink],
            'downlink': [_stage(spec) for spec in profile.downlink],
            **({'shared': [_stage(spec) for spec in profile.shared]} if profile.shared else {})}


def e2e_report(stats: E2EStats) -> dict[str, Any]:
    """Both E2E latency figures of a sampled profile, each with its definition."""
    def figures(latency: Latency, key: str) -> dict[str, Any]:
        return {'p50': latency.p50_ms, 'p95': latency.p95_ms, 'mean': latency.mean_ms, 'samples': latency.n,
                'definition': E2E_DEFINITIONS[key]}
    return {'all_messages': figures(stats.all_messages, 'all_messages'),
            'acted_on': figures(stats.acted_on, 'acted_on')}


def _stage(spec: dict) -> dict[str, Any]:
    """A stage's values with its defaults filled in and named; long lists (traces) as their length."""
    values = {k: _listed(v) for k, v in check_stage(spec).items()}
    return {'model': spec['model'], **values, 'defaults_used': [k for k in values if k not in spec],
            'about': STAGES[spec['model']].doc}


def _listed(value: Any) -> Any:
    """A list or array of up to 6 values as a list, a longer one as its length."""
    if isinstance(value, list | np.ndarray) and len(value) > 6:
        return f'<{len(value)} values>'
    return value.tolist() if isinstance(value, np.ndarray) else value


def run(args: argparse.Namespace) -> int:
    profile = resolve_network(args.name)
    stats = sample_e2e(profile, n=args.samples, seed=args.seed, dt_s=args.dt)
    report = {**profile_report(profile), 'samples': stats.n, 'e2e_latency_ms': e2e_report(stats),
              'obs_loss': stats.obs_loss, 'action_loss': stats.action_loss,
              'round_trip_loss': stats.round_trip_loss}
    if args.json:
        print(json.dumps(report))
        return 0
    defaults = set(profile.defaults)
    mark = lambda key: ' (default)' if key in defaults else ''  # noqa: E731
    print(f'{profile.name}: {profile.description}')
    print(f'  compute_ms {profile.compute_ms:g}{mark("compute_ms")}   reorder uplink '
          f'{str(profile.reorder.uplink).lower()}, downlink {str(profile.reorder.downlink).lower()}'
          f'{mark("reorder")} (false = FIFO)')
    for direction in ('uplink', 'downlink', 'shared'):
        if direction not in report:
            continue
        stages = report[direction]
        print(f'  {direction}:' + ('' if stages else ' ideal (no stages)')
              + (' (one process, met by both directions after their own stages)' if direction == 'shared' else ''))
        for stage in stages:
            defaulted = set(stage['defaults_used'])
            values = [f'{k}: {_text(v)}{" (default)" if k in defaulted else ""}' for k, v in stage.items()
                      if k not in ('defaults_used', 'about')]
            print(f'    {", ".join(values)}\n      ({stage["about"]})')
    print(f'  link state: {LINK_RULE}')
    for key, label in (('all_messages', 'all messages'), ('acted_on', 'acted-on obs')):
        e2e = report['e2e_latency_ms'][key]
        print(f'  E2E {label:<13} p50 {e2e["p50"]:.1f} ms   p95 {e2e["p95"]:.1f} ms   mean {e2e["mean"]:.1f} ms'
              f'   ({e2e["samples"]} round trips)')
        print(f'      {e2e["definition"]}')
    print(f'  loss         obs {stats.obs_loss:.1%}   action {stats.action_loss:.1%}   '
          f'round trip {stats.round_trip_loss:.1%}   ({stats.n} observations sent)')
    return 0


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return '{' + ', '.join(f'{k}: {_text(v)}' for k, v in value.items()) + '}'
    return str(value)
