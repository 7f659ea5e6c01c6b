"""The vector NetworkedEnv: ``VectorNetworkedEnv``, N networked envs whose links and timing run in numpy.

It runs ``num_envs`` copies of an env with Discrete or Box actions (``EnvBatch``: any gymnasium env,
stepped one by one in this process; ``CartPoleBatch``: CartPole-v1's physics in numpy, in the same
float64 operations, with its termination and 500-tick truncation, which ``VectorNetworkedCartPole``
runs) behind per-env simulated links, in virtual time, under the timing rules of :mod:`calf_core.timing`
exactly as :class:`~calf_core.networked_env.NetworkedEnv` applies them: one decision per observation
delivered, the reward summed over the ticks since the previous decision, plans executed by tick index
under the task's hold rule (or its start plan before the first one), stale observations skipped, the
newest of those arriving at one instant kept (:func:`calf_core.timing.keep_newest`), stale plans
discarded, and the end-to-end latency read on the env side. Each env handles its events one at a time in NetworkedEnv's order (time, then action
arrival < tick < observation delivery < policy free); all envs do so at once, in arrays, and a step
ends when every env has reached its next decision. Episodes reset in the same step (gymnasium's
``AutoresetMode.SAME_STEP``: ``info['final_obs']`` and ``info['final_info']``).

The per-env ``info`` arrays match NetworkedEnv's keys (``ticks``, ``obs_seq``, ``applied_obs_seq``,
``applied_index``, ``obs_age_ms``, ``obs_lost``, ``actions_lost``, ``executed``); ``e2e_ms`` holds every end-to-end latency measured
during the step, flat, with the env of each in ``e2e_env``. ``final_info`` adds ``success`` and
``ticks_held``.

The links draw their random numbers in blocks from one generator per direction: a seed gives a
deterministic run, but not NetworkedEnv's sequence, so the two agree exactly under fixed delays
and trace replay and in distribution otherwise. As in NetworkedEnv each env's links are one
continuous process across its episodes (Gilbert-Elliott state, trace position, FIFO order), on a
link clock that advances by each episode's length plus one tick. Every link model runs, batched over the
envs in numpy: independent delays and losses, Gilbert-Elliott loss and trace replay with per-env state in
arrays; stalls, Gilbert-Elliott in time, drifting delay and a profile's shared process (one per env, met by
both of its directions) as one scalar process per env whose windows or level are cached in arrays, asked
again about once per cycle. Bandwidth and duplicate stages fall back to one scalar stage per env, applied
message by message (:class:`BatchLink`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from calf_core.errors import ConfigError
from calf_core.link import IndependentStage, Packet, SharedProcess, SingleCopyStage
from calf_core.models import (
    DriftingDelay,
    GilbertElliottInTime,
    GilbertElliottLoss,
    Stall,
    TraceMode,
    TraceReplay,
    build_stage,
)
from calf_core.networked_env import MESSAGE_OVERHEAD_BYTES, float32_space, plan_space
from calf_core.profiles import Profile
from calf_core.task_spec import SuccessRule, TaskSpec
from calf_core.timing import element_for_tick, held_noop, keep_newest, task_actions

_STATEFUL = (GilbertElliottLoss, TraceReplay)  # batched with per-env state in arrays
_EMPTY = np.iinfo(np.int64).max  # a free message slot
_SEQ_BITS = 16  # a slot's key is arrival_ns << _SEQ_BITS | seq: the earliest first
_SEQ_MASK = (1 << _SEQ_BITS) - 1
_NEVER = _EMPTY >> _SEQ_BITS  # later than any event (about 39 hours of virtual time)
_LATEST_NS = 2.0**62  # arrival times (link clock) are capped here before they become int64


class CartPoleBatch:
    """N CartPole-v1 copies as arrays, with gymnasium's constants and float64 operations.

    Env ``i`` draws its initial states from its own generator, seeded like gymnasium's env.
    """

    GRAVITY, MASSCART, MASSPOLE, LENGTH, FORCE_MAG, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    TOTAL_MASS = MASSPOLE + MASSCART
    POLEMASS_LENGTH = MASSPOLE * LENGTH
    THETA_LIMIT = 12 * 2 * math.pi / 360
    X_LIMIT = 2.4
    MAX_STEPS = 500  # CartPole-v1's TimeLimit
    HIGH = np.array([X_LIMIT * 2, np.inf, THETA_LIMIT * 2, np.inf], dtype=np.float32)

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.state = np.zeros((num_envs, 4))
        self.steps = np.zeros(num_envs, np.int64)  # steps this episode, for the time limit
        self._rngs = [np.random.default_rng() for _ in range(num_envs)]

    def seed(self, seeds: Sequence[int]) -> None:
        self._rngs = [np.random.default_rng(seed) for seed in seeds]

    def reset(self, idx: np.ndarray) -> np.ndarray:
        """Start new episodes in envs ``idx``; return their observations."""
        for i in idx:
            self.state[i] = self._rngs[i].uniform(low=-0.05, high=0.05, size=(4,))
        self.steps[idx] = 0
        return self.state[idx].astype(np.float32)

    def step(self, idx: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Apply ``action`` (0 or 1) in envs ``idx``; return their observations, rewards, termination and
        truncation flags."""
        x, x_dot, theta, theta_dot = self.state[idx].T
        force = np.where(action == 1, self.FORCE_MAG, -self.FORCE_MAG)
        costheta, sintheta = np.cos(theta), np.sin(theta)
        temp = (force + self.POLEMASS_LENGTH * np.square(theta_dot) * sintheta) / self.TOTAL_MASS
        thetaacc = (self.GRAVITY * sintheta - costheta * temp) / (
            self.LENGTH * (4.0 / 3.0 - self.MASSPOLE * np.square(costheta) / self.TOTAL_MASS))
        xacc = temp - self.POLEMASS_LENGTH * thetaacc * costheta / self.TOTAL_MASS
        state = np.stack([x + self.TAU * x_dot, x_dot + self.TAU * xacc,
                          theta + self.TAU * theta_dot, theta_dot + self.TAU * thetaacc], axis=1)
        self.state[idx] = state
        terminated = (np.abs(state[:, 0]) > self.X_LIMIT) | (np.abs(state[:, 2]) > self.THETA_LIMIT)
        self.steps[idx] += 1
        return state.astype(np.float32), np.ones(len(idx)), terminated, self.steps[idx] >= self.MAX_STEPS

    def close(self) -> None:
        """Nothing to release."""


class EnvBatch:
    """N gymnasium envs (any spaces NetworkedEnv takes) stepped one by one in this process, as Stepper steps one.

    A seed given to ``seed`` is used by that env's next reset, as NetworkedEnv passes a reset seed on.
    """

    def __init__(self, envs: Sequence[gym.Env]) -> None:
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        space = self.envs[0].action_space
        # a Discrete action reaches the env as the space's numpy integer, as Stepper passes it
        self._env_action: Any = space.dtype.type if isinstance(space, gym.spaces.Discrete) else None
        self.obs_shape = float32_space(self.envs[0].observation_space).shape
        self._seeds: list[int | None] = [None] * len(self.envs)

    def seed(self, seeds: Sequence[int]) -> None:
        self._seeds = [int(seed) for seed in seeds]

    def reset(self, idx: np.ndarray) -> np.ndarray:
        """Start new episodes in envs ``idx``; return their observations (float32)."""
        obs = np.zeros((len(idx), *self.obs_shape), np.float32)
        for row, i in enumerate(idx.tolist()):
            obs[row] = self.envs[i].reset(seed=self._seeds[i])[0]
            self._seeds[i] = None
        return obs

    def step(self, idx: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Apply ``action[j]`` in env ``idx[j]``; return their observations, rewards, termination and truncation."""
        n, to_env = len(idx), self._env_action
        obs = np.zeros((n, *self.obs_shape), np.float32)
        reward, terminated, truncated = np.zeros(n), np.zeros(n, bool), np.zeros(n, bool)
        for row, i in enumerate(idx.tolist()):
            act = action[row] if to_env is None else to_env(action[row])
            obs[row], reward[row], terminated[row], truncated[row], _ = self.envs[i].step(act)
        return obs, reward, terminated, truncated

    def close(self) -> None:
        for env in self.envs:
            env.close()


class TimedBatch:
    """A stage in time (``Stall``, ``GilbertElliottInTime``) for many envs, one scalar stage per env.

    Each env's renewal process is its own stage's ``OnOff``, drawn about two mean cycles ahead of the messages
    (``OnOff.drawn``); its windows are cached in arrays, so messages are checked against them in numpy, and
    only an env whose message lies past its drawn part calls its process again (about once per cycle).
    """

    def __init__(self, stages: Sequence[Stall | GilbertElliottInTime]) -> None:
        self.stages = list(stages)
        self.loses = isinstance(stages[0], GilbertElliottInTime)
        """Whether a window loses messages (Gilbert-Elliott's bad spells) rather than holds them (stalls)."""
        self._windows = [stage.windows for stage in stages]
        self._ahead_s = 2.0 * self._windows[0].cycle_s
        n = len(stages)
        self._starts = np.full((n, 2), np.inf)  # each env's windows that a later message may lie in
        self._ends = np.full((n, 2), np.inf)
        self._known = np.full(n, -np.inf)  # each env's process is drawn up to here (its next window's start)

    def release(self, envs: np.ndarray, t: np.ndarray, floor_s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Messages of distinct ``envs`` met at ``t`` (no later one before ``floor_s``): the end of the window holding
        each, else its ``t`` (``OnOff.release``)."""
        for j in np.flatnonzero(t >= self._known[envs]).tolist():  # past the drawn part: draw on
            self._draw(int(envs[j]), float(t[j]), float(floor_s[j]), rng)
        col = t[:, None]
        starts, ends = self._starts[envs], self._ends[envs]
        return np.max(np.where((starts <= col) & (col < ends), ends, col), axis=1)

    def meet(self, envs: np.ndarray, floor_s: np.ndarray, t: np.ndarray,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The stage's ``at`` for messages of distinct ``envs`` met at ``t`` (no later one before ``floor_s``, their
        send times on a link): their new times, and which it loses."""
        released = self.release(envs, t, floor_s, rng)
        if not self.loses:
            return released, np.zeros(len(t), bool)
        stage = self.stages[0]
        return t, rng.random(len(t)) < np.where(released > t, stage.loss_bad, stage.loss_good)

    def _draw(self, env: int, t: float, floor_s: float, rng: np.random.Generator) -> None:
        starts, ends, known = self._windows[env].drawn(t + self._ahead_s, floor_s, rng)
        k = len(starts)
        if k > self._starts.shape[1]:
            pad = np.full((len(self._known), k - self._starts.shape[1]), np.inf)
            self._starts, self._ends = np.hstack([self._starts, pad]), np.hstack([self._ends, pad])
        self._starts[env], self._ends[env] = np.inf, np.inf
        self._starts[env, :k], self._ends[env, :k] = starts, ends
        self._known[env] = known


class DriftBatch:
    """A drifting delay for many envs, one scalar ``DriftingDelay`` per env: each env's level and the time it holds
    until are cached in arrays, so a message adds its env's level in numpy, and only an env whose message is sent
    past that time asks its stage for the next level (about once per hold)."""

    def __init__(self, stages: Sequence[DriftingDelay]) -> None:
        self.stages = list(stages)
        self._level = np.zeros(len(stages))
        self._until = np.full(len(stages), -np.inf)

    def meet(self, envs: np.ndarray, send_s: np.ndarray, arrive: np.ndarray,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Messages of distinct ``envs`` sent at ``send_s``: their times after the stage, and none lost."""
        for j in np.flatnonzero(send_s >= self._until[envs]).tolist():  # a new level (or the first)
            env, stage = int(envs[j]), self.stages[int(envs[j])]
            stage.arrival(float(send_s[j]), 0.0, 0, rng)
            self._level[env], self._until[env] = stage.level
        return arrive + self._level[envs], np.zeros(len(envs), bool)


class SharedBatch:
    """A profile's shared process for many envs (one ``SharedProcess`` per env), met by both directions of each
    env's link: its stages batched (``TimedBatch``), the floor from each env's latest send in each direction."""

    def __init__(self, processes: Sequence[SharedProcess]) -> None:
        self.processes = list(processes)
        self._stages = [TimedBatch([p.stages[i] for p in processes]) for i in range(len(processes[0].stages))]
        self._last_send = np.full((len(processes), 2), -np.inf)

    def meet(self, direction: int, envs: np.ndarray, send_s: np.ndarray, t: np.ndarray,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``SharedProcess.meet`` for messages of distinct ``envs``: their times out, and which are lost."""
        self._last_send[envs, direction] = send_s
        other = self._last_send[envs, 1 - direction]
        floor_s = np.where(other == -np.inf, send_s, np.minimum(send_s, other))
        t, lost = t.copy(), np.zeros(len(t), bool)
        for stage in self._stages:
            going = np.flatnonzero(~lost)  # a lost message meets no later stage
            t[going], lost[going] = stage.meet(envs[going], floor_s[going], t[going], rng)
        return t, lost


class BatchLink:
    """One direction of a profile's link for ``num_envs`` envs; each call sends one message per env given.

    Stages that can be batched are applied to all messages at once, in numpy: independent delays and
    losses (one draw per message), Gilbert-Elliott loss and trace replay (per-env state in arrays), stalls and
    Gilbert-Elliott in time (``TimedBatch``), drifting delay (``DriftBatch``) and the shared process
    (``SharedBatch``). Bandwidth and duplicate stages, and a stateful stage behind a duplicate (which may see two
    copies of one env's message), fall back to one instance per env, applied message by message as a scalar
    ``Link`` applies it: the same model, its state per env, in a Python loop over the messages that reach it.
    """

    def __init__(self, specs: Sequence[dict], reorder: bool, num_envs: int,
                 shared: tuple[SharedBatch, int] | None = None) -> None:
        """``shared``: the envs' shared process and this link's direction in it (0 uplink, 1 downlink), met last."""
        self._stages: list[Any] = []  # a batched stage, or a list of one stage per env (the fallback)
        copies = False  # a duplicate stage came before: stateful stages may see two copies of one message
        for spec in specs:
            stage = build_stage(spec)
            if isinstance(stage, IndependentStage) or (isinstance(stage, _STATEFUL) and not copies):
                self._stages.append(stage)
            else:
                each = [stage, *(build_stage(spec) for _ in range(num_envs - 1))]
                if copies:  # an env may have two copies here: one message at a time
                    self._stages.append(each)
                elif isinstance(stage, (Stall, GilbertElliottInTime)):
                    self._stages.append(TimedBatch(each))
                else:
                    self._stages.append(DriftBatch(each) if isinstance(stage, DriftingDelay) else each)
            copies = copies or not isinstance(stage, SingleCopyStage)
        self.shared = shared
        self.copies = copies
        """Whether a message may arrive more than once (a duplicate stage): ``send`` then sorts the copies."""
        # per-env state of batched stateful stages: Gilbert-Elliott bad state, trace position; -1 = not started.
        # It runs on across episodes, as a Link's does.
        self._states = [np.full(num_envs, -1, np.int64) for _ in self._stages]
        self._reorder = reorder
        self._last_arrive = np.full(num_envs, -np.inf)
        self._rng = np.random.default_rng()

    def reseed(self, rng: np.random.Generator) -> None:
        """Draw from ``rng`` from now on; every env's link state runs on (``Link.reseed``)."""
        self._rng = rng

    def send(self, idx: np.ndarray, send_s: np.ndarray, size_bytes: int) -> tuple[np.ndarray, np.ndarray]:
        """Messages of ``size_bytes`` sent by envs ``idx`` at ``send_s``: the copies delivered, as (position in
        ``idx``, arrival time in integer ns), by position, each message's copies in arrival order. A lost
        message has no copy; a duplicated one has several."""
        pos, sent, arrive = np.arange(len(idx)), np.asarray(send_s, np.float64), send_s.copy()
        for stage, state in zip(self._stages, self._states):
            if not pos.size:
                break
            if isinstance(stage, list):
                pos, sent, arrive = _each(stage, idx[pos], pos, sent, arrive, size_bytes, self._rng)
                continue
            if isinstance(stage, (TimedBatch, DriftBatch)):
                arrive, lost = stage.meet(idx[pos], sent, arrive, self._rng)
            else:
                lost = self._apply(stage, state, idx[pos], arrive)
            if lost.any():
                kept = ~lost
                pos, sent, arrive = pos[kept], sent[kept], arrive[kept]
        if self.shared is not None and pos.size:
            pos, sent, arrive = self._meet_shared(idx, pos, sent, arrive)
        if self.copies:  # without copies ``pos`` stays sorted, one row a message
            order = np.lexsort((arrive, pos))
            pos, arrive = pos[order], arrive[order]
        if not self._reorder and pos.size:  # FIFO: no copy before a copy of the env's previous message
            envs = idx[pos]
            arrive = np.maximum(arrive, self._last_arrive[envs])
            if self.copies:  # an env may have several copies here
                np.maximum.at(self._last_arrive, envs, arrive)
            else:
                self._last_arrive[envs] = arrive
        return pos, np.rint(np.minimum(arrive * 1e9, _LATEST_NS)).astype(np.int64)

    def _meet_shared(self, idx: np.ndarray, pos: np.ndarray, sent: np.ndarray,
                     arrive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The copies after the shared process, met one copy of an env's message at a time, in the order a
        ``Link`` passes them on."""
        process, direction = self.shared
        out = np.ones(pos.size, bool)
        for copies in _rounds(pos, self.copies):
            rows = np.arange(pos.size)[copies]
            arrive[rows], lost = process.meet(direction, idx[pos[rows]], sent[rows], arrive[rows], self._rng)
            out[rows[lost]] = False
        return pos[out], sent[out], arrive[out]

    def _apply(self, stage: Any, state: np.ndarray, envs: np.ndarray, arrive: np.ndarray) -> np.ndarray:
        """Apply batched ``stage`` to messages from ``envs`` (distinct unless the stage is independent), adding
        to ``arrive`` in place; return which of them it loses."""
        n, rng = len(envs), self._rng
        if isinstance(stage, IndependentStage):
            delay_s = stage.sample(rng, n)
            lost = np.isnan(delay_s)
            arrive += np.where(lost, 0.0, delay_s)
        elif isinstance(stage, GilbertElliottLoss):  # per-env state, as the scalar stage keeps per link
            bad = state[envs]
            fresh = bad < 0
            bad[fresh] = rng.random(int(fresh.sum())) < stage.pi_bad
            is_bad = bad == 1
            lost = rng.random(n) < np.where(is_bad, stage.loss_bad, stage.loss_good)
            flip = rng.random(n) < np.where(is_bad, stage.p_bad_to_good, stage.p_good_to_bad)
            state[envs] = is_bad != flip
        else:  # TraceReplay: per-env position
            pos = state[envs]
            fresh = pos < 0
            if stage.mode is TraceMode.RANDOM_OFFSET:
                pos[fresh] = rng.integers(len(stage.delays_s), size=int(fresh.sum()))
            else:
                pos[fresh] = 0
            state[envs] = (pos + 1) % len(stage.delays_s)
            lost = np.asarray(stage.lost)[pos]
            arrive += np.asarray(stage.delays_s)[pos]
        return lost


def _each(stages: list[Any], envs: np.ndarray, pos: np.ndarray, sent: np.ndarray, arrive: np.ndarray,
          size_bytes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The per-env fallback: env ``e``'s copy of a stage, ``stages[e]``, applied to each of its messages in
    turn (at most one message per env and call, plus its copies). Returns the copies that survive."""
    out_pos: list[int] = []
    out_sent: list[float] = []
    out_arrive: list[float] = []
    rows = zip(pos.tolist(), envs.tolist(), sent.tolist(), arrive.tolist())
    if isinstance(stages[0], SingleCopyStage):  # one model per list: at most one copy of each message
        for p, env, send_s, arrive_s in rows:
            t = stages[env].arrival(send_s, arrive_s, size_bytes, rng)
            if t is not None:
                out_pos.append(p)
                out_sent.append(send_s)
                out_arrive.append(t)
    else:
        for p, env, send_s, arrive_s in rows:
            for copy in stages[env].apply(Packet(send_s, arrive_s, size_bytes), rng):
                out_pos.append(p)
                out_sent.append(send_s)
                out_arrive.append(copy.arrive_s)
    return np.array(out_pos, np.int64), np.array(out_sent), np.array(out_arrive)


def _rounds(pos: np.ndarray, copies: bool) -> list[Any]:
    """Of sorted positions ``pos`` (a message's copies side by side), the indices of each message's first copies,
    then of its second copies, ...: each round names every message at most once. Without ``copies``, one round."""
    if not copies:
        return [slice(None)]
    if not pos.size:
        return []
    first = np.flatnonzero(np.r_[True, pos[1:] != pos[:-1]])
    rank = np.arange(pos.size) - np.repeat(first, np.diff(np.r_[first, pos.size]))
    return [np.flatnonzero(rank == r) for r in range(int(rank.max()) + 1)]


class VectorNetworkedEnv(VectorEnv):
    """``batch``'s envs, each behind ``profile``'s links, as one gymnasium VectorEnv (see the module doc).

    ``batch`` steps the envs: an :class:`EnvBatch` of any gymnasium envs, a
    :class:`~calf_core.env_workers.ProcessEnvBatch` of them in worker processes, or :class:`CartPoleBatch`. ``task``
    gives the tick, hold rule, initial action, start plan and success rule, as NetworkedEnv's; the spaces are
    one env's; ``seed`` seeds the links on the first reset when it is given no seed. Actions are one per env, or plans of ``plan_horizon`` (``MultiDiscrete``, or Box ``(H, *shape)``);
    Box plans are clipped to the bounds, as NetworkedEnv clips them. An action out of the space (a Discrete
    action out of range, a Box action that is not finite) raises a ValueError.
    """

    metadata = {'autoreset_mode': AutoresetMode.SAME_STEP}

    def __init__(self, batch: Any, task: TaskSpec, observation_space: gym.Space, action_space: gym.Space,
                 profile: Profile, plan_horizon: int = 1, seed: int | None = None) -> None:
        num_envs = batch.num_envs
        if num_envs < 1 or plan_horizon < 1:
            raise ValueError(f'num_envs and plan_horizon must be >= 1, got {num_envs} and {plan_horizon}')
        self.batch, self.task, self.num_envs, self.plan_horizon = batch, task, num_envs, plan_horizon
        self.single_observation_space = float32_space(observation_space)
        self.single_action_space = plan_space(action_space, plan_horizon)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._continuous = isinstance(action_space, gym.spaces.Box)
        shape = tuple(action_space.shape) if self._continuous else ()
        kind = np.float32 if self._continuous else np.int64
        self._action_shape, self._plan_shape = shape, (num_envs, plan_horizon, *shape)
        self._n_actions = 0 if self._continuous else int(action_space.n)
        if self._continuous:
            self._low, self._high = action_space.low, action_space.high
        actions = task_actions(task, action_space)
        self._initial_action = np.asarray(actions.initial, kind)
        noop = held_noop(task, actions)
        self._noop = None if noop is None else np.asarray(noop, kind)
        self._start_plan = np.asarray(actions.start_plan, kind).reshape(len(actions.start_plan), *shape)
        self._success_on_truncation = task.success is SuccessRule.TIME_LIMIT
        self._dt_ns = int(round(task.dt * 1e9))
        self._compute_ns = int(round(profile.compute_ms / 1e3 * 1e9))
        obs_shape = self.single_observation_space.shape
        self._obs_bytes = MESSAGE_OVERHEAD_BYTES + 4 * int(np.prod(obs_shape or (1,)))  # as NetworkedEnv sizes them
        self._action_bytes = MESSAGE_OVERHEAD_BYTES + plan_horizon * (4 * int(np.prod(shape)) if self._continuous else 8)
        shared = SharedBatch([profile.make_shared() for _ in range(num_envs)]) if profile.shared else None
        self.uplink = BatchLink(profile.uplink, profile.reorder.uplink, num_envs, shared and (shared, 0))
        self.downlink = BatchLink(profile.downlink, profile.reorder.downlink, num_envs, shared and (shared, 1))
        n, h = num_envs, plan_horizon
        self._rows = np.arange(n)
        # env side: tick, executor and episode counters
        self._tick = np.zeros(n, np.int64)
        self._plan = np.zeros((n, h, *shape), kind)
        self._plan_seq = np.full(n, -1, np.int64)
        self._plan_decision = np.full(n, -1, np.int64)  # index of the decision that sent the current plan
        self._first_use = np.ones(n, bool)  # the current plan has not run yet
        self._last_action = np.zeros((n, *shape), kind)
        self._last_action[:] = self._initial_action
        self._reward = np.zeros(n)
        self._ticks = np.zeros(n, np.int64)
        self._ticks_held = np.zeros(n, np.int64)
        self._obs_lost = np.zeros(n, np.int64)
        self._actions_lost = np.zeros(n, np.int64)
        self._executed = np.zeros((n, h + 1, h), np.uint8)
        # policy side: gate, busy time, the observation kept while busy, the current decision
        self._gate = np.full(n, -1, np.int64)
        self._busy_until = np.zeros(n, np.int64)
        self._waiting_seq = np.full(n, -1, np.int64)
        self._waiting_obs = np.zeros((n, *obs_shape), np.float32)
        self._waiting_applied = np.full((n, 2), -1, np.int64)
        self._decision_seq = np.zeros(n, np.int64)
        self._decision_applied = np.full((n, 2), -1, np.int64)  # applied_obs_seq, applied_index
        self._decision_ns = np.zeros(n, np.int64)
        self._decision_obs = np.zeros((n, *obs_shape), np.float32)
        self._decisions = np.zeros(n, np.int64)  # decisions sent this episode
        self._fresh = np.zeros(n, bool)  # reset and not yet decided
        self._pending = np.zeros(n, bool)  # the episode ended before its first decision
        self._pending_flags = np.zeros((n, 3), bool)  # (terminated, truncated, success) of a pending end
        # messages in flight, one slot each
        self._obs_key = np.full((n, 4), _EMPTY, np.int64)
        self._obs_data = np.zeros((n, 4, *obs_shape), np.float32)
        self._obs_applied = np.full((n, 4, 2), -1, np.int64)
        self._act_key = np.full((n, 4), _EMPTY, np.int64)
        self._act_plan = np.zeros((n, 4, h, *shape), kind)
        self._act_decision = np.zeros((n, 4), np.int64)
        self._origin_ns = np.zeros(n, np.int64)  # each env's link clock at its episode's tick 0
        self._played = np.zeros(n, bool)  # the env has started an episode before
        self._seed, self._seeded = seed, False  # ``seed`` seeds the links of the first reset given none
        self._e2e: list[tuple[np.ndarray, np.ndarray]] = []
        self._final: dict[str, np.ndarray] = {}

    def reset(self, *, seed: int | Sequence[int] | None = None,
              options: dict | None = None) -> tuple[np.ndarray, dict]:
        """Reset every env. An int seed gives env ``i`` the env seed ``seed + i``; a list gives each its own."""
        if seed is not None or not self._seeded:
            if seed is not None:
                seeds = [int(seed) + i for i in range(self.num_envs)] if np.ndim(seed) == 0 else list(seed)
                if len(seeds) != self.num_envs:
                    raise ValueError(f'reset needs one seed per env ({self.num_envs}), got {len(seeds)}')
                self.batch.seed(seeds)
            up_rng, down_rng = np.random.default_rng(self._seed if seed is None else seed).spawn(2)
            self.uplink.reseed(up_rng)
            self.downlink.reseed(down_rng)
            self._seeded = True
        self._e2e, self._final = [], {}
        self._reset_envs(self._rows)
        self._advance(np.ones(self.num_envs, bool))
        return self._decision_obs.copy(), self._info(np.ones(self.num_envs, bool))

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        plans = self._plans(actions)
        self._e2e, self._final = [], {}
        deciding = np.flatnonzero(~self._pending)
        self._send_actions(deciding, plans[deciding])
        ended = np.flatnonzero(self._pending)
        if ended.size:
            terminated, truncated, success = self._pending_flags[ended].T
            first = self._finish(ended, self._decision_obs[ended], self._decision_applied[ended], terminated, truncated,
                                 success)
            self._send_observations(ended, np.zeros(len(ended), np.int64), first, _no_applied(len(ended)))
        self._advance(np.ones(self.num_envs, bool))
        restarted = self._final.get('mask', np.zeros(self.num_envs, bool))
        reward = np.where(restarted, self._final.get('reward', 0.0), self._reward)
        terminated = self._final.get('terminated', np.zeros(self.num_envs, bool))
        truncated = self._final.get('truncated', np.zeros(self.num_envs, bool))
        info = self._info(restarted)
        carry = ~restarted  # a restarted env keeps its reset ticks and their reward for its next step, as NetworkedEnv does
        self._reward[carry], self._ticks[carry], self._executed[carry] = 0.0, 0, 0
        return self._decision_obs.copy(), reward, terminated.copy(), truncated.copy(), info

    def close_extras(self, **kwargs: Any) -> None:
        self.batch.close()

    def _plans(self, actions: Any) -> np.ndarray:
        """``actions`` as one plan per env: ints in range, or finite Box actions clipped to the bounds."""
        if self._continuous:
            plans = np.array(actions, dtype=np.float32).reshape(self._plan_shape)
            if not np.isfinite(plans).all():
                raise ValueError('Box actions must be finite, got NaN or infinity')
            return np.minimum(np.maximum(plans, self._low), self._high)
        plans = np.asarray(actions, dtype=np.int64).reshape(self._plan_shape)
        if plans.min() < 0 or plans.max() >= self._n_actions:
            raise ValueError(f'actions are 0 to {self._n_actions - 1}, got {actions!r}')
        return plans

    def _info(self, at_reset: np.ndarray) -> dict[str, Any]:
        """This step's info; envs ``at_reset`` report their new episode's reset (0 ticks: those before its first
        decision are its first step's, as in NetworkedEnv)."""
        stamp_s = self._decision_seq * self._dt_ns / 1e9
        info: dict[str, Any] = {
            'ticks': np.where(at_reset, 0, self._ticks), 'obs_seq': self._decision_seq.copy(),
            'applied_obs_seq': self._decision_applied[:, 0].copy(), 'applied_index': self._decision_applied[:, 1].copy(),
            'obs_age_ms': np.where(self._pending, 0.0, (self._decision_ns / 1e9 - stamp_s) * 1e3),
            'obs_lost': self._obs_lost.copy(), 'actions_lost': self._actions_lost.copy(),
            'executed': self._executed.copy(),
            'e2e_ms': np.concatenate([v for v, _ in self._e2e]) if self._e2e else np.zeros(0),
            'e2e_env': np.concatenate([e for _, e in self._e2e]) if self._e2e else np.zeros(0, np.int64)}
        if self._final:
            mask = self._final['mask']
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(mask):
                final_obs[i] = self._final['obs'][i]
            info.update(final_obs=final_obs, _final_obs=mask, _final_info=mask,
                        final_info={key: self._final[key] for key in
                                    ('ticks', 'obs_seq', 'applied_obs_seq', 'applied_index', 'obs_age_ms',
                                     'obs_lost', 'actions_lost', 'executed', 'success', 'ticks_held')})
        return info

    def _advance(self, active: np.ndarray) -> None:
        """Run each active env until it must decide. A pass takes every active env through one tick interval:
        the observations reaching its policy before the next tick (the decision, if one comes: the first arrival
        while free, or the newest kept while busy when the policy is free again), the actions arriving up to
        that decision or through the tick, then the tick if no decision came first. This is NetworkedEnv's
        event order (action arrival < tick < observation delivery < policy free at one time), one interval at a
        time; a pass reads only the rows of the envs still active."""
        while True:
            env = np.flatnonzero(active)
            if not env.size:
                return
            rows = np.arange(env.size)
            tick_t = (self._tick[env] + 1) * self._dt_ns
            busy = self._busy_until[env]
            keys = self._obs_key[env]
            at, seq = keys >> _SEQ_BITS, keys & _SEQ_MASK
            due = at < tick_t[:, None]  # observations arriving before the tick (at the tick they come after it)
            early = due & (at < busy[:, None])  # while the policy computes: the newest waits (BusyPolicy)
            first_free = np.where(due & ~early, at, _NEVER).min(axis=1)
            waits = early.any(axis=1)
            freed = (waits | (self._waiting_seq[env] >= 0)) & (busy < tick_t)  # free before the tick, one waiting
            decide = freed | (first_free < tick_t)
            now = np.where(freed, busy, first_free)  # the decision's time
            on_arrival = decide & (first_free == now)  # on the newest arriving then (before the free event)
            pick_t = np.where(on_arrival, now, np.where(early, at, -1).max(axis=1))  # else the latest while busy
            picked = np.where(at == pick_t[:, None], seq, -1)
            slot = keep_newest(picked)
            kept = waits & ~on_arrival  # the newest arrival while busy becomes the one waiting
            if kept.any():
                idx, where = env[kept], slot[kept]
                self._waiting_seq[idx] = seq[kept, where]
                self._waiting_obs[idx], self._waiting_applied[idx] = self._obs_data[idx, where], self._obs_applied[idx, where]
            # the arrivals up to the decision, or before the tick, are taken
            self._obs_key[env] = np.where(at <= np.where(decide, now, tick_t - 1)[:, None], _EMPTY, keys)
            self._actions_until(env, np.where(decide, now, tick_t))
            if decide.any():
                idx, arrival = env[decide], on_arrival[decide]
                where = slot[decide]
                data = np.where(arrival, seq[rows[decide], where], self._waiting_seq[idx])
                obs = self._obs_data[idx, where]
                obs[~arrival] = self._waiting_obs[idx[~arrival]]
                applied = np.where(arrival[:, None], self._obs_applied[idx, where], self._waiting_applied[idx])
                self._decide(idx, data, now[decide], obs, applied, active)
            ticking = ~decide
            if ticking.any():
                self._on_ticks(env[ticking], active)

    def _actions_until(self, env: np.ndarray, limit_ns: np.ndarray) -> None:
        """The action messages reaching envs ``env`` up to ``limit_ns`` (each env's own), earliest first."""
        count = ((self._act_key[env] >> _SEQ_BITS) <= limit_ns[:, None]).sum(axis=1)
        for k in range(int(count.max())):
            idx = env[count > k]
            keys = self._act_key[idx]
            slot = keys.argmin(axis=1)
            self._on_actions(idx, slot, keys[np.arange(idx.size), slot] >> _SEQ_BITS)

    def _on_actions(self, idx: np.ndarray, slot: np.ndarray, arrive_ns: np.ndarray) -> None:
        """Action messages arrive: Stepper.on_action for each env in ``idx``."""
        seq = self._act_key[idx, slot] & _SEQ_MASK
        self._act_key[idx, slot] = _EMPTY
        current = self._plan_seq[idx]
        measured = seq != current  # a duplicate is not measured
        e2e_ms = (arrive_ns / 1e9 - seq * self._dt_ns / 1e9) * 1e3
        self._e2e.append((e2e_ms[measured], idx[measured]))
        newer = seq > current
        taken, slot = idx[newer], slot[newer]
        self._plan_seq[taken] = seq[newer]
        self._plan[taken] = self._act_plan[taken, slot]
        self._plan_decision[taken] = self._act_decision[taken, slot]
        self._first_use[taken] = True

    def _on_ticks(self, idx: np.ndarray, active: np.ndarray) -> None:
        """Envs ``idx`` tick: the action PlanExecutor.action_for_tick applies (``element_for_tick``), an env step,
        then the observation is sent."""
        tick = self._tick[idx] + 1
        self._tick[idx] = tick
        plan_seq, cycle = self._plan_seq[idx], len(self._start_plan)
        index = element_for_tick(tick, plan_seq, self.plan_horizon, self._first_use[idx], cycle)
        runs = index >= 0  # an element of the plan (or before the first plan, of the start plan) runs
        self._first_use[idx[runs]] = False  # a new plan sets it again
        action = self._last_action[idx]
        if cycle:  # every env without a plan yet runs its start plan
            starts = plan_seq < 0
            action[starts] = self._start_plan[index[starts]]
            runs &= ~starts
        action[runs] = self._plan[idx[runs], index[runs]]
        self._last_action[idx] = action
        if self._noop is not None:  # hold zero or noop: a held tick applies the no-op, and the last action stays
            action[index < 0] = self._noop
        lag = self._decisions[idx] - 1 - self._plan_decision[idx]
        marked = runs & (lag <= self.plan_horizon)
        self._executed[idx[marked], lag[marked], index[marked]] = 1
        applied = np.stack([plan_seq, np.where(runs, index, -1)], axis=1)
        obs, reward, terminated, truncated = self.batch.step(idx, action)
        self._reward[idx] += reward
        self._ticks[idx] += 1
        self._ticks_held[idx] += ~runs
        ended = terminated | truncated
        if ended.any():  # the restarted envs send their observation 0 with the others' observations
            success = (truncated & ~terminated) if self._success_on_truncation else (terminated & (reward > 0))
            restarted, first = self._end(idx[ended], obs[ended], applied[ended], terminated[ended], truncated[ended],
                                         success[ended], active)
            going = ~ended
            idx, tick = np.concatenate([idx[going], restarted]), np.concatenate([tick[going], np.zeros_like(restarted)])
            obs, applied = np.concatenate([obs[going], first]), np.concatenate([applied[going], _no_applied(len(first))])
        self._send_observations(idx, tick, obs, applied)

    def _decide(self, idx: np.ndarray, seq: np.ndarray, now_ns: np.ndarray, obs: np.ndarray, applied: np.ndarray,
                active: np.ndarray) -> None:
        """Envs ``idx`` hand observation ``seq`` to the agent: ObservationGate.admit, then the step returns."""
        self._waiting_seq[idx] = -1
        self._gate[idx] = seq
        self._decision_seq[idx], self._decision_ns[idx], self._decision_obs[idx] = seq, now_ns, obs
        self._decision_applied[idx] = applied
        self._fresh[idx] = False
        active[idx] = False
        # observations in flight up to seq will be skipped when they arrive: drop them now
        rows, cols = np.nonzero((self._obs_key[idx] & _SEQ_MASK) <= seq[:, None])
        self._obs_key[idx[rows], cols] = _EMPTY

    def _end(self, idx: np.ndarray, obs: np.ndarray, applied: np.ndarray, terminated: np.ndarray,
             truncated: np.ndarray, success: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Episodes end. One that ended before its first decision is returned as the reset observation
        and reported at the next step; the others are recorded as final and restarted: returns those and
        their observations 0, which the caller sends."""
        fresh = self._fresh[idx]
        pending = idx[fresh]
        self._pending[pending] = True
        self._pending_flags[pending] = np.stack([terminated[fresh], truncated[fresh], success[fresh]], axis=1)
        self._decision_seq[pending], self._decision_obs[pending] = self._tick[pending], obs[fresh]
        self._decision_applied[pending] = applied[fresh]
        active[pending] = False
        done = ~fresh
        return idx[done], self._finish(idx[done], obs[done], applied[done], terminated[done], truncated[done],
                                       success[done])

    def _finish(self, idx: np.ndarray, obs: np.ndarray, applied: np.ndarray, terminated: np.ndarray,
                truncated: np.ndarray, success: np.ndarray) -> np.ndarray:
        """Record the final step of envs ``idx`` and restart them (``_restart``): their observations 0, not sent."""
        if not idx.size:
            return self._decision_obs[idx]
        n, final = self.num_envs, self._final
        if not final:
            final.update(mask=np.zeros(n, bool), obs=np.zeros_like(self._decision_obs), reward=np.zeros(n),
                         terminated=np.zeros(n, bool), truncated=np.zeros(n, bool), ticks=np.zeros(n, np.int64),
                         obs_seq=np.zeros(n, np.int64), applied_obs_seq=np.full(n, -1, np.int64),
                         applied_index=np.full(n, -1, np.int64), obs_age_ms=np.zeros(n), obs_lost=np.zeros(n, np.int64),
                         actions_lost=np.zeros(n, np.int64), executed=np.zeros_like(self._executed),
                         success=np.zeros(n, bool), ticks_held=np.zeros(n, np.int64))
        final['mask'][idx], final['obs'][idx], final['reward'][idx] = True, obs, self._reward[idx]
        final['terminated'][idx], final['truncated'][idx] = terminated, truncated
        final['ticks'][idx], final['obs_seq'][idx] = self._ticks[idx], self._tick[idx]
        final['applied_obs_seq'][idx], final['applied_index'][idx] = applied.T
        final['obs_lost'][idx], final['actions_lost'][idx] = self._obs_lost[idx], self._actions_lost[idx]
        final['executed'][idx], final['ticks_held'][idx] = self._executed[idx], self._ticks_held[idx]
        final['success'][idx] = success
        return self._restart(idx)

    def _reset_envs(self, idx: np.ndarray) -> None:
        """Start new episodes in envs ``idx`` and send their observation 0 (NetworkedEnv.reset)."""
        self._send_observations(idx, np.zeros(len(idx), np.int64), self._restart(idx), _no_applied(len(idx)))

    def _restart(self, idx: np.ndarray) -> np.ndarray:
        """Start new episodes in envs ``idx``; return their observations 0, for the caller to send.

        The links run on: each env's link clock advances by the episode's length plus one tick."""
        advance = np.maximum((self._tick[idx] + 1) * self._dt_ns, self._busy_until[idx])
        self._origin_ns[idx] += np.where(self._played[idx], advance, 0)
        self._played[idx] = True
        obs = self.batch.reset(idx)
        for array, value in ((self._tick, 0), (self._plan_seq, -1), (self._plan_decision, -1),
                             (self._first_use, True), (self._last_action, self._initial_action), (self._reward, 0.0),
                             (self._ticks, 0), (self._ticks_held, 0), (self._obs_lost, 0), (self._actions_lost, 0),
                             (self._executed, 0), (self._gate, -1), (self._busy_until, 0), (self._waiting_seq, -1),
                             (self._decisions, 0), (self._fresh, True), (self._pending, False),
                             (self._obs_key, _EMPTY), (self._act_key, _EMPTY)):
            array[idx] = value
        return obs

    def _send_observations(self, idx: np.ndarray, seq: np.ndarray, obs: np.ndarray, applied: np.ndarray) -> None:
        origin = self._origin_ns[idx]
        pos, arrive_ns = self.uplink.send(idx, (origin + seq * self._dt_ns) / 1e9, self._obs_bytes)
        self._obs_lost[idx[_lost(pos, len(idx))]] += 1
        arrive_ns = np.minimum(arrive_ns - origin[pos], _NEVER - 1)  # a heavy tail's draw beyond 39 h: never
        for copies in _rounds(pos, self.uplink.copies):
            at = pos[copies]
            self._obs_key, slot = _insert(self._obs_key, idx[at], arrive_ns[copies] << _SEQ_BITS | seq[at])
            self._obs_data = _fit(self._obs_data, self._obs_key.shape[1])
            self._obs_applied = _fit(self._obs_applied, self._obs_key.shape[1])
            self._obs_data[idx[at], slot] = obs[at]
            self._obs_applied[idx[at], slot] = applied[at]

    def _send_actions(self, idx: np.ndarray, plans: np.ndarray) -> None:
        decision = self._decisions[idx]
        self._decisions[idx] += 1
        send_ns = self._decision_ns[idx] + self._compute_ns
        self._busy_until[idx] = send_ns
        origin = self._origin_ns[idx]
        pos, arrive_ns = self.downlink.send(idx, (origin + send_ns) / 1e9, self._action_bytes)
        self._actions_lost[idx[_lost(pos, len(idx))]] += 1
        arrive_ns = np.minimum(arrive_ns - origin[pos], _NEVER - 1)
        for copies in _rounds(pos, self.downlink.copies):
            at = pos[copies]
            envs = idx[at]
            self._act_key, slot = _insert(self._act_key, envs, arrive_ns[copies] << _SEQ_BITS | self._decision_seq[envs])
            self._act_plan = _fit(self._act_plan, self._act_key.shape[1])
            self._act_decision = _fit(self._act_decision, self._act_key.shape[1])
            self._act_plan[envs, slot] = plans[at]
            self._act_decision[envs, slot] = decision[at]


class VectorNetworkedCartPole(VectorNetworkedEnv):
    """``num_envs`` CartPoles on :class:`CartPoleBatch` (its physics in numpy): the vector env's CartPole case."""

    def __init__(self, num_envs: int, profile: Profile, plan_horizon: int = 1,
                 start_plan: Sequence[int] = (), initial_action: int = 0) -> None:
        if any(a not in (0, 1) for a in (*start_plan, initial_action)):
            raise ConfigError(f'CartPole actions are 0 or 1, got start_plan {list(start_plan)}, '
                              f'initial_action {initial_action}')
        task = TaskSpec('cartpole', CartPoleBatch.TAU, 'CartPole-v1', initial_action=initial_action,
                        start_plan=tuple(start_plan))
        space = gym.spaces.Box(-CartPoleBatch.HIGH, CartPoleBatch.HIGH, dtype=np.float32)
        super().__init__(CartPoleBatch(num_envs), task, space, gym.spaces.Discrete(2), profile, plan_horizon)

    @property
    def cartpole(self) -> CartPoleBatch:
        return self.batch


def _no_applied(n: int) -> np.ndarray:
    """``(applied_obs_seq, applied_index)`` of ``n`` reset observations: none."""
    return np.full((n, 2), -1, np.int64)


def _lost(pos: np.ndarray, n: int) -> np.ndarray:
    """Which of ``n`` messages have no copy among the delivered positions ``pos``."""
    lost = np.ones(n, bool)
    lost[pos] = False
    return lost


def _insert(keys: np.ndarray, idx: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Put ``values[j]`` in a free slot of row ``idx[j]`` (rows are distinct), doubling the slots if one is full.

    Returns the (possibly grown) key array and the slot used in each row.
    """
    free = keys[idx] == _EMPTY
    slot = free.argmax(axis=1)
    if not free[np.arange(len(idx)), slot].all():
        keys = np.concatenate([keys, np.full_like(keys, _EMPTY)], axis=1)
        slot = np.where(free[np.arange(len(idx)), slot], slot, keys.shape[1] // 2)
    keys[idx, slot] = values
    return keys, slot


def _fit(data: np.ndarray, slots: int) -> np.ndarray:
    """``data`` (env, slot, ...) with at least ``slots`` slots."""
    if data.shape[1] >= slots:
        return data
    return np.concatenate([data, np.zeros_like(data)], axis=1)
