"""The network profile schema: every top-level key, every stage and its keys, with unit, default and bounds.

This module is the one place a profile is validated. ``check_stage(spec)`` checks one stage spec
(unknown, missing and mistyped keys, values outside their bounds, rules that tie keys together)
before anything is built, and returns its parameters with the defaults filled in;
``check_profile_keys(data, name)`` does the same for the top level. Errors are one line naming the
stage and the key; they quote a key or value only once the file has shown itself a profile (a
mapping with an ``uplink`` key), so a file given by mistake is not echoed. Every time, rate, size and
length has bounds closed on both sides: a positive time has a floor, so no stage is asked for more
than a few events per millisecond of link time, and a trace replay has its own, larger size rule
(``MAX_REPLAY_VALUES``, read from a compact form). ``json_schema()`` renders the same schema as JSON Schema (``calf profile schema
--json``) and ``schema_text()`` as a reference table (``calf profile schema``).
"""
from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from calf_core.errors import ConfigError, shown

REQUIRED = object()  # marks a key with no default
MAX_DELAY_MS = 60_000.0  # one minute: any single delay, jitter or stall longer is refused
MAX_PERIOD_MS = 3_600_000.0  # one hour: the longest stall period or gap
MIN_DELAY_MS = 1e-3  # one microsecond: the smallest positive delay parameter (a median, a scale, a mean)
MIN_EVENT_MS = 1.0  # the shortest stall duration, gap or period and level hold (each parameter of its draw)
MAX_STAGES = 32  # stages in one direction
MAX_LIST = 100_000  # edges and weights of a histogram
MAX_REPLAY_VALUES = 4_000_000  # records of one trace_replay stage: 22 hours at 50 Hz
MAX_PROFILE_BYTES = 96 << 20  # a profile file (a long replay is JSON: its series in the compact form)
MAX_YAML_PROFILE_BYTES = 256 << 10  # a profile file read as YAML (the YAML parser takes seconds per megabyte)
DIST_KINDS = ('fixed', 'uniform', 'exponential', 'lognormal')


@dataclass(frozen=True)
class Key:
    """One key of a stage or of the profile's top level."""

    name: str
    kind: str  # number, integer, boolean, string, choice, numbers, series, flags, distribution, reorder, stages
    unit: str
    doc: str
    default: Any = REQUIRED  # REQUIRED, None (optional, absent) or the value used when absent
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def describe_default(self) -> str:
        if self.default is REQUIRED:
            return 'required'
        if self.default is None:
            return '-'
        return "''" if self.default == '' else _yaml(self.default)


@dataclass(frozen=True)
class StageSchema:
    """A model: its keys, the rule that ties them together (in words) and an example."""

    model: str
    doc: str
    keys: tuple[Key, ...]
    example: str
    rule: str = ''


def _delay(name: str, doc: str, default: Any = REQUIRED, positive: bool = False) -> Key:
    return Key(name, 'number', 'ms', doc, default, MIN_DELAY_MS if positive else 0.0, MAX_DELAY_MS)


def _probability(name: str, doc: str, default: Any = REQUIRED) -> Key:
    return Key(name, 'number', 'probability', doc, default, 0.0, 1.0)


SIGMA = Key('sigma', 'number', '1', 'standard deviation of ln(delay)', low=0.0, high=5.0)
STAGES: dict[str, StageSchema] = {s.model: s for s in (
    StageSchema('fixed_delay', 'a constant latency', (_delay('latency_ms', 'added to every message'),),
                '{model: fixed_delay, latency_ms: 25}'),
    StageSchema('gaussian_delay', 'N(mean_ms, std_ms), truncated to >= 0 by resampling (not clipping)',
                (_delay('mean_ms', 'mean before truncation'), _delay('std_ms', 'standard deviation before truncation')),
                '{model: gaussian_delay, mean_ms: 25, std_ms: 28}'),
    StageSchema('lognormal_delay', 'median_ms * exp(sigma * Z), Z ~ N(0, 1): median median_ms, '
                'p95 median_ms * exp(1.645 sigma); positive and right-skewed',
                (_delay('median_ms', 'the median delay', positive=True), SIGMA),
                '{model: lognormal_delay, median_ms: 12, sigma: 0.5}'),
    StageSchema('gamma_delay', 'a gamma-distributed delay (the usual fit for a congested queue); give mean_ms '
                'and std_ms, or shape and scale_ms (mean = shape * scale_ms, std = sqrt(shape) * scale_ms)',
                (_delay('mean_ms', 'mean delay', None, positive=True),
                 _delay('std_ms', 'standard deviation', None, positive=True),
                 Key('shape', 'number', '1', 'shape k', None, 1e-6, 1e6),
                 _delay('scale_ms', 'scale theta', None, positive=True)),
                '{model: gamma_delay, mean_ms: 20, std_ms: 10}',
                'exactly one pair: mean_ms and std_ms, or shape and scale_ms'),
    StageSchema('pareto_delay', 'Pareto type I: P(delay > x) = (scale_ms / x) ** shape for x >= scale_ms; '
                'median scale_ms * 2 ** (1 / shape), p95 scale_ms * 20 ** (1 / shape)',
                (_delay('scale_ms', 'the minimum delay', positive=True),
                 Key('shape', 'number', '1', 'tail index (mean finite above 1)', low=0.5, high=1000.0)),
                '{model: pareto_delay, scale_ms: 31, shape: 4.3}'),
    StageSchema('empirical_delay', 'a histogram: bin i with weight probs[i], then uniform within the bin',
                (Key('bins_ms', 'numbers', 'ms', 'len(probs) + 1 strictly increasing bin edges', low=0.0,
                     high=MAX_DELAY_MS),
                 Key('probs', 'numbers', 'weight', 'bin weights, normalised to sum 1', low=0.0, high=1e12)),
                '{model: empirical_delay, bins_ms: [5, 10, 40], probs: [0.9, 0.1]}',
                'len(bins_ms) == len(probs) + 1, edges strictly increasing, weights with a positive sum'),
    StageSchema('bernoulli_loss', 'drops each message independently with probability p (no correlation: '
                'use gilbert_elliott for bursts)', (_probability('p', 'loss probability'),),
                '{model: bernoulli_loss, p: 0.05}'),
    StageSchema('gilbert_elliott', 'burst loss: a good/bad Markov chain, stepped once per message (p_good_to_bad, '
                'p_bad_to_good; mean burst 1 / p_bad_to_good messages) or in time (mean_good_ms, mean_bad_ms: each '
                'state holds an exponential time, so a burst lasts as long in seconds whatever the message rate); '
                'the chain starts in its stationary state',
                (_probability('p_good_to_bad', 'per-message move good -> bad', None),
                 Key('p_bad_to_good', 'number', 'probability', 'per-message move bad -> good', None, 1e-9, 1.0),
                 Key('mean_good_ms', 'number', 'ms', 'in time: mean time in the good state', None, MIN_EVENT_MS,
                     MAX_PERIOD_MS),
                 Key('mean_bad_ms', 'number', 'ms', 'in time: mean time in the bad state (mean burst)', None,
                     MIN_EVENT_MS, MAX_PERIOD_MS),
                 _probability('loss_good', 'loss probability in the good state'),
                 _probability('loss_bad', 'loss probability in the bad state')),
                '{model: gilbert_elliott, p_good_to_bad: 0.01, p_bad_to_good: 0.3, loss_good: 0.005, loss_bad: 0.5}',
                'exactly one pair: p_good_to_bad and p_bad_to_good (per message), or mean_good_ms and mean_bad_ms '
                '(in time)'),
    StageSchema('stall', 'link outages: a message whose arrival falls in a stall is released when it ends; '
                'stalls and the spacing between them (gap_ms end to start, or period_ms start to start) are one '
                'renewal process, started at a random phase',
                (Key('duration_ms', 'distribution', 'ms', 'how long each stall lasts', low=MIN_EVENT_MS,
                     high=MAX_DELAY_MS),
                 Key('gap_ms', 'distribution', 'ms', 'time from the end of one stall to the start of the next',
                     None, MIN_EVENT_MS, MAX_PERIOD_MS),
                 Key('period_ms', 'number|distribution', 'ms', 'a number: the mean time from one stall start to '
                     'the next (with mode); a distribution: the time from one stall start to the next, drawn for '
                     'each stall (a stall that starts before the previous one ends merges with it)', None,
                     MIN_EVENT_MS, MAX_PERIOD_MS),
                 Key('rate_hz', 'number', 'Hz', 'stalls per second, 1000 / period_ms (with mode)', None,
                     1e3 / MAX_PERIOD_MS, 1e3 / MIN_EVENT_MS),
                 Key('mode', 'choice', '-', 'with a number period_ms or rate_hz: periodic = gap fixed at period '
                     'minus mean duration; random = that gap exponential', 'periodic', choices=('periodic', 'random'))),
                '{model: stall, duration_ms: {dist: uniform, low: 150, high: 300}, '
                'gap_ms: {dist: uniform, low: 4000, high: 6000}}',
                'exactly one of gap_ms, period_ms, rate_hz; mode only with a number period_ms or rate_hz; the mean '
                'duration below the mean period'),
    StageSchema('drifting_delay', 'a base latency that wanders: a level drawn from level_ms holds for a time '
                'drawn from hold_ms, then the next level is drawn; a message adds the level at its send time; '
                'one renewal process in link time, started at a random phase',
                (Key('level_ms', 'distribution', 'ms', 'the latency level of each period', low=0.0,
                     high=MAX_DELAY_MS),
                 Key('hold_ms', 'distribution', 'ms', 'how long each level holds', low=MIN_EVENT_MS,
                     high=MAX_PERIOD_MS)),
                '{model: drifting_delay, level_ms: {dist: uniform, low: 0, high: 80}, '
                "hold_ms: {dist: exponential, mean: 2000}}"),
    StageSchema('bandwidth', 'a rate-limited FIFO: serialisation size * 8 / rate plus a tail-drop queue',
                (Key('rate_kbps', 'number', 'kbit/s', 'link rate', low=1.0, high=1e8),
                 Key('queue_packets', 'integer', 'messages', 'messages that may wait behind the one being sent',
                     low=0, high=100_000)),
                '{model: bandwidth, rate_kbps: 2000, queue_packets: 50}'),
    StageSchema('duplicate', 'with probability p also delivers a copy extra_delay_ms after the original',
                (_probability('p', 'duplication probability'), _delay('extra_delay_ms', 'delay of the copy')),
                '{model: duplicate, p: 0.01, extra_delay_ms: 5}'),
    StageSchema('trace_replay', 'replays recorded per-message delays and losses in order, wrapping around',
                (Key('delays_ms', 'series', 'ms', 'one delay per message: a list, or the compact form, one '
                     'string of numbers separated by spaces', low=0.0, high=MAX_DELAY_MS),
                 Key('lost', 'flags', '-', 'one flag per message (default: none lost): a list of true/false, or '
                     'the compact form, one string of 0 and 1 characters', None),
                 Key('mode', 'choice', '-', 'loop: start at the first record; random_offset: at a random one '
                     '(once, when the link starts)', 'loop', choices=('loop', 'random_offset'))),
                '{model: trace_replay, delays_ms: [12.1, 13.4, 55.0], lost: [false, false, true]}',
                f'delays_ms non-empty, at most {MAX_REPLAY_VALUES} values; lost as long as delays_ms'),
)}

DIRECTION_KEYS = ('uplink', 'downlink')
SHARED_MODELS = ('stall', 'gilbert_elliott in time')  # the stages a profile's shared list may hold
PROFILE_KEYS: tuple[Key, ...] = (
    Key('name', 'string', '-', 'profile name', 'the file name'),
    Key('description', 'string', '-', 'one line shown by calf profile show', ''),
    Key('compute_ms', 'number', 'ms', 'policy compute time: an action leaves this long after its observation '
        'reached the policy', 1.0, 0.0, MAX_DELAY_MS),
    Key('reorder', 'reorder', '-', 'false = FIFO (no message overtakes an earlier one in its direction); true '
        'lets independent delays reorder messages; or per direction {uplink: bool, downlink: bool}', False),
    Key('uplink', 'stages', '-', 'env -> policy: a list of stages, applied in order'),
    Key('downlink', 'stages', '-', "policy -> env: a list of stages, or 'same' (a copy of the uplink's, with "
        "its own processes)"),
    Key('shared', 'stages', '-', f'one radio: {" and ".join(SHARED_MODELS)} stages run as ONE process for both '
        "directions, hitting them at the same instants; applied after each direction's own stages, at the "
        "message's time at that point", None),
)
DIST_PARAMS = {'fixed': ('value',), 'uniform': ('low', 'high'), 'exponential': ('mean',),
               'lognormal': ('median', 'sigma')}


def check_stage(spec: Any) -> dict[str, Any]:
    """Validate one stage spec ``{model: NAME, key: value, ...}``; return ``{key: value}`` with defaults."""
    if not isinstance(spec, dict) or 'model' not in spec:
        raise ConfigError(f"stage spec must be a mapping with a 'model' key, got {shown(spec)}")
    schema = STAGES.get(spec['model']) if isinstance(spec['model'], str) else None
    if schema is None:
        raise ConfigError(f"unknown model {shown(spec['model'])} (available: {', '.join(sorted(STAGES))})")
    params = _check_keys(schema.model, schema.keys, {k: v for k, v in spec.items() if k != 'model'})
    rule = _RULES.get(schema.model)
    if rule is not None:
        rule(params, set(spec))
    return params


def check_profile_keys(data: Any, name: str) -> dict[str, Any]:
    """Validate a profile's top level (not its stages); return every key with defaults filled in.

    Data that is not a mapping with an ``uplink`` key is not a profile at all (another file given by
    mistake): the error names only its type, never its content."""
    if not isinstance(data, dict) or 'uplink' not in data:
        got = 'a mapping without an uplink key' if isinstance(data, dict) else f'a {type(data).__name__}'
        raise ConfigError(f'profile {name!r} is not a network profile: expected a mapping with an uplink key '
                          f'(see calf profile schema), got {got}')
    return _check_keys(f'profile {name!r}', PROFILE_KEYS, data)


def _check_keys(owner: str, keys: Sequence[Key], given: dict[str, Any]) -> dict[str, Any]:
    by_name = {key.name: key for key in keys}
    for name in given:
        if name not in by_name:
            raise ConfigError(f'{owner}: unknown key {shown(name)} (allowed: {", ".join(by_name)})')
    out = {}
    for key in keys:
        if key.name in given:
            out[key.name] = _check_value(owner, key, given[key.name])
        elif key.default is REQUIRED:
            raise ConfigError(f'{owner}: missing required key {key.name!r}')
        elif key.default is not None and key.kind != 'string':
            out[key.name] = _check_value(owner, key, key.default)
    return out


def _check_value(owner: str, key: Key, value: Any) -> Any:
    where = f'{owner}: {key.name}'
    kind = key.kind
    if kind == 'number':
        return _bounded(where, key, _number(where, value, key.unit))
    if kind == 'integer':
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ConfigError(f'{where} must be an integer ({key.unit}), got {shown(value)}')
        return int(_bounded(where, key, int(value)))
    if kind == 'boolean':
        if not isinstance(value, bool):
            raise ConfigError(f'{where} must be true or false, got {shown(value)}')
        return value
    if kind == 'series':
        return _series(where, key, value)
    if kind == 'flags':
        return _flags(where, value)
    if kind == 'string':
        if not isinstance(value, str):
            raise ConfigError(f'{where} must be a string, got {shown(value)}')
        return value
    if kind == 'choice':
        if value not in key.choices:
            raise ConfigError(f'{where} must be one of {", ".join(key.choices)}, got {shown(value)}')
        return value
    if kind == 'numbers':
        if not isinstance(value, list) or not value or len(value) > MAX_LIST:
            raise ConfigError(f'{where} must be a non-empty list of numbers ({key.unit}), got {shown(value)}')
        for i, item in enumerate(value):
            _bounded(f'{where}[{i}]', key, _number(f'{where}[{i}]', item, key.unit))
        return value
    if kind == 'distribution':
        return _distribution(where, key, value)
    if kind == 'number|distribution':
        return _distribution(where, key, value) if isinstance(value, dict) else _check_value(
            owner, replace(key, kind='number'), value)
    if kind == 'reorder':
        if isinstance(value, bool):
            return {'uplink': value, 'downlink': value}
        if isinstance(value, dict) and value and set(value) <= set(DIRECTION_KEYS):
            per = {d: _check_value(f'{owner}: reorder', Key(d, 'boolean', '-', ''), value.get(d, key.default))
                   for d in DIRECTION_KEYS}
            return per
        raise ConfigError(f'{where} must be true, false or {{uplink: bool, downlink: bool}}, got {shown(value)}')
    if kind == 'stages':
        if key.name == 'downlink' and value == 'same':
            return value
        if not isinstance(value, list) or len(value) > MAX_STAGES:
            raise ConfigError(f'{where} must be a list of at most {MAX_STAGES} stage specs'
                              f'{" or same" if key.name == "downlink" else ""}, got {shown(value)}')
        return value
    raise AssertionError(kind)


def _number(where: str, value: Any, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ConfigError(f'{where} must be a finite number ({unit}), got {shown(value)}')
    return float(value)


def _bounded(where: str, key: Key, number: float) -> float:
    if (key.low is not None and number < key.low) or (key.high is not None and number > key.high):
        raise ConfigError(f'{where} must be {_range(key)}, got {number:g}')
    return number


def _range(key: Key) -> str:
    unit = '' if key.unit in ('1', '-', 'probability') else f' {key.unit}'
    return f'in [{key.low:g}, {key.high:g}]{unit}'


def _series(where: str, key: Key, value: Any) -> np.ndarray:
    """A list of numbers, or their compact form (one string, numbers separated by spaces), as a float array."""
    if isinstance(value, str):
        inner = value.strip()
        if sum(inner.count(c) for c in ' \t\n\r\x0b\x0c') >= MAX_REPLAY_VALUES:  # separators: cheap to count
            raise ConfigError(f'{where} holds more than {MAX_REPLAY_VALUES} values (or separators): split the trace')
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            try:
                array = np.fromstring(value, dtype=np.float64, sep=' ')
            except (ValueError, DeprecationWarning):
                raise ConfigError(f'{where} must be numbers ({key.unit}) separated by spaces: one is not a '
                                  f'number') from None
    elif isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype == np.float64:
        array = value
    elif isinstance(value, list) and len(value) <= MAX_REPLAY_VALUES:
        if not all(isinstance(item, numbers.Real) and not isinstance(item, bool) for item in value):
            raise ConfigError(f'{where} must be a list of numbers ({key.unit}), got {shown(value)}')
        array = np.array(value, dtype=np.float64)
    else:
        raise ConfigError(f'{where} must be a list of at most {MAX_REPLAY_VALUES} numbers ({key.unit}) or one '
                          f'string of them separated by spaces, got {shown(value)}')
    if not 0 < array.size <= MAX_REPLAY_VALUES:
        raise ConfigError(f'{where} must hold 1 to {MAX_REPLAY_VALUES} values, got {array.size}')
    bad = np.flatnonzero(~((array >= key.low) & (array <= key.high)))  # NaN fails both
    if bad.size:
        raise ConfigError(f'{where}[{bad[0]}] must be {_range(key)}, got {array[bad[0]]:g}')
    return array


def compact_series(values: np.ndarray) -> str:
    """The compact form of a series: its numbers (shortest exact repr) separated by spaces."""
    return ' '.join(map(repr, np.asarray(values, dtype=np.float64).tolist()))


def compact_flags(flags: np.ndarray) -> str:
    """The compact form of a list of flags: one character per flag, 1 for true, 0 for false."""
    return (np.asarray(flags, dtype=bool).astype(np.uint8) + 48).tobytes().decode('ascii')


def _flags(where: str, value: Any) -> np.ndarray:
    """A list of true/false, or their compact form (one string of 0 and 1 characters), as a bool array."""
    if isinstance(value, str) and len(value) <= MAX_REPLAY_VALUES:
        chars = np.frombuffer(value.encode('utf-8', 'surrogatepass'), dtype=np.uint8)
        if chars.size != len(value) or not np.all((chars == 48) | (chars == 49)):
            raise ConfigError(f'{where} must be a string of 0 and 1 characters, one per message')
        return chars == 49
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype == np.bool_:
        return value
    if isinstance(value, list) and len(value) <= MAX_REPLAY_VALUES and all(isinstance(v, bool) for v in value):
        return np.array(value, dtype=bool)
    raise ConfigError(f'{where} must be a list of at most {MAX_REPLAY_VALUES} true/false or one string of 0 and '
                      f'1 characters, got {shown(value)}')


def _distribution(where: str, key: Key, value: Any) -> dict[str, Any]:
    """A number (fixed) or {dist: fixed|uniform|exponential|lognormal, ...}; returns the mapping form."""
    if not isinstance(value, dict):
        return {'dist': 'fixed', 'value': _bounded(where, key, _number(where, value, key.unit))}
    dist = value.get('dist')
    if dist not in DIST_PARAMS:
        raise ConfigError(f'{where}: dist must be one of {", ".join(DIST_KINDS)}, got {shown(dist)}')
    scale = Key('', 'number', key.unit, '', low=key.low, high=key.high)
    keys = tuple(SIGMA if p == 'sigma' else replace(scale, name=p) for p in DIST_PARAMS[dist])
    params = _check_keys(f'{where} ({dist})', (Key('dist', 'string', '-', ''), *keys), value)
    if dist == 'uniform' and not params['low'] < params['high']:
        raise ConfigError(f'{where}: low must be < high, got {params["low"]:g} and {params["high"]:g}')
    return {'dist': dist, **{k: float(v) for k, v in params.items() if k != 'dist'}}


def dist_mean(dist: dict[str, Any]) -> float:
    """The mean of a distribution mapping (see ``_distribution``)."""
    kind = dist['dist']
    if kind == 'fixed':
        return dist['value']
    if kind == 'uniform':
        return (dist['low'] + dist['high']) / 2
    if kind == 'exponential':
        return dist['mean']
    return dist['median'] * math.exp(dist['sigma'] ** 2 / 2)


def _gamma_rule(params: dict[str, Any], given: set[str]) -> None:
    pair = {k for k in ('mean_ms', 'std_ms', 'shape', 'scale_ms') if k in params}
    if pair not in ({'mean_ms', 'std_ms'}, {'shape', 'scale_ms'}):
        raise ConfigError(f'gamma_delay: give mean_ms and std_ms, or shape and scale_ms, got {", ".join(sorted(pair))}')


def _empirical_rule(params: dict[str, Any], given: set[str]) -> None:
    edges, probs = params['bins_ms'], params['probs']
    if len(edges) != len(probs) + 1:
        raise ConfigError(f'empirical_delay: bins_ms needs len(probs) + 1 edges, got {len(edges)} edges for '
                          f'{len(probs)} probs')
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise ConfigError(f'empirical_delay: bins_ms must be strictly increasing, got {shown(edges)}')
    if sum(probs) <= 0.0:
        raise ConfigError(f'empirical_delay: probs must have a positive sum, got {shown(probs)}')


def _gilbert_elliott_rule(params: dict[str, Any], given: set[str]) -> None:
    chain = given & {'p_good_to_bad', 'p_bad_to_good', 'mean_good_ms', 'mean_bad_ms'}
    if chain not in ({'p_good_to_bad', 'p_bad_to_good'}, {'mean_good_ms', 'mean_bad_ms'}):
        raise ConfigError('gilbert_elliott: give p_good_to_bad and p_bad_to_good (per message), or mean_good_ms '
                          f'and mean_bad_ms (in time), got {", ".join(sorted(chain)) or "none"}')


def _stall_rule(params: dict[str, Any], given: set[str]) -> None:
    spacing = [k for k in ('gap_ms', 'period_ms', 'rate_hz') if k in params]
    if len(spacing) != 1:
        raise ConfigError(f'stall: give exactly one of gap_ms, period_ms or rate_hz, got {", ".join(spacing) or "none"}')
    if 'gap_ms' in params:
        if 'mode' in given:
            raise ConfigError('stall: mode goes with a number period_ms or rate_hz, not with gap_ms')
        del params['mode']  # no mode applies: the defaults filled in name none
        return
    period = params.get('period_ms', 1e3 / params.get('rate_hz', 1.0))
    if isinstance(period, dict) and 'mode' in given:
        raise ConfigError('stall: mode goes with a number period_ms or rate_hz; a distribution period_ms is '
                          'the start-to-start spacing itself')
    if isinstance(period, dict):
        del params['mode']
    period_ms = dist_mean(period) if isinstance(period, dict) else period
    mean_ms = dist_mean(params['duration_ms'])
    if mean_ms >= period_ms:
        raise ConfigError(f'stall: the mean duration_ms must be < the period ({period_ms:g} ms), got '
                          f'{mean_ms:g}')


def check_shared_stage(spec: dict[str, Any]) -> None:
    """Refuse a stage a profile's ``shared`` list cannot run as one process in time (see SHARED_MODELS)."""
    if spec.get('model') == 'stall' or (spec.get('model') == 'gilbert_elliott' and 'mean_bad_ms' in spec):
        return
    raise ConfigError(f'{shown(spec.get("model"))} cannot be shared: shared holds stall and gilbert_elliott '
                      'in time (mean_good_ms, mean_bad_ms) stages, processes in time that hit both directions at '
                      'once; put other stages in uplink or downlink')


def _trace_rule(params: dict[str, Any], given: set[str]) -> None:
    lost = params.get('lost')
    if lost is not None and lost.size != params['delays_ms'].size:
        raise ConfigError(f'trace_replay: lost must be as long as delays_ms, got {len(lost)} and '
                          f'{len(params["delays_ms"])}')


_RULES = {'gamma_delay': _gamma_rule, 'empirical_delay': _empirical_rule, 'gilbert_elliott': _gilbert_elliott_rule,
          'stall': _stall_rule, 'trace_replay': _trace_rule}


def _yaml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# --- renderings ------------------------------------------------------------------------------------

_JSON_TYPES = {'number': 'number', 'integer': 'integer', 'boolean': 'boolean', 'string': 'string'}


def _json_key(key: Key) -> dict[str, Any]:
    out: dict[str, Any] = {'description': f'{key.doc} ({key.unit})' if key.unit not in ('-', '1') else key.doc}
    bounds: dict[str, Any] = {}
    if key.low is not None:
        bounds['minimum'] = key.low
    if key.high is not None:
        bounds['maximum'] = key.high
    if key.kind in _JSON_TYPES:
        out.update(type=_JSON_TYPES[key.kind], **bounds)
    elif key.kind == 'choice':
        out['enum'] = list(key.choices)
    elif key.kind == 'numbers':
        out.update(type='array', minItems=1, maxItems=MAX_LIST, items={'type': 'number', **bounds})
    elif key.kind == 'series':
        out['oneOf'] = [{'type': 'array', 'minItems': 1, 'maxItems': MAX_REPLAY_VALUES,
                         'items': {'type': 'number', **bounds}},
                        {'type': 'string', 'pattern': r'^\s*\S+(\s+\S+)*\s*$'}]
    elif key.kind == 'flags':
        out['oneOf'] = [{'type': 'array', 'maxItems': MAX_REPLAY_VALUES, 'items': {'type': 'boolean'}},
                        {'type': 'string', 'pattern': '^[01]*$', 'maxLength': MAX_REPLAY_VALUES}]
    elif key.kind in ('distribution', 'number|distribution'):
        out['oneOf'] = [{'type': 'number', **bounds}] + [
            {'type': 'object', 'additionalProperties': False, 'required': ['dist', *params],
             'properties': {'dist': {'const': dist},
                            **{p: {'type': 'number', **({'minimum': SIGMA.low, 'maximum': SIGMA.high}
                                                        if p == 'sigma' else bounds)}
                               for p in params}}}
            for dist, params in DIST_PARAMS.items()]
    elif key.kind == 'reorder':
        out['oneOf'] = [{'type': 'boolean'}, {'type': 'object', 'additionalProperties': False,
                                              'properties': {d: {'type': 'boolean'} for d in DIRECTION_KEYS}}]
    elif key.kind == 'stages':
        stages = {'type': 'array', 'maxItems': MAX_STAGES, 'items': {'$ref': '#/$defs/stage'}}
        out.update(oneOf=[stages, {'const': 'same'}] if key.name == 'downlink' else stages)
    if key.default not in (REQUIRED, None) and key.name != 'name':
        out['default'] = key.default
    return out


def json_schema() -> dict[str, Any]:
    """The profile schema as a JSON Schema (draft 2020-12) document."""
    stages = [{'title': s.model, 'description': s.doc + (f'; {s.rule}' if s.rule else ''), 'type': 'object',
               'additionalProperties': False,
               'required': ['model', *(k.name for k in s.keys if k.default is REQUIRED)],
               'properties': {'model': {'const': s.model}, **{k.name: _json_key(k) for k in s.keys}}}
              for s in STAGES.values()]
    return {'$schema': 'https://json-schema.org/draft/2020-12/schema', 'title': 'CALF network profile',
            'type': 'object', 'additionalProperties': False,
            'required': [k.name for k in PROFILE_KEYS if k.default is REQUIRED],
            'properties': {k.name: _json_key(k) for k in PROFILE_KEYS},
            '$defs': {'stage': {'oneOf': stages}}}


def _bounds_text(key: Key) -> str:
    if key.kind == 'choice':
        return ' | '.join(key.choices)
    if key.low is None:
        return ''
    return _range(key).removeprefix('in ')


def schema_text() -> str:
    """The schema as a plain-text reference: top-level keys, then each stage with an example."""
    lines = ['Profile keys (key, type, unit, default, bounds: description):']
    lines += [f'  {k.name}: {k.kind}, {k.unit}, default {k.describe_default()}'
              f'{", " + _bounds_text(k) if _bounds_text(k) else ""}: {k.doc}' for k in PROFILE_KEYS]
    lines += ['', 'A distribution (stall duration_ms, gap_ms, period_ms; drifting_delay level_ms, hold_ms) is a '
              'number (fixed) or one of: {dist: fixed, value}, {dist: uniform, low, high}, {dist: exponential, mean}, '
              '{dist: lognormal, median, sigma}, in the key\'s unit; each of its parameters but sigma within the '
              'key\'s bounds.', '',
              f'Sizes: uplink and downlink hold at most {MAX_STAGES} stages each, a histogram at most {MAX_LIST} '
              f'values, a trace_replay stage at most {MAX_REPLAY_VALUES} records. A profile file is read up to '
              f'{MAX_PROFILE_BYTES} bytes if it is one JSON object (as calf trace to-profile --replay writes it), '
              f'up to {MAX_YAML_PROFILE_BYTES} bytes if it is YAML.', '', 'Stages:']
    for s in STAGES.values():
        lines.append(f'  {s.model}: {s.doc}')
        for k in s.keys:
            bounds = _bounds_text(k)
            lines.append(f'    {k.name}: {k.kind}, {k.unit}, default {k.describe_default()}'
                         f'{", " + bounds if bounds else ""}: {k.doc}')
        if s.rule:
            lines.append(f'    rule: {s.rule}')
        lines.append(f'    example: {s.example}')
    return '\n'.join(lines)
