"""BPQL's transitions (Kim et al., NeurIPS 2023, "Belief projection-based Q-learning for delayed feedback").

BPQL's actor acts on the augmented, delayed observation x (what the link delivers: frames, the actions in
flight and the delay state), while its critic Q(s, a) is learned on the original, undelayed state s.
In simulation CALF knows the true state at every tick (``NetworkedEnv.tick_listener``), so the critic
needs no belief model: it is fitted on the states the env really was in.

Behind a CALF link decisions and ticks are not one to one, so each *applied* action is one step of a
semi-MDP (``SemiMdp`` assembles them from one env's ticks and decisions):

- decision i answers observation ``seq`` with features x_i and action a_i;
- a_i's segment starts on the tick where a_i is first applied; s_i is the state it was applied in (the
  previous tick's observation), and the segment runs until the tick where the next applied action is
  first applied (on a task that holds zero, the ticks between get no fresh action: they are a_i's);
- its reward is Σ_j γ^j r_{t_i + j} over the segment's k ticks, and its discount γ^k; the next step is
  (x_{i+1}, s_{i+1}) of that next applied action. Every tick's reward belongs to exactly one segment,
  except the ticks before the episode's first applied action (the initial action or start plan, which
  no decision chose): those are dropped;
- a decision whose action never applies (lost, or overtaken by a newer one that arrived first) makes no
  transition: its ticks are the segment of the action that kept running;
- a segment cut by termination is terminal (no bootstrap); one cut by truncation is dropped, since the
  decision that would follow it is never made.

The critic's target is r + γ^k (min Q_targ(s_{i+1}, a') − α log π(a'|x_{i+1})), a' ~ π(·|x_{i+1}); the
actor's loss is E[α log π(a|x_i) − Q(s_i, a)], a ~ π(·|x_i) (``SacLearner.update`` with ``states`` and
``discounts``). The critic is training-only: the checkpoint is an ordinary SAC actor.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from calf_core.timing import ObsRecord

MAX_PENDING = 256
"""Decisions kept while their action has not applied; an older one is taken as lost."""


@dataclass(frozen=True)
class Transition:
    """One semi-MDP step: features and true state where the action applied, the discounted reward over
    its ``ticks``, the discount ``gamma ** ticks`` and the next applied action's features and state."""

    features: np.ndarray
    state: np.ndarray
    action: np.ndarray
    reward: float
    discount: float
    next_features: np.ndarray
    next_state: np.ndarray
    terminated: bool
    ticks: int


@dataclass
class _Segment:
    seq: int
    features: np.ndarray
    state: np.ndarray
    action: np.ndarray
    reward: float = 0.0
    ticks: int = 0


class SemiMdp:
    """One env's ticks (``on_record``, as ``NetworkedEnv.tick_listener``) and decisions (``decide``) turned
    into ``Transition``s (``take``); see the module docstring for the rules."""

    def __init__(self, gamma: float) -> None:
        if not 0 < gamma <= 1:
            raise ValueError(f'gamma must be in (0, 1], got {gamma}')
        self.gamma = gamma
        self._pending: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # seq -> (features, action), not yet applied
        self._open: _Segment | None = None
        self._state: np.ndarray | None = None  # the state the next tick starts in
        self._done: list[Transition] = []
        self.dropped_ticks = 0  # ticks whose reward no transition holds (before the first action, truncated)

    def decide(self, seq: int, features: np.ndarray, action: np.ndarray) -> None:
        """The decision answering observation ``seq``: its features and action (as the critic sees it)."""
        self._pending[seq] = (np.array(features, np.float32), np.array(action, np.float32))
        if len(self._pending) > MAX_PENDING:
            del self._pending[min(self._pending)]

    def on_record(self, record: ObsRecord) -> None:
        """One emitted observation: the reset one starts an episode, every other is one tick."""
        state, self._state = self._state, np.asarray(record.obs, np.float32)
        if record.applied is None:  # reset: a new episode
            self._drop_open()
            self._pending.clear()
            return
        plan_seq, index = record.applied.plan_seq, record.applied.index
        if index >= 0 and plan_seq >= 0 and (self._open is None or plan_seq != self._open.seq):
            self._start(plan_seq, state)
        if self._open is None:
            self.dropped_ticks += 1
        else:
            segment = self._open
            segment.reward += self.gamma ** segment.ticks * float(record.reward)
            segment.ticks += 1
        if record.terminated:
            if self._open is not None:
                self._close(self._open.features, self._open.state, terminated=True)
        elif record.truncated:
            self._drop_open()
        if record.terminated or record.truncated:
            self._pending.clear()

    def take(self) -> list[Transition]:
        """The transitions completed since the last call."""
        done, self._done = self._done, []
        return done

    def _start(self, seq: int, state: np.ndarray | None) -> None:
        """Action ``seq`` applies now, in ``state``: it closes the running segment and opens its own."""
        decision = self._pending.get(seq)
        for old in [s for s in self._pending if s <= seq]:  # applied actions come in order: older ones are lost
            del self._pending[old]
        if decision is None or state is None:  # not a decision this env saw: nothing to learn from
            self._drop_open()
            return
        features, action = decision
        if self._open is not None:
            self._close(features, state, terminated=False)
        self._open = _Segment(seq, features, state, action)

    def _close(self, next_features: np.ndarray, next_state: np.ndarray, terminated: bool) -> None:
        segment, self._open = self._open, None
        assert segment is not None
        self._done.append(Transition(segment.features, segment.state, segment.action, segment.reward,
                                     self.gamma ** segment.ticks, next_features, next_state, terminated,
                                     segment.ticks))

    def _drop_open(self) -> None:
        if self._open is not None:
            self.dropped_ticks += self._open.ticks
        self._open = None


class BeliefReplay:
    """The last ``capacity`` transitions in preallocated float32 arrays (a ring: memory stays flat)."""

    FIELDS = ('features', 'state', 'action', 'reward', 'next_features', 'next_state', 'terminated', 'discount')

    def __init__(self, capacity: int, feature_dim: int, state_dim: int, action_dim: int) -> None:
        if capacity < 1:
            raise ValueError(f'capacity must be >= 1, got {capacity}')
        self.capacity, self.size, self.pos = capacity, 0, 0
        widths = {'features': feature_dim, 'next_features': feature_dim, 'state': state_dim,
                  'next_state': state_dim, 'action': action_dim}
        self.arrays = {name: np.zeros((capacity, widths[name]) if name in widths else capacity, np.float32)
                       for name in self.FIELDS}

    def add(self, transition: Transition) -> None:
        """Store one transition; the oldest is overwritten once full."""
        for name in self.FIELDS:
            self.arrays[name][self.pos] = getattr(transition, name)
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, n: int, rng: np.random.Generator) -> dict[str, Tensor]:
        """``n`` rows drawn uniformly, with replacement, by field name."""
        index = rng.integers(0, self.size, n)
        return {name: torch.from_numpy(array[index]) for name, array in self.arrays.items()}
