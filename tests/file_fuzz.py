"""File fuzz: randomised profiles, relay configs, checkpoint ``meta.json`` files and trace bags.

Each case is a file (or directory) built from a seeded ``np.random.Generator``: a valid document
with one part replaced, a random tree using the schema's own keys, or text-level damage (alias
bombs, deep nesting, binary garbage, truncation, an oversized file). ``run_case`` feeds it to
the loader the ``calf`` command uses and classifies the result: ``ok`` (loaded), ``refused`` (a
one-line CalfError, exit 2 from the CLI) or ``crash`` (anything else, or an error spanning lines).

    python tests/file_fuzz.py --cases 2000 --seed 0     # the long mode (bench/)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml

from calf_core.errors import CalfError
from calf_core.profile_schema import MAX_REPLAY_VALUES

KINDS = ('profile', 'relay', 'meta', 'bag')
PROFILE = {'name': 'fuzz', 'description': 'fuzzed', 'compute_ms': 1.0, 'reorder': False,
           'uplink': [{'model': 'pareto_delay', 'scale_ms': 30.0, 'shape': 4.0},
                      {'model': 'stall', 'mode': 'random', 'period_ms': 4000.0, 'duration_ms': 120.0},
                      {'model': 'gilbert_elliott', 'p_good_to_bad': 0.02, 'p_bad_to_good': 0.2,
                       'loss_good': 0.01, 'loss_bad': 0.6}],
           'downlink': 'same'}
RELAY = [{'in_topic': '/cmd_vel_raw', 'out_topic': '/cmd_vel', 'type': 'geometry_msgs/msg/Twist',
          'direction': 'downlink', 'profile': 'wifi_normal',
          'qos': {'reliability': 'reliable', 'durability': 'volatile', 'depth': 10}}]
META = {'env': 'cartpole', 'regime': 'full', 'representation': {'frames': 1, 'actions': 0}, 'plan_horizon': 1,
        'seed': 0, 'steps': 100, 'start_plan': [0],
        'agent': {'kind': 'mlp', 'obs_dim': 4, 'n_actions': 2, 'hidden': [8], 'plan_horizon': 1}}
SCHEMA_KEYS = sorted({'name', 'model', 'scale_ms', 'shape', 'mean_ms', 'std_ms', 'p', 'loss', 'rate_kbps',
                      'uplink', 'downlink', 'same', 'in_topic', 'out_topic', 'type', 'direction', 'profile',
                      'qos', 'depth', 'env', 'agent', 'kind', 'obs_dim', 'hidden', 'frames', 'representation',
                      'plan_horizon', 'lstm_size', 'format', 'start_plan', 'latency_ms', 'period_ms'})
WEIRD: list[Any] = [None, True, -1, 0, 2 ** 31, 2 ** 64, 10 ** 300, -10 ** 40, 1e308, -1e-300, 1e-300, 5e-324,
                    float('inf'), float('nan'), '', 'x' * 5000, '../../etc/passwd', '\u202e\x7f', [], {}, [[[[[]]]]],
                    {'a': {'b': {'c': {}}}}, list(range(50)), 'same', 'wifi_normal', 1e11, '1 2 nan', '0110']


class Outcome(NamedTuple):
    """What one case did."""

    kind: str
    result: str  # ok | refused | crash
    message: str
    seconds: float


# --- documents --------------------------------------------------------------------------------

def random_tree(rng: np.random.Generator, depth: int = 0) -> Any:
    """A random YAML/JSON value, keys drawn from the schemas' own names."""
    roll = rng.random()
    if depth > 5 or roll < 0.4:
        return WEIRD[int(rng.integers(len(WEIRD)))] if rng.random() < 0.5 else float(rng.normal() * 10 ** rng.integers(0, 14))
    if roll < 0.7:
        return [random_tree(rng, depth + 1) for _ in range(int(rng.integers(0, 5)))]
    return {SCHEMA_KEYS[int(rng.integers(len(SCHEMA_KEYS)))]: random_tree(rng, depth + 1)
            for _ in range(int(rng.integers(0, 6)))}


def mutate(doc: Any, rng: np.random.Generator) -> Any:
    """``doc`` with one randomly chosen part replaced, removed, or wrapped."""
    if isinstance(doc, dict) and doc and rng.random() < 0.85:
        key = list(doc)[int(rng.integers(len(doc)))]
        out = dict(doc)
        action = rng.random()
        if action < 0.15:
            del out[key]
        elif action < 0.6:
            out[key] = mutate(doc[key], rng)
        else:
            out[key] = WEIRD[int(rng.integers(len(WEIRD)))] if rng.random() < 0.7 else random_tree(rng)
        return out
    if isinstance(doc, list) and doc and rng.random() < 0.85:
        out = list(doc)
        i = int(rng.integers(len(out)))
        out[i] = mutate(out[i], rng)
        return out
    return WEIRD[int(rng.integers(len(WEIRD)))] if rng.random() < 0.6 else random_tree(rng)


def damaged_text(rng: np.random.Generator, valid: str) -> str:
    """Text-level damage: alias bombs, deep nesting, garbage, truncation, duplicate or odd syntax."""
    choice = int(rng.integers(7))
    if choice == 0:
        levels, width = int(rng.integers(4, 12)), int(rng.integers(4, 12))
        lines, prev = ['a0: &a0 [' + ','.join(['"lol"'] * width) + ']'], 'a0'
        for i in range(1, levels):
            lines.append(f'a{i}: &a{i} [' + ','.join([f'*{prev}'] * width) + ']')
            prev = f'a{i}'
        return '\n'.join(lines) + '\n'
    if choice == 1:
        n = int(rng.integers(30, 20000))
        return '[' * n + ']' * n if rng.random() < 0.5 else '{"a":' * n + '1' + '}' * n
    if choice == 2:
        return rng.bytes(int(rng.integers(1, 4000))).decode('latin-1')
    if choice == 3:
        return valid[:int(rng.integers(0, max(1, len(valid))))]
    if choice == 4:
        return valid.replace(':', ': &x', 1) + '\nextra: *x\n' + '\t' * int(rng.integers(3))
    if choice == 5:
        return '!!python/object/apply:os.system ["true"]\n' if rng.random() < 0.5 else '? [1, 2]\n: 3\n'
    return valid + 'x: ' + '9' * int(rng.integers(10, 6000)) + '\n'


def _yaml_text(rng: np.random.Generator, valid: Any) -> str:
    """A fuzzed YAML document: mutated structure, a random tree, or damaged text."""
    roll = rng.random()
    if roll < 0.55:
        return yaml.safe_dump(mutate(valid, rng), allow_unicode=True)
    if roll < 0.7:
        return yaml.safe_dump(random_tree(rng), allow_unicode=True)
    return damaged_text(rng, yaml.safe_dump(valid))


def _json_text(rng: np.random.Generator) -> str:
    """A fuzzed meta.json."""
    roll = rng.random()
    if roll < 0.6:
        return json.dumps(mutate({**META, 'format': 1}, rng))
    if roll < 0.7:
        return json.dumps(random_tree(rng))
    return damaged_text(rng, json.dumps({**META, 'format': 1}))


# --- cases ------------------------------------------------------------------------------------

SECRET = 'hunter2'
"""The content of the file ``hostile_profiles`` links to: no refusal may quote it."""


def hostile_profiles(root: Path) -> dict[str, Path]:
    """Profile paths found by hand (issue #28), each to be refused at once in one line that quotes no file:
    a FIFO, a symlink to another file, times below their floor, a replay past its record cap."""
    root.mkdir(parents=True, exist_ok=True)
    cases = {'fifo': root / 'fifo.yaml', 'symlink': root / 'link.yaml', 'tiny stall': root / 'stall.yaml',
             'tiny hold': root / 'hold.yaml', 'long replay': root / 'replay.yaml'}
    os.mkfifo(cases['fifo'])
    (root / 'secret.txt').write_text(f'{SECRET}\n')
    cases['symlink'].symlink_to(root / 'secret.txt')
    cases['tiny stall'].write_text('uplink: [{model: stall, duration_ms: 1.0e-300, gap_ms: 1.0e-300}]\n'
                                   'downlink: same\n')
    cases['tiny hold'].write_text('uplink: [{model: drifting_delay, level_ms: 5, hold_ms: 1.0e-300}]\n'
                                  'downlink: same\n')
    stage = {'model': 'trace_replay', 'delays_ms': '1 ' * (MAX_REPLAY_VALUES + 1)}
    cases['long replay'].write_text(json.dumps({'uplink': [stage], 'downlink': 'same'}))
    return cases


def make_case(kind: str, rng: np.random.Generator, root: Path) -> Path:
    """Write one fuzzed case of ``kind`` under ``root``; return the path the loader gets."""
    root.mkdir(parents=True, exist_ok=True)
    if kind == 'profile':
        path = root / 'fuzz.yaml'
        path.write_text(_yaml_text(rng, PROFILE), encoding='utf-8', errors='surrogatepass')
    elif kind == 'relay':
        path = root / 'relay.yaml'
        path.write_text(_yaml_text(rng, RELAY), encoding='utf-8', errors='surrogatepass')
    elif kind == 'meta':
        path = root / 'ckpt'
        _valid_checkpoint(path)
        (path / 'meta.json').write_text(_json_text(rng), encoding='utf-8', errors='surrogatepass')
    else:
        path = root / 'bag'
        _damaged_bag(path, rng)
    return path


def _valid_checkpoint(path: Path) -> None:
    from calf_agent.agents import make_agent
    from calf_agent.checkpoint import save_checkpoint
    save_checkpoint(path, make_agent(META['agent']), {k: v for k, v in META.items() if k != 'agent'})


def _damaged_bag(path: Path, rng: np.random.Generator) -> None:
    """A small synthetic trace bag with one kind of damage to its files."""
    from calf_core.bags import write_trace_bag
    from calf_core.profiles import load_profile
    from calf_core.traces import synth_trace
    write_trace_bag(path, synth_trace(load_profile('wifi_normal'), 0.5, 0.02, int(rng.integers(1 << 30))),
                    'mcap' if rng.random() < 0.5 else 'sqlite3')
    files = sorted(p for p in path.iterdir() if p.is_file())
    target = files[int(rng.integers(len(files)))]
    data = bytearray(target.read_bytes())
    choice = int(rng.integers(5))
    if choice == 0 and data:
        data = data[:int(rng.integers(len(data)))]
    elif choice == 1 and data:
        for i in rng.integers(0, len(data), int(rng.integers(1, 50))):
            data[i] = int(rng.integers(256))
    elif choice == 2:
        target.unlink()
        return
    elif choice == 3 and target.name == 'metadata.yaml':
        data = bytearray(_yaml_text(rng, yaml.safe_load(data.decode())).encode('utf-8', 'surrogatepass'))
    else:
        data = bytearray(rng.bytes(int(rng.integers(0, 3000))))
    target.write_bytes(bytes(data))


def loaders() -> dict[str, Callable[[Path], Any]]:
    """The loader the ``calf`` command uses for each kind of file."""
    from calf_agent.checkpoint import load_checkpoint
    from calf_agent.policy_runner import PolicyRunner
    from calf_core.bags import read_trace_bag
    from calf_core.profiles import load_profile
    from calf_shim.topic_relay_config import load_relay_config

    def meta(path: Path) -> Any:
        agent, data = load_checkpoint(path)
        return PolicyRunner(agent, data)

    return {'profile': lambda p: load_profile(str(p)), 'relay': load_relay_config, 'meta': meta,
            'bag': read_trace_bag}


def run_case(kind: str, path: Path, load: Callable[[Path], Any]) -> Outcome:
    """Load one case and classify what happened."""
    start = time.perf_counter()
    try:
        load(path)
    except CalfError as err:
        message = str(err)
        result = 'refused' if message and '\n' not in message else 'crash'
        return Outcome(kind, result, message, time.perf_counter() - start)
    except Exception as err:  # the fuzz is looking for exactly these
        return Outcome(kind, 'crash', f'{type(err).__name__}: {err}'[:300], time.perf_counter() - start)
    return Outcome(kind, 'ok', '', time.perf_counter() - start)


CLI_LIMIT_BYTES = 3 << 30
"""Address-space limit of each ``calf`` process the CLI tier starts (a bomb fails fast, not the host)."""


def cli_command(kind: str, path: Path) -> list[str] | None:
    """The ``calf`` command that reads a case of ``kind`` (None: no command reads it alone)."""
    return {'profile': ['profile', 'show', str(path), '--samples', '100'],
            'meta': ['eval', '--policy', str(path), '--episodes', '1'],
            'bag': ['trace', 'info', str(path)]}.get(kind)


def run_cli_case(kind: str, path: Path, timeout_s: float = 120.0) -> Outcome:
    """Run ``calf`` on one case in a memory-limited process: exit 0, or 2 with one stderr line."""
    import resource
    import subprocess
    command = cli_command(kind, path)
    assert command is not None

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (CLI_LIMIT_BYTES, CLI_LIMIT_BYTES))

    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, '-m', 'calf_bringup.cli', *command], capture_output=True, text=True,
                              timeout=timeout_s, preexec_fn=limit, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(kind, 'crash', f'timed out after {timeout_s} s', time.perf_counter() - start)
    seconds = time.perf_counter() - start
    lines = done.stderr.strip().splitlines()
    if done.returncode == 0:
        return Outcome(kind, 'ok', '', seconds)
    if done.returncode == 2 and len(lines) == 1:
        return Outcome(kind, 'refused', lines[0], seconds)
    return Outcome(kind, 'crash', f'exit {done.returncode}: {done.stderr[-300:]}', seconds)


def fuzz(seed: int, cases: int, workdir: Path, kinds: tuple[str, ...] = KINDS) -> list[Outcome]:
    """Run ``cases`` cases of each kind from ``seed``; each case gets a fresh directory."""
    rng = np.random.default_rng(seed)
    load = loaders()
    outcomes = []
    for i in range(cases):
        for kind in kinds:
            case_dir = workdir / f'{kind}-{i}'
            outcomes.append(run_case(kind, make_case(kind, rng, case_dir), load[kind]))
            shutil.rmtree(case_dir, ignore_errors=True)
    return outcomes


def cli_fuzz(seed: int, cases: int, workdir: Path) -> list[Outcome]:
    """Run ``cases`` cases of each kind a command reads through ``calf`` in a fresh process."""
    rng = np.random.default_rng(seed + 1)
    outcomes = []
    for i in range(cases):
        for kind in KINDS:
            if cli_command(kind, workdir) is None:
                continue
            case_dir = workdir / f'cli-{kind}-{i}'
            outcomes.append(run_cli_case(kind, make_case(kind, rng, case_dir)))
            shutil.rmtree(case_dir, ignore_errors=True)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--cases', type=int, default=500, help='cases per kind')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--cli-cases', type=int, default=0, help='cases per kind also run through `calf`')
    parser.add_argument('--workdir', type=Path, required=True, help='scratch directory (created)')
    args = parser.parse_args(argv)
    outcomes = fuzz(args.seed, args.cases, args.workdir)
    outcomes += cli_fuzz(args.seed, args.cli_cases, args.workdir)
    tally = Counter((o.kind, o.result) for o in outcomes)
    crashes = [o for o in outcomes if o.result == 'crash']
    print(json.dumps({'cases': len(outcomes), 'tally': {f'{k}/{r}': n for (k, r), n in sorted(tally.items())},
                      'slowest': max(outcomes, key=lambda o: o.seconds)._asdict(),
                      'crashes': [o._asdict() for o in crashes[:20]]}, indent=1))
    return 1 if crashes else 0


if __name__ == '__main__':
    sys.exit(main())
