"""Trace bags: rosbag2 bags (MCAP or sqlite3), written and read with rosbags.

A trace bag holds ``calf_msgs/msg/TraceSample`` rows on ``/calf/trace`` (the generic shim's: on
``/calf/trace/<relayed topic>``; readers take the rows of every TraceSample topic) and, optionally,
the raw Observation and Action topics they were measured on. The calf_msgs types are registered
in rosbags from their ``.msg`` files (see ``msg_dir``), so a bag carries the same definitions and
type hashes as one from ``ros2 bag record``.

Durability: ``TraceBagWriter.flush()`` ends the current MCAP chunk and fsyncs the file (sqlite3:
commits). A writer killed before ``close()`` leaves no metadata.yaml and, for MCAP, no summary or
footer; such a bag is refused by default, and ``recover=True`` reads every complete chunk (or
committed transaction) of it. What was written after the last flush is lost.
"""
from __future__ import annotations

import os
import sqlite3
import struct
from collections.abc import Callable, Iterable
from contextlib import closing
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from mcap.exceptions import McapError
from mcap.records import Channel, Message, Schema
from mcap.stream_reader import StreamReader
from rosbags.interfaces import Connection
from rosbags.rosbag2 import Reader, StoragePlugin, Writer, WriterError
from rosbags.rosbag2.storage_mcap import McapWriter
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from calf_core.errors import TraceError
from calf_core.traces import BAG_SUFFIXES, ActionEvent, ObsEvent, Sample, Trace, import_from_messages

TRACE_TOPIC = '/calf/trace'
TRACE_TYPE = 'calf_msgs/msg/TraceSample'
OBSERVATION_TYPE = 'calf_msgs/msg/Observation'
ACTION_TYPE = 'calf_msgs/msg/Action'
_SOURCE_MSG_DIR = Path(__file__).resolve().parents[2] / 'calf_msgs' / 'msg'
_PACKED_MSG_DIR = Path(__file__).resolve().parent / 'msg'  # in a wheel: see setup.py
_RECOVER_HINT = ('; if its recording was interrupted, `calf trace recover BAG --out NEW_BAG` '
                 'keeps its complete chunks')


class Storage(str, Enum):
    MCAP = 'mcap'
    SQLITE3 = 'sqlite3'


class BagMessage(NamedTuple):
    topic: str
    msgtype: str
    log_ns: int  # the bag's timestamp: when the recorder received or wrote the message
    data: bytes  # CDR


def msg_dir() -> Path:
    """The calf_msgs ``msg`` directory: calf_msgs' installed share directory in a ROS workspace, else the
    copy a pip-built calf_core carries (packed from calf_msgs at build time), else the source tree."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:  # no ROS: calf_core installed alone
        return _PACKED_MSG_DIR if _PACKED_MSG_DIR.is_dir() else _SOURCE_MSG_DIR
    try:
        installed = Path(get_package_share_directory('calf_msgs')) / 'msg'
        if installed.is_dir():
            return installed
    except PackageNotFoundError:
        pass
    return _PACKED_MSG_DIR if _PACKED_MSG_DIR.is_dir() else _SOURCE_MSG_DIR


@lru_cache(maxsize=1)
def typestore() -> Typestore:
    """ROS 2 Kilted's types plus calf_msgs, registered from the .msg text."""
    store = get_typestore(Stores.ROS2_KILTED)
    types: dict[str, Any] = {}
    for path in sorted(msg_dir().glob('*.msg')):
        types.update(get_types_from_msg(path.read_text(encoding='utf-8'), f'calf_msgs/msg/{path.stem}'))
    store.register(types)
    if TRACE_TYPE not in store.types:
        raise TraceError(f'calf_msgs .msg files not found in {msg_dir()}')
    return store


def _one_line(err: BaseException) -> str:
    return ' '.join(str(err).split()).rstrip('.') or type(err).__name__


def _storage(storage: Storage | str) -> Storage:
    try:
        return Storage(storage)
    except ValueError:
        raise TraceError(f'storage must be mcap or sqlite3, got {storage!r}') from None


# --- writing ----------------------------------------------------------------------------------

class TraceBagWriter:
    """Writes trace samples on ``trace_topics``, and optionally raw topics, into a new bag at ``path``."""

    def __init__(self, path: str | Path, storage: Storage | str = Storage.MCAP,
                 trace_topics: Iterable[str] = (TRACE_TOPIC,)) -> None:
        self.path, self.storage = Path(path), _storage(storage)
        self._store = typestore()
        if self.path.exists():
            raise TraceError(f'{str(self.path)!r} exists already: give a new bag path')
        if not self.path.parent.is_dir():  # create the bag directory only, never a tree of parents
            raise TraceError(f'the parent of bag {str(self.path)!r} does not exist: create {str(self.path.parent)!r} '
                             f'first')
        try:
            self._writer = Writer(self.path, version=Writer.VERSION_LATEST,
                                  storage_plugin=StoragePlugin[self.storage.name])
            self._writer.open()
        except (WriterError, OSError) as err:
            raise TraceError(f'cannot create bag {str(self.path)!r}: {_one_line(err)}') from None
        self._connections: dict[str, Connection] = {}
        for topic in trace_topics:
            self.add_topic(topic, TRACE_TYPE)
        self.samples = 0

    def add_topic(self, topic: str, msgtype: str) -> None:
        if topic not in self._connections:
            self._connections[topic] = self._writer.add_connection(topic, msgtype, typestore=self._store)

    def write_sample(self, sample: Sample, log_ns: int, topic: str = TRACE_TOPIC) -> None:
        """One TraceSample row on ``topic`` (one of ``trace_topics``), logged (and header-stamped) at ``log_ns``."""
        types = self._store.types
        stamp = types['builtin_interfaces/msg/Time'](sec=log_ns // 10**9, nanosec=log_ns % 10**9)
        msg = types[TRACE_TYPE](header=types['std_msgs/msg/Header'](stamp=stamp, frame_id=''),
                                seq=sample.seq, direction=sample.direction, sent_ns=sample.sent_ns,
                                received_ns=sample.received_ns, size_bytes=sample.size_bytes, lost=sample.lost)
        self._writer.write(self._connections[topic], log_ns, self._store.serialize_cdr(msg, TRACE_TYPE))
        self.samples += 1

    def write_raw(self, topic: str, data: bytes, log_ns: int) -> None:
        """A serialized message on a topic added with ``add_topic``."""
        self._writer.write(self._connections[topic], log_ns, data)

    def flush(self) -> None:
        """Make everything written so far durable: end the MCAP chunk and fsync (sqlite3: commit).

        Uses rosbags' storage writers directly (pinned rosbags 0.11.9): they buffer a chunk of up to
        1 MiB (MCAP) or one transaction (sqlite3) until ``close()`` otherwise."""
        storage = self._writer.storage
        if isinstance(storage, McapWriter):
            if storage.chunk.msgs:
                storage.close_chunk()
            storage.bio.flush()
            os.fsync(storage.bio.fileno())
        elif storage is not None:
            storage.conn.commit()

    def close(self) -> None:
        """Write the MCAP summary and footer (sqlite3: commit) and metadata.yaml."""
        if self._writer.storage is not None:
            self._writer.close()

    def __enter__(self) -> TraceBagWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_trace_bag(path: str | Path, samples: Trace | Iterable[Sample],
                    storage: Storage | str = Storage.MCAP) -> int:
    """Write samples (each logged at its receive time, or its send time if lost); return how many."""
    rows = samples.samples() if isinstance(samples, Trace) else list(samples)
    with TraceBagWriter(path, storage) as writer:
        for sample in sorted(rows, key=_log_ns):
            writer.write_sample(sample, _log_ns(sample))
    return len(rows)


def _log_ns(sample: Sample) -> int:
    return sample.sent_ns if sample.lost else sample.received_ns


# --- reading ----------------------------------------------------------------------------------

def _read_closed(path: Path, wanted: Callable[[str], bool]) -> tuple[dict[str, str], list[BagMessage]]:
    """Topics and the wanted messages of a closed bag, in log-time order."""
    with Reader(path) as reader:
        topics = {c.topic: c.msgtype for c in reader.connections}
        connections = [c for c in reader.connections if wanted(c.msgtype)]
        if not connections:  # an empty filter would mean every connection
            return topics, []
        return topics, [BagMessage(c.topic, c.msgtype, t, bytes(d)) for c, t, d in reader.messages(connections)]


def _salvage_mcap(path: Path) -> tuple[dict[str, str], list[BagMessage]]:
    """Every message of the complete chunks of an MCAP file that may end mid-record."""
    schemas: dict[int, str] = {}
    channels: dict[int, tuple[str, str]] = {}
    out: list[BagMessage] = []
    with open(path, 'rb') as stream:
        try:
            for record in StreamReader(stream, validate_crcs=True).records:
                if isinstance(record, Schema):
                    schemas[record.id] = record.name
                elif isinstance(record, Channel):
                    channels[record.id] = (record.topic, schemas.get(record.schema_id, ''))
                elif isinstance(record, Message) and record.channel_id in channels:
                    out.append(BagMessage(*channels[record.channel_id], record.log_time, bytes(record.data)))
        except (McapError, ValueError, struct.error):
            pass  # the file ends inside a record (a chunk being written when the writer died)
    return dict(channels.values()), out


def _salvage_db3(path: Path) -> tuple[dict[str, str], list[BagMessage]]:
    """Every committed message of a sqlite3 bag; opening it rolls back an unfinished transaction."""
    query = ('SELECT t.name, t.type, m.timestamp, m.data FROM messages m JOIN topics t ON m.topic_id = t.id '
             'ORDER BY m.timestamp')
    with closing(sqlite3.connect(f'file:{path}', uri=True)) as conn:
        topics = dict(conn.execute('SELECT name, type FROM topics').fetchall())
        return topics, [BagMessage(n, t, ts, bytes(d)) for n, t, ts, d in conn.execute(query)]


def _salvage(path: Path) -> tuple[dict[str, str], list[BagMessage]]:
    files = sorted(f for f in path.iterdir() if f.suffix in BAG_SUFFIXES) if path.is_dir() else [path]
    if not files:
        raise TraceError(f'{str(path)!r} holds no .mcap or .db3 file to recover')
    topics: dict[str, str] = {}
    messages: list[BagMessage] = []
    for file in files:
        found_topics, found = _salvage_mcap(file) if file.suffix == '.mcap' else _salvage_db3(file)
        topics.update(found_topics)
        messages += found
    if not topics:
        raise TraceError(f'{str(path)!r} holds no complete chunk to recover')
    return topics, sorted(messages, key=lambda m: m.log_ns)


def read_bag(path: str | Path, wanted: Callable[[str], bool] = lambda msgtype: True,
             recover: bool = False) -> tuple[dict[str, str], list[BagMessage]]:
    """All topics (name -> type) and the messages whose type is ``wanted``, in log-time order.

    A missing path, an unclosed, truncated or corrupt bag raise a one-line TraceError. With
    ``recover``, an unclosed bag (no metadata.yaml, no MCAP footer) yields its complete chunks."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f'no such bag: {str(path)!r}')
    if path.is_dir() and not (path / 'metadata.yaml').exists() and not recover:
        raise TraceError(f'{str(path)!r} has no metadata.yaml: not a bag, or a recording never closed{_RECOVER_HINT}')
    for entry in path.iterdir() if path.is_dir() else (path,):
        if not (entry.is_file() or entry.is_dir()):  # a pipe or device would block the read
            raise TraceError(f'{str(entry)!r} is not a regular file (a pipe, device or broken link): not a bag')
    try:
        return _salvage(path) if recover else _read_closed(path, wanted)
    except TraceError:
        raise
    except Exception as err:  # noqa: BLE001  rosbags and sqlite raise many types on damaged files
        raise TraceError(f'cannot read bag {str(path)!r}: {_one_line(err)}'
                         f'{"" if recover else _RECOVER_HINT}') from None


def _decode(store: Typestore, message: BagMessage) -> Any:
    """Deserialize CDR like ``Typestore.deserialize_cdr``, but accept trailing bytes: rmw_fastrtps
    (Kilted) serializes some messages (calf_msgs/Action) 4 bytes longer than rosbags' check allows."""
    try:
        if message.data[:2] not in (b'\x00\x00', b'\x00\x01'):
            raise ValueError(f'unsupported CDR encapsulation {message.data[:2].hex()}')
        msgdef = store.get_msgdef(message.msgtype)
        deserialize = msgdef.deserialize_cdr_le if message.data[1] else msgdef.deserialize_cdr_be
        return deserialize(memoryview(message.data)[4:], 0, msgdef.cls, store)[0]
    except Exception as err:  # noqa: BLE001  corrupt CDR raises struct, index or value errors
        raise TraceError(f'corrupt {message.msgtype} message on {message.topic} at {message.log_ns}: '
                         f'{_one_line(err)}') from None


def read_trace_bag(path: str | Path, recover: bool = False) -> Trace:
    """The trace in a bag's TraceSample topic; a TraceError if it has none."""
    topics, messages = read_bag(path, lambda msgtype: msgtype == TRACE_TYPE, recover)
    messages = [m for m in messages if m.msgtype == TRACE_TYPE]
    if not messages and TRACE_TYPE in topics.values():
        raise TraceError(f'{str(path)!r} has a trace topic but no samples: the recording saw no message '
                         'on both sides of the link')
    if not messages:
        listed = ', '.join(f'{t} ({m})' for t, m in sorted(topics.items())) or 'none'
        raise TraceError(f'{str(path)!r} holds no {TRACE_TYPE} samples (topics: {listed}); a bag of '
                         'Observation and Action topics needs `calf trace import` first')
    store = typestore()
    rows = (_decode(store, m) for m in messages)
    return Trace.from_samples(Sample(r.direction, r.seq, r.sent_ns, r.received_ns, r.size_bytes, r.lost)
                              for r in rows)


def recover_bag(path: str | Path, out: str | Path, storage: Storage | str = Storage.MCAP) -> dict[str, int]:
    """Copy the readable messages of an unclosed bag into a new, closed bag; return counts per topic."""
    topics, messages = read_bag(path, recover=True)
    store = typestore()
    counts: dict[str, int] = {}
    with TraceBagWriter(out, storage) as writer:
        for topic, msgtype in topics.items():
            if msgtype in store.types:
                writer.add_topic(topic, msgtype)
        for m in messages:
            if m.msgtype in store.types:
                writer.write_raw(m.topic, m.data, m.log_ns)
                counts[m.topic] = counts.get(m.topic, 0) + 1
    return counts


# --- import from Observation / Action topics --------------------------------------------------

def _stamp_ns(msg: Any) -> int:
    return int(msg.header.stamp.sec) * 10**9 + int(msg.header.stamp.nanosec)


def _obs_event(store: Typestore, m: BagMessage) -> ObsEvent:
    o = _decode(store, m)
    return ObsEvent(int(o.episode), int(o.seq), _stamp_ns(o), m.log_ns, len(m.data), bool(o.terminated or o.truncated))


def _action_event(store: Typestore, m: BagMessage) -> ActionEvent:
    a = _decode(store, m)
    return ActionEvent(int(a.episode), int(a.obs_seq), _stamp_ns(a), m.log_ns, len(m.data))


def _pick(path: Path, topics: list[str], given: str | None, suffix: str, msgtype: str, option: str) -> str:
    """The given topic, else the one ending in ``suffix``, else the only one of its type."""
    if given is not None:
        if given not in topics:
            raise TraceError(f'{str(path)!r} has no {msgtype} topic {given!r} (has: {", ".join(topics) or "none"})')
        return given
    preferred = [t for t in topics if t.endswith(suffix)]
    if len(preferred) == 1 or len(topics) == 1:
        return (preferred or topics)[0]
    raise TraceError(f'{str(path)!r}: cannot tell which {msgtype} topic to use among '
                     f'{", ".join(topics) or "none"}; pass {option}')


def import_bag(path: str | Path, obs_topic: str | None = None, action_topic: str | None = None,
               sent_action_topic: str | None = None, min_delay_ms: float | None = None) -> Trace:
    """A trace derived from a bag of Observation and Action topics (see ``import_from_messages``).

    ``obs_topic`` must have been logged on the policy side (default: the one ending in
    desktop/observation, else the only one); ``action_topic`` on the env side (default: edge/action,
    else the only one); ``sent_action_topic`` on the policy side (default: desktop/action if
    present), to count lost actions exactly."""
    path = Path(path)
    topics, messages = read_bag(path, lambda t: t in (OBSERVATION_TYPE, ACTION_TYPE))
    observations = sorted(name for name, t in topics.items() if t == OBSERVATION_TYPE)
    actions = sorted(name for name, t in topics.items() if t == ACTION_TYPE)
    obs_topic = _pick(path, observations, obs_topic, 'desktop/observation', OBSERVATION_TYPE, '--obs-topic')
    action_topic = _pick(path, actions, action_topic, 'edge/action', ACTION_TYPE, '--action-topic')
    if sent_action_topic is not None:
        _pick(path, actions, sent_action_topic, '', ACTION_TYPE, '--sent-action-topic')
    else:
        sent_action_topic = next((t for t in actions if t.endswith('desktop/action') and t != action_topic), None)
    store = typestore()
    on = {topic: [m for m in messages if m.topic == topic] for topic in topics}
    sent = [_action_event(store, m) for m in on[sent_action_topic]] if sent_action_topic else None
    return import_from_messages([_obs_event(store, m) for m in on[obs_topic]],
                                [_action_event(store, m) for m in on[action_topic]], sent, min_delay_ms)
