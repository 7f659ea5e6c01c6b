"""calf_msgs <-> plain values, converted once at the node edge, with validation.

Every check raises ``MessageError`` with a one-line reason; nodes count and log it and go on.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from builtin_interfaces.msg import Time

from calf_core.errors import MessageError
from calf_core.limits import MAX_OBS_VALUES, MAX_PLAN_HORIZON, saturate
from calf_core.timing import EpisodeSummary, Feedback, ObsRecord, ReceivedObservation, applied_facts, split_plan
from calf_msgs.msg import Action, EpisodeResult, LinkStats, Observation


class ReceivedAction(NamedTuple):
    episode: int
    obs_seq: int
    plan: list[Any]  # ints (Discrete) or float32 action vectors (Box)
    source: str
    compute_ms: float
    feedback: Feedback | None = None  # a continuous plan's (calf_core.timing.FeedbackPlan)


def time_msg(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def time_ns(stamp: Time) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def obs_to_msg(record: ObsRecord, stamp_ns: int, run: int = 0) -> Observation:
    msg = Observation()
    msg.header.stamp = time_msg(stamp_ns)
    msg.seq, msg.episode, msg.run = record.seq, record.episode, run
    msg.data = record.obs.astype(np.float32).reshape(-1).tolist()
    msg.shape = list(record.obs.shape)
    msg.reward = float(record.reward)
    msg.terminated, msg.truncated = record.terminated, record.truncated
    msg.applied_obs_seq, msg.applied_index = applied_facts(record)
    return msg


def msg_to_obs(msg: Observation, expected_size: int) -> ReceivedObservation:
    """Validate an Observation: length, shape and finite values."""
    if len(msg.data) > MAX_OBS_VALUES or len(msg.shape) > 32:
        raise MessageError(f'observation seq {msg.seq}: {len(msg.data)} values in {len(msg.shape)} dimensions is '
                           f'more than any policy reads ({MAX_OBS_VALUES} values, 32 dimensions)')
    data = np.asarray(msg.data, dtype=np.float32)
    if data.size != expected_size:
        raise MessageError(f'observation seq {msg.seq}: expected {expected_size} values, got {data.size}')
    if msg.shape and math.prod(int(n) for n in msg.shape) != data.size:
        raise MessageError(f'observation seq {msg.seq}: shape {list(msg.shape)} does not hold {data.size} values')
    if not np.all(np.isfinite(data)):
        raise MessageError(f'observation seq {msg.seq}: contains NaN or infinite values')
    applied = (-1, -1) if msg.seq == 0 else (msg.applied_obs_seq, msg.applied_index)  # nothing applied at reset
    if not (-1 <= applied[0] < msg.seq and -1 <= applied[1] < MAX_PLAN_HORIZON):
        raise MessageError(f'observation seq {msg.seq}: applied_obs_seq {applied[0]} and applied_index {applied[1]} '
                           f'are not an earlier observation and a plan element (-1 for none)')
    return ReceivedObservation(msg.episode, msg.seq, data, msg.terminated, msg.truncated, msg.run,
                               time_ns(msg.header.stamp), *applied)


def plan_to_msg(obs: ReceivedObservation, plan: Sequence[Any], source: str, compute_ms: float,
                stamp_ns: int) -> Action:
    """An Action for ``plan``: ints go to discrete/discrete_plan, action vectors (Box) to continuous, a
    ``FeedbackPlan``'s gains and predicted observations to feedback_gains and feedback_predicted."""
    msg = Action()
    msg.header.stamp = time_msg(stamp_ns)
    msg.obs_seq, msg.episode = obs.seq, obs.episode
    plan, feedback = split_plan(plan)
    if isinstance(plan[0], (int, np.integer)):
        msg.discrete = int(plan[0])
        msg.discrete_plan = [int(a) for a in plan] if len(plan) > 1 else []
    else:
        values = np.asarray(plan, dtype=np.float32).reshape(len(plan), -1)
        msg.continuous, msg.continuous_dim = values.reshape(-1).tolist(), values.shape[1]
    if feedback is not None:
        msg.feedback_gains = np.asarray(feedback.gains, dtype=np.float32).reshape(-1).tolist()
        msg.feedback_predicted = np.asarray(feedback.predicted, dtype=np.float32).reshape(-1).tolist()
    msg.source, msg.compute_ms = source, float(compute_ms)
    return msg


def msg_to_plan(msg: Action, n_actions: int, action_shape: tuple[int, ...] = ()) -> ReceivedAction:
    """Validate an Action: discrete actions in range for a Discrete env (``n_actions`` > 0); for a Box env
    (``action_shape``), continuous values that fill whole actions of that shape and are finite. Bounds are
    the stepper's to check (``Verdict.INVALID``). No plan is longer than any plan horizon."""
    if action_shape:
        plan: list[Any] = _continuous_plan(msg, action_shape)
        feedback = _feedback(msg, len(plan), int(np.prod(action_shape)))
        return ReceivedAction(msg.episode, msg.obs_seq, plan, msg.source, msg.compute_ms, feedback)
    if msg.continuous:
        raise MessageError(f'action for obs {msg.obs_seq}: continuous values for an env with discrete actions')
    if len(msg.feedback_gains) or len(msg.feedback_predicted):
        raise MessageError(f'action for obs {msg.obs_seq}: feedback for an env with discrete actions')
    if len(msg.discrete_plan) > MAX_PLAN_HORIZON:
        raise MessageError(f'action for obs {msg.obs_seq}: a plan of {len(msg.discrete_plan)} actions is longer than '
                           f'any plan horizon ({MAX_PLAN_HORIZON})')
    plan = list(msg.discrete_plan) or [msg.discrete]
    bad = [a for a in plan if not 0 <= a < n_actions]
    if bad:
        raise MessageError(f'action for obs {msg.obs_seq}: {bad[0]} is outside 0..{n_actions - 1}')
    return ReceivedAction(msg.episode, msg.obs_seq, plan, msg.source, msg.compute_ms)


def _continuous_plan(msg: Action, action_shape: tuple[int, ...]) -> list[np.ndarray]:
    size = int(np.prod(action_shape))
    values = np.asarray(msg.continuous, dtype=np.float32)
    dim = msg.continuous_dim or values.size
    if values.size == 0:
        raise MessageError(f'action for obs {msg.obs_seq}: no continuous values for an env with continuous actions')
    if dim != size or values.size % size:
        raise MessageError(f'action for obs {msg.obs_seq}: {values.size} continuous values in actions of '
                           f'{dim} do not make actions of shape {list(action_shape)}')
    if values.size // size > MAX_PLAN_HORIZON:
        raise MessageError(f'action for obs {msg.obs_seq}: a plan of {values.size // size} actions is longer than '
                           f'any plan horizon ({MAX_PLAN_HORIZON})')
    if not np.all(np.isfinite(values)):
        raise MessageError(f'action for obs {msg.obs_seq}: continuous values contain NaN or infinity')
    return list(values.reshape(-1, *action_shape))


def _feedback(msg: Action, plan_len: int, action_size: int) -> Feedback | None:
    """The feedback of a continuous plan of ``plan_len`` actions of ``action_size`` values (None: none sent);
    whether its observations are the env's size is the stepper's to check (``Verdict.INVALID``)."""
    if not (len(msg.feedback_gains) or len(msg.feedback_predicted)):
        return None
    gains = np.asarray(msg.feedback_gains, dtype=np.float32)
    predicted = np.asarray(msg.feedback_predicted, dtype=np.float32)
    obs_size, rest = divmod(predicted.size, plan_len)
    if rest or not 0 < obs_size <= MAX_OBS_VALUES or gains.size != plan_len * action_size * obs_size:
        raise MessageError(f'action for obs {msg.obs_seq}: feedback of {gains.size} gains and {predicted.size} '
                           f'predicted values does not fit a plan of {plan_len} actions of {action_size} values')
    if not (np.all(np.isfinite(gains)) and np.all(np.isfinite(predicted))):
        raise MessageError(f'action for obs {msg.obs_seq}: feedback contains NaN or infinity')
    return Feedback(gains.reshape(plan_len, action_size, obs_size), predicted.reshape(plan_len, obs_size))


def summary_to_msg(summary: EpisodeSummary, seq: int, stamp_ns: int) -> EpisodeResult:
    msg = EpisodeResult()
    msg.header.stamp = time_msg(stamp_ns)
    msg.seq, msg.episode = seq, summary.episode
    msg.episode_return, msg.length, msg.success = summary.episode_return, summary.length, summary.success
    msg.e2e_latency_p50_ms = summary.e2e_percentile(50)
    msg.e2e_latency_p95_ms = summary.e2e_percentile(95)
    msg.actions_applied, msg.ticks_held, msg.rejected = (summary.actions_applied, summary.ticks_held,
                                                         summary.rejected)
    msg.e2e_samples_ms = [float(x) for x in summary.e2e_ms]
    return msg


def link_stats_msg(seq: int, reporter: str, direction: int, stamp_ns: int, latency_ms: Sequence[float], *,
                   received: int = 0, delivered: int = 0, dropped_injected: int = 0, dropped_queue: int = 0,
                   dropped_middleware: int = 0, dropped_middleware_estimated: int = 0, rejected: int = 0) -> LinkStats:
    """One direction's counters (saturated: never beyond their uint64 fields) and its latency percentiles
    (p50, p95, p99, in ms; NaN when unmeasured)."""
    counts = (seq, received, delivered, dropped_injected, dropped_queue, dropped_middleware,
              dropped_middleware_estimated, rejected)
    (seq, received, delivered, dropped_injected, dropped_queue, dropped_middleware, dropped_middleware_estimated,
     rejected) = (saturate(n) for n in counts)
    msg = LinkStats(seq=seq, reporter=reporter, direction=direction, received=received, delivered=delivered,
                    dropped_injected=dropped_injected, dropped_queue=dropped_queue,
                    dropped_middleware=dropped_middleware, dropped_middleware_estimated=dropped_middleware_estimated,
                    rejected=rejected)
    msg.header.stamp = time_msg(stamp_ns)
    msg.latency_p50_ms, msg.latency_p95_ms, msg.latency_p99_ms = (float(v) for v in latency_ms)
    return msg
