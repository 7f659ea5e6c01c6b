"""Distributed training at the ROS edge: its topics, and ``Chunk`` <-> ``calf_msgs/ByteChunk``."""
from __future__ import annotations

from rclpy.subscription import Subscription

from calf_agent.dist.wire import Chunk
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


def drain(subscription: Subscription) -> list[ByteChunk]:
    """Every chunk waiting in ``subscription``'s reader queue, taken now.

    A single-threaded executor hands a subscription one message per wait: a node whose timer runs
    a long step (an update, a batch) would read one chunk per step and fall ever further behind.
    """
    taken = []
    with subscription.handle:
        while (info := subscription.handle.take_message(subscription.msg_type, subscription.raw)) is not None:
            taken.append(info[0])
    return taken
