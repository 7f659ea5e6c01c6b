"""Distributed training at the ROS edge: its topics, and ``Chunk`` <-> ``calf_msgs/ByteChunk``."""
from __future__ import annotations

from calf_agent.dist_wire import Chunk
from calf_msgs.msg import ByteChunk

BATCH_TOPIC = '/calf/dist/batches'
"""Workers publish batch chunks (and hellos) here."""
WEIGHTS_PREFIX = '/calf/dist/weights'
"""The learner publishes each worker's weight chunks on ``<prefix>/<worker id>``."""


def chunk_to_msg(chunk: Chunk, seq: int, stamp_ns: int) -> ByteChunk:
    """The message carrying ``chunk``, as the ``seq``-th chunk its sender publishes."""
    msg = ByteChunk(seq=seq, kind=chunk.kind, sender=chunk.sender, message_id=chunk.message_id, index=chunk.index,
                    count=chunk.count, total_bytes=chunk.total_bytes, data=chunk.data)
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    return msg


def msg_to_chunk(msg: ByteChunk) -> Chunk:
    """The chunk a ``ByteChunk`` carries (its bytes copied out of the message)."""
    return Chunk(int(msg.kind), msg.sender, int(msg.message_id), int(msg.index), int(msg.count),
                 int(msg.total_bytes), bytes(msg.data))
