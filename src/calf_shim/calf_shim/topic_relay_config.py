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
take the defaults of `calf_ros.qos.STREAM`.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from calf_core.errors import ConfigError
from calf_core.network import resolve_network
from calf_core.profiles import Profile
from calf_core.traces import Direction
from calf_core.yaml_files import read_yaml
from calf_ros.message_types import normalise_type, resolve_type
from calf_ros.qos import QosConfig, parse_qos

ENTRY_KEYS = ('in_topic', 'out_topic', 'type', 'direction', 'profile', 'qos')
OPTIONAL_KEYS = ('qos',)
_TOPIC = re.compile(r'^(?:~/|/)?[A-Za-z_]\w*(?:/[A-Za-z_]\w*)*$')


class RelayEntry(NamedTuple):
    """One relayed topic."""

    in_topic: str
    out_topic: str
    type_name: str  # normalised: pkg/msg/Name
    direction: Direction  # which model of the profile applies
    profile: Profile
    qos: QosConfig | None  # None: mirror the publishers discovered on in_topic


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


def parse_relay_config(data: Any, base_dir: Path, source: str = 'relay config') -> list[RelayEntry]:
    """Validate parsed YAML: a non-empty list of entries with distinct topics."""
    if not isinstance(data, list) or not data:
        raise ConfigError(f'{source}: must be a non-empty YAML list of topic entries, got {type(data).__name__}')
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
        raise ConfigError(f'must be a mapping with keys {", ".join(ENTRY_KEYS)}, got {type(item).__name__}')
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


def check_types(expected: str, endpoints: Iterable[Endpoint]) -> None:
    """Raise a one-line ConfigError for the first endpoint whose type is not `expected`."""
    for ep in endpoints:
        if ep.type_name != expected:
            raise ConfigError(f'topic {ep.topic}: {ep.kind} of node {ep.node or "(not yet named)"} has type '
                              f'{ep.type_name}, but the relay config says {expected}')


def _topic(key: str, value: Any) -> str:
    if not isinstance(value, str) or not _TOPIC.match(value):
        raise ConfigError(f'{key} must be a ROS topic name such as /cmd_vel, got {repr(value)[:60]}')
    return value


def _direction(value: Any) -> Direction:
    names = [d.name.lower() for d in Direction]
    if value not in names:
        raise ConfigError(f'direction must be one of {", ".join(names)}, got {repr(value)[:60]}')
    return Direction[value.upper()]


def _profile(value: Any, base_dir: Path) -> Profile:
    if not isinstance(value, str) or not value or len(value) > 1024 or '\x00' in value:
        raise ConfigError(f'profile must be a profile name or a YAML path, got {repr(value)[:60]}')
    path = Path(value).expanduser()
    if path.suffix in ('.yaml', '.yml') and not path.is_absolute():
        path = base_dir / path
    return resolve_network(str(path) if path.suffix in ('.yaml', '.yml') else value)


def _check_distinct(entries: list[RelayEntry], source: str) -> None:
    """Each topic is relayed once, and no entry publishes where another one subscribes."""
    seen: dict[str, str] = {}
    for entry in entries:
        for role, topic in (('in_topic', entry.in_topic), ('out_topic', entry.out_topic)):
            if topic in seen:
                raise ConfigError(f'{source}: topic {topic!r} is used twice (as {seen[topic]} and as {role}); '
                                  f'each topic may appear once')
            seen[topic] = role
