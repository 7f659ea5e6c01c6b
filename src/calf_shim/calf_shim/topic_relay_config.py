"""The generic shim's configuration: which topics of an existing stack to impair, and how.

A config file is a YAML list with one entry per relayed topic:

    - in_topic: /cmd_vel_raw          # where the existing publisher now publishes (remapped there)
      out_topic: /cmd_vel             # where the existing subscribers listen
      type: geometry_msgs/msg/Twist   # or geometry_msgs/Twist
      direction: downlink             # uplink (robot -> policy) or downlink (policy -> robot)
      profile: wifi_degraded          # a profile name, or a profile YAML path (relative to this file)
      qos: {reliability: reliable, durability: volatile, depth: 10}  # optional

The entry's `direction` picks the profile's uplink or downlink model. Without `qos`, the shim
mirrors the QoS of the publishers it discovers on `in_topic` (`mirror_qos`); missing `qos` keys
take the defaults of `QOS_DEFAULTS`. Everything here is pure except `resolve_type`, which imports
the message module a type string names.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Sequence

import yaml

from calf_shim.errors import ConfigError
from calf_shim.profiles import Profile, load_profile
from calf_shim.traces import Direction

ENTRY_KEYS = ('in_topic', 'out_topic', 'type', 'direction', 'profile', 'qos')
OPTIONAL_KEYS = ('qos',)
RELIABILITIES = ('best_effort', 'reliable')
DURABILITIES = ('volatile', 'transient_local')
_TYPE = re.compile(r'^([A-Za-z_]\w*)/(?:msg/)?([A-Z]\w*)$')
_TOPIC = re.compile(r'^(?:~/|/)?[A-Za-z_]\w*(?:/[A-Za-z_]\w*)*$')


class TopicQos(NamedTuple):
    """A QoS choice as plain values (see `calf_shim.qos.QosConfig`)."""

    reliability: str
    durability: str
    depth: int


QOS_DEFAULTS = TopicQos('best_effort', 'volatile', 10)


class RelayEntry(NamedTuple):
    """One relayed topic."""

    in_topic: str
    out_topic: str
    type_name: str  # normalised: pkg/msg/Name
    direction: Direction  # which model of the profile applies
    profile: Profile
    qos: TopicQos | None  # None: mirror the publishers discovered on in_topic


class Endpoint(NamedTuple):
    """A publisher or subscription found in the ROS graph."""

    topic: str
    node: str  # fully qualified, or '' while discovery has not named it
    kind: str  # 'publisher' or 'subscription'
    type_name: str


def load_relay_config(path: str | Path) -> list[RelayEntry]:
    """Read, validate and type-check a config file; every error is one line naming the file and entry."""
    path = Path(path)
    entries = parse_relay_config(read_yaml(path, 'relay config'), path.parent, str(path))
    for i, entry in enumerate(entries):
        try:
            resolve_type(entry.type_name)
        except ConfigError as err:
            raise ConfigError(f'{path} entry {i} ({entry.in_topic}): {err}') from None
    return entries


def read_yaml(path: Path, what: str) -> Any:
    """Parse a YAML file; a missing file or a syntax error is a one-line ConfigError naming `what`."""
    try:
        return yaml.safe_load(path.read_text(encoding='utf-8'))
    except OSError as err:
        raise ConfigError(f'cannot read {what} {str(path)!r}: {err.strerror}') from None
    except yaml.YAMLError as err:
        raise ConfigError(f'{what} {str(path)!r} is not valid YAML: {" ".join(str(err).split())}') from None


def parse_relay_config(data: Any, base_dir: Path, source: str = 'relay config') -> list[RelayEntry]:
    """Validate parsed YAML: a non-empty list of entries with distinct topics."""
    if not isinstance(data, list) or not data:
        raise ConfigError(f'{source}: must be a non-empty YAML list of topic entries, got {data!r}')
    entries = []
    for i, item in enumerate(data):
        where = f'{source} entry {i}'
        if isinstance(item, dict) and isinstance(item.get('in_topic'), str):
            where += f' ({item["in_topic"]})'
        try:
            entries.append(parse_entry(item, base_dir))
        except ConfigError as err:
            raise ConfigError(f'{where}: {err}') from None
    _check_distinct(entries, source)
    return entries


def parse_entry(item: Any, base_dir: Path) -> RelayEntry:
    """Validate one entry; a relative profile path is taken relative to `base_dir`."""
    if not isinstance(item, dict):
        raise ConfigError(f'must be a mapping with keys {", ".join(ENTRY_KEYS)}, got {item!r}')
    unknown = sorted(set(item) - set(ENTRY_KEYS))
    missing = [key for key in ENTRY_KEYS if key not in item and key not in OPTIONAL_KEYS]
    if unknown or missing:
        raise ConfigError(f'unknown keys {unknown}, missing keys {missing} (allowed: {", ".join(ENTRY_KEYS)})')
    in_topic, out_topic = _topic('in_topic', item['in_topic']), _topic('out_topic', item['out_topic'])
    if in_topic == out_topic:
        raise ConfigError(f'in_topic and out_topic are both {in_topic!r}: the shim would relay its own output')
    qos = item.get('qos')
    return RelayEntry(in_topic, out_topic, normalise_type(item['type']), _direction(item['direction']),
                      _profile(item['profile'], base_dir), None if qos is None else parse_qos(qos))


def parse_qos(value: Any, defaults: TopicQos = QOS_DEFAULTS) -> TopicQos:
    """`{reliability, durability, depth}`, each optional (missing ones from `defaults`)."""
    if not isinstance(value, dict) or set(value) - set(TopicQos._fields):
        raise ConfigError(f'qos must be a mapping with keys among {", ".join(TopicQos._fields)}, got {value!r}')
    qos = defaults._replace(**value)
    if qos.reliability not in RELIABILITIES:
        raise ConfigError(f'qos reliability must be one of {", ".join(RELIABILITIES)}, got {qos.reliability!r}')
    if qos.durability not in DURABILITIES:
        raise ConfigError(f'qos durability must be one of {", ".join(DURABILITIES)}, got {qos.durability!r}')
    if isinstance(qos.depth, bool) or not isinstance(qos.depth, int) or qos.depth < 1:
        raise ConfigError(f'qos depth must be an integer >= 1, got {qos.depth!r}')
    return qos


def normalise_type(text: Any) -> str:
    """`pkg/msg/Name` or `pkg/Name` -> `pkg/msg/Name`."""
    match = _TYPE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigError(f'type must look like pkg/msg/Name (e.g. geometry_msgs/msg/Twist), got {text!r}')
    return f'{match[1]}/msg/{match[2]}'


def resolve_type(type_name: str) -> type:
    """The message class named by `type_name` (any form `normalise_type` accepts)."""
    package, _, name = normalise_type(type_name).split('/')
    try:
        module = importlib.import_module(f'{package}.msg')
    except ImportError:
        raise ConfigError(f'unknown message type {type_name!r}: no message package {package!r} is installed') \
            from None
    msg_type = getattr(module, name, None)
    if not hasattr(msg_type, 'get_fields_and_field_types'):
        raise ConfigError(f'unknown message type {type_name!r}: package {package!r} has no message {name!r}')
    return msg_type


def mirror_qos(offered: Sequence[tuple[str, str]], depth: int = QOS_DEFAULTS.depth) -> TopicQos:
    """The QoS that matches every discovered publisher, given as (reliability, durability) names.

    Reliable only if all of them are reliable, transient_local only if all of them are, so that
    the subscription matches each of them and the relayed topic offers what the originals offered.
    """
    if not offered:
        raise ValueError('mirror_qos needs at least one publisher')
    reliable = all(reliability == 'reliable' for reliability, _ in offered)
    durable = all(durability == 'transient_local' for _, durability in offered)
    return TopicQos('reliable' if reliable else 'best_effort', 'transient_local' if durable else 'volatile', depth)


def check_types(expected: str, endpoints: Iterable[Endpoint]) -> None:
    """Raise a one-line ConfigError for the first endpoint whose type is not `expected`."""
    for ep in endpoints:
        if ep.type_name != expected:
            raise ConfigError(f'topic {ep.topic}: {ep.kind} of node {ep.node or "(not yet named)"} has type '
                              f'{ep.type_name}, but the relay config says {expected}')


def _topic(key: str, value: Any) -> str:
    if not isinstance(value, str) or not _TOPIC.match(value):
        raise ConfigError(f'{key} must be a ROS topic name such as /cmd_vel, got {value!r}')
    return value


def _direction(value: Any) -> Direction:
    names = [d.name.lower() for d in Direction]
    if value not in names:
        raise ConfigError(f'direction must be one of {", ".join(names)}, got {value!r}')
    return Direction[value.upper()]


def _profile(value: Any, base_dir: Path) -> Profile:
    if not isinstance(value, str) or not value:
        raise ConfigError(f'profile must be a profile name or a YAML path, got {value!r}')
    path = Path(value).expanduser()
    if path.suffix in ('.yaml', '.yml') and not path.is_absolute():
        path = base_dir / path
    return load_profile(str(path) if path.suffix in ('.yaml', '.yml') else value)


def _check_distinct(entries: list[RelayEntry], source: str) -> None:
    """Each topic is relayed once, and no entry publishes where another one subscribes."""
    seen: dict[str, str] = {}
    for entry in entries:
        for role, topic in (('in_topic', entry.in_topic), ('out_topic', entry.out_topic)):
            if topic in seen:
                raise ConfigError(f'{source}: topic {topic!r} is used twice (as {seen[topic]} and as {role}); '
                                  f'each topic may appear once')
            seen[topic] = role
