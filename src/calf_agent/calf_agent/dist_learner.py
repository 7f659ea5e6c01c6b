"""The central learner's core: PPO on the workers' batches, and weights sent by a sync policy.

Pure (no rclpy): the learner node passes received chunks to ``receive`` and publishes what
``step`` returns. Every frame is checked under the run's key (``dist_wire.Opener``). A worker is
admitted by its first hello, up to ``max_workers``; a later hello asks for weights only when the
worker follows another run or none, at most once per ``hello_resend_s``. A batch is trained on only
if its worker was admitted and it fits the run: its steps, observation width, action shape and range,
and finite values within ``MAX_ABS_VALUE``. Every refusal is one log line and one counter per reason. Each ``step`` runs one lag-corrected PPO update on the oldest waiting batch, then
asks the sync policy which workers get the new weights. At most one batch per worker waits: a newer
one replaces it (``batches_superseded``), so that a learner slower than its workers trains on fresh
data instead of an ever longer queue of stale batches. Every ``eval_every`` env steps it writes the
checkpoint (``calf eval`` reads it unchanged) and evaluates it deterministically in virtual time
under the training network (``eval.csv``). ``resume`` continues from a checkpoint's weights,
version and step count, so workers follow a restarted learner with no manual step.
"""
from __future__ import annotations

import csv
import json
import math
import re
import secrets
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from calf_agent.checkpoint import load_checkpoint, save_checkpoint
from calf_agent.dist_key import KEY_BYTES
from calf_agent.dist_ppo import LagConfig, update_on_batch
from calf_agent.dist_sync import SyncPolicy, WorkerSync, mean_kl
from calf_agent.dist_wire import (
    CHUNK_BYTES,
    Chunk,
    Hello,
    Kind,
    Opener,
    Reassembler,
    Refused,
    Sealer,
    Traffic,
    TrajectoryBatch,
    WeightsMessage,
    shown,
    split,
)
from calf_agent.dist_worker import make_worker_envs
from calf_agent.evaluate import evaluate_sim
from calf_agent.policies import MlpAgent
from calf_agent.ppo import PPOConfig
from calf_agent.seeding import seed_everything
from calf_core.errors import ConfigError
from calf_core.profiles import load_profile

PROGRESS_FIELDS = ('update', 'version', 'env_steps', 'worker', 'lag', 'vtrace', 'episodes', 'episodic_return',
                   'policy_loss', 'value_loss', 'approx_kl', 'clipfrac', 'learning_rate', 'weights_sent', 'time_s')
SUMMARY = 'distributed.json'
WORKER_ID = re.compile(r'^[A-Za-z_][A-Za-z0-9_]{0,63}$')
"""A worker id is a ROS name token: weights go to ``<prefix>/<worker id>``."""
LEARNER = 'learner'
"""The sender name of the learner's frames."""
MAX_ABS_VALUE = 1e6
"""Largest magnitude of an observation or reward value in a batch."""
MAX_WORKERS = 64


class Outgoing(NamedTuple):
    """A weights chunk and the worker it is for."""

    target: str
    chunk: Chunk


@dataclass(frozen=True)
class LearnerConfig:
    """One distributed run. ``env_config`` (env, network, representation, plan_horizon, num_steps, ...)
    is sent to the workers with the weights and copied into the checkpoint's meta."""

    out_dir: Path
    env_config: dict[str, Any]
    sync: SyncPolicy
    total_steps: int
    seed: int = 0
    ppo: PPOConfig = field(default_factory=PPOConfig)
    lag: LagConfig = field(default_factory=LagConfig)
    hidden: tuple[int, ...] = (64, 64)
    eval_every: int = 10_000  # env steps between checkpoint + evaluation
    eval_episodes: int = 10
    stop_return: float | None = None  # stop once an evaluation reaches this mean return
    backlog: int = 64  # batches waiting for an update (one per worker); the oldest is dropped beyond this
    chunk_bytes: int = CHUNK_BYTES
    resume: bool = False
    key: bytes = field(default=b'', repr=False)  # shared with the workers: every frame is tagged under it
    max_workers: int = MAX_WORKERS  # workers admitted at most
    hello_resend_s: float = 2.0  # a worker's hellos trigger at most one weights send per this many seconds


class Learner:
    """Receives chunks, updates the policy, decides and encodes weight messages."""

    def __init__(self, cfg: LearnerConfig, log: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic, warn: Callable[[str], None] | None = None) -> None:
        """``log`` gets progress lines, ``warn`` (default: ``log``) one line per refused message."""
        if len(cfg.key) < KEY_BYTES:
            raise ConfigError(f'the learner needs a key of at least {KEY_BYTES} bytes')
        if cfg.max_workers < 1:
            raise ConfigError(f'max_workers must be >= 1, got {cfg.max_workers}')
        self.cfg, self.log, self.clock = cfg, log, clock
        self.rng = seed_everything(cfg.seed)
        self.run = secrets.randbits(31)
        probe = make_worker_envs(cfg.env_config, 1, cfg.seed)
        try:
            obs_dim = int(probe.single_observation_space.shape[0])
            space = probe.single_action_space
            n_actions = int(space.n if hasattr(space, 'n') else space.nvec[0])
        finally:
            probe.close()
        self.agent = MlpAgent(obs_dim, n_actions, cfg.hidden, int(cfg.env_config.get('plan_horizon', 1)))
        self.version = self.env_steps = self.updates = 0
        if cfg.resume:
            self._resume()
        self.optimizer = torch.optim.Adam(self.agent.parameters(), lr=cfg.ppo.learning_rate, eps=1e-5)
        self.reassembler = Reassembler(log=warn or log)
        self.opener, self.sealer = Opener(cfg.key), Sealer(cfg.key, LEARNER)
        self.hellos_ignored = 0  # hellos of admitted workers that asked for nothing, or too soon
        self.received, self.sent = Traffic(), Traffic()
        self.workers: dict[str, WorkerSync] = {}
        self.queue: deque[TrajectoryBatch] = deque()
        self.lags: Counter[int] = Counter()
        self.superseded = self.superseded_steps = 0  # batches replaced by a newer one of their worker
        self.returns: list[float] = []
        self.evals: list[dict[str, float]] = []
        self.solved = False
        self._message_id = 0
        self._next_eval = self.env_steps + cfg.eval_every
        self._start = clock()
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        self._progress = open(cfg.out_dir / 'progress.csv', 'a', newline='')
        self._progress_log = csv.DictWriter(self._progress, PROGRESS_FIELDS)
        if self._progress.tell() == 0:
            self._progress_log.writeheader()

    def _resume(self) -> None:
        if not (Path(self.cfg.out_dir) / 'meta.json').is_file():
            raise ConfigError(f'nothing to resume: {self.cfg.out_dir} holds no checkpoint (meta.json); '
                              'train without --resume')
        agent, meta = load_checkpoint(self.cfg.out_dir)
        if agent.spec() != self.agent.spec():
            raise ConfigError(f'{self.cfg.out_dir} holds a {agent.spec()} policy, this run trains '
                              f'{self.agent.spec()}: pass another --out')
        self.agent.load_state_dict(agent.state_dict())
        self.version = int(meta.get('distributed', {}).get('version', 0))
        self.env_steps = int(meta.get('distributed', {}).get('env_steps', 0))
        self.log(f'resumed {self.cfg.out_dir} at version {self.version}, {self.env_steps} env steps')

    @property
    def done(self) -> bool:
        return self.solved or self.env_steps >= self.cfg.total_steps

    def receive(self, chunk: Chunk, now_s: float) -> None:
        """Take one chunk of a batch or hello; queue what it completes, refuse what is bad."""
        frame = self.reassembler.add(chunk, now_s)
        self.received.received(chunk, frame is not None)
        if frame is None:
            return
        what = f'message {chunk.message_id} from {shown(chunk.sender)}'
        try:
            message = self.opener.decode(frame, chunk.sender)
            if isinstance(message, WeightsMessage):
                raise Refused('corrupt', 'a weights message arrived on the batch topic')
            if not WORKER_ID.match(message.worker_id) or message.worker_id != chunk.sender:
                raise Refused('corrupt', f'worker id {shown(message.worker_id)} is not a name token or not the '
                                         'chunks\' sender')
        except Refused as err:
            self.reassembler.refuse(err.reason, f'{what}: {err}')
            return
        if isinstance(message, Hello):
            self._hello(message, now_s)
            return
        if message.worker_id not in self.workers:
            self.reassembler.refuse('unknown_worker', f'batch {message.seq} of {shown(message.worker_id)}: the '
                                                      'worker was not admitted (no hello, or --max-workers reached)')
            return
        problem = self._batch_problem(message)
        if problem:
            self.reassembler.refuse('bad_batch', f'batch {message.seq} of {shown(message.worker_id)}: {problem}')
            return
        older = next((b for b in self.queue if b.worker_id == message.worker_id), None)
        if older is not None:  # train on each worker's freshest batch: the lag stays near the worker count
            self.queue.remove(older)
            self.superseded += 1
            self.superseded_steps += older.env_steps
        if len(self.queue) >= self.cfg.backlog:
            dropped = self.queue.popleft()
            self.reassembler.refuse('backlog', f'batch {dropped.seq} of {dropped.worker_id!r}: the learner is behind')
        self.queue.append(message)

    def _hello(self, hello: Hello, now_s: float) -> None:
        """Admit a new worker (up to ``max_workers``); weights for one that follows another run, not too often."""
        sync = self.workers.get(hello.worker_id)
        if sync is None:
            if len(self.workers) >= self.cfg.max_workers:
                self.reassembler.refuse('max_workers', f'hello of {shown(hello.worker_id)}: '
                                                       f'{self.cfg.max_workers} workers already admitted')
                return
            sync = self.workers[hello.worker_id] = WorkerSync()
            self.log(f'worker {hello.worker_id!r} joined')
        elif (hello.learner_run == self.run and hello.version >= 0) or now_s - sync.hello_at_s < self.cfg.hello_resend_s:
            self.hellos_ignored += 1  # in step with this run, or weights were sent on a hello a moment ago
            return
        sync.hello_at_s, sync.version = now_s, -1  # weights at the next step

    def _batch_problem(self, b: TrajectoryBatch) -> str | None:
        """What makes ``b`` unfit for this run's policy (its shapes and values), or None."""
        steps, envs, dim = b.obs.shape
        heads, n = self.agent.plan_horizon, self.agent.n_actions
        if steps != int(self.cfg.env_config['num_steps']) or dim != self.agent.obs_dim:
            return (f'{steps} steps of {dim} observation values, this run takes {self.cfg.env_config["num_steps"]} '
                    f'of {self.agent.obs_dim}')
        if b.actions.shape != ((steps, envs) if heads == 1 else (steps, envs, heads)) \
                or b.behaviour_logits.shape[2:] != (heads * n,):
            return (f'actions {tuple(b.actions.shape)} and behaviour logits {tuple(b.behaviour_logits.shape)} do not '
                    f'fit {heads} head(s) of {n} actions')
        if len(b.actions) and not ((b.actions >= 0) & (b.actions < n)).all():
            return f'actions outside [0, {n})'
        floats = (b.obs, b.rewards, b.next_obs, b.final_obs, b.logprobs, b.behaviour_logits)
        if not all(torch.isfinite(t).all() and (t.abs() <= MAX_ABS_VALUE).all() for t in floats) \
                or (b.logprobs > 1e-4).any():
            return f'values that are not finite, beyond {MAX_ABS_VALUE:g} in magnitude, or log-probabilities above 0'
        if not all(((t == 0) | (t == 1)).all() for t in (b.dones, b.next_done)):
            return 'done flags other than 0 and 1'
        if len(b.episode_returns) > b.env_steps or not all(math.isfinite(r) and abs(r) <= MAX_ABS_VALUE * b.env_steps
                                                          for r in b.episode_returns):
            return 'episode returns that are too many, not finite or too large'
        return None

    def step(self) -> list[Outgoing]:
        """One update on the oldest waiting batch (if any), then the weights the sync policy sends."""
        updated = bool(self.queue) and not self.done
        if updated:
            self._update(self.queue.popleft())
        if self.env_steps >= self._next_eval or (self.done and self.updates and not self.evals):
            self._evaluate()
        return self._sends(only_new=not updated)

    def _update(self, batch: TrajectoryBatch) -> None:
        known = batch.learner_run == self.run
        lag = self.version - batch.version if known else None
        sync = self.workers.setdefault(batch.worker_id, WorkerSync())
        if known:
            sync.on_batch(batch.version, batch.obs.flatten(0, 1), batch.behaviour_logits.flatten(0, 1))
        else:
            sync.version = -1  # collected under another learner run: weights go out at once
        effective_lag = lag if lag is not None else self.cfg.sync.lag_cap + 1
        lr = self.cfg.ppo.learning_rate * (max(0.0, 1 - self.env_steps / self.cfg.total_steps)
                                           if self.cfg.ppo.anneal_lr else 1.0)
        self.optimizer.param_groups[0]['lr'] = max(lr, 1e-6)
        stats = update_on_batch(self.agent, self.optimizer, batch, effective_lag, self.cfg.ppo, self.cfg.lag, self.rng)
        self.version += 1
        self.updates += 1
        self.env_steps += batch.env_steps
        self.lags[effective_lag if lag is not None else -1] += 1
        self.returns += batch.episode_returns
        window = self.returns[-20:]
        self._progress_log.writerow({
            'update': self.updates, 'version': self.version, 'env_steps': self.env_steps, 'worker': batch.worker_id,
            'lag': lag if lag is not None else '', 'vtrace': int(stats['vtrace']), 'episodes': len(self.returns),
            'episodic_return': float(np.mean(window)) if window else math.nan,
            **{k: stats[k] for k in ('policy_loss', 'value_loss', 'approx_kl', 'clipfrac')},
            'learning_rate': lr, 'weights_sent': self.sent.messages, 'time_s': self.clock() - self._start})
        self._progress.flush()  # a row per update, readable while the run goes on

    def _sends(self, only_new: bool) -> list[Outgoing]:
        """Weights for the workers that want them; with ``only_new`` (no update ran), for unknown ones only."""
        out: list[Outgoing] = []
        for worker_id, sync in self.workers.items():
            if only_new and sync.version >= 0:
                continue
            drift = None
            if self.cfg.sync.kind == 'aps' and sync.obs is not None and sync.reference_logits is not None:
                with torch.no_grad():
                    drift = mean_kl(sync.reference_logits, self.agent.logits(sync.obs), self.agent.plan_horizon)
            if sync.wants(self.cfg.sync, self.version, drift):
                out += self._weights_for(worker_id, sync)
        return out

    def _weights_for(self, worker_id: str, sync: WorkerSync) -> list[Outgoing]:
        message = WeightsMessage(self.version, self.run, worker_id, self.agent.spec(), self.cfg.env_config,
                                 self.agent.state_dict())
        self._message_id += 1
        chunks = split(self.sealer.encode(message), Kind.WEIGHTS, LEARNER, self._message_id, self.cfg.chunk_bytes)
        self.sent.sent(chunks)
        with torch.no_grad():
            reference = None if sync.obs is None else self.agent.logits(sync.obs)
        sync.on_send(self.version, reference)
        return [Outgoing(worker_id, chunk) for chunk in chunks]

    def checkpoint(self) -> Path:
        """Write ``policy.safetensors`` + ``meta.json`` (with the version and env steps reached)."""
        meta = {**{k: v for k, v in self.cfg.env_config.items() if k != 'num_steps'}, 'seed': self.cfg.seed,
                'steps': self.env_steps,
                'distributed': {'version': self.version, 'env_steps': self.env_steps, 'sync': str(self.cfg.sync)}}
        return save_checkpoint(self.cfg.out_dir, self.agent, meta)

    def _evaluate(self) -> None:
        self._next_eval = self.env_steps + self.cfg.eval_every
        self.checkpoint()
        report = evaluate_sim(self.cfg.out_dir, load_profile(self.cfg.env_config['network']),
                              self.cfg.eval_episodes, seed=10_000 + self.cfg.seed)
        row = {'time_s': round(self.clock() - self._start, 3), 'env_steps': self.env_steps, 'version': self.version,
               'mean_return': report['mean_return'], 'weights_bytes': self.sent.bytes}
        self.evals.append(row)
        with open(self.cfg.out_dir / 'eval.csv', 'a', newline='') as file:
            writer = csv.DictWriter(file, list(row))
            if file.tell() == 0:
                writer.writeheader()
            writer.writerow(row)
        self.log(f'eval at {self.env_steps} env steps (version {self.version}): mean return '
                 f'{report["mean_return"]:.1f}')
        if self.cfg.stop_return is not None and report['mean_return'] >= self.cfg.stop_return:
            self.solved = True

    def summary(self) -> dict[str, Any]:
        """What the run did: steps, updates, traffic per direction, refusals, the lag distribution."""
        return {'sync': str(self.cfg.sync), 'env_steps': self.env_steps, 'updates': self.updates,
                'version': self.version, 'wall_time_s': round(self.clock() - self._start, 3),
                'workers': sorted(self.workers), 'solved': self.solved,
                'batches_received': self.received.as_dict(), 'weights_sent': self.sent.as_dict(),
                'refused': dict(self.reassembler.refused), 'hellos_ignored': self.hellos_ignored,
                'batches_superseded': {'messages': self.superseded, 'env_steps': self.superseded_steps},
                'lag_histogram': {('other_run' if k < 0 else str(k)): v for k, v in sorted(self.lags.items())},
                'evals': self.evals}

    def close(self) -> None:
        """Write the final checkpoint and ``distributed.json``."""
        if self.updates:
            self.checkpoint()
        (self.cfg.out_dir / SUMMARY).write_text(json.dumps(self.summary(), indent=2) + '\n')
        self._progress.close()
