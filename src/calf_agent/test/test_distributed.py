"""Distributed training's pure core: wire format, chunking, sync policies, lag correction, and a
learner with workers exchanging real chunks (CartPole, real torch), without ROS."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from calf_agent.dist.learner import Learner, LearnerConfig
from calf_agent.dist.policy import mean_kl
from calf_agent.dist.ppo import LagConfig, update_on_batch, vtrace
from calf_agent.dist.sync import DEFAULT_APS_DELTA, SyncPolicy, WorkerSync, parse_sync
from calf_agent.dist.wire import (
    Hello,
    Kind,
    Opener,
    Reassembler,
    Refused,
    Sealer,
    TrajectoryBatch,
    WeightsMessage,
    snapshot,
    split,
    tagged,
)
from calf_agent.dist.worker import RolloutWorker
from calf_agent.policies import MlpAgent
from calf_agent.ppo import PPOConfig, compute_gae
from calf_agent.trainer import cartpole_defaults
from calf_core.errors import ConfigError

KEY = bytes(range(32))
ENV_CONFIG = {'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline',
              'representation': {'frames': 1, 'actions': 0, 'obs_age': False}, 'plan_horizon': 1, 'num_steps': 16}


def _weights(version: int = 3, target: str = 'w0') -> WeightsMessage:
    agent = MlpAgent(4, 2)
    return snapshot(agent, version, 7, target, ENV_CONFIG)


def _worker(worker_id: str = 'w0', envs: int = 2) -> RolloutWorker:
    worker = RolloutWorker(worker_id, 'cartpole', KEY, envs, seed=1)
    worker.apply(_weights(target=worker_id))
    return worker


def _round_trip(message, sender: str = 'w0'):
    return Opener(KEY).decode(Sealer(KEY, sender).encode(message), sender)


def test_batch_round_trips_through_bytes():
    batch = _worker().collect(20)
    back = _round_trip(batch)
    assert isinstance(back, TrajectoryBatch)
    assert (back.worker_id, back.seq, back.version, back.learner_run) == ('w0', 1, 3, 7)
    for name in ('obs', 'actions', 'logprobs', 'behaviour', 'rewards', 'dones', 'next_obs', 'next_done', 'masks',
                 'state_h', 'state_c'):
        assert torch.equal(getattr(back, name), getattr(batch, name)), name
    assert back.obs.shape == (20, 2, 4) and back.env_steps == 40
    assert back.episode_returns == batch.episode_returns


def test_weights_and_hello_round_trip():
    message = _weights()
    back = _round_trip(message, 'learner')
    assert isinstance(back, WeightsMessage) and back.version == 3 and back.target == 'w0'
    assert all(torch.equal(back.state[k], v) for k, v in message.state.items())
    assert _round_trip(Hello('robot_1', 5, 2), 'robot_1') == Hello('robot_1', 5, 2)


@pytest.mark.parametrize('damage', ['flip', 'truncate', 'pad', 'magic'])
def test_damaged_frames_are_refused(damage):
    frame = bytearray(Sealer(KEY, 'learner').encode(_weights()))
    if damage == 'flip':
        frame[len(frame) // 2] ^= 0xFF
    elif damage == 'truncate':
        del frame[-100:]
    elif damage == 'pad':
        frame += b'\0'
    else:
        frame[:4] = b'XXXX'
    with pytest.raises(Refused, match='no valid tag') as refused:
        Opener(KEY).decode(bytes(frame), 'learner')
    assert refused.value.reason == 'unauthenticated'


def test_oversized_frame_is_refused_before_parsing():
    frame = Sealer(KEY, 'learner').encode(_weights())
    with pytest.raises(Refused, match='exceeds the limit'):
        Opener(KEY, max_bytes=len(frame) - 1).decode(frame, 'learner')


def test_chunks_reassemble_in_any_order_and_duplicates_are_harmless():
    frame = Sealer(KEY, 'learner').encode(_weights())
    chunks = split(frame, Kind.WEIGHTS, 'learner', 1, KEY, chunk_bytes=4096)
    assert len(chunks) > 3 and max(len(c.data) for c in chunks) == 4096 + 32  # a piece and its tag
    joiner = Reassembler(KEY)
    results = [joiner.add(c, 0.0) for c in [*reversed(chunks[1:]), chunks[1], chunks[0]]]
    assert results[:-1] == [None] * (len(results) - 1) and results[-1] == frame
    assert not joiner.refused


def test_reassembler_counts_and_logs_each_refusal_once():
    lines: list[str] = []
    joiner = Reassembler(KEY, max_bytes=10_000, timeout_s=5.0, log=lines.append)
    first, second, third = (split(b'x' * 3000, Kind.BATCH, 'w0', i, KEY, 1000) for i in (1, 2, 3))
    joiner.add(first[0], 0.0)
    assert joiner.add(second[0], 0.1) is None and not joiner.refused  # two of w0's messages in progress
    assert joiner.add(third[0], 0.1) is None  # a third: message 1, the oldest, is dropped as incomplete
    assert joiner.add(tagged(KEY, 0, 'w1', 1, 0, 1, 10**9, b'z'), 0.2) is None  # announces too much
    assert joiner.add(tagged(KEY, 0, 'w0', 2, 1, 5, 3000, b'y' * 1000), 0.3) is None  # contradicts its message
    joiner.add(split(b'q' * 2000, Kind.BATCH, 'w2', 1, KEY, 1000)[0], 0.3)
    assert joiner.pending == 3
    joiner.add(second[1], 10.0)  # every message in progress times out, and so does the one this chunk starts
    assert joiner.refused == {'incomplete': 4, 'malformed': 2} and joiner.pending == 1
    assert len(lines) == 6 and all('\n' not in line for line in lines)
    assert joiner.add(tagged(KEY, 0, 'w3', 1, 0, 2, 5, b'abc'), 11.0) is None
    assert joiner.add(tagged(KEY, 0, 'w3', 1, 1, 2, 5, b'd'), 11.0) is None  # 4 of 5 bytes: truncated
    assert joiner.refused['truncated'] == 1


@pytest.mark.parametrize('text, expected', [('every', SyncPolicy('every')), ('period:4', SyncPolicy('period', 4)),
                                            ('aps:0.02', SyncPolicy('aps', delta=0.02))])
def test_parse_sync(text, expected):
    assert parse_sync(text) == expected
    assert str(parse_sync(text)) == text


def test_aps_without_a_delta_takes_the_default():
    assert parse_sync('aps') == SyncPolicy('aps', delta=DEFAULT_APS_DELTA)


@pytest.mark.parametrize('text', ['always', 'period:0', 'period:x', 'aps:-1', 'aps:', 'aps:x', 'every:2'])
def test_parse_sync_refuses(text):
    with pytest.raises(ConfigError, match='--sync must be'):
        parse_sync(text)


def test_sync_decisions():
    sync = WorkerSync()
    assert sync.wants(parse_sync('period:4'), 0, None)  # unknown worker: at once
    sync.on_send(5, {}, None)
    assert not sync.wants(parse_sync('every'), 5, None)
    assert sync.wants(parse_sync('every'), 6, None)
    assert [sync.wants(parse_sync('period:4'), v, None) for v in (7, 8, 9)] == [False, False, True]
    aps = parse_sync('aps:0.1', lag_cap=10)
    assert not sync.wants(aps, 8, 0.05) and sync.wants(aps, 8, 0.2)
    assert sync.wants(aps, 16, 0.0)  # lag 11 > cap 10


def test_a_lost_send_is_detected_from_later_batches():
    sync = WorkerSync()
    sync.on_send(4, {}, None)
    batch = _worker().collect(4)
    batch.version = 2
    for _ in range(2):
        sync.on_batch(batch)
    assert sync.version == 4 and sync.held == {}  # batches collected before the weights arrived
    sync.on_batch(batch)
    assert sync.version == 2 and sync.sent_version == 2 and sync.held is None  # a snapshot next


def test_mean_kl_is_exact():
    ref = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.1]]))
    cur = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    expected = (0.0 + 0.9 * np.log(0.9 / 0.5) + 0.1 * np.log(0.1 / 0.5)) / 2
    agent = MlpAgent(4, 2)
    assert mean_kl(agent, ref, cur) == pytest.approx(expected, rel=1e-5)
    assert mean_kl(agent, cur, cur) == pytest.approx(0.0, abs=1e-7)


def _random_rollout(seed: int = 0, steps: int = 12, envs: int = 3):
    g = torch.Generator().manual_seed(seed)
    rewards, values = torch.rand(steps, envs, generator=g), torch.rand(steps, envs, generator=g)
    dones = (torch.rand(steps, envs, generator=g) < 0.2).float()
    return rewards, values, dones, torch.rand(envs, generator=g), torch.zeros(envs)


@pytest.mark.parametrize('gae_lambda', [1.0, 0.95])
def test_vtrace_on_policy_is_gae(gae_lambda):
    rewards, values, dones, next_value, next_done = _random_rollout()
    logp = torch.full_like(rewards, -0.7)
    vs, adv = vtrace(logp, logp, rewards, values, dones, next_value, next_done, 0.9, gae_lambda)
    gae_adv, gae_ret = compute_gae(rewards, values, dones, next_value, next_done, 0.9, gae_lambda)
    assert torch.allclose(vs, gae_ret, atol=1e-5) and torch.allclose(adv, gae_adv, atol=1e-5)


@pytest.mark.parametrize('gae_lambda, vs, adv', [(1.0, [1.25, 0.5, 0.0], [0.75, -0.5, 1.0]),
                                                 (0.5, [1.375, 0.5, 0.0], [0.875, -0.5, 1.0])])
def test_vtrace_matches_a_hand_computed_example(gae_lambda, vs, adv):
    """Three steps, γ = 0.5, an episode ending after step 1, π/μ = 2, 0.5, 0.25 (ρ = c/λ = 1, 0.5, 0.25):
    ρδ = 1, -0.5, 1; vs - V = ρδ_t + γ c_t (vs - V)_{t+1}; advantages ρ_t (r_t + γ (V + λ (vs - V))_{t+1} - V_t)."""
    col = lambda *xs: torch.tensor(xs, dtype=torch.float32).view(-1, 1)  # noqa: E731
    behaviour = col(-1.0, -1.0, -1.0)
    target = behaviour + col(np.log(2.0), np.log(0.5), np.log(0.25))
    got = vtrace(behaviour, target, col(1.0, 0.0, 2.0), col(0.5, 1.0, -1.0), col(0.0, 0.0, 1.0),
                 torch.tensor([2.0]), torch.tensor([0.0]), 0.5, gae_lambda)
    assert torch.allclose(got[0], col(*vs), atol=1e-6) and torch.allclose(got[1], col(*adv), atol=1e-6)


def test_vtrace_truncates_importance_weights():
    rewards, values, dones, next_value, next_done = _random_rollout(1)
    behaviour = torch.full_like(rewards, -2.0)
    clipped = vtrace(behaviour, behaviour + 3.0, rewards, values, dones, next_value, next_done, 0.9)
    on_policy = vtrace(behaviour, behaviour, rewards, values, dones, next_value, next_done, 0.9)
    assert all(torch.allclose(a, b) for a, b in zip(clipped, on_policy))  # ρ = e^3 is cut to 1
    down = vtrace(behaviour, behaviour - 1.0, rewards, values, dones, next_value, next_done, 0.9)
    assert not torch.allclose(down[1], on_policy[1])


def test_updates_weigh_a_stale_batch_by_its_importance_weights():
    """A batch of the learner's own policy has ρ = 1; one of another policy ρ < 1, and still moves it."""
    worker = _worker()
    batch = _round_trip(worker.collect(16))
    ppo = PPOConfig(update_epochs=2, num_minibatches=2)
    rng = np.random.default_rng(0)
    own = MlpAgent(4, 2)
    own.load_state_dict(worker.agent.state_dict())
    stats = update_on_batch(own, torch.optim.Adam(own.parameters(), lr=1e-3), batch, ppo, LagConfig(), rng)
    assert stats['rho_mean'] == pytest.approx(1.0, abs=1e-5)
    other = MlpAgent(4, 2)
    with torch.no_grad():  # a policy far from the worker's
        for p in other.parameters():
            p.add_(torch.randn_like(p, generator=torch.Generator().manual_seed(p.numel())))
    before = [p.clone() for p in other.parameters()]
    stats = update_on_batch(other, torch.optim.Adam(other.parameters(), lr=1e-3), batch, ppo, LagConfig(), rng)
    assert stats['rho_mean'] < 0.99 and np.isfinite(stats['policy_loss'])
    assert any(not torch.equal(a, b) for a, b in zip(before, other.parameters()))


def _learner(tmp_path: Path, sync: str, **kw) -> Learner:
    cfg = LearnerConfig(tmp_path, ENV_CONFIG, parse_sync(sync), total_steps=kw.pop('total_steps', 10_000),
                        train=replace(cartpole_defaults(), ppo=PPOConfig(update_epochs=2, num_minibatches=1)),
                        eval_every=10**9, key=KEY, **kw)
    return Learner(cfg, log=lambda line: None, clock=lambda: 0.0)


def _exchange(learner: Learner, workers: list[RolloutWorker], rounds: int) -> None:
    """Hellos, then ``rounds`` batches from each worker, with every chunk handed over in memory."""
    for worker in workers:
        for chunk in worker.hello():
            learner.receive(chunk, 0.0)
    for _ in range(rounds):
        _deliver(learner, workers)
        for worker in workers:
            for chunk in worker.next_batch(16):
                learner.receive(chunk, 0.0)
        while learner.queue:
            _deliver(learner, workers)


def _deliver(learner: Learner, workers: list[RolloutWorker]) -> None:
    """One learner step; each weights chunk goes to the worker it is addressed to."""
    by_id = {worker.worker_id: worker for worker in workers}
    for out in learner.step():
        by_id[out.target].receive(out.chunk, 0.0)


@pytest.mark.slow
def test_every_sends_each_worker_each_update(tmp_path):
    learner = _learner(tmp_path, 'every')
    workers = [RolloutWorker(f'w{i}', 'cartpole', KEY, 2, seed=i) for i in range(2)]
    _exchange(learner, workers, rounds=4)
    assert learner.updates == 8 and learner.version == 8 and learner.env_steps == 8 * 32
    weights_per_message = learner.sent.bytes / learner.sent.messages
    assert learner.sent.messages == 2 + 8 * 2  # the first weights, then one per worker per update
    assert (learner.snapshots, learner.deltas) == (2, 16) and weights_per_message < 10_000  # then int8 deltas
    assert all(w.version > 0 and not w.reassembler.refused for w in workers)
    assert learner.received.messages == 2 + 8 and not learner.reassembler.refused
    assert sum(learner.lags.values()) == 8 and max(learner.lags) <= 1


@pytest.mark.slow
def test_aps_sends_fewer_weights_than_every(tmp_path):
    every, aps = _learner(tmp_path / 'every', 'every'), _learner(tmp_path / 'aps', 'aps:0.05')
    for learner in (every, aps):
        _exchange(learner, [RolloutWorker(f'w{i}', 'cartpole', KEY, 2, seed=i) for i in range(2)], rounds=4)
    assert aps.updates == every.updates == 8
    assert aps.sent.bytes < every.sent.bytes
    assert max(aps.lags) > 1  # workers ran stale copies, corrected by the learner


def test_corrupt_batch_is_refused_counted_and_the_learner_carries_on(tmp_path):
    lines: list[str] = []
    learner = _learner(tmp_path, 'every')
    learner.reassembler.log = lines.append
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=0)
    _exchange(learner, [worker], rounds=1)
    chunks = worker.next_batch(16)
    data = bytearray(chunks[-1].data)
    data[len(data) // 2] ^= 0x55  # one flipped byte in the payload
    bad = chunks[-1]._replace(data=bytes(data))
    for chunk in [*chunks[:-1], bad]:
        learner.receive(chunk, 0.0)
    assert learner.reassembler.refused == {'forged': 1} and not learner.queue
    assert len(lines) == 1 and 'tag does not check' in lines[0]
    _exchange(learner, [worker], rounds=1)
    assert learner.updates == 2


def test_learner_resumes_from_its_checkpoint(tmp_path):
    first = _learner(tmp_path, 'every')
    _exchange(first, [RolloutWorker('w0', 'cartpole', KEY, 2, seed=0)], rounds=2)
    first.close()
    again = _learner(tmp_path, 'every', resume=True)
    assert (again.version, again.env_steps) == (first.version, first.env_steps)
    assert again.run != first.run
    assert all(torch.equal(a, b) for a, b in zip(first.agent.parameters(), again.agent.parameters()))
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=0)
    worker.apply(snapshot(first.agent, 0, first.run, 'w0', ENV_CONFIG))
    for chunk in [*worker.hello(), *worker.next_batch(16)]:  # admitted; collected under the old run: V-trace
        again.receive(chunk, 0.0)
    sends = again.step()
    assert again.lags[-1] == 1 and sends
    assert {out.target for out in sends} == {'w0'}
    assert any(worker.receive(out.chunk, 0.0) for out in sends) and worker.learner_run == again.run


def test_a_newer_batch_of_a_worker_replaces_its_waiting_one(tmp_path):
    learner = _learner(tmp_path, 'every')
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=0)
    _exchange(learner, [worker], rounds=1)
    for _ in range(3):
        for chunk in worker.next_batch(16):
            learner.receive(chunk, 0.0)
    assert [b.seq for b in learner.queue] == [4] and learner.superseded == 2
    assert learner.summary()['batches_superseded'] == {'messages': 2, 'env_steps': 64}


@pytest.mark.slow
def test_a_learner_with_lagged_workers_still_learns_cartpole(tmp_path):
    """4 workers that get weights every 8th version only (lags of 0 to 7 versions): V-trace on every batch
    still brings the 20-episode return past 150 within 60,000 env steps (CartPole's own PPO settings)."""
    cfg = LearnerConfig(tmp_path, {**ENV_CONFIG, 'num_steps': 32}, parse_sync('period:8'), total_steps=60_000,
                        train=cartpole_defaults(), eval_every=10**9, key=KEY)
    learner = Learner(cfg, log=lambda line: None, clock=lambda: 0.0)
    workers = [RolloutWorker(f'w{i}', 'cartpole', KEY, 8, seed=i) for i in range(4)]
    best = 0.0
    _exchange(learner, workers, rounds=1)
    while learner.env_steps < cfg.total_steps and best < 150:
        for worker in workers:
            for chunk in worker.next_batch(32):
                learner.receive(chunk, 0.0)
        while learner.queue:
            _deliver(learner, workers)
        best = max(best, float(np.mean(learner.returns[-20:])))
    assert max(learner.lags) >= 7 and sum(n for lag, n in learner.lags.items() if lag >= 4) >= learner.updates / 3
    assert best >= 150, f'best 20-episode return {best:.1f} after {learner.env_steps} env steps'
