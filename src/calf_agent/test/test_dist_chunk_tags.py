"""Chunks carry tags: without the run's key, nobody on the domain can replace, corrupt or crowd out a
message in progress. Real learner, worker, sealers and reassemblers, without ROS."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from calf_agent.dist.learner import Learner, LearnerConfig
from calf_agent.dist.sync import parse_sync
from calf_agent.dist.wire import (
    MAX_BYTES,
    MAX_SENDER,
    Chunk,
    Hello,
    Kind,
    Reassembler,
    Sealer,
    WeightsMessage,
    snapshot,
    tagged,
)
from calf_agent.dist.worker import RolloutWorker
from calf_agent.policies import MlpAgent
from calf_agent.ppo import PPOConfig
from calf_agent.trainer import cartpole_defaults

KEY = bytes(range(32))
ATTACKER = b'\xaa' * 32  # a key that is not the run's
ENV_CONFIG = {'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline',
              'representation': {'frames': 1, 'actions': 0, 'obs_age': False}, 'plan_horizon': 1, 'num_steps': 16}


def _weights() -> WeightsMessage:
    return snapshot(MlpAgent(4, 2), 1, 7, 'w0', ENV_CONFIG)


def _forgeries(genuine: Chunk) -> list[Chunk]:
    """What someone without the key can send under ``genuine``'s sender: a newer message, chunks of the
    same message with other contents or sizes, and announcements of 64 MiB."""
    newer = genuine.message_id + 1
    return [tagged(ATTACKER, genuine.kind, genuine.sender, newer, 0, 2, 2 * MAX_SENDER, b'x' * MAX_SENDER),
            tagged(ATTACKER, genuine.kind, genuine.sender, genuine.message_id, genuine.count - 1, genuine.count,
                   genuine.total_bytes, b'\0' * 16),
            genuine._replace(data=b'\0' * 16 + genuine.data[16:]),  # the genuine tag on other bytes
            genuine._replace(message_id=newer, count=1, total_bytes=MAX_BYTES),
            tagged(ATTACKER, genuine.kind, genuine.sender, 2**63, 0, 4096, MAX_BYTES, b'y' * 1024)]


def test_forged_chunks_under_the_learners_name_do_not_disturb_its_weights_in_progress():
    lines: list[str] = []
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=1, log=lines.append)
    chunks = Sealer(KEY, 'learner').chunks(_weights(), chunk_bytes=1024)
    assert len(chunks) >= 4
    half = len(chunks) // 2
    arrivals = [*chunks[:half], *_forgeries(chunks[0]), *chunks[half:-1]]
    assert not any(worker.receive(chunk, 0.0) for chunk in arrivals)
    assert worker.reassembler.pending == 1 and worker.reassembler.reserved == chunks[0].total_bytes
    assert worker.receive(chunks[-1], 0.0) and worker.ready and worker.version == 1  # the genuine one completes
    assert worker.reassembler.refused == {'forged': 5} and len(lines) == 5
    assert all('tag does not check under this run\'s key' in line for line in lines)


def test_a_flood_of_forged_announcements_does_not_stop_a_genuine_batch(tmp_path):
    cfg = LearnerConfig(tmp_path, ENV_CONFIG, parse_sync('every'), total_steps=10_000, eval_every=10**9, key=KEY,
                        train=replace(cartpole_defaults(), ppo=PPOConfig(update_epochs=1, num_minibatches=1)))
    learner = Learner(cfg, log=lambda line: None, clock=lambda: 0.0, warn=lambda line: None)
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=1, chunk_bytes=512)
    assert worker.apply(_weights())
    for chunk in worker.hello():
        learner.receive(chunk, 0.0)
    batch = worker.next_batch(16)
    assert len(batch) >= 4
    flood = 0
    for i, chunk in enumerate(batch):
        for n in range(500):  # 64 MiB announced under the worker's name and others', newer than its message
            sender = 'w0' if n % 2 else f'x{n}'
            learner.receive(tagged(ATTACKER, Kind.BATCH, sender, chunk.message_id + 1 + n, 0, 4096, MAX_BYTES,
                                   b'z' * 64), float(i))
            flood += 1
        learner.receive(chunk, float(i))
        assert learner.reassembler.reserved <= chunk.total_bytes  # the flood reserved nothing
    assert len(learner.queue) == 1 and learner.queue[0].worker_id == 'w0'
    assert learner.reassembler.refused == {'forged': flood} and learner.reassembler.pending == 0


@pytest.mark.parametrize('field, value', [('kind', int(Kind.HELLO)), ('sender', 'w1'), ('message_id', 2),
                                          ('index', 1), ('count', 4), ('total_bytes', 2999), ('piece', 0),
                                          ('tag', -1)])
def test_a_tampered_chunk_is_refused_and_changes_nothing(field, value):
    lines: list[str] = []
    joiner = Reassembler(KEY, log=lines.append)
    first, second, third = [tagged(KEY, Kind.BATCH, 'w0', 1, i, 3, 3000, bytes([i]) * 1000) for i in range(3)]
    assert joiner.add(first, 0.0) is None
    if field in ('piece', 'tag'):
        data = bytearray(third.data)
        data[value] ^= 1
        tampered = third._replace(data=bytes(data))
    else:
        tampered = third._replace(**{field: value})
    assert joiner.add(tampered, 0.1) is None
    assert joiner.refused == {'forged': 1} and len(lines) == 1 and (joiner.pending, joiner.reserved) == (1, 3000)
    assert joiner.add(second, 0.2) is None and joiner.add(third, 0.3) == b'\0' * 1000 + b'\1' * 1000 + b'\2' * 1000


def test_a_newer_message_of_a_sender_does_not_drop_its_older_one_still_arriving():
    joiner = Reassembler(KEY)
    sealer = Sealer(KEY, 'learner')
    older, newer = (sealer.chunks(_weights(), chunk_bytes=1024) for _ in range(2))
    assert newer[0].message_id == older[0].message_id + 1
    done = [joiner.add(chunk, 0.0) for pair in zip(older, newer) for chunk in pair]
    assert sum(frame is not None for frame in done) == 2 and not joiner.refused
    third = sealer.chunks(_weights(), chunk_bytes=1024)
    joiner.add(older[0], 0.0)  # a replay of a completed message takes no place
    assert joiner.refused == {'replayed': 1} and joiner.pending == 0
    assert [joiner.add(chunk, 0.0) for chunk in third][-1] is not None


def test_a_restarted_sender_is_not_blocked_by_its_earlier_runs_messages():
    joiner = Reassembler(KEY)
    before = Sealer(KEY, 'w0', epoch=10**18)
    for _ in range(2):  # two batches cut short when the worker died
        joiner.add(before.chunks(Hello('w0'), chunk_bytes=8)[0], 0.0)
    assert joiner.pending == 2
    after = Sealer(KEY, 'w0', epoch=10**18 + 10**9)  # a second later
    frames = [joiner.add(chunk, 1.0) for chunk in after.chunks(Hello('w0'), chunk_bytes=8)]
    assert frames[-1] is not None  # its message displaced the oldest of the earlier run's
    assert joiner.refused == {'incomplete': 1} and joiner.pending == 1


def test_a_new_message_displaces_only_older_ones_of_its_own_sender():
    lines: list[str] = []
    joiner = Reassembler(KEY, budget_bytes=3000, log=lines.append)

    def first_chunk(sender: str, message_id: int) -> Chunk:
        return tagged(KEY, Kind.BATCH, sender, message_id, 0, 2, 1000, b'x' * 500)

    for chunk in (first_chunk('w0', 5), first_chunk('w0', 6), first_chunk('w1', 1)):
        assert joiner.add(chunk, 0.0) is None
    assert joiner.add(first_chunk('w0', 4), 0.0) is None  # older than both of w0's in progress
    assert joiner.add(first_chunk('w2', 1), 0.0) is None  # the budget is full, and w2 has nothing to displace
    assert joiner.refused == {'stale': 1, 'budget': 1} and (joiner.pending, joiner.reserved) == (3, 3000)
    assert joiner.add(first_chunk('w1', 2), 0.0) is None  # w1's newer message takes the place of its older one
    assert joiner.refused['incomplete'] == 1 and 'message 1 from \'w1\'' in lines[-1]
    assert joiner.add(tagged(KEY, Kind.BATCH, 'w0', 6, 1, 2, 1000, b'y' * 500), 0.0) == b'x' * 500 + b'y' * 500


@pytest.mark.parametrize('seed', range(3))
def test_genuine_messages_of_several_senders_all_complete_among_random_forgeries(seed):
    rng = np.random.default_rng(seed)
    queues = [[chunk for _ in range(3) for chunk in sealer.chunks(_weights(), int(rng.integers(512, 4096)))]
              for sealer in (Sealer(KEY, f'w{i}') for i in range(3))]  # each sender's chunks, in its order
    forged = []
    for _ in range(1000):  # a genuine chunk's name and id (or a newer one), with the attacker's key or a bad tag
        genuine = queues[int(rng.integers(3))][int(rng.integers(9))]
        aimed = genuine._replace(index=int(rng.integers(genuine.count)),
                                 message_id=genuine.message_id + int(rng.integers(2)))
        piece = rng.bytes(int(rng.integers(0, 600)))
        forged.append(tagged(ATTACKER, *aimed[:-1], piece) if rng.random() < 0.5 else
                      aimed._replace(data=piece + rng.bytes(32)))
    queues.append(forged)
    joiner, frames = Reassembler(KEY), []
    while any(queues):
        queue = queues[int(rng.choice([i for i, q in enumerate(queues) if q]))]
        frames.append(joiner.add(queue.pop(0), 0.0))
    assert sum(frame is not None for frame in frames) == 9 and set(joiner.refused) <= {'forged', 'malformed'}
    assert joiner.refused['forged'] >= 900 and joiner.pending == 0 and joiner.reserved == 0
