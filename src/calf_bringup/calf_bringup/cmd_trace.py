"""``calf trace``: network traces as rosbag2 bags: synthesise, record, import, inspect, recover, fit.

A trace bag is accepted wherever a profile name is (``--network path/to/bag``); it is replayed
from a seeded random offset in each episode (``calf_core.network.resolve_network``).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from calf_bringup.cli_args import MAX_SECONDS, number
from calf_core import atomic
from calf_core.bags import (
    Storage,
    import_bag,
    read_trace_bag,
    recover_bag,
    write_trace_bag,
)
from calf_core.network import resolve_network
from calf_core.profile_schema import MAX_DELAY_MS, MAX_PERIOD_MS, MIN_EVENT_MS
from calf_core.task_spec import MAX_DT_S, MIN_DT_S
from calf_core.traces import (
    STALL_MS,
    fit_profile_dict,
    plot_trace,
    replay_profile_dict,
    synth_trace,
    trace_stats,
)

STORAGES = [s.value for s in Storage]


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser('trace', help='network traces as rosbags: synth, record, import, info, recover, '
                                          'to-profile')
    verbs = parser.add_subparsers(dest='verb', required=True)

    synth = verbs.add_parser('synth', help='write a synthetic trace of a profile')
    synth.add_argument('--profile', required=True, help='profile name or YAML path')
    synth.add_argument('--duration', type=number(0.001, MAX_SECONDS), default=60.0, help='seconds of traffic')
    synth.add_argument('--dt', type=number(MIN_DT_S, MAX_DT_S), default=0.02, help='observation period (seconds)')
    synth.add_argument('--seed', type=int, default=0)
    _output(synth)
    synth.set_defaults(func=run_synth)

    info = verbs.add_parser('info', help='counts, latency percentiles, loss, loss bursts and stalls')
    info.add_argument('bag', type=Path)
    info.add_argument('--plot', type=Path, metavar='PNG', help='also plot latency over time and its CDF (into an '
                                                               'existing directory)')
    info.add_argument('--stall-ms', type=number(MIN_EVENT_MS, MAX_PERIOD_MS), default=STALL_MS,
                      help='delivery gap that counts as a stall')
    info.add_argument('--json', action='store_true', help='print one JSON object')
    info.set_defaults(func=run_info)

    record = verbs.add_parser('record', help='record the running graph (runs the trace_recorder node)')
    record.add_argument('--duration', type=number(0, MAX_SECONDS), default=0.0, help='seconds; 0 records until Ctrl-C')
    record.add_argument('--raw', action='store_true', help='also record the raw Observation and Action topics')
    record.add_argument('--loss-timeout', type=number(0.001, 3600), default=2.0,
                        help='seconds before a message counts lost')
    record.add_argument('--flush-period', type=number(0.01, 3600), default=1.0, help='seconds between bag flushes')
    record.add_argument('--namespace', default='/calf', help='namespace of the edge/* and desktop/* topics')
    _output(record)
    record.set_defaults(func=run_record)

    imp = verbs.add_parser('import', help='derive a trace from a bag of Observation and Action topics')
    imp.add_argument('bag', type=Path)
    imp.add_argument('--obs-topic', help='Observation topic logged on the policy side (default: */desktop/'
                                         'observation, else the only one)')
    imp.add_argument('--action-topic', help='Action topic logged on the env side (default: */edge/action, '
                                            'else the only one)')
    imp.add_argument('--sent-action-topic', help='Action topic logged on the policy side, to count lost actions '
                                                 'exactly (default: */desktop/action if present)')
    imp.add_argument('--min-delay-ms', type=number(0, MAX_DELAY_MS),
                     help='stamps and log times are different clocks: align each direction so its fastest message '
                          'took this long')
    _output(imp)
    imp.set_defaults(func=run_import)

    recover = verbs.add_parser('recover', help='copy the complete chunks of an unclosed (killed) bag')
    recover.add_argument('bag', type=Path)
    _output(recover)
    recover.set_defaults(func=run_recover)

    to_profile = verbs.add_parser('to-profile', help='write a network profile YAML from a trace')
    to_profile.add_argument('bag', type=Path)
    to_profile.add_argument('--out', type=Path, required=True, help='profile YAML to write')
    to_profile.add_argument('--name', help='profile name (default: the YAML file name)')
    to_profile.add_argument('--replay', action='store_true',
                            help='replay every recorded delay and loss (exact, large: written as one JSON object, '
                                 'which is also YAML) instead of fitting an empirical delay histogram and '
                                 'Gilbert-Elliott loss')
    to_profile.add_argument('--mode', choices=('random_offset', 'loop'), default='random_offset',
                            help='with --replay: where each episode starts in the trace')
    to_profile.set_defaults(func=run_to_profile)


def _output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--out', type=Path, required=True, help='bag directory to create')
    parser.add_argument('--storage', choices=STORAGES, default=Storage.MCAP.value)


def run_synth(args: argparse.Namespace) -> int:
    trace = synth_trace(resolve_network(args.profile), args.duration, args.dt, args.seed)
    count = write_trace_bag(args.out, trace, args.storage)
    print(json.dumps({'out': str(args.out), 'samples': count, 'profile': args.profile, 'seed': args.seed}))
    return 0


def run_info(args: argparse.Namespace) -> int:
    trace = read_trace_bag(args.bag)
    report = {'bag': str(args.bag), **trace_stats(trace, args.stall_ms)}
    if args.plot:
        plot_trace(trace, args.plot, title=args.bag.name)
        report['plot'] = str(args.plot)
    print(json.dumps(report) if args.json else _describe(report))
    return 0


def _describe(report: dict[str, Any]) -> str:
    lines = [f"{report['bag']}: {report['samples']} samples over {report['duration_s']:.1f} s"]
    for name in ('uplink', 'downlink'):
        d = report[name]
        latency = d['latency_ms']
        figures = (f"p50 {latency['p50']:.1f}  p95 {latency['p95']:.1f}  p99 {latency['p99']:.1f} ms"
                   if latency else 'nothing delivered')
        loss = f"{d['loss_rate']:.1%}" if d['loss_rate'] is not None else '-'
        bursts = ' '.join(f'{n}x{length}' for length, n in d['loss_bursts']['lengths'].items()) or 'none'
        stalls, threshold = d['stalls'], report['stall_threshold_ms']
        lines.append(f"  {name:<8} {d['messages']} messages, {figures}, lost {d['lost']} ({loss})")
        lines.append(f"           loss bursts (count x length): {bursts}; "
                     f"stalls > {threshold:g} ms: {stalls['count']} (longest {stalls['max_ms']:.0f} ms)")
    if 'plot' in report:
        lines.append(f"  plot: {report['plot']}")
    return '\n'.join(lines)


def run_record(args: argparse.Namespace) -> int:
    from calf_shim import trace_recorder_node  # imports rclpy: only when recording

    params = {'out': str(args.out), 'storage': args.storage, 'raw': str(args.raw).lower(),
              'duration_s': float(args.duration), 'loss_timeout_s': float(args.loss_timeout),
              'flush_period_s': float(args.flush_period)}
    ros_args = ['calf-trace-record', '--ros-args', '-r', f'__ns:={args.namespace}']
    for name, value in params.items():
        ros_args += ['-p', f'{name}:={value}']
    return trace_recorder_node.main(ros_args)


def run_import(args: argparse.Namespace) -> int:
    trace = import_bag(args.bag, args.obs_topic, args.action_topic, args.sent_action_topic, args.min_delay_ms)
    count = write_trace_bag(args.out, trace, args.storage)
    print(json.dumps({'out': str(args.out), 'samples': count, 'uplink': len(trace.uplink),
                      'downlink': len(trace.downlink)}))
    return 0


def run_recover(args: argparse.Namespace) -> int:
    counts = recover_bag(args.bag, args.out, args.storage)
    print(json.dumps({'out': str(args.out), 'messages': counts}))
    return 0


def run_to_profile(args: argparse.Namespace) -> int:
    name = args.name or args.out.stem
    trace = read_trace_bag(args.bag)
    if args.replay:  # JSON, the series compact: a long replay loads in seconds (see calf profile schema)
        text = json.dumps(replay_profile_dict(trace, name, args.mode)) + '\n'
    else:
        header = f'# Network profile (schema: calf profile schema) made by `calf trace to-profile` from {args.bag}.\n'
        text = header + yaml.safe_dump(fit_profile_dict(trace, name), sort_keys=False, default_flow_style=None)
    atomic.write_text(args.out, text)
    print(json.dumps({'out': str(args.out), 'name': name, 'replay': args.replay}))
    return 0
