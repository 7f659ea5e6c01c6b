"""The central learner's core: PPO on the workers' batches, and weights sent by a sync policy.

Pure (no rclpy): the learner node passes received chunks to ``receive`` and publishes what
``step`` returns. Every frame is checked under the run's key (``wire.Opener``). A worker is
admitted by its first hello, up to ``max_workers``; a later hello asks for weights only when the
worker follows another run or none, at most once per ``hello_resend_s``. A batch is trained on only
if its worker was admitted and it fits the run: its steps, observation width, action shape and range,
and finite values within ``MAX_ABS_VALUE``. Every refusal is one log line and one counter per reason.

The policy is the one ``calf train`` would train on the task (``TrainConfig``: MLP, LSTM or Gaussian,
single actions or plans). Each ``step`` runs one PPO update, lag-corrected by V-trace (``ppo``), then asks the
sync policy which workers get the new weights: a delta of the changed tensors in
reduced precision against the state the worker holds (int8: a finer one if the coarse one strays), or a
snapshot when that state is unknown or the reduced policy strays from the full one by more than
``kl_bound`` on the last batch (``delta``).
With ``rounds`` (the learner node's default) an update trains on one batch of every live worker at once (a round: it
starts when each worker heard from in the last ``round_wait_s`` has a batch waiting, or ``round_wait_s``
after the round's first batch arrived), and with flow control every worker is paced from its admission: it
pauses itself after each batch and is told to go on after the update that took it, so that it collects
its next batch with the new weights (sent first). A round's batches are then all of the learner's
version, on-policy as single-process PPO's rollout: a worker that went on collecting while the learner
trained would hand it batches one update or more old, which cost an InvertedPendulum-v5 run 3x the
samples even with one worker. Without ``rounds`` each ``step`` trains on the oldest waiting batch.
At most one batch per worker waits: a newer one replaces it (``batches_superseded``, the wasted
fraction), so that a learner slower than its workers trains on fresh data; without rounds, a worker whose batch was superseded is told to pause while a batch of it waits (``Control``), and
one more batch of it, already in flight, may wait too; from then on it is paced. After every update it
writes what ``resume`` continues from (``STATE``:
the policy, the optimiser's state, the version and env steps), so that a learner killed mid-run loses
no update, only the batches in flight. After its first update, every ``eval_every`` env steps and at
the end it writes the checkpoint (``calf eval`` reads it unchanged); at each evaluation it also
evaluates the policy deterministically in virtual time under the training network (``eval.csv``).
Workers follow a resumed learner with no manual step.
"""
from __future__ import annotations

import copy
import csv
import json
import math
import os
import re
import secrets
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from calf_agent.checkpoint import load_checkpoint, save_checkpoint
from calf_agent.dist.delta import DEFAULT_PRECISION, KL_BOUND, PRECISIONS, checksum, delta_levels, make_delta
from calf_agent.dist.key import KEY_BYTES
from calf_agent.dist.policy import PpoAgent, action_shape, batch_params, mean_kl, param_size, state_size
from calf_agent.dist.ppo import LagConfig, merged, update_on_batch
from calf_agent.dist.sync import SyncPolicy, WorkerSync
from calf_agent.dist.wire import (
    CHUNK_BYTES,
    Chunk,
    Control,
    Hello,
    Opener,
    Reassembler,
    Refused,
    Sealer,
    Traffic,
    TrajectoryBatch,
    WeightsMessage,
    encode,
    shown,
    snapshot,
)
from calf_agent.dist.worker import make_worker_envs
from calf_agent.evaluate import evaluate_sim
from calf_agent.gaussian import GaussianAgent
from calf_agent.policies import LstmAgent
from calf_agent.seeding import seed_everything
from calf_agent.trainer import TrainConfig, build_agent, cartpole_defaults
from calf_core import progress
from calf_core.errors import ConfigError
from calf_core.network import resolve_network

PROGRESS_FIELDS = ('update', 'version', 'env_steps', 'worker', 'lag', 'rho_mean', 'episodes', 'episodic_return',
                   'policy_loss', 'value_loss', 'approx_kl', 'clipfrac', 'learning_rate', 'weights_sent', 'time_s')
SUMMARY = 'distributed.json'
WORKER_ID = re.compile(r'^[A-Za-z_][A-Za-z0-9_]{0,63}$')
"""A worker id is a ROS name token: weights go to ``<prefix>/<worker id>``."""
LEARNER = 'learner'
"""The sender name of the learner's weights frames."""
CONTROL = 'learner_control'
"""The sender name of the learner's control frames (numbered apart from its weights)."""
STATE = 'learner_state.safetensors'
"""What ``resume`` continues from, beside the checkpoint, rewritten after every update: the policy
(``policy.<name>``), the optimiser's state (``optimizer.<index>.<name>``), the version and env steps
(``counters``)."""
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
    train: TrainConfig = field(default_factory=cartpole_defaults)  # agent, network sizes, PPO settings
    lag: LagConfig = field(default_factory=LagConfig)
    eval_every: int = 10_000  # env steps between checkpoint + evaluation
    eval_episodes: int = 10
    stop_return: float | None = None  # stop once an evaluation reaches this mean return
    backlog: int = 64  # batches waiting for an update (one per worker); the oldest is dropped beyond this
    chunk_bytes: int = CHUNK_BYTES
    resume: bool = False
    key: bytes = field(default=b'', repr=False)  # shared with the workers: every frame is tagged under it
    max_workers: int = MAX_WORKERS  # workers admitted at most
    hello_resend_s: float = 2.0  # a worker's hellos trigger at most one weights send per this many seconds
    precision: str = DEFAULT_PRECISION  # of the tensors in deltas: fp16 or bf16
    kl_bound: float = KL_BOUND  # a delta whose reduced policy strays this far from the full one is a snapshot (0: always)
    flow_control: bool = True  # pause workers whose batches would be superseded
    rounds: bool = False  # an update trains on one batch of every live worker (see the module doc; the nodes' default)
    round_wait_s: float = 30.0  # a round goes ahead this long after its first batch without the missing batches,
    # and does not wait for a worker not heard from (hello or batch) for this long


class Learner:
    """Receives chunks, updates the policy, decides and encodes weight messages."""

    def __init__(self, cfg: LearnerConfig, log: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic, warn: Callable[[str], None] | None = None) -> None:
        """``log`` gets progress lines, ``warn`` (default: ``log``) one line per refused message."""
        if len(cfg.key) < KEY_BYTES:
            raise ConfigError(f'the learner needs a key of at least {KEY_BYTES} bytes')
        if cfg.max_workers < 1:
            raise ConfigError(f'max_workers must be >= 1, got {cfg.max_workers}')
        if cfg.precision not in PRECISIONS:
            raise ConfigError(f'precision must be one of {", ".join(PRECISIONS)}, got {cfg.precision!r}')
        self.cfg, self.log, self.clock = cfg, log, clock
        self.rng = seed_everything(cfg.seed)
        self.run = secrets.randbits(31)
        probe = make_worker_envs(cfg.env_config, 1, cfg.seed)
        try:
            self.agent: PpoAgent = build_agent(cfg.train, probe)
        except ValueError as err:
            raise ConfigError(f'distributed training cannot build a policy for {cfg.env_config["env"]}: {err}') from None
        finally:
            probe.close()
        self._shadow = copy.deepcopy(self.agent)  # the policy as a worker holds it after a delta
        self.version = self.env_steps = self.updates = 0
        self.optimizer = torch.optim.Adam(self.agent.parameters(), lr=cfg.train.ppo.learning_rate, eps=1e-5,
                                          foreach=True)
        if cfg.resume:
            self._resume()
        self.reassembler = Reassembler(cfg.key, log=warn or log)
        self.opener, self.sealer = Opener(cfg.key), Sealer(cfg.key, LEARNER)
        self.control_sealer = Sealer(cfg.key, CONTROL)
        self.last_batch: TrajectoryBatch | None = None
        self.accepted_steps = 0  # env steps of the batches queued (trained on or superseded)
        self.snapshots = self.deltas = self.snapshots_for_kl = self.fine_deltas = self.controls = 0
        self.snapshot_bytes = 0  # what the weights messages sent would have cost as full snapshots
        self._snapshot_size: tuple[int, int] = (-1, 0)  # (version, bytes of its snapshot frame)
        self.hellos_ignored = 0  # hellos of admitted workers that asked for nothing, or too soon
        self.received, self.sent = Traffic(), Traffic()
        self.workers: dict[str, WorkerSync] = {}
        self.queue: deque[TrajectoryBatch] = deque()
        self.lags: Counter[int] = Counter()
        self.superseded = self.superseded_steps = 0  # batches replaced by a newer one of their worker
        self.returns: list[float] = []
        self.evals: list[dict[str, float]] = []
        self.solved = False
        self._round_start_s = 0.0  # when the first batch of the round waiting arrived
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
        restored = self._load_state()
        self.log(f'resumed {self.cfg.out_dir} at version {self.version}, {self.env_steps} env steps, '
                 f'{"from its last update, with its" if restored else "from the checkpoint, with a fresh"} '
                 'optimiser state')

    def _save_state(self) -> None:
        """Write ``STATE``: replaced whole (a killed process leaves the old file or the new one), not synced
        to disk at every update (the checkpoint is)."""
        tensors = {f'policy.{name}': value.detach().clone().contiguous()
                   for name, value in self.agent.state_dict().items()}
        tensors.update({f'optimizer.{index}.{name}': torch.as_tensor(value).detach().clone().contiguous()
                        for index, entry in self.optimizer.state_dict()['state'].items()
                        for name, value in entry.items()})
        tensors['counters'] = torch.tensor([self.version, self.env_steps], dtype=torch.int64)
        path = self.cfg.out_dir / STATE
        partial = path.with_name(f'.{STATE}.partial')
        partial.write_bytes(st_save(tensors))
        os.replace(partial, path)

    def _load_state(self) -> bool:
        """Continue from ``STATE`` if there is one at least as new as the checkpoint; ConfigError if it does not
        fit this policy."""
        path = self.cfg.out_dir / STATE
        if not path.is_file():
            return False
        fix = 'delete it to resume from the checkpoint with a fresh optimiser state'
        try:
            tensors = st_load(path.read_bytes())
        except Exception as exc:  # safetensors raises its own errors for a damaged file
            raise ConfigError(f'{path} is no learner state ({" ".join(str(exc).split())[:120]}): {fix}') from None
        policy = {name.removeprefix('policy.'): value for name, value in tensors.items() if name.startswith('policy.')}
        own = self.agent.state_dict()
        counters = tensors.get('counters', torch.empty(0))
        if {n: v.shape for n, v in policy.items()} != {n: v.shape for n, v in own.items()} or counters.shape != (2,):
            raise ConfigError(f'{path} holds the state of another policy than this one: {fix}')
        version, env_steps = (int(v) for v in counters)
        if version < self.version:
            return False
        state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in tensors.items():
            index, _, name = key.removeprefix('optimizer.').partition('.')
            if key.startswith('optimizer.'):
                state.setdefault(int(index) if index.isdigit() else -1, {})[name] = value
        params = list(self.agent.parameters())
        if set(state) - set(range(len(params))) or any(
                entry.get('exp_avg', torch.empty(0)).shape != params[i].shape for i, entry in state.items()):
            raise ConfigError(f'{path} holds the optimiser state of other parameters than this policy\'s: {fix}')
        self.agent.load_state_dict(policy)
        self.version, self.env_steps = version, env_steps
        self.optimizer.load_state_dict({'state': state, 'param_groups': self.optimizer.state_dict()['param_groups']})
        return True

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
            if isinstance(message, (WeightsMessage, Control)):
                raise Refused('corrupt', f'a {type(message).__name__} message arrived on the batch topic')
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
        sync = self.workers[message.worker_id]
        sync.heard_s = now_s
        waiting = [b for b in self.queue if b.worker_id == message.worker_id]
        if len(waiting) >= (2 if sync.paused else 1):  # train on each worker's freshest batch
            self.queue.remove(waiting[0])
            self.superseded += 1
            self.superseded_steps += waiting[0].env_steps
            sync.pause_wanted = self.cfg.flow_control
        if sync.paced:
            sync.paused = True  # a paced worker paused itself after this batch
        self.accepted_steps += message.env_steps
        if not self.queue:
            self._round_start_s = now_s
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
            paced = self.cfg.rounds and self.cfg.flow_control  # told to go on with its first weights
            sync = self.workers[hello.worker_id] = WorkerSync(pause_wanted=paced, paced=paced, paused=paced)
            self.log(f'worker {hello.worker_id!r} joined')
        elif (hello.learner_run == self.run and hello.version >= 0) or now_s - sync.hello_at_s < self.cfg.hello_resend_s:
            self.hellos_ignored += 1  # in step with this run, or weights were sent on a hello a moment ago
            sync.heard_s = now_s
            return
        sync.heard_s = sync.hello_at_s = now_s
        sync.version, sync.held = -1, None  # a snapshot at the next step

    def _batch_problem(self, b: TrajectoryBatch) -> str | None:
        """What makes ``b`` unfit for this run's policy (its shapes and values), or None."""
        steps, envs, dim = b.obs.shape
        agent = self.agent
        if steps != int(self.cfg.env_config['num_steps']) or dim != agent.obs_dim:
            return (f'{steps} steps of {dim} observation values, this run takes {self.cfg.env_config["num_steps"]} '
                    f'of {agent.obs_dim}')
        split_by = envs if isinstance(agent, LstmAgent) else steps * envs
        if split_by < self.cfg.train.ppo.num_minibatches:
            return (f'{envs} envs, too few for this run\'s {self.cfg.train.ppo.num_minibatches} minibatches: give the '
                    f'worker more --envs')
        continuous = isinstance(agent, GaussianAgent)
        shape, plan = action_shape(agent), agent.plan_horizon
        if tuple(b.actions.shape[2:]) != shape or b.actions.is_floating_point() != continuous \
                or b.behaviour.shape[2:] != (param_size(agent),) or b.masks.shape[2:] != (plan,) \
                or b.state_h.shape[1:] != (state_size(agent),):
            return (f'actions {tuple(b.actions.shape)} {b.actions.dtype}, behaviour {tuple(b.behaviour.shape)}, masks '
                    f'{tuple(b.masks.shape)} or state {tuple(b.state_h.shape)} do not fit this run\'s policy '
                    f'(actions {shape}, {param_size(agent)} distribution parameters, {plan} plan elements)')
        if not continuous and len(b.actions) and not ((b.actions >= 0) & (b.actions < agent.n_actions)).all():
            return f'actions outside [0, {agent.n_actions})'
        floats = (b.obs, b.rewards, b.next_obs, b.logprobs, b.behaviour, b.state_h, b.state_c, b.actions.float())
        if not all(torch.isfinite(t).all() and (t.abs() <= MAX_ABS_VALUE).all() for t in floats) \
                or (not continuous and (b.logprobs > 1e-4).any()):
            return f'values that are not finite, beyond {MAX_ABS_VALUE:g} in magnitude, or log-probabilities above 0'
        if not all(((t == 0) | (t == 1)).all() for t in (b.dones, b.next_done, b.masks)):
            return 'done flags or plan masks other than 0 and 1'
        if len(b.episode_returns) > b.env_steps or not all(math.isfinite(r) and abs(r) <= MAX_ABS_VALUE * b.env_steps
                                                          for r in b.episode_returns):
            return 'episode returns that are too many, not finite or too large'
        return None

    def step(self) -> list[Outgoing]:
        """One update on the waiting batches of a round (without ``rounds``: the oldest waiting batch), if any,
        then the weights the sync policy sends and the workers told to pause or go on."""
        batches = self._next_batches() if not self.done else []
        updated = bool(batches)
        if updated:
            self._update(*batches)
        if self.env_steps >= self._next_eval or (self.done and self.updates and not self.evals):
            self._evaluate()
        return self._sends(only_new=not updated) + self._flow()

    def _next_batches(self) -> list[TrajectoryBatch]:
        """What the next update trains on: every waiting batch once the round is complete or has waited
        ``round_wait_s`` (without ``rounds``: the oldest waiting batch); none yet otherwise."""
        if not self.queue:
            return []
        if not self.cfg.rounds:
            return [self.queue.popleft()]
        now = self.clock()
        waiting = {b.worker_id for b in self.queue}
        live = {w for w, sync in self.workers.items() if now - sync.heard_s <= self.cfg.round_wait_s}
        if live - waiting and now - self._round_start_s < self.cfg.round_wait_s:
            return []
        batches = list(self.queue)
        self.queue.clear()
        return batches

    def _flow(self) -> list[Outgoing]:
        """Pause each worker whose batches were superseded while a batch of it waits; let it go on once none does."""
        out: list[Outgoing] = []
        waiting = {b.worker_id for b in self.queue}
        for worker_id, sync in self.workers.items():
            pause = sync.pause_wanted and worker_id in waiting
            if pause != sync.paused:
                sync.paused = pause
                sync.paced = sync.paced or pause
                self.controls += 1
                out += [Outgoing(worker_id, chunk) for chunk in
                        self.control_sealer.chunks(Control(worker_id, self.run, pause), self.cfg.chunk_bytes)]
        return out

    def _update(self, *batches: TrajectoryBatch) -> None:
        """One PPO update on ``batches`` taken together (``ppo.merged``)."""
        lags: list[int] = []
        for batch in batches:
            sync = self.workers.setdefault(batch.worker_id, WorkerSync())
            if batch.learner_run == self.run:
                sync.on_batch(batch)
                lags.append(self.version - batch.version)
            else:
                sync.version, sync.held = -1, None  # collected under another learner run: a snapshot at once
            self.lags[lags[-1] if batch.learner_run == self.run else -1] += 1
            self.returns += batch.episode_returns
        batch = merged(list(batches))
        ppo = self.cfg.train.ppo
        lr = ppo.learning_rate * (max(0.0, 1 - self.env_steps / self.cfg.total_steps) if ppo.anneal_lr else 1.0)
        self.optimizer.param_groups[0]['lr'] = max(lr, 1e-6)
        stats = update_on_batch(self.agent, self.optimizer, batch, ppo, self.cfg.lag, self.rng)
        self.last_batch = batch
        self.version += 1
        self.updates += 1
        self.env_steps += batch.env_steps
        self._save_state()
        if self.updates == 1:
            self.checkpoint()  # something --resume can start from before the first evaluation
        progress.report(self.env_steps, self.cfg.total_steps)  # calf train's bar (calf_core.progress.watching)
        window = self.returns[-20:]
        self._progress_log.writerow({
            'update': self.updates, 'version': self.version, 'env_steps': self.env_steps,
            'worker': '+'.join(b.worker_id for b in batches), 'lag': max(lags) if lags else '',
            'rho_mean': round(stats['rho_mean'], 4), 'episodes': len(self.returns),
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
            if self.cfg.sync.kind == 'aps' and sync.probe is not None and sync.reference is not None:
                drift = mean_kl(self.agent, sync.reference, self._params(self.agent, sync.probe))
            if sync.wants(self.cfg.sync, self.version, drift):
                out += self._weights_for(worker_id, sync)
        return out

    @torch.no_grad()
    def _params(self, agent: PpoAgent, batch: TrajectoryBatch) -> torch.Tensor:
        return batch_params(agent, batch.obs, batch.dones, (batch.state_h, batch.state_c))

    def _weights_for(self, worker_id: str, sync: WorkerSync) -> list[Outgoing]:
        """A delta against what the worker holds, or a snapshot (see the module doc)."""
        message = snapshot(self.agent, self.version, self.run, worker_id, self.cfg.env_config)
        if sync.held is not None:
            for levels in delta_levels(self.cfg.precision):  # coarsest first
                delta, result = make_delta(message.state, sync.held, self.cfg.precision, levels)
                if self._close_enough(result):
                    message = replace(message, state=delta, base_version=sync.sent_version, checksum=checksum(result))
                    self.fine_deltas += levels != delta_levels(self.cfg.precision)[0]
                    break
            else:
                self.snapshots_for_kl += 1
        held = message.state if message.base_version < 0 else result
        self.deltas += message.base_version >= 0
        self.snapshots += message.base_version < 0
        chunks = self.sealer.chunks(message, self.cfg.chunk_bytes)
        self.sent.sent(chunks)
        self.snapshot_bytes += (self._snapshot_frame_bytes(worker_id) if message.base_version >= 0
                                else sum(len(c.data) for c in chunks))
        reference = None
        if sync.probe is not None:
            self._shadow.load_state_dict(held)
            reference = self._params(self._shadow, sync.probe)
        sync.on_send(self.version, held, reference)
        return [Outgoing(worker_id, chunk) for chunk in chunks]

    def _snapshot_frame_bytes(self, worker_id: str) -> int:
        """Bytes of the current version as a full snapshot frame (encoded once per version)."""
        if self._snapshot_size[0] != self.version:
            full = snapshot(self.agent, self.version, self.run, worker_id, self.cfg.env_config)
            self._snapshot_size = (self.version, len(encode(full, self.cfg.key, LEARNER, 0, 0)))
        return self._snapshot_size[1]

    def _close_enough(self, result: dict[str, torch.Tensor]) -> bool:
        """Whether the policy holding ``result`` is closer than ``kl_bound`` to the learner's on its last batch
        (``kl_bound`` 0: never, every send is a snapshot)."""
        if self.last_batch is None:
            return self.cfg.kl_bound > 0
        self._shadow.load_state_dict(result)
        kl = mean_kl(self.agent, self._params(self.agent, self.last_batch), self._params(self._shadow, self.last_batch))
        return self.cfg.kl_bound > 0 and kl < self.cfg.kl_bound

    def checkpoint(self) -> Path:
        """Write ``policy.safetensors`` + ``meta.json`` (with the version and env steps reached)."""
        meta = {**{k: v for k, v in self.cfg.env_config.items() if k != 'num_steps'}, 'seed': self.cfg.seed,
                'steps': self.env_steps,
                'distributed': {'version': self.version, 'env_steps': self.env_steps, 'sync': str(self.cfg.sync)}}
        return save_checkpoint(self.cfg.out_dir, self.agent, meta)

    def _evaluate(self) -> None:
        self._next_eval = self.env_steps + self.cfg.eval_every
        self.checkpoint()
        report = evaluate_sim(self.cfg.out_dir, resolve_network(self.cfg.env_config['network']),
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

    @property
    def wasted_fraction(self) -> float:
        """The share of the env steps received that were superseded, never trained on."""
        return self.superseded_steps / self.accepted_steps if self.accepted_steps else 0.0

    def summary(self) -> dict[str, Any]:
        """What the run did: steps, updates, traffic per direction, refusals, the lag distribution."""
        return {'sync': str(self.cfg.sync), 'env_steps': self.env_steps, 'updates': self.updates,
                'version': self.version, 'wall_time_s': round(self.clock() - self._start, 3),
                'workers': sorted(self.workers), 'solved': self.solved,
                'batches_received': self.received.as_dict(), 'weights_sent': self.sent.as_dict(),
                'refused': dict(self.reassembler.refused), 'hellos_ignored': self.hellos_ignored,
                'batches_superseded': {'messages': self.superseded, 'env_steps': self.superseded_steps},
                'wasted_fraction': round(self.wasted_fraction, 4),
                'weights_messages': {'snapshots': self.snapshots, 'deltas': self.deltas,
                                     'snapshots_for_kl': self.snapshots_for_kl, 'fine_deltas': self.fine_deltas,
                                     'bytes_as_snapshots': self.snapshot_bytes,
                                     'precision': self.cfg.precision},
                'controls_sent': self.controls,
                'lag_histogram': {('other_run' if k < 0 else str(k)): v for k, v in sorted(self.lags.items())},
                'evals': self.evals}

    def close(self) -> None:
        """Write the final checkpoint and ``distributed.json``."""
        if self.updates:
            self.checkpoint()
        (self.cfg.out_dir / SUMMARY).write_text(json.dumps(self.summary(), indent=2) + '\n')
        self._progress.close()
