"""Distributed training as deployed: a learner node and worker node processes over DDS (localhost, the
test run's private domain), sharing a key file. Trainings are tiny (a few thousand CartPole steps under
sim_clean). Intruders publish forged, replayed and foreign messages and are refused."""
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
from ros_helpers import PrivateNode, new_context, shut_down, spin_until

from calf_agent.dist.chunk_msgs import BATCH_TOPIC, WEIGHTS_PREFIX, chunk_to_msg
from calf_agent.dist.key import create_key, read_key_file
from calf_agent.dist.wire import Kind, Sealer, WeightsMessage, snapshot, split
from calf_agent.dist.worker import RolloutWorker
from calf_agent.evaluate import evaluate_sim
from calf_agent.policies import MlpAgent
from calf_bringup.distributed import training_graph
from calf_bringup.runner import Graph
from calf_core.profiles import load_profile
from calf_msgs.msg import ByteChunk
from calf_ros.qos import BATCHES, WEIGHTS

pytestmark = pytest.mark.ros
TIMEOUT_S = 240.0


def _params(out: Path, steps: int, **extra: object) -> dict[str, object]:
    return {'out': str(out), 'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline', 'steps': steps,
            'seed': 0, 'sync': 'every', 'eval_every': 4096, 'eval_episodes': 3, **extra}


def _graph(out: Path, steps: int, workers: int, learner_network: str | None = None) -> list:
    """``calf train --workers``'s processes, with the key file it creates in the run's directory."""
    key = create_key(out.parent / 'dist.key')
    return training_graph(_params(out, steps), workers=workers, envs=4, seed=0, learner_network=learner_network,
                          out_dir=out, key_file=str(key))


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


def _workers(row: dict[str, str]) -> set[str]:
    """The workers whose batches an update (a round) trained on."""
    return set(row['worker'].split('+'))


@pytest.mark.slow
def test_learner_and_two_workers_train_and_the_checkpoint_evaluates(tmp_path):
    out = tmp_path / 'run'
    with Graph(_graph(out, 8192, workers=2), output=None) as graph:
        assert graph.wait_for_exit('learner', TIMEOUT_S) == 0, graph.tail('learner')
    summary = json.loads((out / 'distributed.json').read_text())
    assert summary['env_steps'] >= 8192 and summary['workers'] == ['w0', 'w1']
    assert summary['weights_sent']['bytes'] > 0 and summary['batches_received']['messages'] >= summary['updates']
    assert not summary['refused'] and sum(summary['lag_histogram'].values()) >= summary['updates']  # per batch
    assert {'w0+w1', 'w1+w0'} & {row['worker'] for row in _updates(out)}  # rounds of both workers' batches
    report = evaluate_sim(out, load_profile('sim_clean'), episodes=3, seed=0)  # what calf eval runs
    assert report['episodes'] == 3 and report['mean_return'] >= 8


@pytest.mark.slow
def test_a_box_env_trains_with_two_workers_on_weight_deltas(tmp_path):
    out = tmp_path / 'run'
    key = create_key(tmp_path / 'dist.key')
    params = {**_params(out, 4096, eval_every=4096, eval_episodes=2), 'env': 'Pendulum-v1', 'num_steps': 256}
    specs = training_graph(params, workers=2, envs=2, seed=0, learner_network=None, out_dir=out, key_file=str(key))
    with Graph(specs, output=None) as graph:
        assert graph.wait_for_exit('learner', TIMEOUT_S) == 0, graph.tail('learner')
    summary = json.loads((out / 'distributed.json').read_text())
    assert summary['env_steps'] >= 4096 and summary['workers'] == ['w0', 'w1'] and not summary['refused']
    assert summary['weights_messages']['snapshots'] >= 2 and summary['weights_messages']['deltas'] >= 1
    assert 0 <= summary['wasted_fraction'] < 1 and (out / 'learner_state.safetensors').is_file()
    meta = json.loads((out / 'meta.json').read_text())
    assert meta['agent']['kind'] == 'gaussian'
    report = evaluate_sim(out, load_profile('sim_clean'), episodes=2, seed=0)  # what calf eval runs
    assert report['episodes'] == 2 and report['mean_return'] < 0  # Pendulum's returns are negative


@pytest.mark.slow
@pytest.mark.timeout(600)  # 12,288 env steps on a loaded machine
def test_a_killed_worker_does_not_stop_the_learner(tmp_path):
    out = tmp_path / 'run'
    specs = _graph(out, 12_288, workers=2)
    with Graph(specs, output=None) as graph:
        assert _wait(lambda: any(_workers(row) == {'w0', 'w1'} for row in _updates(out)))
        os.killpg(graph._child('worker_w1').process.pid, signal.SIGKILL)
        assert graph.wait_for_exit('worker_w1', 10) == -signal.SIGKILL
        killed_at = len(_updates(out))
        assert graph.wait_for_exit('learner', TIMEOUT_S) == 0, graph.tail('learner')
    after = _updates(out)[killed_at:]  # w1's batches already received may still be trained on, then only w0's
    assert len(after) > 3 and all(_workers(row) == {'w0'} for row in after[-3:])  # rounds go on without it
    assert sum('w1' in _workers(row) for row in after) <= 2  # at most the batches of it waiting at the kill
    summary = json.loads((out / 'distributed.json').read_text())
    assert summary['env_steps'] >= 12_288 and not summary['refused'].keys() - {'incomplete'}  # its batch in flight


@pytest.mark.slow
@pytest.mark.timeout(600)  # two learners, one after the other, on a loaded machine
def test_a_learner_killed_mid_run_resumes_from_its_last_update(tmp_path):
    """SIGKILL, no evaluation yet: --resume continues from the last update, not from scratch or the last
    evaluation; the batches in flight are all the kill costs."""
    out = tmp_path / 'run'
    first, worker = _graph(out, 10**6, workers=1)
    first = first._replace(parameters={**first.parameters, 'eval_every': 10**6})
    with Graph([worker], output=None) as workers:
        with Graph([first], output=None) as graph:
            assert _wait(lambda: len(_updates(out)) >= 4), graph.tail('learner')
            os.killpg(graph._child('learner').process.pid, signal.SIGKILL)
            assert graph.wait_for_exit('learner', 10) == -signal.SIGKILL
        before = _updates(out)
        last = before[-1]
        resumed = first._replace(parameters={**first.parameters, 'steps': int(last['env_steps']) + 1024,
                                             'resume': True})
        with Graph([resumed], output=None) as graph:  # the worker keeps running: no manual step
            assert graph.wait_for_exit('learner', TIMEOUT_S) == 0, graph.tail('learner')
        assert workers.returncode('worker_w0') is None
    first_new = _updates(out)[len(before)]
    resumed_at = int(first_new['version']) - 1  # the version the resumed learner started from
    assert int(last['version']) <= resumed_at <= int(last['version']) + 1  # no update lost (one more if the
    assert int(first_new['env_steps']) > int(last['env_steps'])  # kill came between the state and its row)
    summary = json.loads((out / 'distributed.json').read_text())
    assert summary['env_steps'] >= int(last['env_steps']) + 1024 and not summary['refused'].keys() - {'unknown_worker'}


@pytest.mark.slow
def test_workers_follow_a_learner_restarted_from_its_checkpoint(tmp_path):
    out = tmp_path / 'run'
    first, worker = _graph(out, 4096, workers=1)
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
    assert not summary['refused'].keys() - {'unknown_worker'}  # batches before its next hello re-admitted it


@pytest.mark.slow
def test_forged_replayed_and_unadmitted_batches_are_refused_with_one_line_each(tmp_path):
    out = tmp_path / 'run'
    (learner,) = [spec for spec in _graph(out, 10**6, workers=1) if spec.executable == 'learner_node']
    key = read_key_file(Path(learner.parameters['key_file']))
    worker = RolloutWorker('intruder', 'cartpole', key, 2, seed=0)
    worker.apply(_weights('intruder'))
    batch = worker.collect(8)
    forged = split(Sealer(b'k' * 32, 'intruder').encode(batch), Kind.BATCH, 'intruder', 1, b'k' * 32)
    signed = Sealer(key, 'intruder').chunks(batch, chunk_bytes=1024)
    huge = signed[0]._replace(message_id=signed[0].message_id + 1, total_bytes=2**40)
    assert len(forged) == 1 and len(signed) > 1
    context = new_context()
    executor = SingleThreadedExecutor(context=context)
    node = Node('intruder', context=context)
    executor.add_node(node)
    publisher = node.create_publisher(ByteChunk, BATCH_TOPIC, BATCHES)
    try:
        with Graph([learner], output=None) as graph:
            assert spin_until(executor, lambda: publisher.get_subscription_count() > 0, 60)
            for seq, chunk in enumerate([*forged, *signed, *signed, huge]):  # signed twice: replayed
                publisher.publish(chunk_to_msg(chunk, seq, 0))

            def refusals() -> list[str]:
                return [line for line in graph.tail('learner') if 'refused' in line]

            assert spin_until(executor, lambda: len(refusals()) >= 3 + len(signed), 60), graph.tail('learner')
            lines = refusals()
            assert 'tag does not check' in lines[0] and '(forged, 1 so far)' in lines[0]
            assert 'was not admitted' in lines[1] and '(unknown_worker, 1 so far)' in lines[1]
            assert all('(replayed, ' in line for line in lines[2:-1]) and len(lines) == 3 + len(signed)
            assert '(malformed, 1 so far)' in lines[-1]
            assert graph.returncode('learner') is None  # it carries on
    finally:
        shut_down(executor, context, node)


@pytest.mark.slow
def test_a_worker_refuses_weights_for_an_env_it_was_not_told_to_run(tmp_path):
    out = tmp_path / 'run'
    (worker,) = [spec for spec in _graph(out, 4096, workers=1) if spec.executable == 'worker_node']
    key = read_key_file(Path(worker.parameters['key_file']))
    marker = tmp_path / 'imported'
    (tmp_path / 'calf_intruder_env.py').write_text(f'open({str(marker)!r}, "w").close()\nmake = None\n')
    foreign = _weights('w0')
    foreign.env_config['env'] = 'calf_intruder_env:make'  # as os:abort, but leaves a mark instead
    chunks = Sealer(key, 'learner').chunks(foreign)
    with Graph([worker._replace(additional_env={**worker.additional_env, 'PYTHONPATH': f'{tmp_path}:' +
                                                 os.environ.get('PYTHONPATH', '')})], output=None) as graph, \
            PrivateNode('intruder') as intruder:
        publisher = intruder.node.create_publisher(ByteChunk, f'{WEIGHTS_PREFIX}/w0', WEIGHTS)
        assert intruder.until(lambda: publisher.get_subscription_count() > 0, 60)
        for seq, chunk in enumerate(chunks):
            publisher.publish(chunk_to_msg(chunk, seq, 0))
        assert intruder.until(lambda: any('foreign_env' in line for line in graph.tail('worker_w0')), 60), \
            graph.tail('worker_w0')
        assert graph.returncode('worker_w0') is None
    assert not marker.exists()


def _weights(target: str) -> WeightsMessage:
    agent = MlpAgent(4, 2)
    config = {'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline',
              'representation': {'frames': 1, 'actions': 0, 'obs_age': False}, 'plan_horizon': 1, 'num_steps': 8}
    return snapshot(agent, 0, 1, target, config)


@pytest.mark.slow
def test_training_across_a_degraded_learner_link(tmp_path):
    out = tmp_path / 'run'
    specs = _graph(out, 4096, workers=1, learner_network='wifi_degraded')
    assert specs[0].executable == 'generic_shim_node'
    with Graph(specs, output=None) as graph:
        assert graph.wait_for_exit('learner', TIMEOUT_S) == 0, graph.tail('learner')
        assert graph.returncode('learner_shim') is None  # the shim ran the whole time
    summary = json.loads((out / 'distributed.json').read_text())
    assert summary['env_steps'] >= 4096 and summary['workers'] == ['w0']
    assert summary['weights_sent']['messages'] >= 1 and (out / 'policy.safetensors').is_file()
