"""Distributed training for any task and cheap weights (issue #33): Box actions, plans, the LSTM agent and
the full regime's delay state through a real learner and real workers (in memory, without ROS); deltas in
reduced precision checked by checksum; hostile weights frames (a delta for a version the worker does not
hold, a wrong checksum, a decompression bomb); flow control; the optimiser state across a resume."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import zstandard
from safetensors.torch import save as st_save

from calf_agent.dist import delta as delta_module
from calf_agent.dist.delta import apply_delta, checksum, make_delta
from calf_agent.dist.learner import STATE, Learner, LearnerConfig
from calf_agent.dist.policy import mean_kl
from calf_agent.dist.sync import parse_sync
from calf_agent.dist.wire import (
    MAX_BYTES,
    Kind,
    Opener,
    Reassembler,
    Refused,
    Sealer,
    WeightsMessage,
    _frame,
    snapshot,
    split,
)
from calf_agent.dist.worker import RolloutWorker
from calf_agent.gaussian import GaussianAgent
from calf_agent.policies import LstmAgent, MlpAgent
from calf_agent.regimes import train_defaults

KEY = bytes(range(32))
CARTPOLE = {'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline',
            'representation': {'frames': 1, 'actions': 0}, 'plan_horizon': 1, 'num_steps': 16}


def _learner(tmp_path: Path, env_config: dict = CARTPOLE, sync: str = 'every', **kw) -> Learner:
    env = env_config['env']
    train = replace(train_defaults(env, 'ppo'), ppo=replace(train_defaults(env, 'ppo').ppo, update_epochs=2,
                                                             num_minibatches=2))
    cfg = LearnerConfig(tmp_path, env_config, parse_sync(sync), total_steps=kw.pop('total_steps', 100_000),
                        train=train, eval_every=10**9, key=KEY, **kw)
    return Learner(cfg, log=lambda line: None, clock=lambda: 0.0)


def _round(learner: Learner, workers: list[RolloutWorker], num_steps: int, now_s: float = 0.0) -> None:
    """Each worker (hello first if it has no weights) sends one batch; the learner updates on all of them."""
    by_id = {w.worker_id: w for w in workers}
    for worker in workers:
        if not worker.ready or worker.needs_snapshot:
            for chunk in worker.hello():
                learner.receive(chunk, now_s)
            for out in learner.step():
                by_id[out.target].receive(out.chunk, now_s)
        for chunk in worker.next_batch(num_steps):
            learner.receive(chunk, now_s)
    while learner.queue:
        for out in learner.step():
            by_id[out.target].receive(out.chunk, now_s)


@pytest.mark.parametrize('env_config, agent_type, action_dtype', [
    ({**CARTPOLE, 'env': 'Pendulum-v1', 'network': 'delay_only', 'regime': 'delay_only',
      'representation': {'frames': 2, 'actions': 1}}, GaussianAgent, torch.float32),
    ({**CARTPOLE, 'env': 'Pendulum-v1', 'plan_horizon': 3}, GaussianAgent, torch.float32),
    ({**CARTPOLE, 'plan_horizon': 4, 'network': 'full_net_aware', 'regime': 'full',
      'representation': {'frames': 2, 'actions': 3, 'delay_state': True}}, MlpAgent, torch.int64),
    ({**CARTPOLE, 'env': 'minigrid', 'representation': {'frames': 1, 'actions': 0}}, LstmAgent, torch.int64),
])
@pytest.mark.slow
def test_any_task_trains_with_two_workers_on_deltas(tmp_path, env_config, agent_type, action_dtype):
    learner = _learner(tmp_path, env_config)
    assert type(learner.agent) is agent_type
    workers = [RolloutWorker(f'w{i}', env_config['env'], KEY, 4, seed=i) for i in range(2)]
    for _ in range(3):
        _round(learner, workers, env_config['num_steps'])
    assert learner.updates == 6 and not learner.reassembler.refused
    assert learner.snapshots == 2 and learner.deltas >= 6  # one snapshot each, then deltas only
    for worker in workers:
        assert not worker.reassembler.refused and worker.version == learner.version
        assert checksum(worker.agent.state_dict()) == checksum(learner.workers[worker.worker_id].held)
    batch = workers[0].collect(env_config['num_steps'])
    assert batch.actions.dtype == action_dtype and batch.masks.shape[2] == env_config['plan_horizon']
    if env_config['plan_horizon'] > 1:  # the loss counts the executed plan elements only
        assert 0 < batch.masks.mean() < 1


def test_a_delta_costs_less_than_a_snapshot_and_stays_within_the_kl_bound(tmp_path):
    learner = _learner(tmp_path)
    worker = RolloutWorker('w0', 'cartpole', KEY, 4, seed=0)
    for chunk in worker.hello():
        learner.receive(chunk, 0.0)
    for out in learner.step():
        worker.receive(out.chunk, 0.0)
    snapshot_bytes = learner.sent.bytes
    _round(learner, [worker], 16)
    assert (learner.snapshots, learner.deltas) == (1, 1)
    assert learner.sent.bytes - snapshot_bytes < 0.25 * snapshot_bytes  # int8 differences, compressed
    full = learner._params(learner.agent, learner.last_batch)
    held = learner._params(worker.agent, learner.last_batch)
    assert abs(mean_kl(learner.agent, full, held)) < learner.cfg.kl_bound


def test_a_delta_beyond_the_kl_bound_is_sent_as_a_snapshot(tmp_path):
    learner = _learner(tmp_path, kl_bound=0.0, precision='bf16')
    worker = RolloutWorker('w0', 'cartpole', KEY, 4, seed=0)
    for _ in range(3):
        _round(learner, [worker], 16)
    assert learner.deltas == 0 and learner.snapshots == 4 and learner.snapshots_for_kl == 3
    assert torch.equal(worker.agent.actor[-1].weight, learner.agent.actor[-1].weight)  # full precision


def test_an_int8_delta_beyond_the_kl_bound_is_sent_finer_then_as_a_snapshot(tmp_path, monkeypatch):
    """With the bound between the KLs the coarse and the fine int8 delta cause (measured here, on the learner's
    last batch), the fine one goes; with nothing finer to try and the bound below the coarse KL, a snapshot."""
    learner = _learner(tmp_path, precision='int8')
    worker = RolloutWorker('w0', 'cartpole', KEY, 4, seed=0)
    for _ in range(2):
        _round(learner, [worker], 16)
    for chunk in worker.next_batch(16):
        learner.receive(chunk, 0.0)
    learner._update(learner.queue.popleft())  # a new version, not sent yet
    sync = learner.workers['w0']
    full = learner._params(learner.agent, learner.last_batch)
    kls = []
    for levels in delta_module.delta_levels('int8'):
        learner._shadow.load_state_dict(make_delta(learner.agent.state_dict(), sync.held, 'int8', levels)[1])
        kls.append(mean_kl(learner.agent, full, learner._params(learner._shadow, learner.last_batch)))
    assert kls[1] < kls[0]
    learner.cfg = replace(learner.cfg, kl_bound=(kls[0] + kls[1]) / 2)
    for out in learner._weights_for('w0', sync):
        worker.receive(out.chunk, 0.0)
    assert (learner.deltas, learner.fine_deltas, learner.snapshots_for_kl) == (3, 1, 0)
    assert worker.version == learner.version and checksum(worker.agent.state_dict()) == checksum(sync.held)
    monkeypatch.setattr(delta_module, 'INT8_LADDER', (delta_module.INT8_LEVELS,))  # nothing finer to try
    learner._update(replace(learner.last_batch))
    learner.cfg = replace(learner.cfg, kl_bound=kls[0] / 1e6)
    for out in learner._weights_for('w0', sync):
        worker.receive(out.chunk, 0.0)
    assert learner.snapshots_for_kl == 1 and learner.deltas == 3
    assert checksum(worker.agent.state_dict()) == checksum(learner.agent.state_dict())  # full precision


def test_int8_differences_land_bit_for_bit_and_carry_what_rounding_left_out():
    agent = MlpAgent(4, 2)
    held = {k: v.clone() for k, v in agent.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    current = {k: v + 1e-3 * torch.randn(v.shape, generator=gen) for k, v in held.items()}
    delta, result = make_delta(current, held, 'int8')
    assert {t.dtype for k, t in delta.items() if not k.endswith('#step')} == {torch.int8}
    assert checksum(apply_delta(held, delta)) == checksum(result)  # the worker's sum is the learner's
    size = lambda state: len(zstandard.ZstdCompressor(level=19).compress(st_save(state)))  # noqa: E731
    assert size(delta) < size(current) / 8
    gap = lambda state: max(float((current[k] - state[k]).abs().max()) for k in current)  # noqa: E731
    again, closer = make_delta(current, result, 'int8')  # the next delta, onto what the worker now holds
    assert checksum(apply_delta(result, again)) == checksum(closer)
    assert gap(closer) < gap(result) < gap(held)


@pytest.mark.parametrize('delta, problem', [
    ({'actor.0.0.weight': torch.zeros(64, 4, dtype=torch.int8)}, 'without its step'),
    ({'actor.0.0.weight#step': torch.tensor(0.1)}, 'belongs to no int8'),
    ({'actor.0.0.weight': torch.zeros(64, 4, dtype=torch.int8), 'actor.0.0.weight#step': torch.tensor(float('nan'))},
     'no finite float32'),
    ({'actor.0.0.weight': torch.zeros(64, 4, dtype=torch.int8), 'actor.0.0.weight#step': torch.ones(2)},
     'no finite float32'),
])
def test_apply_delta_refuses_bad_int8_differences(delta, problem):
    with pytest.raises(ValueError, match=problem):
        apply_delta(MlpAgent(4, 2).state_dict(), delta)


def _held_worker(version: int = 3, run: int = 7) -> tuple[RolloutWorker, MlpAgent]:
    agent = MlpAgent(4, 2)
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=1)
    assert worker.apply(snapshot(agent, version, run, 'w0', CARTPOLE))
    return worker, agent


def _delta(agent: MlpAgent, worker: RolloutWorker, base: int, version: int, precision: str = 'fp16'
           ) -> WeightsMessage:
    with torch.no_grad():
        for p in agent.parameters():
            p.add_(0.01)
    delta, result = make_delta(agent.state_dict(), worker.agent.state_dict(), precision)
    return WeightsMessage(version, 7, 'w0', agent.spec(), CARTPOLE, delta, base, checksum(result))


@pytest.mark.parametrize('precision', ['fp16', 'int8'])
def test_a_delta_onto_a_version_the_worker_does_not_hold_is_never_applied(tmp_path, precision):
    worker, agent = _held_worker(version=3)
    before = checksum(worker.agent.state_dict())
    lines: list[str] = []
    worker.reassembler.log = lines.append
    frame = Sealer(KEY, 'learner').encode(_delta(agent, worker, base=2, version=4, precision=precision))  # on 2
    assert not any(worker.receive(c, 0.0) for c in split(frame, Kind.WEIGHTS, 'learner', 1, KEY))
    assert worker.reassembler.refused == {'stale_base': 1} and worker.version == 3
    assert checksum(worker.agent.state_dict()) == before and worker.needs_snapshot
    assert len(lines) == 1 and 'asking for a snapshot' in lines[0]
    (chunk,) = worker.hello()
    hello = Opener(KEY).decode(Reassembler(KEY).add(chunk, 0.0), 'w0')
    assert hello.version == -1  # the hello asks for a snapshot
    good = _delta(agent, worker, base=3, version=5, precision=precision)
    assert worker.apply(good) and worker.version == 5 and not worker.needs_snapshot


@pytest.mark.parametrize('precision', ['fp16', 'int8'])
def test_a_delta_with_a_wrong_checksum_is_refused(tmp_path, precision):
    worker, agent = _held_worker()
    before = checksum(worker.agent.state_dict())
    message = replace(_delta(agent, worker, base=3, version=4, precision=precision), checksum='0' * 64)
    with pytest.raises(Refused, match='checksum') as refused:
        worker.apply(message)
    assert refused.value.reason == 'checksum' and worker.needs_snapshot
    assert worker.version == 3 and checksum(worker.agent.state_dict()) == before


def test_a_worker_asking_for_a_snapshot_gets_one_at_the_hello_rate(tmp_path):
    learner = _learner(tmp_path)
    worker = RolloutWorker('w0', 'cartpole', KEY, 4, seed=0)
    _round(learner, [worker], 16)
    _round(learner, [worker], 16)
    worker.needs_snapshot = True  # as after a refused delta
    sent = learner.snapshots
    for now_s in (10.0, 10.5):  # the second hello comes before hello_resend_s
        for chunk in worker.hello():
            learner.receive(chunk, now_s)
        for out in learner.step():
            worker.receive(out.chunk, now_s)
    assert learner.snapshots == sent + 1 and learner.hellos_ignored == 1 and not worker.needs_snapshot


@pytest.mark.parametrize('content_size', [True, False])
def test_a_decompression_bomb_is_refused_before_it_expands(content_size):
    bomb = zstandard.ZstdCompressor(write_content_size=content_size).compress(bytes(MAX_BYTES + 1024))
    header = {'version': 1, 'learner_run': 7, 'target': 'w0', 'agent_spec': {}, 'env_config': {},
              'base_version': -1, 'checksum': ''}
    frame = _frame(Kind.WEIGHTS, KEY, 'learner', 1, 1, header, bomb)  # signed: only the size is wrong
    assert len(frame) < 10_000
    with pytest.raises(Refused, match='limit of|announces') as refused:
        Opener(KEY).decode(frame, 'learner')
    assert refused.value.reason == 'oversized'


def test_apply_delta_refuses_tensors_the_policy_does_not_have():
    state = MlpAgent(4, 2).state_dict()
    with pytest.raises(ValueError, match='fits no tensor'):
        apply_delta(state, {'critic.0.weight': torch.zeros(3, 3)})
    with pytest.raises(ValueError, match='fits no tensor'):
        apply_delta(state, {'nothing': torch.zeros(1)})


def test_flow_control_pauses_a_worker_instead_of_superseding_its_batches(tmp_path):
    learner = _learner(tmp_path)
    worker = RolloutWorker('w0', 'cartpole', KEY, 4, seed=0)
    _round(learner, [worker], 16)
    for _ in range(2):  # faster than the learner: the first batch is superseded
        for chunk in worker.next_batch(16):
            learner.receive(chunk, 1.0)
    assert learner.superseded == 1
    learner.queue.append(learner.queue[0])  # a second worker's batch ahead of it (the learner is behind)
    learner.queue[0] = replace(learner.queue[0], worker_id='w1', seq=99)
    learner.workers.setdefault('w1', type(learner.workers['w0'])())
    for out in learner.step():  # trains on w1's batch; w0's still waits: w0 is told to pause
        if out.target == 'w0':
            worker.receive(out.chunk, 1.0)
    assert learner.workers['w0'].paused and not worker.may_collect(1.0)
    for chunk in worker.next_batch(16):  # the batch in flight when the pause was sent waits too
        learner.receive(chunk, 1.1)
    assert learner.superseded == 1 and len(learner.queue) == 2
    for _ in range(2):
        for out in learner.step():
            worker.receive(out.chunk, 1.2)
    assert not learner.queue and not learner.workers['w0'].paused and worker.may_collect(1.2)
    assert worker.paced and learner.workers['w0'].paced
    for chunk in worker.next_batch(16, now_s=1.5):  # paced: one batch, then it waits for the learner's word
        learner.receive(chunk, 1.5)
    assert not worker.may_collect(1.5)
    for out in learner.step():  # the batch is taken: go on
        worker.receive(out.chunk, 1.6)
    assert worker.may_collect(1.6) and learner.superseded == 1
    assert learner.summary()['wasted_fraction'] == pytest.approx(1 / 5)  # 5 batches of w0 arrived, 1 superseded
    worker.paused_at_s = 2.0  # a pause whose learner went quiet ends after pause_timeout_s
    assert not worker.may_collect(2.0 + worker.pause_timeout_s) and worker.may_collect(2.1 + worker.pause_timeout_s)


def test_resume_restores_the_optimiser_state(tmp_path):
    first = _learner(tmp_path)
    _round(first, [RolloutWorker('w0', 'cartpole', KEY, 4, seed=0)], 16)
    first.close()
    assert (tmp_path / STATE).is_file()
    saved = first.optimizer.state_dict()['state']
    again = _learner(tmp_path, resume=True)
    restored = again.optimizer.state_dict()['state']
    assert set(restored) == set(saved) and len(saved) == len(list(first.agent.parameters()))
    for index, entry in saved.items():
        for name in ('step', 'exp_avg', 'exp_avg_sq'):
            assert torch.equal(torch.as_tensor(restored[index][name]), torch.as_tensor(entry[name])), (index, name)
    _round(again, [RolloutWorker('w0', 'cartpole', KEY, 4, seed=0)], 16)  # and it trains on from there
    steps_per_update = 2 * 2  # epochs x minibatches
    assert again.updates == 1
    assert float(again.optimizer.state_dict()['state'][0]['step']) == float(saved[0]['step']) + steps_per_update
