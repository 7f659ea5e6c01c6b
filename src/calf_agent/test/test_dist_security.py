"""Distributed training against hostile peers on the domain (issue #28): forged, replayed and foreign
frames, unbounded specs, unfit batches, hello floods, partial-message floods and giant sender names,
each refused with one log line and one counter per reason. Real learner and workers, without ROS."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from calf_agent.dist.learner import Learner, LearnerConfig
from calf_agent.dist.sync import parse_sync
from calf_agent.dist.wire import (
    BUDGET_BYTES,
    MAX_BYTES,
    MAX_PENDING,
    Chunk,
    Hello,
    Kind,
    Opener,
    Reassembler,
    Refused,
    Sealer,
    TrajectoryBatch,
    WeightsMessage,
    shown,
    snapshot,
    split,
    tagged,
)
from calf_agent.dist.worker import RolloutWorker
from calf_agent.policies import MlpAgent
from calf_agent.ppo import PPOConfig
from calf_agent.trainer import cartpole_defaults
from calf_core.errors import ConfigError

KEY = bytes(range(32))
ENV_CONFIG = {'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline',
              'representation': {'frames': 1, 'actions': 0, 'obs_age': False}, 'plan_horizon': 1, 'num_steps': 16}


def _learner(tmp_path: Path, lines: list[str] | None = None, **kw) -> Learner:
    cfg = LearnerConfig(tmp_path, ENV_CONFIG, parse_sync('every'), total_steps=10_000,
                        train=replace(cartpole_defaults(), ppo=PPOConfig(update_epochs=1, num_minibatches=1)),
                        eval_every=10**9, key=KEY, **kw)
    return Learner(cfg, log=lambda line: None, clock=lambda: 0.0, warn=(lines if lines is not None else []).append)


def _send(learner: Learner, frame: bytes, kind: Kind, sender: str, message_id: int, now_s: float = 0.0) -> None:
    for chunk in split(frame, kind, sender, message_id, KEY, chunk_bytes=4096):
        learner.receive(chunk, now_s)


def _weights(env_config: dict | None = None, target: str = 'w0', **spec) -> WeightsMessage:
    message = snapshot(MlpAgent(4, 2), 1, 7, target, env_config or ENV_CONFIG)
    return replace(message, agent_spec={**message.agent_spec, **spec})


def _ready_worker(worker_id: str = 'w0') -> RolloutWorker:
    worker = RolloutWorker(worker_id, 'cartpole', KEY, 2, seed=1)
    assert worker.apply(_weights(target=worker_id))
    return worker


def _admitted(learner: Learner, worker: RolloutWorker) -> None:
    for chunk in worker.hello():
        learner.receive(chunk, 0.0)
    assert worker.worker_id in learner.workers


# --- authenticated frames ---

def test_frames_without_a_valid_tag_are_refused_before_anything_is_parsed(tmp_path):
    lines: list[str] = []
    learner = _learner(tmp_path, lines)
    batch = _ready_worker().collect(16)
    _send(learner, Sealer(b'x' * 32, 'w0').encode(batch), Kind.BATCH, 'w0', 1)  # another key
    _send(learner, Sealer(KEY, 'w0').encode(batch)[:-32], Kind.BATCH, 'w0', 2)  # no tag
    garbage = b'CALF' + b'\xff' * 200  # would be undecodable JSON, if it were parsed
    _send(learner, garbage, Kind.BATCH, 'w0', 3)
    assert learner.reassembler.refused == {'unauthenticated': 3} and not learner.queue and not learner.workers
    assert len(lines) == 3 and all('no valid tag' in line for line in lines)


def test_a_frame_signed_as_one_sender_and_sent_as_another_is_refused():
    frame = Sealer(KEY, 'w0').encode(Hello('w0'))
    with pytest.raises(Refused, match="frame of 'w0' arrived as chunks of 'w1'") as refused:
        Opener(KEY).decode(frame, 'w1')
    assert refused.value.reason == 'unauthenticated'


def test_a_replayed_frame_is_refused_and_a_restarted_sender_is_not():
    opener, sealer = Opener(KEY), Sealer(KEY, 'w0', epoch=100)
    first, second = sealer.encode(Hello('w0')), sealer.encode(Hello('w0'))
    assert opener.decode(second, 'w0') == Hello('w0')
    for old in (second, first):  # the same frame again, and an older one
        with pytest.raises(Refused, match='not newer') as refused:
            opener.decode(old, 'w0')
        assert refused.value.reason == 'replayed'
    assert opener.decode(Sealer(KEY, 'w0', epoch=101).encode(Hello('w0')), 'w0') == Hello('w0')  # restarted
    with pytest.raises(Refused, match='not newer'):
        opener.decode(Sealer(KEY, 'w0', epoch=99).encode(Hello('w0')), 'w0')  # an earlier run's frame


def test_the_replay_state_is_bounded():
    opener = Opener(KEY, max_senders=4)
    for i in range(10):
        opener.decode(Sealer(KEY, f'w{i}').encode(Hello(f'w{i}')), f'w{i}')
    assert list(opener._newest) == ['w6', 'w7', 'w8', 'w9']


def test_a_replayed_batch_is_refused_by_the_learner(tmp_path):
    lines: list[str] = []
    learner = _learner(tmp_path, lines)
    worker = _ready_worker()
    _admitted(learner, worker)
    frame = worker.sealer.encode(worker.collect(16))
    chunks = split(frame, Kind.BATCH, 'w0', 5, KEY, chunk_bytes=1024)
    for chunk in [*chunks, *chunks]:  # the same chunks again: refused as they arrive, and take no place
        learner.receive(chunk, 0.0)
        assert learner.reassembler.pending <= 1
    _send(learner, frame, Kind.BATCH, 'w0', 6)  # the same frame as a newer message: refused by its numbering
    assert learner.reassembler.refused == {'replayed': len(chunks) + 1} and len(learner.queue) == 1
    assert 'not newer than message 5' in lines[0] and 'last accepted' in lines[-1]


def test_nodes_need_a_key(tmp_path):
    with pytest.raises(ConfigError, match='needs a key'):
        Learner(LearnerConfig(tmp_path, ENV_CONFIG, parse_sync('every'), total_steps=10))


# --- the worker runs only what its command line names ---

def test_weights_for_a_foreign_env_are_refused_and_import_nothing(tmp_path, monkeypatch):
    marker = tmp_path / 'imported'
    (tmp_path / 'calf_probe_env.py').write_text(f'open({str(marker)!r}, "w").close()\nmake = None\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    lines: list[str] = []
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=1, log=lines.append)
    for message_id, env in enumerate(('calf_probe_env:make', 'os:abort'), 1):
        frame = Sealer(KEY, 'learner').encode(_weights({**ENV_CONFIG, 'env': env}))
        assert not any(worker.receive(c, 0.0) for c in split(frame, Kind.WEIGHTS, 'learner', message_id, KEY))
    assert worker.reassembler.refused == {'foreign_env': 2} and not worker.ready and worker.envs is None
    assert not marker.exists() and len(lines) == 2 and "this worker runs 'cartpole'" in lines[0]


def test_a_network_the_worker_did_not_choose_is_refused(tmp_path):
    profile = tmp_path / 'mine.yaml'
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=1)
    with pytest.raises(Refused, match='no built-in profile') as refused:
        worker.apply(_weights({**ENV_CONFIG, 'network': str(profile)}))
    assert refused.value.reason == 'foreign_env' and not worker.ready


@pytest.mark.parametrize('spec, message', [
    ({'hidden': [16384] * 16}, 'more than 67108864'),  # 4 billion weights: refused before any is allocated
    ({'hidden': [64] * 17}, '1 to 16 layer widths'),
    ({'kind': 'model_plan'}, 'PPO agents'),
    ({'obs_dim': 5}, 'other names or shapes than the spec builds'),  # the weights sent do not fit the spec
])
def test_agent_specs_from_the_wire_pass_the_checkpoint_bounds(spec, message):
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=1)
    with pytest.raises(Refused, match=message) as refused:
        worker.apply(_weights(**spec))
    assert refused.value.reason == 'bad_spec' and not worker.ready


def test_a_spec_that_does_not_fit_the_workers_env_is_refused():
    agent = MlpAgent(6, 2)
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=1)
    with pytest.raises(Refused, match='6 observation values and 2 actions, this worker.s envs 4 observation values and 2 actions'):
        worker.apply(snapshot(agent, 1, 7, 'w0', ENV_CONFIG))
    assert not worker.ready and worker.envs is None


# --- the learner checks every batch against the run ---

def _doctored(batch: TrajectoryBatch, **changes) -> TrajectoryBatch:
    return TrajectoryBatch(**{**batch.__dict__, **changes})


def test_a_batch_of_a_worker_never_admitted_is_refused(tmp_path):
    lines: list[str] = []
    learner = _learner(tmp_path, lines)
    worker = _ready_worker()
    batch = worker.collect(16)
    batch.rewards.fill_(1e30)
    _send(learner, worker.sealer.encode(batch), Kind.BATCH, 'w0', 1)
    assert learner.reassembler.refused == {'unknown_worker': 1} and not learner.queue
    assert len(lines) == 1 and 'was not admitted' in lines[0]
    learner.step()
    assert learner.updates == 0


@pytest.mark.parametrize('change, message', [
    (lambda b: {'obs': torch.zeros(16, 2, 5), 'next_obs': torch.zeros(2, 5)},
     '5 observation values, this run takes 16 of 4'),
    (lambda b: {'rewards': torch.full_like(b.rewards, 1e30)}, 'beyond 1e+06'),
    (lambda b: {'actions': torch.full_like(b.actions, 7)}, 'actions outside'),
    (lambda b: {'dones': torch.full_like(b.dones, 0.5)}, 'done flags'),
    (lambda b: {'logprobs': torch.full_like(b.logprobs, 3.0)}, 'log-probabilities above 0'),
    (lambda b: {'episode_returns': [1e300]}, 'episode returns'),
])
def test_an_admitted_workers_batch_that_does_not_fit_the_run_is_refused(tmp_path, change, message):
    lines: list[str] = []
    learner = _learner(tmp_path, lines)
    worker = _ready_worker()
    _admitted(learner, worker)
    batch = worker.collect(16)
    _send(learner, worker.sealer.encode(_doctored(batch, **change(batch))), Kind.BATCH, 'w0', 10)
    assert learner.reassembler.refused == {'bad_batch': 1} and not learner.queue
    assert len(lines) == 1 and message in lines[0]
    _send(learner, worker.sealer.encode(worker.collect(16)), Kind.BATCH, 'w0', 11)
    learner.step()  # the learner carries on with the next good batch
    assert learner.updates == 1 and all(torch.isfinite(p).all() for p in learner.agent.parameters())


def test_non_finite_rewards_are_refused(tmp_path):
    learner = _learner(tmp_path)
    worker = _ready_worker()
    _admitted(learner, worker)
    batch = worker.collect(16)
    batch.rewards[3, 1] = float('nan')
    _send(learner, worker.sealer.encode(batch), Kind.BATCH, 'w0', 10)
    assert learner.reassembler.refused == {'corrupt': 1} and not learner.queue


def test_workers_beyond_max_workers_are_refused(tmp_path):
    lines: list[str] = []
    learner = _learner(tmp_path, lines, max_workers=2)
    for i in range(3):
        _send(learner, Sealer(KEY, f'w{i}').encode(Hello(f'w{i}')), Kind.HELLO, f'w{i}', 1)
    assert sorted(learner.workers) == ['w0', 'w1'] and learner.reassembler.refused == {'max_workers': 1}
    assert len(lines) == 1 and '2 workers already admitted' in lines[0]


@pytest.mark.slow
def test_a_hello_flood_sends_weights_a_bounded_number_of_times(tmp_path):
    learner = _learner(tmp_path, max_workers=4)
    one, many = Sealer(KEY, 'w0'), [Sealer(KEY, f'f{i}') for i in range(3000)]
    hello_bytes = 0
    for i in range(3000):  # 3,000 hellos of one worker over 3 s, then one of each of 3,000 ids
        frame = one.encode(Hello('w0'))
        hello_bytes += len(frame)
        _send(learner, frame, Kind.HELLO, 'w0', i + 1, now_s=i / 1000)
        learner.step()
    for sealer in many:
        _send(learner, sealer.encode(Hello(sealer.sender)), Kind.HELLO, sealer.sender, 1, now_s=3.0)
        learner.step()
    weights = len(Sealer(KEY, 'learner').encode(_weights()))
    assert learner.sent.messages == 2 + 3  # w0 at 0 s and 2 s (--hello-resend), then 3 more admitted ids
    assert learner.sent.bytes <= 5 * weights + 4096 and learner.sent.bytes < 10 * hello_bytes
    assert learner.reassembler.refused == {'max_workers': 2997} and learner.hellos_ignored == 2998


def test_a_hello_of_a_worker_in_step_with_the_run_sends_nothing(tmp_path):
    learner = _learner(tmp_path)
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=1)
    _admitted(learner, worker)
    assert any(worker.receive(out.chunk, 0.0) for out in learner.step())
    for chunk in worker.hello():  # the heartbeat of a worker that has this run's weights
        learner.receive(chunk, 60.0)
    assert not learner.step() and learner.hellos_ignored == 1


# --- the reassembler's bounds ---

def test_many_senders_of_never_completed_messages_stay_within_the_byte_budget():
    lines: list[str] = []
    joiner = Reassembler(KEY, log=lines.append)
    for i in range(300):  # the first 16 KiB of a 64 MiB message, from each of 300 key holders
        joiner.add(tagged(KEY, Kind.BATCH, f's{i}', 1, 0, 4096, MAX_BYTES, b'x' * 16384), 0.0)
    assert joiner.reserved <= BUDGET_BYTES and joiner.pending == BUDGET_BYTES // MAX_BYTES
    assert joiner.refused == {'budget': 300 - BUDGET_BYTES // MAX_BYTES} and len(lines) == joiner.refused['budget']
    for i in range(2 * MAX_PENDING):  # many small ones: the count of messages in progress is bounded too
        joiner.add(tagged(KEY, Kind.BATCH, f't{i}', 1, 0, 2, 2, b'x'), 0.0)
    assert joiner.pending <= MAX_PENDING
    joiner.add(tagged(KEY, Kind.BATCH, 'late', 1, 0, 1, 1, b'x'), 31.0)  # all time out: the budget is free again
    assert joiner.reserved == 0 and joiner.pending == 0


def test_a_long_sender_name_is_refused_and_cut_in_the_log():
    lines: list[str] = []
    joiner = Reassembler(KEY, log=lines.append)
    name = 'w' * 1_000_000 + '\n\x1b[31m'
    assert joiner.add(Chunk(int(Kind.HELLO), name, 1, 0, 1, 10, b'x' * 10), 0.0) is None
    assert joiner.refused == {'malformed': 1} and len(lines) == 1
    assert len(lines[0]) < 400 and '\n' not in lines[0] and '\x1b' not in lines[0]
    assert shown('a\nb' + 'c' * 100) == repr('a?b' + 'c' * 61 + '...')


def test_chunks_of_an_unknown_kind_are_refused():
    joiner = Reassembler(KEY)
    assert joiner.add(Chunk(9, 'w0', 1, 0, 1, 1, b'x'), 0.0) is None
    assert joiner.refused == {'malformed': 1}


def test_resume_without_a_checkpoint_is_refused(tmp_path):
    with pytest.raises(ConfigError, match='nothing to resume'):
        _learner(tmp_path, resume=True)


def test_seeded_hostile_chunks_never_crash_the_learner_and_are_all_counted(tmp_path):
    rng = np.random.default_rng(0)
    learner = _learner(tmp_path)
    worker = _ready_worker()
    _admitted(learner, worker)
    frame = worker.sealer.encode(worker.collect(16))
    for message_id in range(2, 402):
        data = bytearray(frame)
        how = message_id % 4
        if how == 0:
            data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
        elif how == 1:
            del data[int(rng.integers(1, len(data))):]
        elif how == 2:
            data += rng.bytes(int(rng.integers(1, 64)))
        else:
            data = bytearray(rng.bytes(len(data)))
        for chunk in split(bytes(data), Kind.BATCH, 'w0', message_id, KEY, chunk_bytes=int(rng.integers(64, 8192))):
            learner.receive(chunk._replace(total_bytes=chunk.total_bytes + int(rng.integers(0, 2)) * (how == 3)), 0.0)
    assert not learner.queue and sum(learner.reassembler.refused.values()) >= 400  # each message refused
    assert set(learner.reassembler.refused) <= {'unauthenticated', 'forged', 'truncated', 'incomplete', 'malformed'}
    assert learner.reassembler.refused['unauthenticated'] >= 300 and learner.updates == 0
