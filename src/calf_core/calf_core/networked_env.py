"""NetworkedEnv: a gymnasium wrapper that runs an env behind a simulated network, in virtual time.

The env ticks every ``dt`` through :class:`calf_core.timing.Stepper` (the same class the env node
runs). Observations travel over ``uplink``, actions over ``downlink``. The agent makes one decision
per observation delivered to it; the reward returned is the sum over the ticks that elapsed since
the previous decision.

Virtual time restarts at 0 each episode for the env (stamps, ``obs_age_ms``, E2E); the links see
one continuous clock, episode time plus an origin that advances by each episode's length plus
one tick, as the env node's episodes follow each other. See ``reset``.

``info['executed']`` (``uint8 [H + 1, H]``) says which plan elements ran during a step: row ``l``,
column ``j`` is 1 if element ``j`` of the plan sent ``l`` decisions earlier in this episode (row 0:
the plan passed to this ``step``) was applied on a tick of this step. A trainer ORs the rows into its
earlier steps to learn only from executed elements. Executions more than H decisions late are not
reported.

Actions follow the inner env's space: ``Discrete`` (an int, or with ``plan_horizon`` H > 1 a
``MultiDiscrete`` plan of H ints) or ``Box`` (one action vector, or an ``(H, *shape)`` plan of them,
clipped to the bounds before they are sent); a Box plan may come as a ``calf_core.timing.FeedbackPlan``, its
gains and predicted observations travelling with it (the message grows by their float32 values). ``info`` also holds ``ticks`` (env ticks this step; 0 after
``reset``: the ticks before the first decision are the first step's, with their reward, so an episode's
ticks and rewards add up exactly once),
``e2e_ms`` (end-to-end latencies of actions that arrived this step), ``obs_seq``, ``applied_obs_seq`` and
``applied_index`` (the action applied at that observation's tick: the obs_seq its plan answered and its
element, -1 for the initial action, start plan or reset, and -1 for the index when held; as
``Observation`` carries them), ``obs_age_ms`` (age of
the observation at decision time), ``obs_lost``/``actions_lost`` (this episode) and, on the last step,
``episode_e2e_ms``, ``success`` and ``ticks_held``. ``info`` is a :class:`StepInfo`, a dict whose deep
copy (SB3's ``DummyVecEnv`` makes one every step) shares its immutable values.

:mod:`calf_core.vector_networked` applies the same rules to many envs at once, in numpy.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec

from calf_core.events import ACTION, FREE, OBS, TICK, BusyPolicy, EventQueue
from calf_core.link import Link
from calf_core.task_spec import TaskSpec
from calf_core.timing import BoxBounds, Feedback, FeedbackPlan, ObsRecord, Stepper, keep_newest

MESSAGE_OVERHEAD_BYTES = 64
ENV_ID = 'calf/Networked-v0'
"""The gymnasium id that builds a NetworkedEnv (``gym.make``, ``gym.make_vec``; registered by :mod:`calf_core.api`)."""
MAX_EXECUTED_ARRAYS = 1024
"""Most ``info['executed']`` patterns a NetworkedEnv keeps made, to copy rather than build."""
_INTS = frozenset({int, np.int64, np.int32})  # the action types step takes without an isinstance check
_new = tuple.__new__  # builds a NamedTuple without its Python-level constructor


_IMMUTABLE = frozenset({int, float, bool, str, type(None)})


class StepInfo(dict):
    """A step's ``info``: a plain dict whose deep copy shares the values that cannot change.

    SB3's ``DummyVecEnv`` deep-copies every step's infos. ``copy.deepcopy`` walks each value in
    Python; this copy keeps ints, floats, bools, strings and tuples of those as they are (immutable,
    so sharing them is a deep copy), copies numeric arrays (``executed``) and deep-copies everything
    else (values a wrapper added), so the copy is equal and independent as ``copy.deepcopy`` of a dict
    would make it.
    """

    __slots__ = ()

    def __deepcopy__(self, memo: dict[int, Any]) -> StepInfo:
        copied = StepInfo(self)
        memo[id(self)] = copied
        immutable, deepcopy = _IMMUTABLE, copy.deepcopy
        for key, value in self.items():
            kind = type(value)
            if kind in immutable or (kind is tuple and immutable.issuperset(map(type, value))):
                continue
            if kind is np.ndarray and not value.dtype.hasobject:  # ``executed``: what deepcopy does, directly
                twin = memo.get(id(value))
                if twin is None:
                    twin = memo[id(value)] = value.copy()
                copied[key] = twin
            else:
                copied[key] = deepcopy(value, memo)
        return copied


class SentPlan(NamedTuple):
    """An action message on its way to the env: the plan answering observation ``obs_seq``."""

    obs_seq: int
    episode: int
    plan: list[Any]
    checked: bool  # a Box plan found finite and within the bounds when it was built: the env need not check it again
    feedback: Feedback | None  # a FeedbackPlan's gains and predicted observations, checked on arrival


class NetworkedEnv(gym.Wrapper):
    """Wrap ``env`` so that every observation and action crosses a simulated link.

    A ``gymnasium.Wrapper``: ``.env`` is the next layer, ``.unwrapped`` the innermost env (the user's robot);
    ``render`` and ``close`` reach them too."""

    metadata = {'render_modes': []}  # calf/Networked-v0 takes no render_mode: a user's env renders as it was made

    def __init__(self, env: gym.Env, task: TaskSpec, uplink: Link, downlink: Link, compute_ms: float = 0.0,
                 plan_horizon: int = 1, seed: int | None = None) -> None:
        """``env`` ticks every ``task.dt`` under ``task``'s hold rule, initial action and start plan; its
        observations cross ``uplink``, its actions ``downlink`` after ``compute_ms`` of policy compute.
        ``plan_horizon`` actions travel per decision; ``seed`` seeds the links and the first reset."""
        if compute_ms < 0:
            raise ValueError(f'compute_ms must be >= 0, got {compute_ms}')
        if plan_horizon < 1:
            raise ValueError(f'plan_horizon must be >= 1, got {plan_horizon}')
        super().__init__(env)
        self.task, self.uplink, self.downlink = task, uplink, downlink  # gym.Wrapper.spec is gymnasium's
        self.dt, self.plan_horizon = task.dt, plan_horizon
        self._dt_ns, self._compute_ns = _to_ns(task.dt), _to_ns(compute_ms / 1e3)
        self.stepper = Stepper(env, task)
        self.observation_space = float32_space(env.observation_space)
        self.action_space = plan_space(env.action_space, plan_horizon)
        self._continuous = self.stepper.continuous
        self._one_int = not self._continuous and plan_horizon == 1  # an action is one int: step's shortcut
        self._n_actions = self.stepper.n_actions
        if self._continuous:
            self._plan_shape = (plan_horizon, *env.action_space.shape)
            self._agent_shape = self.action_space.shape  # one action's shape for plan_horizon 1, else the plan's
            self._low, self._high = env.action_space.low, env.action_space.high
            self._plan_bounds = BoxBounds(self.action_space.low, self.action_space.high)
        action_bytes = 4 * int(np.prod(env.action_space.shape)) if self._continuous else 8  # float32s | int64
        self._obs_bytes = MESSAGE_OVERHEAD_BYTES + 4 * int(np.prod(env.observation_space.shape or (1,)))
        self._action_bytes = MESSAGE_OVERHEAD_BYTES + action_bytes * plan_horizon
        self._seed = seed
        self._seeded = False
        self._origin_ns = 0  # the links' clock at this episode's tick 0: episode times + origin = link times
        self._queue = EventQueue()
        self._policy = BusyPolicy(self._queue)  # the agent: busy for compute_ms after each decision
        self._last_seq = -1  # the observation the agent last acted on this episode (ObservationGate's rule)
        self._decision: ObsRecord | None = None
        self._decision_ns = 0
        self._reward = 0.0
        self._ticks = 0
        self._e2e_seen = 0
        self._e2e_ms: list[float] = []
        self._ended: ObsRecord | None = None
        self._decision_of: dict[int, int] = {}  # obs_seq -> index of the decision that answered it
        self._executed_shape = (plan_horizon + 1, plan_horizon)
        self._executed = 0  # this step's info['executed'] as bits: row l, column j is bit l * H + j
        self._executed_arrays: dict[int, np.ndarray] = {}  # of the bits: what info['executed'] copies
        self.obs_lost = self.actions_lost = 0
        # what the event loop reads every tick and never changes (the queue is cleared, never replaced)
        self._loop = (self._queue.heap, self._queue.order, self.stepper, self._policy, self._dt_ns, self._obs_bytes,
                      self._decision_of, plan_horizon)
        self.tick_listener: Callable[[ObsRecord], None] | None = None
        """Called with every observation the env emits, the reset one included, before it is sent: which
        action was applied at that tick, and the state it led to (e.g. imitation labels applied actions)."""

    @property
    def spec(self) -> EnvSpec | None:
        """``calf/Networked-v0``'s spec when ``gym.make`` built this env, else None: the links and the task are
        objects that no spec can remake. (``gym.make`` sets the spec on the innermost env, which CALF built too.)"""
        spec = self.unwrapped.spec
        return spec if spec is not None and spec.id == ENV_ID else None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode, one tick after the previous one ended on the links' clock.

        The links are one continuous process across episodes, as the live shim's are: stall phase,
        Gilbert-Elliott state, bandwidth queue, trace position and FIFO order run on. A ``seed`` (or,
        on the first reset, the constructor's) reseeds the env and the links' generators
        (``Link.reseed``); it does not restart the link process, so nothing locks to the episode start.
        """
        env_seed = None
        if seed is not None or not self._seeded:
            master = np.random.default_rng(self._seed if seed is None else seed)
            up_rng, down_rng = master.spawn(2)
            if seed is not None:
                env_seed = int(master.integers(2**31))
            self.uplink.reseed(up_rng)
            self.downlink.reseed(down_rng)
            self._seeded = True
        if self.stepper.episode >= 0:  # the link runs on: this episode starts one tick after the last one
            self._origin_ns += max((self.stepper.tick_index + 1) * self._dt_ns, self._policy.busy_until_ns)
        self._queue.clear()
        self._policy.reset()
        self._last_seq = -1
        self._ended = None
        self._reward, self._ticks, self._e2e_seen = 0.0, 0, 0
        self._decision_of.clear()
        self._executed = 0
        self.obs_lost = self.actions_lost = 0
        first = self.stepper.reset(0.0, seed=env_seed)
        if self.tick_listener is not None:
            self.tick_listener(first)
        self._e2e_ms = self.stepper.e2e_ms  # this episode's list, appended to as actions arrive
        record = self._advance(first)
        return record.obs, self._info(record, ticks=0)  # the ticks until now, and their reward, are the first step's

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._ended is None:
            record = self._decision
            assert record is not None, 'step() before reset()'
            feedback, size = None, self._action_bytes
            if self._one_int and (type(action) in _INTS or isinstance(action, np.integer)):
                action = int(action)
                plan, checked = [action], 0 <= action < self._n_actions  # in range: the env need not check it again
            else:
                if type(action) is FeedbackPlan:
                    feedback = action.feedback
                    size += 4 * (np.size(feedback.gains) + np.size(feedback.predicted))
                    action = action.actions
                plan, checked = self._as_plan(action)
            decision_of, seq = self._decision_of, record.seq  # send the plan
            decision_of[seq] = len(decision_of)
            send_ns = self._decision_ns + self._compute_ns
            self._policy.busy_until_ns = send_ns  # computing until it sends
            origin_ns = self._origin_ns
            arrivals = self.downlink.transmit((origin_ns + send_ns) / 1e9, size)
            if len(arrivals) == 1:
                arrive_ns, heap = round(arrivals[0] * 1e9) - origin_ns, self._queue.heap
                if arrive_ns <= (self.stepper.tick_index + 1) * self._dt_ns and (not heap or arrive_ns < heap[0][0]):
                    # the next event, before the next tick: handled now, as the queue would hand it over first
                    self.stepper.on_action(seq, record.episode, plan, arrive_ns / 1e9, checked, feedback)
                else:
                    heappush(heap, (arrive_ns, ACTION, next(self._queue.order),
                                    _new(SentPlan, (seq, record.episode, plan, checked, feedback))))
            elif arrivals:
                queue, sent = self._queue, _new(SentPlan, (seq, record.episode, plan, checked, feedback))
                for arrive_s in arrivals:
                    heappush(queue.heap, (round(arrive_s * 1e9) - origin_ns, ACTION, next(queue.order), sent))
            else:
                self.actions_lost += 1
            record = self._advance()
        else:
            record = self._ended
        reward = self._reward
        info = self._info(record)
        self._reward = 0.0
        self._ticks = 0
        if self._ended is not None:
            summary = self.stepper.finish()
            info.update(episode_e2e_ms=tuple(summary.e2e_ms), success=summary.success,
                        ticks_held=summary.ticks_held)
        return record.obs, reward, record.terminated, record.truncated, info

    def _as_plan(self, action: Any) -> tuple[list[Any], bool]:
        """``action`` as the plan sent, and whether it is known valid (a Box plan found within the bounds)."""
        if self._continuous:
            values = np.array(action, dtype=np.float32)  # a copy: the plan keeps its values
            if values.shape != self._agent_shape:  # as many values in another shape; the wrong number raises
                values = values.reshape(self._plan_shape).reshape(self._agent_shape)
            checked = self._plan_bounds.contains(values)
            if not checked:  # the policy side clips, as SB3 does; the env checks what it gets (NaN stays NaN)
                values = np.minimum(np.maximum(values, self._low), self._high)
            if self.plan_horizon == 1:
                return [values], checked
            return [values[i] for i in range(self.plan_horizon)], checked  # indexing: iterating costs twice as much
        if self.plan_horizon == 1:
            if isinstance(action, (int, np.integer)):
                return [int(action)], False
            return [int(np.asarray(action).reshape(-1)[0])], False
        return [int(a) for a in np.asarray(action).reshape(-1)], False

    def _advance(self, emitted: ObsRecord | None = None) -> ObsRecord:
        """Send ``emitted`` (if given), then run virtual time until the agent must decide or the episode ends.

        Events due before the next tick are handled first, in (time, rank, order) order; of the observations
        that reach the agent at one instant, it keeps the newest (``keep_newest``). This loop is the per-tick
        cost: queue pushes, the running reward and tick count, the tick's time and the executed bits are
        inlined as locals.
        """
        heap, order, stepper, policy, dt_ns, obs_bytes, decision_of, horizon = self._loop
        transmit, origin_ns, listener = self.uplink.transmit, self._origin_ns, self.tick_listener
        reward, ticks, executed = self._reward, self._ticks, self._executed
        tick_ns = stepper.tick_index * dt_ns  # the time of the last tick (``emitted``'s stamp), in episode ns
        while True:
            if emitted is not None:
                arrivals = transmit((origin_ns + tick_ns) / 1e9, obs_bytes)
                if len(arrivals) == 1:
                    arrive_ns = round(arrivals[0] * 1e9) - origin_ns
                    if arrive_ns >= tick_ns + dt_ns or (heap and arrive_ns >= heap[0][0]):
                        heappush(heap, (arrive_ns, OBS, next(order), emitted))
                    elif arrive_ns < policy.busy_until_ns:  # the next event, handled now as the queue would hand
                        policy.offer(arrive_ns, emitted)  # it over: the agent still computes, so it waits
                    else:  # ... or acts on it (newer than the last decision's)
                        policy.waiting = None
                        self._last_seq = emitted.seq
                        self._decision, self._decision_ns = emitted, arrive_ns
                        self._reward, self._ticks, self._executed = reward, ticks, executed
                        return emitted
                elif arrivals:
                    for arrive_s in arrivals:
                        heappush(heap, (round(arrive_s * 1e9) - origin_ns, OBS, next(order), emitted))
                else:
                    self.obs_lost += 1
            tick_ns += dt_ns
            due = (tick_ns, TICK)
            while heap and heap[0] < due:  # queue.due_before, inlined
                time_ns, rank, _, payload = heappop(heap)  # an Event's fields
                if rank == ACTION:
                    obs_seq, episode, plan, checked, feedback = payload
                    stepper.on_action(obs_seq, episode, plan, time_ns / 1e9, checked, feedback)
                    continue
                if rank == FREE:
                    record = policy.waiting
                elif heap and heap[0][0] == time_ns and heap[0][1] == OBS:  # more arrive at this instant
                    record = self._newest_arriving(payload, time_ns)
                else:
                    record = payload
                if record is None or record.seq <= self._last_seq:  # act only on newer observations
                    continue
                if time_ns < policy.busy_until_ns:  # still computing: the newest arrival waits
                    policy.offer(time_ns, record)
                    continue
                policy.waiting = None  # policy.offer's free case, inlined
                self._last_seq = record.seq
                self._decision, self._decision_ns = record, time_ns
                self._reward, self._ticks, self._executed = reward, ticks, executed
                return record
            emitted = stepper.tick(tick_ns / 1e9)
            if listener is not None:
                listener(emitted)
            _, _, _, _, tick_reward, terminated, truncated, (_, plan_seq, index, _) = emitted
            if index >= 0:  # info['executed']
                decision = decision_of.get(plan_seq)
                if decision is not None:
                    lag = len(decision_of) - 1 - decision
                    if lag <= horizon:
                        executed |= 1 << (lag * horizon + index)
            reward += tick_reward
            ticks += 1
            if terminated or truncated:
                self._ended = emitted
                self._reward, self._ticks, self._executed = reward, ticks, executed
                return emitted

    def _newest_arriving(self, first: ObsRecord, time_ns: int) -> ObsRecord:
        """Of ``first`` and the other observations reaching the agent at ``time_ns`` (taken off the queue), the
        one it keeps (``keep_newest``)."""
        arriving = [first, *self._queue.pop_at(time_ns, OBS)]
        return arriving[keep_newest([record.seq for record in arriving])]

    def _info(self, record: ObsRecord, ticks: int | None = None) -> dict:
        """This step's info (``ticks``: the count to report, default this step's); hands over the ``executed``
        matrix and starts a fresh one."""
        e2e, seen = self._e2e_ms, self._e2e_seen  # a tuple of the new ones: vector envs merge it into an object array
        if len(e2e) > seen:
            new_e2e = tuple(e2e[seen:])
            self._e2e_seen = len(e2e)
        else:
            new_e2e = ()
        executed = self._executed_arrays.get(self._executed)
        if executed is None:
            executed = self._executed_array(self._executed)
        self._executed = 0
        seq, _, stamp_s, _, _, _, _, applied = record
        applied_obs_seq, applied_index = (-1, -1) if applied is None else applied[1:3]  # applied_facts, inlined
        return StepInfo(ticks=self._ticks if ticks is None else ticks, e2e_ms=new_e2e, obs_seq=seq,
                        applied_obs_seq=applied_obs_seq, applied_index=applied_index,
                        obs_age_ms=(self._decision_ns / 1e9 - stamp_s) * 1e3 if self._ended is None else 0.0,
                        obs_lost=self.obs_lost, actions_lost=self.actions_lost, executed=executed.copy())

    def _executed_array(self, bits: int) -> np.ndarray:
        """``info['executed']`` of ``bits`` (row l, column j is bit l * H + j), kept for the next time if there is room."""
        array = np.zeros(self._executed_shape, np.uint8)
        array.reshape(-1)[[i for i in range(array.size) if bits >> i & 1]] = 1
        if len(self._executed_arrays) < MAX_EXECUTED_ARRAYS:
            self._executed_arrays[bits] = array
        return array


def plan_space(space: gym.Space, plan_horizon: int) -> gym.Space:
    """The agent's action space: one action of ``space``, or a plan of ``plan_horizon`` of them."""
    if isinstance(space, gym.spaces.Discrete):
        n = int(space.n)
        return gym.spaces.Discrete(n) if plan_horizon == 1 else gym.spaces.MultiDiscrete([n] * plan_horizon)
    if isinstance(space, gym.spaces.Box):
        if plan_horizon == 1:
            return space
        return gym.spaces.Box(np.stack([space.low] * plan_horizon), np.stack([space.high] * plan_horizon),
                              dtype=space.dtype)
    raise ValueError(f'NetworkedEnv needs a Discrete or Box action space, got {space}')


def float32_space(space: gym.Space) -> gym.Space:
    """``space`` as the float32 observations the stepper emits (a Box of another dtype is recast)."""
    if isinstance(space, gym.spaces.Box) and space.dtype != np.float32:
        return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)
    return space


def _to_ns(seconds: float) -> int:
    return int(round(seconds * 1e9))
