"""NetworkedEnv: a gymnasium wrapper that runs an env behind a simulated network, in virtual time.

The env ticks every ``dt`` through :class:`calf_shim.timing.Stepper` (the same class the env node
runs). Observations travel over ``uplink``, actions over ``downlink``. The agent makes one decision
per observation delivered to it; the reward returned is the sum over the ticks that elapsed since
the previous decision.

``info['executed']`` (``uint8 [H + 1, H]``) says which plan elements ran during a step: row ``l``,
column ``j`` is 1 if element ``j`` of the plan sent ``l`` decisions earlier in this episode (row 0:
the plan passed to this ``step``) was applied on a tick of this step. A trainer ORs the rows into its
earlier steps to learn only from executed elements. Executions more than H decisions late are not
reported.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from calf_shim.link import Link
from calf_shim.timing import HoldMode, ObservationGate, ObsRecord, Stepper

_ACTION, _OBS, _POLICY_FREE = 0, 2, 3
_TICK = 1  # ranks between action arrivals and deliveries that share a timestamp
MESSAGE_OVERHEAD_BYTES = 64


@dataclass(order=True)
class _Event:
    time_ns: int  # integer nanoseconds, so that equal times compare equal
    rank: int
    order: int
    payload: Any = field(compare=False)


class NetworkedEnv(gym.Env):
    """Wrap ``env`` so that every observation and action crosses a simulated link."""

    metadata = {'render_modes': []}

    def __init__(self, env: gym.Env, uplink: Link, downlink: Link, dt: float, compute_ms: float = 0.0,
                 hold: str | HoldMode = HoldMode.LAST, noop_action: int | None = None,
                 initial_action: int = 0, plan_horizon: int = 1, success_on_truncation: bool = False,
                 seed: int | None = None) -> None:
        if dt <= 0:
            raise ValueError(f'dt must be > 0, got {dt}')
        if compute_ms < 0:
            raise ValueError(f'compute_ms must be >= 0, got {compute_ms}')
        if plan_horizon < 1:
            raise ValueError(f'plan_horizon must be >= 1, got {plan_horizon}')
        if not isinstance(env.action_space, gym.spaces.Discrete):
            raise ValueError(f'NetworkedEnv needs a Discrete action space, got {env.action_space}')
        self.env, self.uplink, self.downlink = env, uplink, downlink
        self.dt, self.plan_horizon = dt, plan_horizon
        self._dt_ns, self._compute_ns = _to_ns(dt), _to_ns(compute_ms / 1e3)
        self.stepper = Stepper(env, HoldMode(hold), initial_action, noop_action, success_on_truncation)
        n = int(env.action_space.n)
        self.observation_space = env.observation_space
        self.action_space = (gym.spaces.Discrete(n) if plan_horizon == 1
                             else gym.spaces.MultiDiscrete([n] * plan_horizon))
        self._obs_bytes = MESSAGE_OVERHEAD_BYTES + 4 * int(np.prod(env.observation_space.shape or (1,)))
        self._action_bytes = MESSAGE_OVERHEAD_BYTES + 8 * plan_horizon
        self._master_rng = np.random.default_rng(seed)
        self._events: list[_Event] = []
        self._order = itertools.count()
        self._gate = ObservationGate()
        self._decision: ObsRecord | None = None
        self._decision_ns = 0
        self._waiting: ObsRecord | None = None
        self._busy_until_ns = 0
        self._reward = 0.0
        self._ticks = 0
        self._e2e_seen = 0
        self._ended: ObsRecord | None = None
        self._decision_of: dict[int, int] = {}  # obs_seq -> index of the decision that answered it
        self._executed = np.zeros((plan_horizon + 1, plan_horizon), dtype=np.uint8)
        self.obs_lost = self.actions_lost = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._master_rng = np.random.default_rng(seed)
        up_rng, down_rng = self._master_rng.spawn(2)
        self.uplink.reset(up_rng)
        self.downlink.reset(down_rng)
        self._events.clear()
        self._gate = ObservationGate()
        self._waiting, self._ended = None, None
        self._busy_until_ns, self._reward, self._ticks, self._e2e_seen = 0, 0.0, 0, 0
        self._decision_of.clear()
        self._executed[:] = 0
        self.obs_lost = self.actions_lost = 0
        env_seed = None if seed is None else int(self._master_rng.integers(2**31))
        self._send_observation(self.stepper.reset(0.0, seed=env_seed))
        record = self._advance()
        return record.obs, self._info(record)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._ended is None:
            assert self._decision is not None, 'step() before reset()'
            self._send_action(self._decision, self._as_plan(action))
            record = self._advance()
        else:
            record = self._ended
        reward = self._reward
        info = self._info(record)
        self._reward, self._ticks = 0.0, 0
        self._executed[:] = 0
        if self._ended is not None:
            summary = self.stepper.finish()
            info.update(episode_e2e_ms=tuple(summary.e2e_ms), success=summary.success,
                        ticks_held=summary.ticks_held)
        return record.obs, reward, record.terminated, record.truncated, info

    def _as_plan(self, action: Any) -> list[int]:
        if self.plan_horizon == 1:
            return [int(np.asarray(action).reshape(-1)[0])]
        return [int(a) for a in np.asarray(action).reshape(-1)]

    def _advance(self) -> ObsRecord:
        """Run virtual time until the agent must decide or the episode ends."""
        while True:
            next_tick_ns = (self.stepper.tick_index + 1) * self._dt_ns
            if self._events and (self._events[0].time_ns, self._events[0].rank) < (next_tick_ns, _TICK):
                decided = self._handle(heapq.heappop(self._events))
                if decided is not None:
                    return decided
                continue
            record = self.stepper.tick(next_tick_ns / 1e9)
            self._mark_executed(record)
            self._reward += record.reward
            self._ticks += 1
            if record.terminated or record.truncated:
                self._ended = record
                return record
            self._send_observation(record)

    def _mark_executed(self, record: ObsRecord) -> None:
        applied = record.applied
        if applied is None or applied.index < 0 or applied.plan_seq not in self._decision_of:
            return
        lag = len(self._decision_of) - 1 - self._decision_of[applied.plan_seq]
        if lag <= self.plan_horizon:
            self._executed[lag, applied.index] = 1

    def _handle(self, event: _Event) -> ObsRecord | None:
        if event.rank == _ACTION:
            obs_seq, episode, plan = event.payload
            self.stepper.on_action(obs_seq, episode, plan, event.time_ns / 1e9)
            return None
        record: ObsRecord | None = event.payload if event.rank == _OBS else self._waiting
        if record is None or record.seq <= self._gate.last_seq:
            return None
        if event.time_ns < self._busy_until_ns:
            if self._waiting is None or event.rank == _POLICY_FREE:
                self._push(self._busy_until_ns, _POLICY_FREE, None)
            self._waiting = record
            return None
        self._waiting = None
        self._gate.admit(record.episode, record.seq)
        self._decision, self._decision_ns = record, event.time_ns
        return record

    def _send_observation(self, record: ObsRecord) -> None:
        arrivals = self.uplink.transmit(record.stamp_s, self._obs_bytes)
        self.obs_lost += not arrivals
        for arrive_s in arrivals:
            self._push(_to_ns(arrive_s), _OBS, record)

    def _send_action(self, record: ObsRecord, plan: list[int]) -> None:
        self._decision_of[record.seq] = len(self._decision_of)
        send_ns = self._decision_ns + self._compute_ns
        self._busy_until_ns = send_ns
        arrivals = self.downlink.transmit(send_ns / 1e9, self._action_bytes)
        self.actions_lost += not arrivals
        for arrive_s in arrivals:
            self._push(_to_ns(arrive_s), _ACTION, (record.seq, record.episode, plan))

    def _push(self, time_ns: int, rank: int, payload: Any) -> None:
        heapq.heappush(self._events, _Event(time_ns, rank, next(self._order), payload))

    def _info(self, record: ObsRecord) -> dict:
        e2e = self.stepper.e2e_ms
        new_e2e = tuple(e2e[self._e2e_seen:])  # a tuple: vector envs merge it into an object array
        self._e2e_seen = len(e2e)
        return {'ticks': self._ticks, 'e2e_ms': new_e2e, 'obs_seq': record.seq,
                'obs_age_ms': (self._decision_ns / 1e9 - record.stamp_s) * 1e3 if self._ended is None else 0.0,
                'obs_lost': self.obs_lost, 'actions_lost': self.actions_lost,
                'executed': self._executed.copy()}


def _to_ns(seconds: float) -> int:
    return int(round(seconds * 1e9))
