"""When the learner sends a worker new weights: ``every`` update, every ``period:K`` updates, or
``aps:δ`` (adaptive policy synchronisation: when the worker's policy has drifted more than δ).

APS drift is exact: the mean KL divergence KL(μ ‖ π) over the observations of the worker's last
batch, between the behaviour distribution μ logged in that batch (or, once newer weights have been
sent, the sent policy's distribution on the same observations) and the learner's current π.
Under every policy a worker whose version lags more than ``lag_cap`` updates is sent weights.
``aps`` without a δ means ``aps:0.05`` (``DEFAULT_APS_DELTA``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from torch import Tensor

from calf_agent.dist.wire import TrajectoryBatch
from calf_core.errors import ConfigError

SYNC_KINDS = ('every', 'period', 'aps')
DEFAULT_LAG_CAP = 32
DEFAULT_APS_DELTA = 0.05
"""δ of ``--sync aps`` given without one: a mean KL of 0.05 nats between the worker's policy and the learner's."""
LOST_AFTER_BATCHES = 3
"""Batches still at an older version after a send before the send counts as lost."""


class SyncPolicy(NamedTuple):
    """A parsed ``--sync`` value."""

    kind: str
    period: int = 1
    delta: float = 0.0
    lag_cap: int = DEFAULT_LAG_CAP

    def __str__(self) -> str:
        return {'every': 'every', 'period': f'period:{self.period}', 'aps': f'aps:{self.delta:g}'}[self.kind]


def parse_sync(text: str, lag_cap: int = DEFAULT_LAG_CAP) -> SyncPolicy:
    """``every``, ``period:K`` (K >= 1), ``aps:δ`` (δ > 0) or ``aps`` (δ = ``DEFAULT_APS_DELTA``);
    ConfigError names a bad value."""
    kind, colon, arg = text.strip().partition(':')
    if lag_cap < 1:
        raise ConfigError(f'the version lag cap must be >= 1, got {lag_cap}')
    try:
        if kind == 'every' and not arg:
            return SyncPolicy('every', lag_cap=lag_cap)
        if kind == 'period' and int(arg) >= 1:
            return SyncPolicy('period', period=int(arg), lag_cap=lag_cap)
        if kind == 'aps' and not colon:
            return SyncPolicy('aps', delta=DEFAULT_APS_DELTA, lag_cap=lag_cap)
        if kind == 'aps' and float(arg) > 0:
            return SyncPolicy('aps', delta=float(arg), lag_cap=lag_cap)
    except ValueError:
        pass
    raise ConfigError(f'--sync must be every, period:K (K >= 1), aps or aps:DELTA (DELTA > 0, default '
                      f'{DEFAULT_APS_DELTA:g}), got {text!r}')


@dataclass
class WorkerSync:
    """What the learner knows about one worker's policy copy."""

    version: int = -1  # -1: unknown, the worker gets weights at once
    sent_version: int = -1
    batches_since_send: int = 0
    probe: TrajectoryBatch | None = None  # its last batch: drift is measured on its observations
    reference: Tensor | None = None  # [T * N, P] the worker's policy on ``probe``
    hello_at_s: float = -math.inf  # when a hello of this worker last asked for weights
    held: dict[str, Tensor] | None = None  # the state last sent, as the worker holds it (None: send a snapshot)
    pause_wanted: bool = False  # a batch of it was superseded: it pauses while one waits
    paced: bool = False  # told to pause once: it pauses itself after each batch
    paused: bool = False  # told to pause, or paused itself after a batch
    heard_s: float = -math.inf  # when its last hello or batch arrived (a round waits only for live workers)

    def on_batch(self, batch: TrajectoryBatch) -> None:
        """A batch collected with ``batch.version`` arrived: its logged distribution is the new reference."""
        self.batches_since_send += 1
        if batch.version >= self.sent_version or self.batches_since_send >= LOST_AFTER_BATCHES:
            self.version, self.probe, self.reference = batch.version, batch, batch.behaviour.flatten(0, 1)
            if batch.version < self.sent_version:
                self.sent_version = batch.version  # the send was lost: its version never arrived
                self.held = None  # and what the worker holds is not known: a snapshot next

    def on_send(self, version: int, held: dict[str, Tensor], params_on_probe: Tensor | None) -> None:
        """Weights ``version`` were sent, leaving the worker with ``held``; ``params_on_probe`` is that policy
        on the last batch's observations."""
        self.version = self.sent_version = version
        self.batches_since_send = 0
        self.held, self.reference = held, params_on_probe

    def lag(self, learner_version: int) -> int:
        return learner_version - self.version if self.version >= 0 else learner_version + 1

    def wants(self, policy: SyncPolicy, learner_version: int, drift: float | None) -> bool:
        """Whether ``policy`` sends this worker the learner's ``learner_version`` now."""
        lag = self.lag(learner_version)
        if self.version < 0 or lag > policy.lag_cap:
            return True
        if lag <= 0:
            return False
        if policy.kind == 'every':
            return True
        if policy.kind == 'period':
            return lag >= policy.period
        return drift is not None and drift > policy.delta
