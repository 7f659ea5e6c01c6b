"""The timing rules of CALF, in one place.

Both the virtual-time ``NetworkedEnv`` and the live env and policy nodes call these classes,
so that a policy meets the same timing in training as over DDS (README, "Timing semantics"). The task's
:class:`calf_core.task_spec.TaskSpec` gives the tick, hold rule, initial action and start plan:

- The env ticks every ``dt``. Tick 0 is the reset. At tick k >= 1 it applies the newest
  plan that has arrived, steps, and emits observation k stamped with the tick time.
- A plan answering observation s holds actions for ticks s+1, s+2, ...: ``plan[j]`` applies at
  tick ``s + 1 + j``. A plan whose ticks have all passed when it first applies runs its last
  element once. When a plan runs out, the env holds its last element (``HoldMode.LAST``, the
  zero-order hold), applies a zero command (``HoldMode.ZERO``, Box actions) or takes the task's
  no-op (``HoldMode.NOOP``). A one-element plan is a single action. Discrete and continuous (Box)
  plans follow the same rules; a plan element of a Box task is one action vector.
- Before the first plan of an episode arrives the env holds its initial action or, when it is
  given a start plan, cycles through that: tick k applies ``start_plan[(k - 1) % len(start_plan)]``.
- A plan answering an older observation than the newest one applied is discarded.
- A Box plan may carry first-order feedback (:class:`FeedbackPlan`): element j then applies
  ``clip(plan[j] + gains[j] @ (o - predicted[j]))``, ``o`` being the observation the env emitted at the tick
  before (what the env sees as it applies the element) and ``predicted[j]`` the planner's prediction of it,
  within the action bounds. A held tick applies no feedback: under hold last it repeats the last element as sent.
- The end-to-end latency of step s is the arrival time of its action minus the stamp of
  observation s, both read on the env side.
- The policy acts only on observations newer than the last one it acted on. Of several that reach it
  at one instant (a stall releasing them, a FIFO pile-up) it keeps the newest and never sees the
  others (:func:`keep_newest`), as a policy node's depth-1 subscription does.

Times are float seconds on one clock; no clock synchronisation across hosts is needed.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from calf_core.errors import ConfigError
from calf_core.task_spec import Action, HoldMode, SuccessRule, TaskSpec

__all__ = ['AppliedAction', 'BoxBounds', 'EpisodeSummary', 'Feedback', 'FeedbackPlan', 'HoldMode', 'ObsRecord',
           'ObservationGate', 'PlanExecutor', 'ReceivedObservation', 'Stepper', 'TaskActions', 'Verdict',
           'applied_facts', 'checked_feedback', 'element_for_tick', 'first_action', 'held_noop', 'keep_newest',
           'split_plan', 'task_actions']


class Verdict(enum.Enum):
    """What the env side did with an arriving action message."""

    ACCEPTED = 'accepted'
    STALE = 'stale'
    DUPLICATE = 'duplicate'
    OTHER_EPISODE = 'other_episode'
    UNKNOWN_OBSERVATION = 'unknown_observation'
    INVALID = 'invalid'


# Per-tick shortcuts: enum member lookups are slow, and tuple.__new__ builds a NamedTuple without its
# Python-level constructor.
_ACCEPTED, _STALE, _DUPLICATE = Verdict.ACCEPTED, Verdict.STALE, Verdict.DUPLICATE
_new = tuple.__new__
_FLOAT32 = np.dtype(np.float32)
SMALL_ACTION = 64
"""Largest Box action size whose bounds ``BoxBounds`` checks element by element in Python."""

class AppliedAction(NamedTuple):
    """The action applied at one tick and where it came from."""

    action: Any  # int (Discrete) or float32 vector (Box)
    plan_seq: int  # obs_seq of the plan it came from, -1 for the initial action
    index: int  # element of that plan, -1 when held or a no-op
    held: bool


class Feedback(NamedTuple):
    """First-order feedback for the elements of a Box plan of H actions of A values, on observations of O values."""

    gains: np.ndarray  # float32 [H, A, O]: element j's change of action per unit of observation error
    predicted: np.ndarray  # float32 [H, O]: the observation the planner expects the env to see as it applies j


class FeedbackPlan(NamedTuple):
    """A Box plan and its feedback, as a policy hands it to ``NetworkedEnv.step`` or a policy node sends it."""

    actions: Any  # [H, *action shape]
    gains: np.ndarray
    predicted: np.ndarray

    @property
    def feedback(self) -> Feedback:
        return Feedback(self.gains, self.predicted)


def split_plan(plan: Any) -> tuple[Any, Feedback | None]:
    """A plan's actions and its feedback (None for a plain plan)."""
    return (list(plan.actions), plan.feedback) if type(plan) is FeedbackPlan else (plan, None)


def first_action(plan: Any) -> Any:
    """A plan's first action: what a policy that sends single actions (an adapter policy node) sends. A feedback
    plan's first element needs no correction: it predicted the observation it answers."""
    return split_plan(plan)[0][0]


def checked_feedback(feedback: Any, plan_len: int, action_size: int, obs_size: int) -> Feedback | None:
    """``feedback`` as float32 arrays if they fit a plan of ``plan_len`` actions of ``action_size`` values on
    observations of ``obs_size`` values and are finite; else None."""
    try:
        gains = np.asarray(feedback[0], dtype=np.float32)
        predicted = np.asarray(feedback[1], dtype=np.float32)
    except (TypeError, ValueError, IndexError):
        return None
    if gains.shape != (plan_len, action_size, obs_size) or predicted.shape != (plan_len, obs_size):
        return None
    if not (np.isfinite(gains).all() and np.isfinite(predicted).all()):
        return None
    return Feedback(gains, predicted)


class TaskActions(NamedTuple):
    """A task's actions made concrete for its action space: ints (Discrete) or float32 vectors (Box)."""

    initial: Any
    noop: Any  # zeros under hold zero, else the spec's noop_action or None (what a held tick applies: held_noop)
    start_plan: tuple[Any, ...]


def task_actions(spec: TaskSpec, space: gym.Space) -> TaskActions:
    """``spec``'s initial action, no-op and start plan for ``space``; a ConfigError if they do not fit it."""
    if isinstance(space, gym.spaces.Discrete):
        if spec.hold is HoldMode.ZERO:
            raise ConfigError(f'task {spec.name}: hold zero is for continuous (Box) actions: use hold last, '
                              f'or hold noop with a noop_action')
        convert: Any = lambda action, key: _discrete_action(action, int(space.n), spec.name, key)  # noqa: E731
    elif isinstance(space, gym.spaces.Box):
        convert = lambda action, key: _box_action(action, space, spec.name, key)  # noqa: E731
    else:
        raise ConfigError(f'task {spec.name}: CALF runs Discrete or Box action spaces, got {space}')
    if spec.hold is HoldMode.ZERO:
        noop = convert(tuple(0.0 for _ in range(int(np.prod(space.shape)))), 'zero')
    else:
        noop = None if spec.noop_action is None else convert(spec.noop_action, 'noop_action')
    if spec.initial_action is not None:
        initial = convert(spec.initial_action, 'initial_action')
    elif noop is not None:
        initial = noop
    else:
        initial = 0 if isinstance(space, gym.spaces.Discrete) else convert(
            tuple(0.0 for _ in range(int(np.prod(space.shape)))), 'initial_action (zeros)')
    return TaskActions(initial, noop, tuple(convert(a, 'start_plan') for a in spec.start_plan))


def _discrete_action(action: Action, n: int, task: str, key: str) -> int:
    if not (isinstance(action, (int, np.integer)) and 0 <= action < n):
        raise ConfigError(f'task {task}: {key} {action!r} is not an action in 0..{n - 1}')
    return int(action)


def _box_action(action: Action, space: gym.spaces.Box, task: str, key: str) -> np.ndarray:
    value = np.asarray(action, dtype=np.float32).reshape(-1)
    if value.size != int(np.prod(space.shape)) or not BoxBounds(space.low, space.high).contains(
            value.reshape(space.shape)):
        raise ConfigError(f'task {task}: {key} {list(np.atleast_1d(action))} is not an action of {space}')
    return value.reshape(space.shape)


class BoxBounds:
    """The bounds of a Box, for the per-message check of actions (env side) and plans (policy side)."""

    __slots__ = ('_bounds', '_high', '_low', '_unbounded')

    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        self._low, self._high = low, high
        self._unbounded = not (np.isfinite(low).all() and np.isfinite(high).all())
        # small actions are checked on Python floats: two numpy reductions cost more than the loop
        self._bounds = tuple(zip(low.reshape(-1).tolist(), high.reshape(-1).tolist())) \
            if low.size <= SMALL_ACTION else None

    def contains(self, value: np.ndarray) -> bool:
        """Whether ``value`` (of the bounds' shape, or one with as many values that broadcasts to it: a
        one-action plan) is finite and within the bounds. NaN fails both comparisons; infinity fails them
        unless the bound is infinite too, hence the finiteness check."""
        bounds = self._bounds
        if bounds is None:
            return bool((self._low <= value).all() and (value <= self._high).all()) and not (
                self._unbounded and not np.isfinite(value).all())
        for x, (lo, hi) in zip(value.ravel().tolist(), bounds):
            if not lo <= x <= hi:
                return False
        return not self._unbounded or all(map(math.isfinite, value.ravel().tolist()))


def element_for_tick(tick: Any, plan_seq: Any, plan_len: int, first_use: Any, start_len: int) -> Any:
    """The hold rule: the plan element that runs at ``tick`` (>= 1), or -1 for a held tick.

    With a plan (``plan_seq`` >= 0: the observation it answers; ``first_use``: it has not run yet) the element is
    that plan's ``tick - plan_seq - 1`` while the plan lasts, and its last one on a first use after all its ticks
    have passed. Without one (``plan_seq`` -1) it is the start plan's ``(tick - 1) % start_len``, if there is a
    start plan. A held tick applies the no-op (:func:`held_noop`) or else the last action applied.
    Elementwise on ints and bools or on numpy integer and bool arrays alike: :class:`PlanExecutor` and the vector
    env (:mod:`calf_core.vector_networked`) both call it.
    """
    k = tick - plan_seq  # the plan's element k - 1 is due
    late = k > plan_len  # runs on a first use only (``late <= first_use``), and then its last element
    element = (k - late * (k - plan_len)) * ((plan_seq >= 0) & (late <= first_use)) - 1
    if start_len:
        element = element + (plan_seq < 0) * ((tick - 1) % start_len + 1)
    return element


def held_noop(spec: TaskSpec, actions: TaskActions) -> Any:
    """The action a held tick applies (hold zero or noop), or None: it applies the last action again."""
    return None if spec.hold is HoldMode.LAST else actions.noop


class PlanExecutor:
    """Env-side choice of the action for each tick from the plans that have arrived (:func:`element_for_tick`)."""

    def __init__(self, spec: TaskSpec, action_space: gym.Space) -> None:
        self.spec = spec
        self.hold = spec.hold
        actions = task_actions(spec, action_space)
        self.initial_action, self.noop_action, self.start_plan = actions
        self._held_noop = held_noop(spec, actions)
        if isinstance(action_space, gym.spaces.Box):
            self._low, self._high = action_space.low, action_space.high
        self.reset()

    def reset(self) -> None:
        """Forget every plan: the next ticks use the initial action."""
        self._plan: tuple[Any, ...] = ()
        self._feedback: Feedback | None = None
        self._plan_seq, self._first_use = -1, True
        self._last_action = self.initial_action
        self._held: AppliedAction | None = None  # a held tick that repeats until the next plan (see action_for_tick)

    @property
    def newest_seq(self) -> int:
        """obs_seq of the newest plan accepted this episode, or -1."""
        return self._plan_seq

    def offer(self, obs_seq: int, plan: Sequence[Any], feedback: Feedback | None = None) -> Verdict:
        """Take a plan (validated actions, and the feedback checked against it) if it answers a newer observation
        than the current one."""
        if obs_seq < self._plan_seq:
            return _STALE
        if obs_seq == self._plan_seq:
            return _DUPLICATE
        self._plan, self._plan_seq, self._first_use, self._held = tuple(plan), obs_seq, True, None
        self._feedback = feedback
        return _ACCEPTED

    def action_for_tick(self, tick: int, obs: np.ndarray | None = None) -> AppliedAction:
        """The action to apply at ``tick`` (>= 1); ``obs``: the observation of the tick before, which a plan's
        feedback corrects its element by."""
        held = self._held
        if held is not None:  # every tick is held until the next plan: the same action, the same facts
            return held
        plan, plan_seq, start_len = self._plan, self._plan_seq, len(self.start_plan)
        index = element_for_tick(tick, plan_seq, len(plan), self._first_use, start_len)
        self._first_use = False  # a new plan sets it again
        if index >= 0:
            if plan_seq >= 0:
                action = self._last_action = plan[index]  # hold last repeats the element as sent: no feedback
                if self._feedback is not None and obs is not None:
                    action = self._corrected(action, index, obs)
                return _new(AppliedAction, (action, plan_seq, index, False))
            self._last_action = action = self.start_plan[index]
            return AppliedAction(action, -1, -1, True)
        held = _new(AppliedAction, (self._last_action if self._held_noop is None else self._held_noop, plan_seq, -1,
                                    True))
        if plan_seq >= 0 or not start_len:  # a plan run out (or no plan and no start plan) stays held
            self._held = held
        return held

    def _corrected(self, action: np.ndarray, index: int, obs: np.ndarray) -> np.ndarray:
        """Plan element ``index`` corrected by its feedback for the observation ``obs``, within the bounds."""
        gains, predicted = self._feedback  # type: ignore[misc]
        change = gains[index] @ (obs.reshape(-1) - predicted[index])
        return np.clip(action + change.reshape(action.shape), self._low, self._high).astype(np.float32)


class ObsRecord(NamedTuple):
    """One emitted observation, as the env node publishes it."""

    seq: int
    episode: int
    stamp_s: float
    obs: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    applied: AppliedAction | None  # None for the reset observation


def applied_facts(record: ObsRecord) -> tuple[int, int]:
    """``(applied_obs_seq, applied_index)`` at ``record``'s tick, as ``Observation`` carries them: the obs_seq
    the applied plan answered (-1 for the initial action or start plan) and its element (-1 when held);
    ``(-1, -1)`` for the reset observation."""
    applied = record.applied
    return (-1, -1) if applied is None else (applied.plan_seq, applied.index)


class ReceivedObservation(NamedTuple):
    """One observation as a policy receives it: the ``Observation`` message's fields, validated
    (``calf_ros.conversions.msg_to_obs``), handed whole to the policy side (``PolicyRunner``)."""

    episode: int
    seq: int
    obs: np.ndarray
    terminated: bool = False
    truncated: bool = False
    run: int = 0  # id of the env run: a new value means the env side restarted
    stamp_ns: int = 0  # the env-side time of the tick
    applied_obs_seq: int = -1  # which plan and element the tick applied (see applied_facts)
    applied_index: int = -1

    @property
    def ended(self) -> bool:
        """The episode ended at this observation (terminated or truncated)."""
        return self.terminated or self.truncated

    @classmethod
    def of(cls, record: ObsRecord, run: int = 0) -> ReceivedObservation:
        """``record`` as the policy receives it, with nothing lost on the way (virtual time)."""
        return cls(record.episode, record.seq, record.obs, record.terminated, record.truncated, run,
                   round(record.stamp_s * 1e9), *applied_facts(record))


@dataclass
class EpisodeSummary:
    """What the env side knows about one finished episode."""

    episode: int
    episode_return: float
    length: int
    success: bool
    e2e_ms: list[float]
    actions_applied: int
    ticks_held: int
    rejected: int

    def e2e_percentile(self, q: float) -> float:
        return float(np.percentile(self.e2e_ms, q)) if self.e2e_ms else math.nan


@dataclass
class Stepper:
    """Runs a gymnasium env on ticks under the timing rules; pure and clock-agnostic.

    The caller supplies the time of every tick and every arriving action: virtual time in
    ``NetworkedEnv``, the node clock in the env node.
    """

    env: Any  # gymnasium.Env with a Discrete or Box action space
    spec: TaskSpec
    stamp_memory: int = 4096
    executor: PlanExecutor = field(init=False)
    episode: int = field(init=False, default=-1)
    tick_index: int = field(init=False, default=0)
    done: bool = field(init=False, default=True)
    _stamps: list[float] = field(init=False, default_factory=list)  # stamp of seq s at s % stamp_memory
    _summary: EpisodeSummary | None = field(init=False, default=None)
    _success: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        space = self.env.action_space
        self.continuous = isinstance(space, gym.spaces.Box)
        self.n_actions = 0 if self.continuous else int(space.n)  # 0 for Box actions
        self.action_shape: tuple[int, ...] = tuple(space.shape) if self.continuous else ()
        # a Discrete action reaches the env as the space's numpy integer, as vector envs pass it: a Python
        # int makes gymnasium's Discrete.contains (asserted in env.step) build an np.iinfo every tick. Made
        # once per action (a tuple lookup), since building a numpy integer costs more than the lookup.
        self._env_action: Any = None if self.continuous else tuple(map(space.dtype.type, range(self.n_actions)))
        if self.continuous:
            self._bounds = BoxBounds(space.low, space.high)
        self.executor = PlanExecutor(self.spec, space)
        self._action_size = int(np.prod(self.action_shape))
        self._obs_size = int(np.prod(self.env.observation_space.shape or (1,)))
        self._obs: np.ndarray | None = None  # the newest observation emitted: what a plan's feedback corrects by
        self._stamps = [0.0] * self.stamp_memory
        self._success_on_truncation = self.spec.success is SuccessRule.TIME_LIMIT

    def reset(self, now_s: float, seed: int | None = None) -> ObsRecord:
        """Start a new episode at ``now_s`` and return observation 0."""
        obs, _ = self.env.reset(seed=seed)
        self.episode += 1
        self.tick_index, self.done, self._success = 0, False, False
        self.executor.reset()
        self._summary = EpisodeSummary(self.episode, 0.0, 0, False, [], 0, 0, 0)
        self._stamps[0] = now_s
        self._obs = obs = np.asarray(obs, dtype=np.float32)
        return _new(ObsRecord, (0, self.episode, now_s, obs, 0.0, False, False, None))

    def on_action(self, obs_seq: int, episode: int, plan: Sequence[int], now_s: float,
                  checked: bool = False, feedback: Any = None) -> Verdict:
        """Handle an action message arriving at ``now_s``: a plan of ints (Discrete) or of action vectors
        (Box), with or without ``feedback`` (gains and predicted observations: :class:`Feedback`, Box plans only).
        A plan that is empty, out of range or bounds, of the wrong shape or not finite is counted
        and refused (``Verdict.INVALID``), as is feedback that does not fit it. ``checked``: the caller built
        ``plan`` and found it valid by these rules (ints in range of a Discrete task; float32 action vectors of a
        Box task, within its bounds), so it is not checked again; its feedback is checked all the same."""
        if not checked:
            plan = self._checked_box_plan(plan) if self.continuous else _checked_plan(plan, self.n_actions)
        if plan is not None and feedback is not None:
            feedback = checked_feedback(feedback, len(plan), self._action_size, self._obs_size) \
                if self.continuous else None
            plan = plan if feedback is not None else None
        if plan is None:
            self._count_rejected()
            return Verdict.INVALID
        if episode != self.episode or self.done:
            return Verdict.OTHER_EPISODE
        tick = self.tick_index
        if not tick - self.stamp_memory < obs_seq <= tick:  # not emitted, or forgotten
            return Verdict.UNKNOWN_OBSERVATION
        verdict = self.executor.offer(obs_seq, plan, feedback)
        if verdict is not _DUPLICATE:
            summary = self._summary
            if summary is not None:
                summary.e2e_ms.append((now_s - self._stamps[obs_seq % self.stamp_memory]) * 1e3)
                if verdict is _ACCEPTED:
                    summary.actions_applied += 1
        return verdict

    def tick(self, now_s: float) -> ObsRecord:
        """Apply the action for the next tick, step the env and emit the observation."""
        if self.done:
            raise RuntimeError('tick() after the episode ended: call reset() first')
        self.tick_index = tick = self.tick_index + 1
        applied = self.executor.action_for_tick(tick, self._obs)
        action, _, _, held = applied
        to_env = self._env_action
        obs, reward, terminated, truncated, _ = self.env.step(action if to_env is None else to_env[action])
        reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
        summary = self._summary
        assert summary is not None
        summary.episode_return += reward
        if held:
            summary.ticks_held += 1
        if terminated or truncated:
            self.done = True
            if self._success_on_truncation:
                self._success = truncated and not terminated
            else:
                self._success = terminated and reward > 0
        self._stamps[tick % self.stamp_memory] = now_s  # the last stamp_memory stamps are known
        if type(obs) is not np.ndarray:
            obs = np.asarray(obs, dtype=np.float32)
        elif obs.dtype is not _FLOAT32:  # a MuJoCo env's float64: astype casts as asarray does, at less cost
            obs = obs.astype(np.float32)
        self._obs = obs
        return _new(ObsRecord, (tick, self.episode, now_s, obs, reward, terminated, truncated, applied))

    @property
    def e2e_ms(self) -> list[float]:
        """End-to-end latencies measured so far in this episode (milliseconds)."""
        return self._summary.e2e_ms if self._summary is not None else []

    def finish(self) -> EpisodeSummary:
        """Summary of the episode that just ended (call once ``done`` is set)."""
        assert self._summary is not None
        self._summary.length = self.tick_index
        self._summary.success = self._success
        return self._summary

    def _checked_box_plan(self, plan: Sequence[Any]) -> tuple[np.ndarray, ...] | None:
        """``plan`` as float32 action vectors if each has the action shape, is finite and within bounds."""
        shape, contains, checked = self.action_shape, self._bounds.contains, []
        for action in plan:
            try:
                value = np.asarray(action, dtype=np.float32)
            except (TypeError, ValueError):
                return None
            if value.shape != shape or not contains(value):
                return None
            checked.append(value)
        return tuple(checked) if checked else None

    def _count_rejected(self) -> None:
        if self._summary is not None:
            self._summary.rejected += 1


def _checked_plan(plan: Sequence[Any], n_actions: int) -> tuple[int, ...] | None:
    """``plan`` as ints if it is non-empty and every element is an integer action in [0, n_actions)."""
    if len(plan) == 1 and type(plan[0]) is int:  # the common single action, checked per message
        return (plan[0],) if 0 <= plan[0] < n_actions else None
    for action in plan:
        if not (isinstance(action, (int, np.integer)) and 0 <= action < n_actions):
            return None
    return tuple(map(int, plan)) if len(plan) > 0 else None


def keep_newest(seqs: Sequence[int] | np.ndarray) -> Any:
    """Keep-newest: of the observations that reach a policy at one instant, the position of the one it acts
    on, the newest; the policy never sees the others. ``seqs`` holds their seqs along the last axis, one row
    per policy (-1 marks an empty slot); the result is an index, or one per row.

    A stall releasing held messages, or a FIFO link delivering a pile-up, hands a policy several
    observations at once. A policy node's depth-1 subscription keeps only the last one delivered, which a
    FIFO link makes the newest; ``NetworkedEnv`` and the vector env apply this rule to match it."""
    return np.argmax(seqs, axis=-1)


MAX_EPISODE_JUMP = 100
"""Largest episode step within one env run that the gate takes at once."""
MAX_SEQ_JUMP = 1000
"""Largest seq step within an episode (or first seq of a newer episode) that the gate takes at once."""
CONFIRMATIONS = 3
"""Observations of an implausible jump, each a plausible successor of the last, before the gate follows it."""


@dataclass
class ObservationGate:
    """Policy-side rule: act only on observations newer than the last one acted on.

    A different ``run`` id means the env side restarted: it is followed at once. Within one run, a
    newer observation is taken at once when it is plausible: the same episode with seq at most
    ``MAX_SEQ_JUMP`` ahead, or an episode at most ``MAX_EPISODE_JUMP`` ahead with seq at most
    ``MAX_SEQ_JUMP``. A newer but implausible one (episode 2**32-1, seq 2**64-1) is taken only once
    ``CONFIRMATIONS`` observations have arrived that continue it plausibly, with nothing admitted in
    between (an env that ran on while the policy heard nothing). A single forged observation, or
    forgeries with random ids, therefore cannot make every later observation look old.
    Forgeries that do take the gate far ahead (``CONFIRMATIONS`` of them in a row, with the env's run id)
    are left the same way: older observations that the gate's point cannot plausibly follow, and that
    continue each other plausibly, are taken once ``CONFIRMATIONS`` of them have arrived with nothing
    admitted in between (``rewind``). Older observations of the gate's own stream (late or duplicated
    messages) are skipped as before.
    ``anomalies`` counts implausible jumps (``episode_jump``, ``seq_jump``), rewinds (``rewind``) and
    run changes after the first run (``run_change``).
    """

    episode: int = -1
    last_seq: int = -1
    run: int = 0
    anomalies: dict[str, int] = field(default_factory=dict)
    _jump: tuple[int, int, int] | None = None  # an implausible stream seen: (episode, last seq, observations)
    _behind: tuple[int, int, int] | None = None  # a stream behind the gate it cannot follow: the same fields

    def admit(self, episode: int, seq: int, run: int = 0) -> bool:
        """True if (episode, seq) is newer than anything acted on; records it."""
        if run != self.run or self.episode < 0:
            if self.episode >= 0:
                self._count('run_change')
        elif not (episode > self.episode or (episode == self.episode and seq > self.last_seq)):
            if (episode, seq) == (self.episode, self.last_seq) or _follows(episode, seq, self.episode, self.last_seq):
                return False  # a duplicate, or late: the gate's point follows it
            self._behind = _chained(self._behind, episode, seq)
            if self._behind[2] < CONFIRMATIONS:
                return False
            self._count('rewind')
        elif not _follows(self.episode, self.last_seq, episode, seq) and not self._confirmed(episode, seq):
            return False
        self.episode, self.last_seq, self.run, self._jump, self._behind = episode, seq, run, None, None
        return True

    def is_new_episode(self, episode: int) -> bool:
        return episode != self.episode

    def _confirmed(self, episode: int, seq: int) -> bool:
        """Count one implausible observation; True once a plausible run of them is long enough."""
        self._count('episode_jump' if episode != self.episode else 'seq_jump')
        self._jump = _chained(self._jump, episode, seq)
        return self._jump[2] >= CONFIRMATIONS

    def _count(self, kind: str) -> None:
        self.anomalies[kind] = self.anomalies.get(kind, 0) + 1


def _chained(chain: tuple[int, int, int] | None, episode: int, seq: int) -> tuple[int, int, int]:
    """``chain`` (episode, last seq, observations) with (episode, seq) added if it plausibly continues it, else a
    new chain of that one observation."""
    if chain is not None and chain[:2] != (episode, seq) and _follows(*chain[:2], episode, seq):
        return episode, seq, chain[2] + 1
    return episode, seq, 1


def _follows(episode: int, seq: int, next_episode: int, next_seq: int) -> bool:
    """Is (next_episode, next_seq) a plausible successor of (episode, seq) in one env run?"""
    if next_episode == episode:
        return seq < next_seq <= seq + MAX_SEQ_JUMP
    return episode < next_episode <= episode + MAX_EPISODE_JUMP and next_seq <= MAX_SEQ_JUMP
