"""Adapters between standard ROS messages and CALF's vectors, configured by YAML, no code.

One adapter file serves both sides of a link: the policy side (`calf_agent.nodes.adapter_policy_node`)
reads observations from messages and writes actions into them; the env side
(`calf_env.adapter_env_node`) writes observations into messages and reads actions from them.
An adapter file has two sections:

    observation:                         # the observation vector, one per message
      topic: /joint_states
      type: sensor_msgs/msg/JointState   # or std_msgs/msg/Float32MultiArray, nav_msgs/msg/Odometry
      joints: [slider, hinge]            # JointState: these joints, in this order, ...
      fields: [position, velocity]       # ... each with these fields: slider.position, slider.velocity, ...
      # Odometry: fields: [pose.pose.position.x, twist.twist.linear.x, ...]
      # Float32MultiArray: indices: [0, 2] (optional; default: all of data)
      qos: {reliability: best_effort, depth: 1}       # optional
    action:                              # what the policy's action becomes
      topic: /cmd_vel
      type: geometry_msgs/msg/Twist      # or std_msgs/msg/Float32MultiArray
      fields: [linear.x, angular.z]      # Twist only: the fields the action vector fills (others stay 0)
      table:                             # discrete action index -> vector; without it, actions are vectors
        - [0.2, 0.5]
        - [0.2, -0.5]
      qos: {reliability: reliable, depth: 10}         # optional

On the env side a command message becomes the discrete action of the nearest table row (Euclidean,
in float32); a value outside the range of its table column is rejected, like an out-of-range
action index. Without a table (a Box env) the fields are read back as the continuous action, in
order; the env's action bounds apply as to any continuous action. Pure: messages are read and written by attribute (duck typing), never imported here.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from calf_core.errors import ConfigError, MessageError
from calf_core.yaml_files import read_yaml
from calf_ros.message_types import normalise_type
from calf_ros.qos import QosConfig, parse_qos

ARRAY = 'std_msgs/msg/Float32MultiArray'
JOINT_STATE = 'sensor_msgs/msg/JointState'
ODOMETRY = 'nav_msgs/msg/Odometry'
TWIST = 'geometry_msgs/msg/Twist'
JOINT_FIELDS = ('position', 'velocity', 'effort')
ODOMETRY_FIELDS = tuple([f'pose.pose.position.{a}' for a in 'xyz'] + [f'pose.pose.orientation.{a}' for a in 'xyzw']
                        + [f'twist.twist.{part}.{a}' for part in ('linear', 'angular') for a in 'xyz'])
TWIST_FIELDS = tuple(f'{part}.{a}' for part in ('linear', 'angular') for a in 'xyz')
OBSERVATION_QOS = QosConfig('best_effort', 'volatile', 1)  # sensor data: newest only, matches any publisher
ACTION_QOS = QosConfig('reliable', 'volatile', 10)  # commands: matches reliable and best-effort subscribers


class ObservationReader(Protocol):
    size: int | None  # values per observation, when known before a message arrives

    def read(self, msg: Any) -> np.ndarray:
        """The message's chosen values as float32."""

    def write(self, values: Sequence[float]) -> dict[str, Any]:
        """Field path -> value of a message that `read` turns back into `values`."""


@dataclass(frozen=True)
class ArrayReader:
    """`data[indices]` of a Float32MultiArray (all of `data` when indices is None)."""

    indices: tuple[int, ...] | None

    @property
    def size(self) -> int | None:
        return None if self.indices is None else len(self.indices)

    def read(self, msg: Any) -> np.ndarray:
        data = np.asarray(msg.data, dtype=np.float32)
        if self.indices is None:
            return data
        if max(self.indices) >= data.size:
            raise MessageError(f'Float32MultiArray has {data.size} values, index {max(self.indices)} was asked for')
        return data[list(self.indices)]

    def write(self, values: Sequence[float]) -> dict[str, Any]:
        if self.indices is None:
            return {'data': list(values)}
        data = [0.0] * (max(self.indices) + 1)  # values at their indices, zeros between
        for index, value in zip(self.indices, values):
            data[index] = value
        return {'data': data}


@dataclass(frozen=True)
class JointStateReader:
    """For each joint in order, its chosen fields (position, velocity, effort)."""

    joints: tuple[str, ...]
    fields: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.joints) * len(self.fields)

    def read(self, msg: Any) -> np.ndarray:
        index = {name: i for i, name in enumerate(msg.name)}
        missing = [joint for joint in self.joints if joint not in index]
        if missing:
            raise MessageError(f'JointState has no joint {missing[0]!r} (it has {list(msg.name)})')
        columns = {}
        for field in self.fields:
            columns[field] = values = getattr(msg, field)
            if len(values) != len(msg.name):
                raise MessageError(f'JointState {field} has {len(values)} values for {len(msg.name)} joints')
        return np.array([columns[f][index[j]] for j in self.joints for f in self.fields], dtype=np.float32)

    def write(self, values: Sequence[float]) -> dict[str, Any]:
        n = len(self.fields)
        return {'name': list(self.joints), **{field: [values[j * n + i] for j in range(len(self.joints))]
                                              for i, field in enumerate(self.fields)}}


@dataclass(frozen=True)
class FieldReader:
    """Dotted field paths of a message, e.g. twist.twist.linear.x of an Odometry."""

    paths: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.paths)

    def read(self, msg: Any) -> np.ndarray:
        return np.array([get_path(msg, path) for path in self.paths], dtype=np.float32)

    def write(self, values: Sequence[float]) -> dict[str, Any]:
        return dict(zip(self.paths, values))


@dataclass(frozen=True)
class ObservationAdapter:
    """Where observations come from and how a message becomes the policy's vector."""

    topic: str
    type_name: str
    reader: ObservationReader
    qos: QosConfig

    def decode(self, msg: Any, expected_size: int) -> np.ndarray:
        """The observation vector; MessageError (one line) when its size is wrong or a value is not finite."""
        obs = self.reader.read(msg)
        if obs.size != expected_size:
            raise MessageError(f'{self.type_name} on {self.topic} gave {obs.size} values, the policy expects '
                               f'{expected_size}')
        if not np.all(np.isfinite(obs)):
            raise MessageError(f'{self.type_name} on {self.topic} holds NaN or infinite values')
        return obs

    def encode(self, obs: Sequence[float]) -> dict[str, Any]:
        """Field path -> value of the message carrying observation `obs` (env side)."""
        values = [float(v) for v in obs]
        if self.reader.size is not None and len(values) != self.reader.size:
            raise ValueError(f'observation {values} has {len(values)} values, the adapter maps {self.reader.size}')
        return self.reader.write(values)


@dataclass(frozen=True)
class ActionAdapter:
    """Where actions go and how an action becomes message fields."""

    topic: str
    type_name: str
    fields: tuple[str, ...] | None  # Twist: the field paths the vector fills; None: Float32MultiArray data
    table: tuple[tuple[float, ...], ...] | None  # discrete action index -> vector; None: continuous
    qos: QosConfig

    def encode(self, action: int | Sequence[float]) -> dict[str, Any]:
        """Field path -> value for one action: an index into the table, or a vector (continuous)."""
        if isinstance(action, (int, np.integer)):
            vector = self._row(int(action))
        else:
            vector = tuple(float(v) for v in action)
            if self.fields is not None and len(vector) != len(self.fields):
                raise ValueError(f'action {list(vector)} has {len(vector)} values for fields {list(self.fields)}')
        if self.fields is None:
            return {'data': list(vector)}
        return dict(zip(self.fields, vector))

    def decode(self, msg: Any, action_shape: tuple[int, ...] = ()) -> int | np.ndarray:
        """The action a command stands for (env side): for a Discrete env the nearest table row; for a
        Box env (``action_shape``) the values read back from the fields (or data) as one float32 action.

        MessageError (one line) for a wrong number of values, a non-finite one, or (discrete) one
        outside the range of its table column. A continuous action's bounds are the stepper's to check."""
        vector = np.asarray(msg.data if self.fields is None else [get_path(msg, f) for f in self.fields],
                            dtype=np.float32)
        if action_shape:
            size = int(np.prod(action_shape))
            if vector.size != size:
                raise MessageError(f'{self.type_name} on {self.topic} holds {vector.size} values, the env\'s actions '
                                   f'have {size}')
            self._check_finite(vector)
            return vector.reshape(action_shape)
        table = np.asarray(self._table(), dtype=np.float32)
        names = self.fields or [f'data[{i}]' for i in range(table.shape[1])]
        if vector.shape != table.shape[1:]:
            raise MessageError(f'{self.type_name} on {self.topic} holds {vector.size} values, the action table '
                               f'rows have {table.shape[1]}')
        self._check_finite(vector)
        low, high = table.min(axis=0), table.max(axis=0)
        outside = np.flatnonzero((vector < low) | (vector > high))
        if outside.size:
            i = int(outside[0])
            raise MessageError(f'{self.type_name} on {self.topic}: {names[i]} = {vector[i]:g} is outside the action '
                               f'table range [{low[i]:g}, {high[i]:g}]')
        return int(np.argmin(np.sum((table - vector) ** 2, axis=1)))

    def _check_finite(self, vector: np.ndarray) -> None:
        if not np.all(np.isfinite(vector)):
            raise MessageError(f'{self.type_name} on {self.topic} holds NaN or infinite values')

    def _table(self) -> tuple[tuple[float, ...], ...]:
        if self.table is None:
            raise ValueError('a discrete action needs a table in the adapter config')
        return self.table

    def _row(self, index: int) -> tuple[float, ...]:
        table = self._table()
        if not 0 <= index < len(table):
            raise ValueError(f'action {index} is outside the table of {len(table)} rows')
        return table[index]


@dataclass(frozen=True)
class AdapterConfig:
    observation: ObservationAdapter
    action: ActionAdapter

    def check_sizes(self, obs_size: int, n_actions: int, side: str = 'policy', action_dim: int = 0) -> None:
        """Raise ConfigError when the config cannot serve a policy or env (`side`) of these sizes: discrete
        with `n_actions`, or continuous with `action_dim` values per action (then `n_actions` is 0)."""
        size = self.observation.reader.size
        if size is not None and size != obs_size:
            raise ConfigError(f'the adapter maps {size} observation values, the {side} has {obs_size}')
        if action_dim:
            fields = self.action.fields
            if self.action.table is not None or (fields is not None and len(fields) != action_dim):
                raise ConfigError(f'the {side} has continuous actions of {action_dim} values: the adapter action needs '
                                  f'no table and {action_dim} fields, it has '
                                  f'{"a table" if self.action.table is not None else f"{len(fields or ())} fields"}')
            return
        table = self.action.table
        if table is None or len(table) != n_actions:
            raise ConfigError(f'the {side} has {n_actions} discrete actions: the adapter action table needs '
                              f'{n_actions} rows, it has {0 if table is None else len(table)}')


def load_adapter_config(path: str | Path) -> AdapterConfig:
    """Read and validate an adapter file; every error is one line naming the file."""
    data = read_yaml(Path(path), 'adapter config')
    try:
        return parse_adapter_config(data)
    except ConfigError as err:
        raise ConfigError(f'{path}: {err}') from None


def parse_adapter_config(data: Any) -> AdapterConfig:
    _keys('adapter config', data, ('observation', 'action'), ('observation', 'action'))
    return AdapterConfig(parse_observation(data['observation']), parse_action(data['action']))


def parse_observation(data: Any) -> ObservationAdapter:
    _keys('observation', data, ('topic', 'type', 'joints', 'fields', 'indices', 'qos'), ('topic', 'type'))
    type_name = normalise_type(data['type'])
    allowed = {ARRAY: ('indices',), JOINT_STATE: ('joints', 'fields'), ODOMETRY: ('fields',)}
    if type_name not in allowed:
        raise ConfigError(f'observation type must be one of {", ".join(allowed)}, got {data["type"]!r}')
    extra = sorted(set(data) & {'joints', 'fields', 'indices'} - set(allowed[type_name]))
    if extra:
        raise ConfigError(f'observation keys {extra} do not apply to {type_name}')
    if type_name == ARRAY:
        indices = data.get('indices')
        reader: ObservationReader = ArrayReader(None if indices is None else _indices(indices))
    elif type_name == JOINT_STATE:
        reader = JointStateReader(_names('joints', data.get('joints')), _choices('fields', data.get('fields'),
                                                                                  JOINT_FIELDS))
    else:
        reader = FieldReader(_choices('fields', data.get('fields'), ODOMETRY_FIELDS))
    return ObservationAdapter(_topic(data['topic']), type_name, reader,
                              parse_qos(data.get('qos', {}), OBSERVATION_QOS))


def parse_action(data: Any) -> ActionAdapter:
    _keys('action', data, ('topic', 'type', 'fields', 'table', 'qos'), ('topic', 'type'))
    type_name = normalise_type(data['type'])
    if type_name == TWIST:
        fields: tuple[str, ...] | None = _choices('fields', data.get('fields'), TWIST_FIELDS)
    elif type_name == ARRAY:
        if 'fields' in data:
            raise ConfigError(f'action fields do not apply to {ARRAY}: the action vector fills data')
        fields = None
    else:
        raise ConfigError(f'action type must be one of {TWIST}, {ARRAY}, got {data["type"]!r}')
    table = None if data.get('table') is None else _table(data['table'], None if fields is None else len(fields))
    return ActionAdapter(_topic(data['topic']), type_name, fields, table, parse_qos(data.get('qos', {}), ACTION_QOS))


def get_path(msg: Any, path: str) -> Any:
    """The value at a dotted field path."""
    for name in path.split('.'):
        msg = getattr(msg, name)
    return msg


def set_fields(msg: Any, values: dict[str, Any]) -> Any:
    """Assign each dotted path of `values` on `msg`; returns `msg`."""
    for path, value in values.items():
        *parents, name = path.split('.')
        setattr(get_path(msg, '.'.join(parents)) if parents else msg, name, value)
    return msg


def _keys(what: str, data: Any, allowed: tuple[str, ...], required: tuple[str, ...]) -> None:
    if not isinstance(data, dict):
        raise ConfigError(f'{what} must be a mapping with keys among {", ".join(allowed)}, got {data!r}')
    unknown = sorted(set(data) - set(allowed))
    missing = [key for key in required if key not in data]
    if unknown or missing:
        raise ConfigError(f'{what}: unknown keys {unknown}, missing keys {missing} (allowed: {", ".join(allowed)})')


def _topic(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f'topic must be a ROS topic name such as /cmd_vel, got {value!r}')
    return value


def _names(key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f'{key} must be a non-empty list of names, got {value!r}')
    if len(set(value)) != len(value):
        raise ConfigError(f'{key} lists a name twice: {value!r}')
    return tuple(value)


def _choices(key: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    names = _names(key, value)
    bad = [name for name in names if name not in allowed]
    if bad:
        raise ConfigError(f'{key}: unknown {bad[0]!r} (choose from {", ".join(allowed)})')
    return names


def _indices(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise ConfigError(f'indices must be a non-empty list of integers >= 0, got {value!r}')
    return tuple(value)


def _table(value: Any, width: int | None) -> tuple[tuple[float, ...], ...]:
    """Rows of finite numbers, all of one width (`width` when the fields fix it)."""
    if not isinstance(value, list) or not value or not all(isinstance(row, list) and row for row in value):
        raise ConfigError(f'table must be a non-empty list of non-empty number lists, got {value!r}')
    width = len(value[0]) if width is None else width
    for i, row in enumerate(value):
        if len(row) != width or not all(_finite(v) for v in row):
            raise ConfigError(f'table row {i} must hold {width} finite numbers, got {row!r}')
    return tuple(tuple(float(v) for v in row) for row in value)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
