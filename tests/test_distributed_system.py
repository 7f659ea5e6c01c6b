"""Distributed training as deployed: a learner node and worker node processes over DDS (localhost, the
test run's private domain). Trainings are tiny (a few thousand CartPole steps under sim_clean)."""
from __future__ import annotations

import csv
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from ros_helpers import new_context, shut_down, spin_until

from calf_agent.chunk_msgs import BATCH_TOPIC, chunk_to_msg
from calf_agent.dist_wire import Kind, WeightsMessage, encode, split
from calf_agent.dist_worker import RolloutWorker
from calf_agent.evaluate import evaluate_sim
from calf_agent.policies import MlpAgent
from calf_bringup.distributed import training_graph
from calf_bringup.runner import Graph
from calf_core.profiles import load_profile
from calf_msgs.msg import ByteChunk
from calf_ros.qos import BATCHES

pytestmark = pytest.mark.ros
TIMEOUT_S = 240.0


def _params(out: Path, steps: int, **extra: object) -> dict[str, object]:
    return {'out': str(out), 'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline', 'steps': steps,
            'seed': 0, 'sync': 'every', 'eval_every': 4096, 'eval_episodes': 3, **extra}


def _wait(condition: Callable[[], bool], timeout_s: float = TIMEOUT_S) -> bool:
    """Poll ``condition`` (a file another process writes) every 0.2 s until it holds or the time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def _updates(out: Path) -> list[dict[str, str]]:
    path = out / 'progress.csv'
    return list(csv.DictReader(path.open())) if path.is_file() else []


@pytest.mark.slow
def test_learner_and_two_workers_train_and_the_checkpoint_evaluates(tmp_path):
    out = tmp_path / 'run'
    with Graph(training_graph(_params(out, 8192), workers=2, envs=4, seed=0, learner_network=None, out_dir=out),
               output=None) as graph:
        assert graph.wait_for_exit('learner', TIMEOUT_S) == 0, graph.tail('learner')
    summary = json.loads((out / 'distributed.json').read_text())
    assert summary['env_steps'] >= 8192 and summary['workers'] == ['w0', 'w1']
    assert summary['weights_sent']['bytes'] > 0 and summary['batches_received']['messages'] >= summary['updates']
    assert not summary['refused'] and sum(summary['lag_histogram'].values()) == summary['updates']
    assert {row['worker'] for row in _updates(out)} == {'w0', 'w1'}
    report = evaluate_sim(out, load_profile('sim_clean'), episodes=3, seed=0)  # what calf eval runs
    assert report['episodes'] == 3 and report['mean_return'] >= 8


@pytest.mark.slow
def test_a_killed_worker_does_not_stop_the_learner(tmp_path):
    out = tmp_path / 'run'
    specs = training_graph(_params(out, 12_288), workers=2, envs=4, seed=0, learner_network=None, out_dir=out)
    with Graph(specs, output=None) as graph:
        assert _wait(lambda: {'w0', 'w1'} <= {row['worker'] for row in _updates(out)})
        os.killpg(graph._child('worker_w1').process.pid, signal.SIGKILL)
        assert graph.wait_for_exit('worker_w1', 10) == -signal.SIGKILL
        killed_at = len(_updates(out))
        assert graph.wait_for_exit('learner', TIMEOUT_S) == 0, graph.tail('learner')
    after = _updates(out)[killed_at + 2:]  # a batch of w1 may have been on its way
    assert after and {row['worker'] for row in after} == {'w0'}
    assert json.loads((out / 'distributed.json').read_text())['env_steps'] >= 12_288


@pytest.mark.slow
def test_workers_follow_a_learner_restarted_from_its_checkpoint(tmp_path):
    out = tmp_path / 'run'
    first, worker = training_graph(_params(out, 4096), workers=1, envs=4, seed=0, learner_network=None,
                                   out_dir=out)
    with Graph([worker], output=None) as workers:
        with Graph([first], output=None) as graph:
            assert graph.wait_for_exit('learner', TIMEOUT_S) == 0, graph.tail('learner')
        version = json.loads((out / 'distributed.json').read_text())['version']
        resumed = first._replace(parameters={**first.parameters, 'steps': 8192, 'resume': True})
        with Graph([resumed], output=None) as graph:  # the worker keeps running: no manual step
            assert graph.wait_for_exit('learner', TIMEOUT_S) == 0, graph.tail('learner')
        assert workers.returncode('worker_w0') is None
    summary = json.loads((out / 'distributed.json').read_text())
    assert summary['version'] > version and summary['env_steps'] >= 8192 and summary['workers'] == ['w0']
    assert summary['lag_histogram'].get('other_run', 0) >= 1  # its first batch was collected under the old run


@pytest.mark.slow
def test_a_corrupt_batch_is_refused_with_one_line_and_counted(tmp_path):
    out = tmp_path / 'run'
    (learner,) = [spec for spec in training_graph(_params(out, 10**6), 1, 4, 0, None, out)
                  if spec.executable == 'learner_node']
    worker = RolloutWorker('intruder', 2, seed=0)
    worker.apply(_weights())
    chunks = split(encode(worker.collect(8)), Kind.BATCH, 'intruder', 1, chunk_bytes=1024)
    damaged = bytearray(chunks[-1].data)
    damaged[len(damaged) // 2] ^= 0x01
    chunks[-1] = chunks[-1]._replace(data=bytes(damaged))
    huge = chunks[0]._replace(message_id=2, total_bytes=2**40)
    context = new_context()
    executor = SingleThreadedExecutor(context=context)
    node = Node('corrupt_sender', context=context)
    executor.add_node(node)
    publisher = node.create_publisher(ByteChunk, BATCH_TOPIC, BATCHES)
    try:
        with Graph([learner], output=None) as graph:
            assert spin_until(executor, lambda: publisher.get_subscription_count() > 0, 60)
            for seq, chunk in enumerate([*chunks, huge]):
                publisher.publish(chunk_to_msg(chunk, seq, 0))

            def refusals() -> list[str]:
                return [line for line in graph.tail('learner') if 'refused' in line]

            assert spin_until(executor, lambda: len(refusals()) >= 2, 60), graph.tail('learner')
            lines = refusals()
            assert 'checksum' in lines[0] and '(corrupt, 1 so far)' in lines[0]
            assert '(malformed, 1 so far)' in lines[1]
            assert graph.returncode('learner') is None  # it carries on
    finally:
        shut_down(executor, context, node)


def _weights() -> WeightsMessage:
    agent = MlpAgent(4, 2)
    config = {'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline',
              'representation': {'frames': 1, 'actions': 0, 'obs_age': False}, 'plan_horizon': 1, 'num_steps': 8}
    return WeightsMessage(0, 1, 'intruder', agent.spec(), config, agent.state_dict())


@pytest.mark.slow
def test_training_across_a_degraded_learner_link(tmp_path):
    out = tmp_path / 'run'
    specs = training_graph(_params(out, 4096), workers=1, envs=4, seed=0, learner_network='wifi_degraded', out_dir=out)
    assert specs[0].executable == 'generic_shim_node'
    with Graph(specs, output=None) as graph:
        assert graph.wait_for_exit('learner', TIMEOUT_S) == 0, graph.tail('learner')
        assert graph.returncode('learner_shim') is None  # the shim ran the whole time
    summary = json.loads((out / 'distributed.json').read_text())
    assert summary['env_steps'] >= 4096 and summary['workers'] == ['w0']
    assert summary['weights_sent']['messages'] >= 1 and (out / 'policy.safetensors').is_file()
