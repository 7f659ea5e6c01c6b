"""Distributed training learns as a single process does (issue #33): a batch collected by the learner's own
version is trained on-policy (a Gaussian's observation normaliser is the one the worker acted with), and in
rounds every worker waits after its batch for the weights trained on it, so that no batch is stale. Real
learner and workers, in memory (no ROS)."""
from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import torch

from calf_agent.dist.delta import checksum
from calf_agent.dist.learner import Learner, LearnerConfig
from calf_agent.dist.ppo import merged
from calf_agent.dist.sync import parse_sync
from calf_agent.dist.worker import RolloutWorker
from calf_agent.regimes import train_defaults

KEY = bytes(range(32))
PENDULUM = {'env': 'Pendulum-v1', 'network': 'sim_clean', 'regime': 'baseline',
            'representation': {'frames': 1, 'actions': 0}, 'plan_horizon': 1, 'num_steps': 32}


class Clock:
    """Seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _learner(tmp_path: Path, clock: Clock, **kw) -> Learner:
    base = train_defaults('Pendulum-v1', 'ppo')
    train = replace(base, ppo=replace(base.ppo, update_epochs=2, num_minibatches=2))
    cfg = LearnerConfig(tmp_path, PENDULUM, parse_sync('every'), total_steps=100_000, train=train,
                        eval_every=10**9, key=KEY, **kw)
    return Learner(cfg, log=lambda line: None, clock=clock)


def _deliver(learner: Learner, workers: list[RolloutWorker], now: float) -> None:
    by_id = {w.worker_id: w for w in workers}
    for out in learner.step():
        by_id[out.target].receive(out.chunk, now)


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / 'progress.csv') as file:
        return list(csv.DictReader(file))


def test_a_batch_without_lag_is_trained_on_policy(tmp_path):
    """One worker, full snapshots, every batch collected by the learner's current version: the learner's policy
    at the update's start gives each action the worker's own log-probability (ρ = 1), although the normaliser
    moves with every batch (the old learner folded the batch into it first, and trained the batch off-policy)."""
    clock = Clock()
    learner = _learner(tmp_path, clock, kl_bound=0.0)
    worker = RolloutWorker('w0', 'Pendulum-v1', KEY, 4, seed=3)
    for chunk in worker.hello():
        learner.receive(chunk, 0.0)
    _deliver(learner, [worker], 0.0)
    means = []
    for _ in range(3):
        for chunk in worker.next_batch(PENDULUM['num_steps']):
            learner.receive(chunk, 0.0)
        _deliver(learner, [worker], 0.0)
        assert checksum(worker.agent.state_dict()) == checksum(learner.agent.state_dict())
        means.append(learner.agent.obs_norm.mean.clone())
    rows = _rows(tmp_path)
    assert [int(r['lag']) for r in rows] == [0, 0, 0]
    assert all(abs(float(r['rho_mean']) - 1.0) < 1e-4 for r in rows), [r['rho_mean'] for r in rows]
    assert not torch.equal(means[0], means[-1])  # the normaliser learned from the batches


def test_a_round_trains_on_every_live_worker_and_each_collects_with_its_weights(tmp_path):
    """Workers are paced from their admission: each pauses after its batch; the learner waits for both, trains
    once on the two together, and lets each go on only once it holds the new weights (no batch is stale)."""
    clock = Clock()
    learner = _learner(tmp_path, clock, rounds=True)
    workers = [RolloutWorker(f'w{i}', 'Pendulum-v1', KEY, 2, seed=i) for i in range(2)]
    for worker in workers:
        for chunk in worker.hello():
            learner.receive(chunk, clock.now)
    _deliver(learner, workers, clock.now)
    assert all(w.ready and w.paced and w.may_collect(clock.now) for w in workers)
    for update in range(1, 4):
        for chunk in workers[0].next_batch(PENDULUM['num_steps'], clock.now):
            learner.receive(chunk, clock.now)
        assert not workers[0].may_collect(clock.now)  # paused itself after its batch
        _deliver(learner, workers, clock.now)
        assert learner.updates == update - 1  # the round waits for w1
        for chunk in workers[1].next_batch(PENDULUM['num_steps'], clock.now):
            learner.receive(chunk, clock.now)
        _deliver(learner, workers, clock.now)
        assert learner.updates == update and learner.env_steps == update * 2 * 2 * PENDULUM['num_steps']
        assert all(w.may_collect(clock.now) and w.version == learner.version for w in workers)
    rows = _rows(tmp_path)
    assert [(r['worker'], r['lag']) for r in rows] == [('w0+w1', '0')] * 3


def test_a_round_goes_ahead_without_a_worker_that_is_silent(tmp_path):
    """A worker that stops (no batch, no hello) holds a round up for at most ``round_wait_s`` once; once it has
    been silent that long rounds no longer wait for it."""
    clock = Clock()
    learner = _learner(tmp_path, clock, rounds=True, round_wait_s=5.0)
    workers = [RolloutWorker(f'w{i}', 'Pendulum-v1', KEY, 2, seed=i) for i in range(2)]
    for worker in workers:
        for chunk in worker.hello():
            learner.receive(chunk, clock.now)
    _deliver(learner, workers, clock.now)
    for chunk in workers[0].next_batch(PENDULUM['num_steps'], clock.now):
        learner.receive(chunk, clock.now)
    clock.now = 4.9
    _deliver(learner, workers, clock.now)
    assert learner.updates == 0
    clock.now = 5.0
    _deliver(learner, workers, clock.now)
    assert learner.updates == 1 and workers[0].may_collect(clock.now)
    clock.now = 5.5  # w1 silent for 5.5 s: no longer waited for
    for chunk in workers[0].next_batch(PENDULUM['num_steps'], clock.now):
        learner.receive(chunk, clock.now)
    _deliver(learner, workers, clock.now)
    assert learner.updates == 2


def test_merged_batches_hold_every_env_of_each(tmp_path):
    """Two workers' batches as one: envs side by side, as a single process's rollout of all of them."""
    learner = _learner(tmp_path, Clock())
    workers = [RolloutWorker(f'w{i}', 'Pendulum-v1', KEY, n, seed=i) for i, n in ((0, 2), (1, 3))]
    for worker in workers:
        for chunk in worker.hello():
            learner.receive(chunk, 0.0)
    _deliver(learner, workers, 0.0)
    a, b = (w.collect(8) for w in workers)
    both = merged([a, b])
    assert both.obs.shape[:2] == (8, 5) and both.next_obs.shape[0] == 5 and both.env_steps == 40
    assert torch.equal(both.obs[:, 2:], b.obs) and torch.equal(both.logprobs[:, :2], a.logprobs)
    assert both.episode_returns == a.episode_returns + b.episode_returns
