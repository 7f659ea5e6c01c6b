"""Distributed training's messages as bytes: trajectory batches up, weights down, never pickle.

A frame is ``MAGIC | format u8 | kind u8 | epoch u64 | seq u64 | sender_len u16 | header_len u32 |
payload_len u64 | sender | header | payload | tag``: the header is JSON, the payload a safetensors blob,
the tag an HMAC-SHA256 under the shared key (``key``) of everything before it. A ``Sealer``
writes one sender's frames, numbering them ``(epoch, seq)``: the epoch is the sender's start time, the
seq counts up. An ``Opener`` checks the tag first (constant time; nothing of an unauthenticated frame
is parsed), then that the frame came from the sender whose chunks carried it and is newer than the
last one it accepted from that sender (a replayed frame is refused), then decodes it, refusing
tensors of the wrong names, shapes or types. A weights frame's payload (a snapshot or a delta,
``delta``) is zstd-compressed and never expands past ``max_bytes``; a control frame tells a
worker to pause or go on (flow control).

``split`` cuts a frame into chunks of at most ``chunk_bytes`` of its bytes, each followed by its own
tag: an HMAC-SHA256 under the key of the chunk's kind, sender, message id, index, count, total size
and piece (``tagged``). A sealed frame's chunks carry message id ``epoch + seq``, which grows across
restarts of the sender. ``Reassembler`` checks each chunk's tag before the chunk touches any state,
so that without the key no chunk can replace, corrupt or crowd out a message in progress; it joins
them per sender, kind and message id within a byte budget across all senders and refuses (one log
line, one counter per reason) chunks that are malformed, forged, replayed or over budget, and
messages left incomplete. The frame's own tag still binds the joined chunks to one sealed frame
(chunks of two frames that share a message id, after a sender's clock went back, do not join into a
frame) and lets ``Opener`` check any frame on its own.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import struct
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

import torch
import zstandard
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from calf_agent.dist.delta import checksum
from calf_core.errors import MessageError

MAGIC = b'CALF'
FORMAT = 3
"""The wire format's version, in every frame and every chunk tag (3: chunks carry tags)."""
_PREFIX = struct.Struct('<4sBBQQHIQ')
_CHUNK_MAGIC = b'CALF chunk'  # its 5th byte is no format: no chunk tag's input is a frame's
_CHUNK_HEAD = struct.Struct('<10sBBQIIQH')
_KIND_AT = 5  # the kind's offset in a frame
_TAG = 32
MAX_BYTES = 64 * 1024 * 1024
"""Largest frame a receiver accepts by default (64 MiB)."""
BUDGET_BYTES = 4 * MAX_BYTES
"""Bytes a receiver reserves at most for messages in progress, over all senders (256 MiB)."""
MAX_PENDING = 256
"""Messages in progress a receiver keeps at most, over all senders."""
MAX_SENDER = 64
"""Longest sender name a chunk may carry."""
ZSTD_LEVEL = 19
"""Compression level of weights payloads."""
CHUNK_BYTES = 16 * 1024
"""Default chunk size: small enough that one lost datagram costs little on a lossy link."""
IN_FLIGHT = 2
"""Messages in progress a receiver keeps per sender and kind: a newer one does not drop an older one
still arriving."""
MAX_SENDERS = 1024
"""Senders a receiver remembers the newest frame and message of (the longest silent is forgotten)."""


def shown(text: str, limit: int = MAX_SENDER) -> str:
    """``text`` for a log line: printable characters only, at most ``limit`` of them, quoted."""
    clean = ''.join(c if c.isprintable() else '?' for c in text[:limit + 1])
    return repr(clean if len(clean) <= limit else clean[:limit] + '...')


class Refused(MessageError):
    """A frame refused for ``reason`` (the counter it goes to): unauthenticated, replayed or corrupt."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class Kind(IntEnum):
    """What a frame carries (the same numbers as ``calf_msgs/ByteChunk``'s KIND_*)."""

    BATCH = 0
    WEIGHTS = 1
    HELLO = 2
    CONTROL = 3  # flow control, learner to worker


@dataclass
class TrajectoryBatch:
    """``T`` steps of ``N`` envs collected by one worker with policy ``version``.

    ``obs`` are raw features; ``dones[t]`` flags ``obs[t]`` as the first of an episode (CleanRL's
    convention). ``actions`` are indices (int64, ``[T, N]`` or ``[T, N, H]``) or values (float32,
    ``[T, N, A]`` or ``[T, N, H, A]``); ``behaviour`` ``[T, N, P]`` holds the behaviour distribution's
    parameters (``policy``) and ``logprobs`` its log-probabilities of the actions, over the plan
    elements ``masks`` ``[T, N, H]`` marks as executed. ``rewards`` are as the learner trains on them:
    scaled where the task normalises rewards, with ``γ V(final obs)`` added where an episode was
    truncated. ``state_h``/``state_c`` ``[N, S]`` are an LSTM's state before the first step (S = 0
    for feed-forward agents).
    """

    worker_id: str
    seq: int
    version: int
    learner_run: int
    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    behaviour: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    next_obs: torch.Tensor
    next_done: torch.Tensor
    masks: torch.Tensor
    state_h: torch.Tensor
    state_c: torch.Tensor
    episode_returns: list[float] = field(default_factory=list)

    @property
    def env_steps(self) -> int:
        return int(self.rewards.numel())


_BATCH_TENSORS = {'obs': torch.float32, 'actions': torch.int64, 'logprobs': torch.float32,
                  'behaviour': torch.float32, 'rewards': torch.float32, 'dones': torch.float32,
                  'next_obs': torch.float32, 'next_done': torch.float32, 'masks': torch.float32,
                  'state_h': torch.float32, 'state_c': torch.float32}
_ACTION_TYPES = (torch.int64, torch.float32)


@dataclass
class WeightsMessage:
    """The learner's policy at ``version``: its ``spec()``, the workers' env settings and ``state``.

    With ``base_version`` -1 ``state`` is a snapshot (every tensor, full precision); otherwise a delta:
    the tensors that changed since ``base_version``, in reduced precision, which the worker applies
    only onto exactly that version. ``checksum`` (``delta.checksum``) is of the state that results.
    """

    version: int
    learner_run: int
    target: str  # the worker it is addressed to
    agent_spec: dict[str, Any]
    env_config: dict[str, Any]
    state: dict[str, torch.Tensor]
    base_version: int = -1
    checksum: str = ''


def snapshot(agent: torch.nn.Module, version: int, learner_run: int, target: str,
             env_config: dict[str, Any]) -> WeightsMessage:
    """A snapshot of ``agent`` (every tensor, full precision, with its checksum) for worker ``target``."""
    state = {k: v.detach().clone() for k, v in agent.state_dict().items()}
    return WeightsMessage(version, learner_run, target, agent.spec(), env_config, state, -1, checksum(state))


@dataclass
class Hello:
    """A worker announcing itself, and the learner run and version it follows (0 and -1: none yet).

    A worker that cannot apply a delta says hello with version -1: it asks for a snapshot."""

    worker_id: str
    learner_run: int = 0
    version: int = -1


@dataclass
class Control:
    """Flow control for one worker: ``pause`` while a batch of it still waits at the learner."""

    target: str
    learner_run: int
    pause: bool


Message = TrajectoryBatch | WeightsMessage | Hello | Control


def encode(message: Message, key: bytes, sender: str, epoch: int, seq: int) -> bytes:
    """One frame holding ``message``, the ``seq``-th of ``sender``'s ``epoch``, tagged under ``key``."""
    if isinstance(message, TrajectoryBatch):
        header = {'worker_id': message.worker_id, 'seq': message.seq, 'version': message.version,
                  'learner_run': message.learner_run, 'episode_returns': message.episode_returns}
        tensors = {name: getattr(message, name).contiguous() for name in _BATCH_TENSORS}
        kind = Kind.BATCH
    elif isinstance(message, WeightsMessage):
        header = {'version': message.version, 'learner_run': message.learner_run, 'target': message.target,
                  'agent_spec': message.agent_spec, 'env_config': message.env_config,
                  'base_version': message.base_version, 'checksum': message.checksum}
        return _frame(Kind.WEIGHTS, key, sender, epoch, seq, header,
                      compress(st_save({k: v.detach().contiguous() for k, v in message.state.items()})))
    elif isinstance(message, Control):
        header = {'target': message.target, 'learner_run': message.learner_run, 'pause': message.pause}
        tensors, kind = {}, Kind.CONTROL
    else:
        header = {'worker_id': message.worker_id, 'learner_run': message.learner_run, 'version': message.version}
        tensors, kind = {}, Kind.HELLO
    return _frame(kind, key, sender, epoch, seq, header, st_save(dict(tensors)) if tensors else b'')


def _frame(kind: Kind, key: bytes, sender: str, epoch: int, seq: int, header: Mapping[str, Any],
           payload: bytes) -> bytes:
    name = sender.encode()
    head = json.dumps(header, sort_keys=True).encode()
    body = _PREFIX.pack(MAGIC, FORMAT, int(kind), epoch, seq, len(name), len(head), len(payload)) + name + head + payload
    return body + hmac.new(key, body, hashlib.sha256).digest()


class Sealer:
    """Writes one sender's frames: each tagged under the key and numbered after the one before."""

    def __init__(self, key: bytes, sender: str, epoch: int | None = None) -> None:
        """``epoch`` defaults to the wall clock in ns: a restarted sender numbers above its last run."""
        self._key, self.sender = key, sender
        self.epoch = time.time_ns() if epoch is None else epoch
        self.seq = 0

    def encode(self, message: Message) -> bytes:
        """The next frame of this sender, holding ``message``."""
        self.seq += 1
        return encode(message, self._key, self.sender, self.epoch, self.seq)

    def chunks(self, message: Message, chunk_bytes: int = CHUNK_BYTES) -> list[Chunk]:
        """The next frame of this sender, holding ``message``, as tagged chunks with message id ``epoch + seq``."""
        frame = self.encode(message)
        return split(frame, Kind(frame[_KIND_AT]), self.sender, self.epoch + self.seq, self._key, chunk_bytes)


class Opener:
    """Checks and decodes frames under the key; remembers the newest ``(epoch, seq)`` of each sender.

    At most ``max_senders`` are remembered (the longest silent is forgotten); only a holder of the
    key can add one.
    """

    def __init__(self, key: bytes, max_senders: int = MAX_SENDERS, max_bytes: int = MAX_BYTES) -> None:
        self._key, self.max_senders, self.max_bytes = key, max_senders, max_bytes
        self._newest: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def decode(self, frame: bytes, sender: str) -> Message:
        """The message in ``frame``, which came as chunks of ``sender``; Refused (one line) if it is bad."""
        if len(frame) > self.max_bytes:
            raise Refused('corrupt', f'frame of {len(frame)} bytes exceeds the limit of {self.max_bytes}')
        if len(frame) < _PREFIX.size + _TAG or not hmac.compare_digest(
                hmac.new(self._key, frame[:-_TAG], hashlib.sha256).digest(), frame[-_TAG:]):
            raise Refused('unauthenticated', f'frame of {len(frame)} bytes has no valid tag: not signed with this '
                                             'run\'s key, or damaged on the way')
        magic, fmt, kind, epoch, seq, name_len, head_len, payload_len = _PREFIX.unpack_from(frame)
        if magic != MAGIC or fmt != FORMAT or _PREFIX.size + name_len + head_len + payload_len + _TAG != len(frame):
            raise Refused('corrupt', f'not a CALF frame of format {FORMAT} (magic {magic!r}, format {fmt}) or its '
                                     'lengths disagree')
        body = memoryview(frame)[_PREFIX.size:-_TAG]
        signer = bytes(body[:name_len]).decode(errors='replace')
        if signer != sender:
            raise Refused('unauthenticated', f'frame of {shown(signer)} arrived as chunks of {shown(sender)}')
        newest = self._newest.get(sender)
        if newest is not None and (epoch, seq) <= newest:
            raise Refused('replayed', f'frame {epoch}/{seq} is not newer than {newest[0]}/{newest[1]}, the last '
                                      'accepted from this sender')
        self._newest[sender] = (epoch, seq)
        self._newest.move_to_end(sender)
        while len(self._newest) > self.max_senders:
            self._newest.popitem(last=False)
        try:
            header = json.loads(bytes(body[name_len:name_len + head_len]))
            payload = bytes(body[name_len + head_len:])
            if kind == Kind.WEIGHTS:
                payload = decompress(payload, self.max_bytes)
            tensors = st_load(payload) if payload else {}
            return _message(Kind(kind), header, tensors)
        except Refused:
            raise
        except MessageError as err:
            raise Refused('corrupt', str(err)) from None
        except Exception as exc:  # json, safetensors, enum and key errors all mean a bad frame
            raise Refused('corrupt', f'undecodable frame: {" ".join(str(exc).split())[:200] or type(exc).__name__}'
                          ) from None


def compress(payload: bytes) -> bytes:
    """``payload`` as one zstd frame that records its size."""
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(payload)


def decompress(data: bytes, max_bytes: int) -> bytes:
    """The bytes of zstd frame ``data``; Refused (``oversized``) before more than ``max_bytes`` are expanded."""
    announced = zstandard.frame_content_size(data)
    if announced > max_bytes:
        raise Refused('oversized', f'compressed payload announces {announced} bytes (limit {max_bytes})')
    parts, size = [], 0
    with zstandard.ZstdDecompressor().stream_reader(data) as reader:
        while part := reader.read(1 << 20):
            size += len(part)
            if size > max_bytes:
                raise Refused('oversized', f'compressed payload expands past the limit of {max_bytes} bytes')
            parts.append(part)
    return b''.join(parts)


def _message(kind: Kind, header: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Message:
    if kind == Kind.HELLO:
        return Hello(str(header['worker_id']), int(header['learner_run']), int(header['version']))
    if kind == Kind.WEIGHTS:
        return WeightsMessage(int(header['version']), int(header['learner_run']), str(header['target']),
                              dict(header['agent_spec']), dict(header['env_config']), tensors,
                              int(header['base_version']), str(header['checksum']))
    if kind == Kind.CONTROL:
        return Control(str(header['target']), int(header['learner_run']), bool(header['pause']))
    if set(tensors) != set(_BATCH_TENSORS):
        raise MessageError(f'batch tensors {sorted(tensors)} differ from {sorted(_BATCH_TENSORS)}')
    for name, dtype in _BATCH_TENSORS.items():
        allowed = _ACTION_TYPES if name == 'actions' else (dtype,)
        if tensors[name].dtype not in allowed:
            raise MessageError(f'batch tensor {name} is {tensors[name].dtype}, expected {dtype}')
    batch = TrajectoryBatch(str(header['worker_id']), int(header['seq']), int(header['version']),
                            int(header['learner_run']), **tensors,
                            episode_returns=[float(r) for r in header['episode_returns']])
    _check_batch_shapes(batch)
    return batch


def _check_batch_shapes(b: TrajectoryBatch) -> None:
    """Raise MessageError unless every tensor agrees with ``rewards`` ``[T, N]`` and ``obs`` ``[T, N, D]``."""
    if b.rewards.dim() != 2 or b.obs.dim() != 3 or b.obs.shape[:2] != b.rewards.shape:
        raise MessageError(f'batch obs {tuple(b.obs.shape)} and rewards {tuple(b.rewards.shape)} '
                           'are not [T, N, D] and [T, N]')
    steps, envs, dim = b.obs.shape
    expected = {'actions': b.actions.shape[:2], 'logprobs': b.logprobs.shape, 'dones': b.dones.shape,
                'behaviour': b.behaviour.shape[:2], 'masks': b.masks.shape[:2]}
    bad = [name for name, shape in expected.items() if tuple(shape) != (steps, envs)]
    if b.next_obs.shape != (envs, dim) or b.next_done.shape != (envs,):
        bad.append('next_obs/next_done')
    if b.behaviour.dim() != 3 or b.masks.dim() != 3:
        bad.append('behaviour/masks (not [T, N, ...])')
    if b.state_h.dim() != 2 or b.state_h.shape != b.state_c.shape or len(b.state_h) != envs:
        bad.append('state_h/state_c')
    if bad:
        raise MessageError(f'batch of {steps} steps x {envs} envs has mismatched {", ".join(bad)}')
    floats = (b.obs, b.rewards, b.logprobs, b.behaviour, b.next_obs, b.state_h, b.state_c, b.actions.float())
    if not all(torch.isfinite(t).all() for t in floats):
        raise MessageError('batch holds NaN or infinite values')


class Chunk(NamedTuple):
    """One piece of a frame, as carried by ``calf_msgs/ByteChunk``.

    ``data`` is the piece (at most ``chunk_bytes`` of the frame) followed by the chunk's tag: an
    HMAC-SHA256 under the run's key of every other field and the piece (``tagged``).
    """

    kind: int
    sender: str
    message_id: int
    index: int
    count: int
    total_bytes: int
    data: bytes


def _chunk_tag(key: bytes, kind: int, sender: str, message_id: int, index: int, count: int, total_bytes: int,
               piece: bytes | memoryview) -> bytes:
    name = sender.encode('utf-8', 'surrogatepass')
    mac = hmac.new(key, _CHUNK_HEAD.pack(_CHUNK_MAGIC, FORMAT, kind, message_id, index, count, total_bytes,
                                         len(name)) + name, 'sha256')
    mac.update(piece)  # not joined to the head: a large piece is not copied
    return mac.digest()


def tagged(key: bytes, kind: int, sender: str, message_id: int, index: int, count: int, total_bytes: int,
           piece: bytes | memoryview) -> Chunk:
    """The chunk carrying ``piece``, tagged under ``key``."""
    tag = _chunk_tag(key, kind, sender, message_id, index, count, total_bytes, piece)
    return Chunk(kind, sender, message_id, index, count, total_bytes, b''.join((piece, tag)))


def split(frame: bytes, kind: Kind, sender: str, message_id: int, key: bytes,
          chunk_bytes: int = CHUNK_BYTES) -> list[Chunk]:
    """``frame`` as chunks of at most ``chunk_bytes`` of its bytes each (plus a tag), tagged under ``key``."""
    if chunk_bytes < 1:
        raise ValueError(f'chunk_bytes must be >= 1, got {chunk_bytes}')
    view = memoryview(frame)  # pieces are copied once, into their chunks
    pieces = [view[i:i + chunk_bytes] for i in range(0, len(frame), chunk_bytes)] or [b'']
    return [tagged(key, int(kind), sender, message_id, i, len(pieces), len(frame), piece)
            for i, piece in enumerate(pieces)]


@dataclass
class _Pending:
    count: int
    total_bytes: int
    started_s: float
    parts: dict[int, memoryview] = field(default_factory=dict)
    size: int = 0


class Reassembler:
    """Joins chunks into frames; checks each chunk's tag under ``key`` before it touches any state.

    A chunk that names no known kind, a sender longer than ``MAX_SENDER``, more than ``max_bytes``, an
    index outside its count or more bytes than its message is refused (``malformed``); one whose tag
    does not check under the key (another key, damaged, forged) is refused (``forged``). Either changes
    nothing. Messages in progress are kept per sender, kind and message id, at most ``in_flight`` per
    sender and kind (the newest); a chunk of a message not newer than the last completed of its sender and kind is refused
    (``replayed``: a replay, or a link's duplicate). Each message in progress reserves the bytes it
    announces; a new message that would take the reserved total over ``budget_bytes``, the messages
    in progress over ``max_pending`` or its sender's and kind's over ``in_flight`` first displaces older
    messages of its own sender and kind (dropped as ``incomplete``), and is refused if that is not
    enough (``budget``, or ``stale`` when newer messages of its sender hold the places). A message still
    incomplete after ``timeout_s`` is dropped as ``incomplete``. A chunk that contradicts its message's
    other chunks is refused (``malformed``) and the message keeps what it has. Each refusal calls ``log``
    once and counts in ``refused[reason]``.
    """

    def __init__(self, key: bytes, max_bytes: int = MAX_BYTES, timeout_s: float = 30.0,
                 log: Callable[[str], None] = lambda line: None, budget_bytes: int = BUDGET_BYTES,
                 max_pending: int = MAX_PENDING, in_flight: int = IN_FLIGHT, max_senders: int = MAX_SENDERS) -> None:
        self._key, self.max_bytes, self.timeout_s, self.log = key, max_bytes, timeout_s, log
        self.budget_bytes, self.max_pending, self.in_flight = budget_bytes, max_pending, in_flight
        self.max_senders = max_senders
        self.refused: Counter[str] = Counter()
        self.reserved = 0  # bytes announced by the messages in progress
        self.pending = 0  # messages in progress
        self._streams: dict[tuple[str, int], dict[int, _Pending]] = {}  # (sender, kind) -> message id -> parts
        self._completed: OrderedDict[tuple[str, int], int] = OrderedDict()  # newest message id completed

    def refuse(self, reason: str, detail: str) -> None:
        """Count one refusal and log it on one line (also used for frames that fail to decode)."""
        self.refused[reason] += 1
        self.log(f'refused {detail} ({reason}, {self.refused[reason]} so far)')

    def add(self, chunk: Chunk, now_s: float) -> bytes | None:
        """The whole frame once ``chunk`` completes it, else None."""
        self._expire(now_s)
        what = f'chunk {chunk.index}/{chunk.count} of message {chunk.message_id} from {shown(chunk.sender)}'
        problem = self._malformed(chunk)
        if problem:
            self.refuse('malformed', f'{what}: {problem}')
            return None
        data = memoryview(chunk.data)  # the piece is kept as a view of the chunk's bytes, not copied
        piece = data[:-_TAG]
        if not hmac.compare_digest(data[-_TAG:], _chunk_tag(
                self._key, chunk.kind, chunk.sender, chunk.message_id, chunk.index, chunk.count, chunk.total_bytes,
                piece)):
            self.refuse('forged', f'{what}: its tag does not check under this run\'s key (another run\'s key, '
                                  'damaged, or forged)')
            return None
        stream = (chunk.sender, chunk.kind)
        pending = self._streams.get(stream, {}).get(chunk.message_id) or self._start(chunk, stream, now_s, what)
        if pending is None:
            return None
        if (chunk.count, chunk.total_bytes) != (pending.count, pending.total_bytes) or (
                chunk.index not in pending.parts and pending.size + len(piece) > pending.total_bytes):
            self.refuse('malformed', f'{what}: disagrees with its message\'s other chunks')
            return None
        if chunk.index in pending.parts:
            return None  # a duplicate
        pending.parts[chunk.index] = piece
        pending.size += len(piece)
        if len(pending.parts) < pending.count:
            return None
        self._drop(stream, chunk.message_id)
        self._completed[stream] = max(chunk.message_id, self._completed.get(stream, -1))
        self._completed.move_to_end(stream)
        while len(self._completed) > self.max_senders:
            self._completed.popitem(last=False)
        if pending.size != pending.total_bytes:
            self.refuse('truncated', f'message {chunk.message_id} from {shown(chunk.sender)}: '
                                     f'{pending.size} of {pending.total_bytes} bytes')
            return None
        return b''.join(pending.parts[i] for i in range(pending.count))

    def _start(self, chunk: Chunk, stream: tuple[str, int], now_s: float, what: str) -> _Pending | None:
        """A new message in progress for ``chunk``, after displacing older ones of its stream if need be; or None."""
        completed = self._completed.get(stream)
        if completed is not None and chunk.message_id <= completed:
            self.refuse('replayed', f'{what}: not newer than message {completed}, the last completed from this '
                                    'sender')
            return None
        messages = self._streams.get(stream, {})
        older = sorted(i for i in messages if i < chunk.message_id)
        for drop in range(len(older) + 1):
            freed = sum(messages[i].total_bytes for i in older[:drop])
            if len(messages) - drop < self.in_flight and self.pending - drop < self.max_pending \
                    and self.reserved - freed + chunk.total_bytes <= self.budget_bytes:
                break
        else:
            if len(messages) - len(older) >= self.in_flight:
                self.refuse('stale', f'{what}: messages {sorted(messages)} of this sender are newer')
            else:
                self.refuse('budget', f'{what}: {self.pending} messages of {self.reserved} bytes in progress '
                                      f'(limits {self.max_pending} and {self.budget_bytes} bytes)')
            return None
        for message_id in older[:drop]:
            old = self._drop(stream, message_id)
            self.refuse('incomplete', f'message {message_id} from {shown(stream[0])}: {len(old.parts)} of '
                                      f'{old.count} chunks arrived before newer message {chunk.message_id}')
        pending = self._streams.setdefault(stream, {})[chunk.message_id] = _Pending(chunk.count, chunk.total_bytes,
                                                                                    now_s)
        self.pending += 1
        self.reserved += chunk.total_bytes
        return pending

    def _malformed(self, chunk: Chunk) -> str | None:
        """What makes ``chunk`` unacceptable on its own, or None."""
        if not 0 < chunk.total_bytes <= self.max_bytes:
            return f'{chunk.total_bytes} bytes announced (limit {self.max_bytes})'
        if not 0 <= chunk.index < chunk.count <= chunk.total_bytes:
            return f'its index is outside its count, or the count exceeds its {chunk.total_bytes} bytes'
        if not 0 <= chunk.message_id < 1 << 64:
            return 'its message id is no 64-bit unsigned number'
        if chunk.kind not in set(Kind):
            return f'unknown kind {chunk.kind}'
        if len(chunk.sender) > MAX_SENDER:
            return f'a sender name of {len(chunk.sender)} characters (limit {MAX_SENDER})'
        if not _TAG <= len(chunk.data) <= chunk.total_bytes + _TAG:
            return f'{len(chunk.data)} bytes of data: less than its {_TAG}-byte tag, or more than its message'
        return None

    def _drop(self, stream: tuple[str, int], message_id: int) -> _Pending:
        messages = self._streams[stream]
        pending = messages.pop(message_id)
        if not messages:
            del self._streams[stream]
        self.pending -= 1
        self.reserved -= pending.total_bytes
        return pending

    def _expire(self, now_s: float) -> None:
        for stream, messages in list(self._streams.items()):
            for message_id, pending in list(messages.items()):
                if now_s - pending.started_s > self.timeout_s:
                    self._drop(stream, message_id)
                    self.refuse('incomplete', f'message {message_id} from {shown(stream[0])}: {len(pending.parts)} '
                                              f'of {pending.count} chunks after {self.timeout_s:g} s')


@dataclass
class Traffic:
    """Messages, chunks and bytes of one direction (one kind of frame), as one side saw them."""

    messages: int = 0
    chunks: int = 0
    bytes: int = 0

    def sent(self, chunks: list[Chunk]) -> None:
        """Count one message sent as ``chunks``."""
        self.messages += 1
        self.chunks += len(chunks)
        self.bytes += sum(len(c.data) for c in chunks)

    def received(self, chunk: Chunk, completes: bool) -> None:
        """Count one chunk received, and its message when ``completes``."""
        self.chunks += 1
        self.bytes += len(chunk.data)
        self.messages += int(completes)

    def as_dict(self) -> dict[str, int]:
        return {'messages': self.messages, 'chunks': self.chunks, 'bytes': self.bytes}
