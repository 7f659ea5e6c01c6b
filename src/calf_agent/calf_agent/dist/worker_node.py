"""The rollout worker node: ``envs`` networked envs in virtual time, a local policy copy, batches to the learner.

Thin: ``calf_agent.dist.worker.RolloutWorker`` does the work. The node runs ``env`` (its own choice:
weights for another env are refused). Until weights arrive it says hello on ``batch_topic`` every
``hello_period_s``, then every ``heartbeat_s``; it collects one batch per timer tick and publishes its
chunks (QoS ``calf_ros.qos.BATCHES``). Weights arrive on ``<weights_prefix>/<worker_id>`` (QoS ``WEIGHTS``)
and replace the local copy between batches; a delta it cannot apply makes its next hello (at
``hello_period_s``) ask for a snapshot. While the learner says pause it collects nothing (for at most
``pause_timeout_s``). A restarted learner admits the worker at its next hello and sends its weights, so
the worker follows it with no manual step. Every frame is tagged under the key in
``key_file`` (or ``CALF_DIST_KEY``).
"""
from __future__ import annotations

import os
import re
import socket
import sys
import time
from typing import Any

from rclpy.node import Node

from calf_agent.dist.chunk_msgs import BATCH_TOPIC, WEIGHTS_PREFIX, chunk_to_msg, drain, msg_to_chunk
from calf_agent.dist.key import KEY_ENV, load_key
from calf_agent.dist.learner import WORKER_ID
from calf_agent.dist.wire import Chunk
from calf_agent.dist.worker import PAUSE_TIMEOUT_S, RolloutWorker
from calf_core.envs import env_spec
from calf_core.errors import ConfigError
from calf_msgs.msg import ByteChunk
from calf_ros.node_main import run_node
from calf_ros.node_params import declare_parameters
from calf_ros.qos import BATCHES, WEIGHTS

PARAMETERS: dict[str, tuple[Any, str]] = {
    'worker_id': ('', 'this worker\'s id, a name token; empty: <hostname>_<pid>'),
    'env': ('cartpole', 'the env this worker runs (as calf train --env); weights for another env are refused'),
    'network': ('', 'a network profile file the learner may name, besides the built-in profiles'),
    'key_file': ('', f'file of the key shared with the learner (its OUT/dist.key); empty: the key in {KEY_ENV}'),
    'envs': (8, 'envs stepped in one batch'),
    'seed': (1, 'seed of the envs and of action sampling'),
    'batch_topic': (BATCH_TOPIC, 'where batch chunks go'),
    'weights_prefix': (WEIGHTS_PREFIX, 'weights arrive on PREFIX/<worker_id>'),
    'hello_period_s': (1.0, 'period of hellos until the first weights arrive (seconds)'),
    'heartbeat_s': (2.0, 'period of hellos once weights arrived (seconds): a restarted learner admits it again'),
    'chunk_bytes': (16 * 1024, 'largest chunk of a batch (bytes)'),
    'collect_period_s': (0.001, 'period of the collection timer (seconds)'),
    'pause_timeout_s': (PAUSE_TIMEOUT_S, 'a pause the learner asked for ends after this long without a word (seconds)'),
}


def default_worker_id() -> str:
    """``<hostname>_<pid>`` as a name token."""
    return re.sub(r'\W', '_', f'w_{socket.gethostname()}_{os.getpid()}')


class WorkerNode(Node):
    """Publishes batch chunks, subscribes to its weights."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__('worker', **kwargs)
        p = declare_parameters(self, PARAMETERS)
        worker_id = p['worker_id'] or default_worker_id()
        if not WORKER_ID.match(worker_id):
            raise ConfigError(f'worker_id must be a name token (letters, digits, _; 64 at most), got {worker_id!r}')
        if min(p['envs'], p['chunk_bytes']) < 1 or not min(p['hello_period_s'], p['heartbeat_s'],
                                                            p['pause_timeout_s']) > 0:
            raise ConfigError('envs and chunk_bytes must be >= 1, hello_period_s, heartbeat_s and pause_timeout_s > 0')
        env_spec(p['env'])  # an unknown env fails here, before any weights
        self.worker = RolloutWorker(worker_id, p['env'], load_key(p['key_file']), p['envs'], p['seed'],
                                    p['chunk_bytes'], log=self.get_logger().warning, network=p['network'],
                                    pause_timeout_s=p['pause_timeout_s'])
        self.hello_period_s, self.heartbeat_s = p['hello_period_s'], p['heartbeat_s']
        self._last_hello = -float('inf')
        self._seq = 0
        self._batches = self.create_publisher(ByteChunk, p['batch_topic'], BATCHES)
        weights_topic = f'{p["weights_prefix"].rstrip("/")}/{worker_id}'
        self._weights = self.create_subscription(ByteChunk, weights_topic, self._on_chunk, WEIGHTS)
        self.create_timer(p['collect_period_s'], self._tick)
        self.get_logger().info(f'worker {worker_id}: {p["envs"]} envs of {p["env"]}, batches to {p["batch_topic"]}, '
                               f'weights from {weights_topic}')

    def _on_chunk(self, msg: ByteChunk) -> None:
        self.worker.receive(msg_to_chunk(msg), time.monotonic())

    def _tick(self) -> None:
        for msg in drain(self._weights):  # the newest weights before each batch, not one chunk per batch
            self._on_chunk(msg)
        now = time.monotonic()
        in_step = self.worker.ready and not self.worker.needs_snapshot
        if now - self._last_hello >= (self.heartbeat_s if in_step else self.hello_period_s):
            self._last_hello = now
            self._publish(self.worker.hello())
        if not self.worker.may_collect(now):
            return
        self._publish(self.worker.next_batch(int(self.worker.env_config['num_steps']), time.monotonic()))

    def _publish(self, chunks: list[Chunk]) -> None:
        for chunk in chunks:
            self._seq += 1
            self._batches.publish(chunk_to_msg(chunk, self._seq, self.get_clock().now().nanoseconds))

    def destroy_node(self) -> None:
        self.get_logger().info(f'traffic: {self.worker.traffic()}, {self.worker.env_steps} env steps')
        self.worker.close()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    return run_node('worker_node', WorkerNode, args)


if __name__ == '__main__':
    sys.exit(main())
