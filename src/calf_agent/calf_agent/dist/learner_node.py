"""The learner node: PPO on the trajectory batches of rollout workers, weights back by a sync policy.

Thin: ``calf_agent.dist.learner.Learner`` does the work. Batches and hellos arrive as
``calf_msgs/ByteChunk`` on ``batch_topic`` (QoS ``calf_ros.qos.BATCHES``); weights go to each worker on
``<weights_prefix>/<worker id>`` (QoS ``WEIGHTS``, transient local: a worker that matches late still
gets them). Every frame is tagged under the key in ``key_file`` (or ``CALF_DIST_KEY``); the node
is given the file's path, never the key. The node exits once the step budget is spent or an evaluation reaches ``stop_return``,
leaving the checkpoint and ``distributed.json`` in ``out``.
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rclpy.node import Node
from rclpy.publisher import Publisher

from calf_agent.dist.chunk_msgs import BATCH_TOPIC, WEIGHTS_PREFIX, chunk_to_msg, drain, msg_to_chunk
from calf_agent.dist.delta import DEFAULT_PRECISION, KL_BOUND, PRECISIONS
from calf_agent.dist.key import KEY_ENV, load_key
from calf_agent.dist.learner import MAX_WORKERS, Learner, LearnerConfig
from calf_agent.dist.sync import DEFAULT_LAG_CAP, parse_sync
from calf_agent.regimes import default_representation, train_defaults
from calf_agent.representation import Representation
from calf_core.errors import ConfigError
from calf_core.network import resolve_network
from calf_msgs.msg import ByteChunk
from calf_ros.node_main import run_node
from calf_ros.node_params import declare_parameters
from calf_ros.qos import BATCHES, WEIGHTS

PARAMETERS: dict[str, tuple[Any, str]] = {
    'out': ('', 'checkpoint directory (as calf train --out); also progress.csv, eval.csv, distributed.json'),
    'env': ('cartpole', 'task the workers run (any calf train task; the agent and PPO settings are its calf train '
                        'defaults)'),
    'network': ('full_net_aware', 'network profile of the workers\' envs, in virtual time'),
    'regime': ('full', 'regime name recorded in the checkpoint'),
    'frames': (0, 'frame stack k; 0: the network\'s default'),
    'action_history': (-1, 'actions remembered; -1: the network\'s default'),
    'delay_state': (-1, 'the delay state in the features: 1 on, 0 off, -1: the default'),
    'obs_age': (False, 'the age of the newest observation in the features'),
    'plan_horizon': (1, 'actions per message (a plan; the loss counts executed elements only)'),
    'steps': (100_000, 'env steps to train for, summed over workers'),
    'seed': (0, 'seed of the learner\'s torch and of the evaluations'),
    'sync': ('every', 'every, period:K or aps:DELTA'),
    'lag_cap': (DEFAULT_LAG_CAP, 'a worker lagging more versions than this gets weights under any sync'),
    'num_steps': (0, 'steps per env in one worker batch; 0: the task\'s calf train rollout length'),
    'eval_every': (10_000, 'env steps between checkpoint + deterministic evaluation'),
    'eval_episodes': (10, 'episodes per evaluation'),
    'stop_return': (0.0, 'stop once an evaluation reaches this mean return; 0: train the whole budget'),
    'resume': (False, 'continue from the checkpoint in out (weights, version, steps) if there is one'),
    'chunk_bytes': (16 * 1024, 'largest chunk of a weights message (bytes)'),
    'precision': (DEFAULT_PRECISION, f'precision of the tensors in weight deltas: {" or ".join(PRECISIONS)}'),
    'kl_bound': (KL_BOUND, 'largest mean KL between the full and the reduced policy a delta may cause; above it a '
                           'snapshot; 0: every weights message a full snapshot'),
    'flow_control': (True, 'pause workers whose batches the learner would supersede (with rounds: after each batch)'),
    'rounds': (True, 'each update trains on one batch of every live worker, each worker waiting after its batch for '
                     'the weights trained on it; false: one update per batch, workers collecting on'),
    'round_wait_s': (30.0, 'a round goes ahead this long after its first batch without the missing ones, and does not '
                           'wait for a worker not heard from for this long (seconds)'),
    'key_file': ('', f'file of the key shared with the workers (calf train --workers writes OUT/dist.key); '
                     f'empty: the key in {KEY_ENV}'),
    'max_workers': (MAX_WORKERS, 'workers admitted at most; hellos beyond are refused'),
    'batch_topic': (BATCH_TOPIC, 'where workers publish batch chunks'),
    'weights_prefix': (WEIGHTS_PREFIX, 'weights go to PREFIX/<worker id>'),
    'step_period_s': (0.002, 'period of the update timer (seconds)'),
}


def learner_config(p: dict[str, Any]) -> LearnerConfig:
    """The run the parameters ``p`` describe; ConfigError names a bad value."""
    if not p['out']:
        raise ConfigError('no checkpoint directory: pass -p out:=DIR')
    if p['round_wait_s'] <= 0:
        raise ConfigError(f"round_wait_s must be > 0, got {p['round_wait_s']}")
    if p['kl_bound'] < 0:
        raise ConfigError(f"kl_bound must be >= 0, got {p['kl_bound']}")
    if min(p['steps'], p['eval_every'], p['eval_episodes'], p['chunk_bytes'], p['max_workers'],
           p['plan_horizon']) < 1 or p['num_steps'] < 0:
        raise ConfigError('steps, eval_every, eval_episodes, chunk_bytes, max_workers and plan_horizon must be >= 1, '
                          'num_steps >= 0')
    profile = resolve_network(p['network'])
    base = train_defaults(p['env'], 'ppo')
    plan = p['plan_horizon']
    default = default_representation(p['env'], profile, None if p['delay_state'] < 0 else bool(p['delay_state']))
    rep = Representation(frames=p['frames'] or default.frames,
                         actions=default.actions if p['action_history'] < 0 else p['action_history'],
                         obs_age=p['obs_age'], delay_state=default.delay_state)
    num_steps = p['num_steps'] or base.num_steps
    try:
        train = replace(base, num_steps=num_steps, mask_unexecuted=plan > 1,
                        plan_head='independent', meta={})
    except ValueError as err:
        raise ConfigError(f'bad training settings: {err}') from None
    env_config = {'env': p['env'], 'network': p['network'], 'regime': p['regime'], 'representation': rep.as_dict(),
                  'plan_horizon': plan, 'num_steps': num_steps}
    return LearnerConfig(Path(p['out']), env_config, parse_sync(p['sync'], p['lag_cap']), p['steps'], p['seed'],
                         train=train,
                         eval_every=p['eval_every'], eval_episodes=p['eval_episodes'],
                         stop_return=p['stop_return'] or None, chunk_bytes=p['chunk_bytes'], resume=p['resume'],
                         key=load_key(p['key_file']), max_workers=p['max_workers'], precision=p['precision'],
                         flow_control=p['flow_control'], kl_bound=p['kl_bound'], rounds=p['rounds'],
                         round_wait_s=p['round_wait_s'])


class LearnerNode(Node):
    """Subscribes to batch chunks, publishes weight chunks per worker."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__('learner', **kwargs)
        p = declare_parameters(self, PARAMETERS)
        self.learner = Learner(learner_config(p), log=self.get_logger().info, clock=time.monotonic,
                               warn=self.get_logger().warning)
        self.weights_prefix = p['weights_prefix'].rstrip('/')
        self._weights_out: dict[str, Publisher] = {}
        self._seq = 0
        self._batches = self.create_subscription(ByteChunk, p['batch_topic'], self._on_chunk, BATCHES)
        self.create_timer(p['step_period_s'], self._step)
        self.get_logger().info(f'learner run {self.learner.run}: sync {self.learner.cfg.sync}, '
                               f'{self.learner.cfg.total_steps} env steps, batches on {p["batch_topic"]}')

    def _on_chunk(self, msg: ByteChunk) -> None:
        self.learner.receive(msg_to_chunk(msg), time.monotonic())

    def _step(self) -> None:
        for msg in drain(self._batches):  # everything that arrived during the last update
            self._on_chunk(msg)
        for out in self.learner.step():
            self._seq += 1
            self._publisher(out.target).publish(chunk_to_msg(out.chunk, self._seq, self.get_clock().now().nanoseconds))

    def _publisher(self, worker_id: str) -> Publisher:
        if worker_id not in self._weights_out:
            self._weights_out[worker_id] = self.create_publisher(ByteChunk, f'{self.weights_prefix}/{worker_id}',
                                                                WEIGHTS)
        return self._weights_out[worker_id]

    def destroy_node(self) -> None:
        self.learner.close()
        self.get_logger().info(f'wrote {self.learner.cfg.out_dir}: {self.learner.env_steps} env steps, '
                               f'{self.learner.sent.bytes} weight bytes sent, '
                               f'{100 * self.learner.wasted_fraction:.1f} % of the env steps received superseded')
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    return run_node('learner_node', LearnerNode, args, finished=lambda node: node.learner.done)


if __name__ == '__main__':
    sys.exit(main())
