"""Faults cost no more than the batches in flight (issue #33): a learner killed mid-run and resumed continues
from its last update, not its last evaluation; a worker that dies costs the learner nothing it had received.
A real learner and real workers, in memory (without ROS); a killed learner is one never closed."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from calf_agent.dist.learner import STATE, Learner, LearnerConfig
from calf_agent.dist.sync import parse_sync
from calf_agent.dist.worker import RolloutWorker
from calf_agent.ppo import PPOConfig
from calf_agent.trainer import cartpole_defaults
from calf_core.errors import ConfigError

KEY = bytes(range(32))
ENV_CONFIG = {'env': 'cartpole', 'network': 'sim_clean', 'regime': 'baseline',
              'representation': {'frames': 1, 'actions': 0, 'obs_age': False}, 'plan_horizon': 1, 'num_steps': 16}


def _learner(out: Path, resume: bool = False) -> Learner:
    cfg = LearnerConfig(out, ENV_CONFIG, parse_sync('every'), total_steps=100_000,
                        train=replace(cartpole_defaults(), ppo=PPOConfig(update_epochs=2, num_minibatches=1)),
                        eval_every=10**9, key=KEY, resume=resume)  # no evaluation: no checkpoint from one
    return Learner(cfg, log=lambda line: None, clock=lambda: 0.0)


def _send(learner: Learner, worker: RolloutWorker) -> None:
    """The worker's hello if it has no weights, else one batch of it; the learner's answer delivered."""
    for chunk in worker.hello() if not worker.ready else worker.next_batch(16):
        learner.receive(chunk, 0.0)
    _deliver(learner, [worker])


def _deliver(learner: Learner, workers: list[RolloutWorker]) -> None:
    by_id = {worker.worker_id: worker for worker in workers}
    for out in learner.step():
        if out.target in by_id:
            by_id[out.target].receive(out.chunk, 0.0)


def _optimiser_state(learner: Learner) -> dict[tuple[int, str], torch.Tensor]:
    return {(index, name): torch.as_tensor(value) for index, entry in learner.optimizer.state_dict()['state'].items()
            for name, value in entry.items()}


def test_a_learner_killed_mid_run_resumes_at_its_last_update(tmp_path):
    first = _learner(tmp_path)
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=0)
    for _ in range(6):  # a hello, then 5 batches: 5 updates, no evaluation
        _send(first, worker)
    assert first.updates == 5 and (tmp_path / STATE).is_file()
    in_flight = worker.next_batch(16)  # collected, never received: the learner is killed (never closed)
    again = _learner(tmp_path, resume=True)
    assert (again.version, again.env_steps) == (first.version, first.env_steps) == (5, 5 * 32)
    assert all(torch.equal(a, b) for a, b in zip(first.agent.state_dict().values(), again.agent.state_dict().values()))
    saved, restored = _optimiser_state(first), _optimiser_state(again)
    assert saved.keys() == restored.keys() and all(torch.equal(saved[k], restored[k]) for k in saved)
    for chunk in in_flight:  # it reaches the new learner before the worker's next hello: the cost of the kill
        again.receive(chunk, 0.0)
    assert again.reassembler.refused == {'unknown_worker': 1} and not again.queue
    for chunk in [*worker.hello(), *worker.next_batch(16)]:  # still collected under the old run: V-trace
        again.receive(chunk, 0.0)
    _deliver(again, [worker])
    assert again.updates == 1 and again.version == 6 and again.lags[-1] == 1
    assert worker.learner_run == again.run and worker.version == 6


def test_a_learner_state_of_another_policy_is_refused_in_one_line(tmp_path):
    first = _learner(tmp_path)
    worker = RolloutWorker('w0', 'cartpole', KEY, 2, seed=0)
    for _ in range(2):
        _send(first, worker)
    (tmp_path / STATE).write_bytes(b'not safetensors')
    with pytest.raises(ConfigError, match='is no learner state .*: delete it to resume from the checkpoint'):
        _learner(tmp_path, resume=True)


@pytest.mark.slow
def test_a_dead_worker_costs_only_its_batch_in_flight(tmp_path):
    learner = _learner(tmp_path)
    workers = [RolloutWorker(f'w{i}', 'cartpole', KEY, 2, seed=i) for i in range(2)]
    for worker in workers:
        _send(learner, worker)  # hellos: snapshots
    sent = 0
    for round_ in range(3):
        for worker in workers:
            for chunk in worker.next_batch(16):
                learner.receive(chunk, 0.0)
            sent += 32
        if round_ < 2:
            while learner.queue:
                _deliver(learner, workers)
    dead = workers.pop()  # its last batch waits at the learner
    dead.next_batch(16)  # it dies collecting this one: in flight, never sent
    while learner.queue:
        _deliver(learner, workers)
    assert learner.env_steps == sent and learner.superseded == 0  # everything it received was trained on
    for _ in range(3):
        _send(learner, workers[0])
    assert learner.env_steps == sent + 3 * 32 and not learner.reassembler.refused
