"""Distributed training on a Ray cluster (``calf train --workers N --cluster ray[:ADDRESS]``); Ray is
imported only here, through ``experiment_ray.connect``.

The learner runs in this process (on the head, or wherever ``calf train`` runs) and each worker is a Ray
actor holding a ``RolloutWorker``: the same batches, sync rules, deltas, flow control and V-trace as over
DDS. Frames travel as the return values and arguments of actor calls, through Ray's object store: a call
hands a worker the chunks the learner addressed to it since its last call and returns what the worker
sends (a batch, or a hello while it has no weights or wants a snapshot). Every frame is still tagged under
the run's key and checked on arrival; chunks travel as plain tuples of numbers, names and bytes. The key
reaches the actors in the job's runtime environment (``CALF_DIST_KEY``), which anyone who may submit work
to the cluster can read, as they can run any code there: a Ray cluster is one trust domain. An actor that
dies (its node lost, the process killed) is restarted by Ray; it says hello and gets a snapshot, so the
run loses only the batch it was collecting.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from calf_agent.dist.key import KEY_ENV
from calf_agent.dist.learner import Learner, LearnerConfig
from calf_agent.dist.wire import Chunk
from calf_agent.dist.worker import RolloutWorker
from calf_bringup.distributed import worker_ids
from calf_bringup.experiment_ray import connect
from calf_ros.scheduling import restore_ordinary_priority

RAY_CHUNK_BYTES = 1 << 20
"""Chunks of at most 1 MiB: the object store carries a frame whole, there is no datagram to lose."""
IDLE_S = 0.05
"""How long an actor that may not collect (paused, or no weights yet) waits before its call returns."""
RESTARTS = 3
"""Times Ray restarts a worker actor that died."""
UNAVAILABLE_S = 1.0
"""How long the learner waits before calling again an actor Ray reported unavailable (restarting)."""
ROUND_POLL_S = 0.01
"""How long the learner waits for an actor while batches wait for a round to complete (or go ahead)."""

Wire = tuple[int, str, int, int, int, int, bytes]
"""A ``Chunk`` as it crosses the object store."""


class WorkerActor:
    """One rollout worker as a Ray actor: takes the learner's chunks, returns its own."""

    def __init__(self, worker_id: str, env: str, num_envs: int, seed: int, network: str) -> None:
        # Ray starts actors at nice 15; beside other work they would hardly run
        if refused := restore_ordinary_priority():
            print(f'[calf] rollout worker {worker_id} priority: {refused}', file=sys.stderr)
        key = bytes.fromhex(os.environ[KEY_ENV])
        self.worker = RolloutWorker(worker_id, env, key, num_envs, seed, chunk_bytes=RAY_CHUNK_BYTES,
                                    network=network)

    def run(self, incoming: list[Wire]) -> list[Wire]:
        """Apply ``incoming``; then a batch if the worker may collect, else a hello (if it needs weights)."""
        now = time.monotonic()
        for chunk in incoming:
            self.worker.receive(Chunk(*chunk), now)
        if self.worker.may_collect(now) and not self.worker.needs_snapshot:
            assert self.worker.env_config is not None  # weights arrived
            return [tuple(c) for c in self.worker.next_batch(int(self.worker.env_config['num_steps']), now)]
        time.sleep(IDLE_S)
        return [tuple(c) for c in self.worker.hello()] if not self.worker.ready or self.worker.needs_snapshot else []

    def traffic(self) -> dict[str, dict[str, int]]:
        return self.worker.traffic()


def train_on_ray(cfg: LearnerConfig, address: str, workers: int, envs: int, seed: int, network: str,
                 log: Callable[[str], None] = print) -> Learner:
    """Train with ``workers`` actors (``envs`` envs each) on the Ray cluster at ``address`` (``auto``,
    ``local`` or ``HOST:PORT``) until the learner is done (or every actor died for good); the closed learner."""
    ray = connect(address)
    try:
        actors = start_workers(ray, cfg, workers, envs, seed, network)
        learner = Learner(replace(cfg, chunk_bytes=RAY_CHUNK_BYTES), log=log)
        try:
            drive(ray, learner, actors, log)
        finally:
            learner.close()
            for handle in actors.values():
                ray.kill(handle)
        return learner
    finally:
        ray.shutdown()


def start_workers(ray: Any, cfg: LearnerConfig, workers: int, envs: int, seed: int, network: str) -> dict[str, Any]:
    """``workers`` actors (ids w0, w1, ...; ``envs`` envs each), restarted by Ray when they die; their handles."""
    cpus = ray.cluster_resources().get('CPU', 1.0)
    actor = ray.remote(num_cpus=round(min(1.0, cpus / (workers + 1)), 2), max_restarts=RESTARTS,
                       max_task_retries=0, runtime_env={'env_vars': {KEY_ENV: cfg.key.hex()}})(WorkerActor)
    return {wid: actor.remote(wid, str(cfg.env_config['env']), envs, seed * 100 + i + 1, network)
            for i, wid in enumerate(worker_ids(workers))}


def drive(ray: Any, learner: Learner, actors: dict[str, Any], log: Callable[[str], None]) -> None:
    """Each worker's call returns, its chunks go to the learner, one update runs, and the worker is called
    again with what the learner sent it; the other workers collect meanwhile."""
    inbox: dict[str, list[Wire]] = {wid: [] for wid in actors}
    failures = dict.fromkeys(actors, 0)  # calls in a row that found the actor dead
    retry_at = dict.fromkeys(actors, 0.0)  # an actor Ray is restarting is called again from then on
    pending = {actors[wid].run.remote([]): wid for wid in actors}
    while not learner.done and (pending or actors):
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=ROUND_POLL_S if learner.queue else UNAVAILABLE_S) \
            if pending else ([], [])
        now = time.monotonic()
        for ref in ready:
            wid = pending.pop(ref)
            try:
                chunks = ray.get(ref)
                failures[wid] = 0
            except ray.exceptions.ActorUnavailableError:  # Ray is restarting it: not a death, call again soon
                if not retry_at[wid]:
                    log(f'worker {wid}: its actor is unavailable (restarting); calling it again every {UNAVAILABLE_S} s')
                retry_at[wid] = now + UNAVAILABLE_S
                continue
            except ray.exceptions.RayActorError as err:  # restarted by Ray, or gone for good
                failures[wid] += 1
                gone = failures[wid] > RESTARTS
                log(f'worker {wid}: its actor died ({type(err).__name__}); '
                    + ('giving it up' if gone else 'calling it again'))
                if gone:
                    del actors[wid]
                continue
            retry_at[wid] = 0.0
            for chunk in chunks:
                learner.receive(Chunk(*chunk), now)
        for out in learner.step():
            if out.target in inbox:
                inbox[out.target].append(tuple(out.chunk))
        for wid in set(actors) - set(pending.values()):
            if now >= retry_at[wid]:
                pending[actors[wid].run.remote(inbox[wid])] = wid
                inbox[wid] = []
        if not pending and actors and not learner.queue:
            time.sleep(UNAVAILABLE_S / 10)  # every actor is restarting: nothing to wait on
