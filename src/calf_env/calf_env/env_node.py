"""The env node: a task ticking in real time under CALF's timing rules (``calf_core.timing.Stepper``).

Publishes ``observation`` every tick, ``episode_result`` per episode and ``link_stats`` (end to end);
applies what arrives on ``action``. No episode counts before a policy is heard (``StartGate``): until the
first action arrives the node ticks warm-up episodes (holding its initial action or running its start
plan) that publish observations but no EpisodeResult; then it resets with ``seed`` into episode 0 of
the count, which starts again with ``seed`` if it ends without an action applied (a policy heard once,
too slow to act in it). ``results_file`` gets each counted result as a JSON line too (what ``calf eval
--backend ros`` reads: no DDS discovery to miss). Its episode index in messages keeps counting from the
warm-up ones; EpisodeResult.seq and ``episodes`` count only the episodes played with a policy. Ticks run on their own thread at absolute deadlines
``t0 + k * dt / time_scale``: at a 5 ms period an rclpy timer lost ticks and ran up to 20 ms late
here, the thread stayed within a few ms. A deadline missed by a whole tick is skipped, not caught
up in a burst. Times are steady-clock seconds since the node started; stamps that clock in ns.

A tick happens at its deadline, as in virtual time, however late the busy host wakes its thread: the
observation is stamped with the deadline (the shim's delays run from that stamp), and an action that arrived
after the deadline waits for the next tick instead of reaching this one. Each counted result in
``results_file`` also says how many of the episode's actions came from each ``Action.source`` (``sources``:
the share of each sub-policy under a hierarchy, counted where the actions are applied), and the compute time
each policy sent with them (``compute_samples_ms``, from ``Action.compute_ms``).

Subclasses change the observation and action messages by overriding ``_open_topics`` and
``_publish_observation`` (``calf_env.adapter_env_node``: standard messages).
"""
from __future__ import annotations

import itertools
import math
import os
import sys
import threading
from collections import Counter, deque
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.event_handler import QoSMessageLostInfo, SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.subscription import MessageInfo

from calf_core.envs import make_stepper
from calf_core.errors import MessageError
from calf_core.timing import EpisodeSummary, Feedback, ObsRecord, Verdict
from calf_env.env_config import EnvNodeConfig, StartGate, next_tick
from calf_msgs.msg import Action, EpisodeResult, LinkStats, Observation
from calf_ros.arrival import age_s
from calf_ros.conversions import link_stats_msg, msg_to_plan, obs_to_msg, summary_to_msg
from calf_ros.json_lines import JsonLinesWriter
from calf_ros.losses import MiddlewareLosses
from calf_ros.node_main import run_node
from calf_ros.qos import RESULTS

LATE_ACTIONS = 64  # actions held for the next tick while a late tick thread has not run the one before
MAX_SOURCES = 16  # distinct Action.source names counted per episode (the rest are applied, not counted)
SOURCE_VERDICTS = frozenset({Verdict.ACCEPTED, Verdict.STALE, Verdict.DUPLICATE})  # valid, of this episode
MAX_COMPUTE_SAMPLES = 10_000  # Action.compute_ms values kept per episode (the newest)
MAX_COMPUTE_MS = 3_600_000.0  # a larger Action.compute_ms is not a measurement: not kept


class ArrivedAction(NamedTuple):
    """An action as it arrived (``now``: when DDS received it, node seconds), for the stepper."""
    obs_seq: int
    episode: int
    plan: Sequence[Any]
    now: float
    source: str
    feedback: Feedback | None = None
    compute_ms: float = math.nan  # the policy's Action.compute_ms; NaN when the message has none


class EnvNode(Node):
    NAME = 'env'

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(self.NAME, **kwargs)
        self.config = cfg = EnvNodeConfig.from_node(self)
        self.stepper = make_stepper(cfg.env, start_plan=cfg.start_plan)
        self.run_id = int.from_bytes(os.urandom(4), 'little') or 1  # tells policies this run restarted
        self.finished = threading.Event()
        self.error: str | None = None
        self.verdicts: Counter[Verdict] = Counter()
        self.actions_received = self.rejected = 0
        self.losses = MiddlewareLosses()  # actions lost before the action callback (LinkStats.dropped_middleware)
        self.episodes_done = self.missed_ticks = self.ticks = 0
        self.gate = StartGate(cfg.wait_for_policy, cfg.policy_timeout_s)
        self._counting = False  # the current episode is one of the count (it started after the gate opened)
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._window: list[float] = []
        self._next_deadline = 0.0  # node seconds of the next tick the thread is to run
        self._late: deque[ArrivedAction] = deque(maxlen=LATE_ACTIONS)
        self._sources: Counter[str] = Counter()  # the current episode's offered actions per Action.source
        self._compute_ms: deque[float] = deque(maxlen=MAX_COMPUTE_SAMPLES)  # theirs, as the policy measured it
        self._stats_seq = itertools.count()
        self._clock = Clock(clock_type=ClockType.STEADY_TIME)
        self._t0_ns = self._clock.now().nanoseconds
        # each counted episode's result, as a JSON line (None: no file)
        self._results_file = JsonLinesWriter(cfg.results_file, 'results_file') if cfg.results_file else None
        self._open_topics()
        self._result_pub = self.create_publisher(EpisodeResult, 'episode_result', RESULTS)
        self._stats_pub = self.create_publisher(LinkStats, 'link_stats', RESULTS)
        self.create_timer(cfg.stats_period_s, self._publish_stats)
        self.get_logger().info(
            f'{cfg.env}: dt {cfg.dt * 1e3:g} ms / time_scale {cfg.time_scale:g} = a tick every '
            f'{cfg.tick_s * 1e3:g} ms; {cfg.episodes or "unlimited"} episodes, seed {cfg.seed}')
        self._thread = threading.Thread(target=self._run, name='env-ticks', daemon=True)
        self._thread.start()

    def _write_result(self, line: dict[str, Any]) -> None:
        if self._results_file is not None:
            self._results_file.write(line)

    def _open_topics(self) -> None:
        """The observation publisher ``_obs_pub`` and the action subscription ``_action_sub``."""
        self._obs_pub = self.create_publisher(Observation, 'observation', self.config.qos.profile())
        self._action_sub = self.create_subscription(Action, 'action', self._on_action, self.config.qos.profile(),
                                 event_callbacks=SubscriptionEventCallbacks(message_lost=self._on_lost))

    def _now(self) -> tuple[int, float]:
        """Steady clock: (stamp in nanoseconds, seconds since the node started)."""
        ns = self._clock.now().nanoseconds
        return ns, (ns - self._t0_ns) / 1e9

    def _run(self) -> None:
        """Tick until stopped or every episode is done; a failing tick ends the node (main reports it)."""
        try:
            if self.config.wait_for_subscriber:
                self.get_logger().info(f'waiting for a subscriber on {self._obs_pub.topic_name}')
            while self.config.wait_for_subscriber and self._obs_pub.get_subscription_count() == 0:
                if self._stop.wait(0.05):
                    return
            start, k = self._now()[1], 0
            self.gate.start(start)
            if not self.gate.open:
                self.get_logger().info(f'waiting for a policy: no episode counts before the first action arrives on '
                                       f'{self._action_topic()}; meanwhile {self._meanwhile()}')
            self._next_deadline = start
            while not self._stop.wait(max(0.0, start + k * self.config.tick_s - self._now()[1])):
                if not self._tick(start + k * self.config.tick_s):
                    return
                k, previous = next_tick(k, self._now()[1] - start, self.config.tick_s), k
                self.missed_ticks += k - previous - 1
        except Exception as err:  # noqa: BLE001 (after a shutdown, publishing fails: not an error)
            self.error = f'tick failed: {" ".join(str(err).split())}' if self.context.ok() else None
        finally:
            self.finished.set()

    def _tick(self, now: float) -> bool:
        """Reset or step at the deadline ``now`` (node seconds), publish; return False once the last episode has
        ended (or no policy came)."""
        ns = self._t0_ns + round(now * 1e9)
        self.ticks += 1
        with self._lock:
            verdicts = [(late, self._offer(late)) for late in self._due_late_actions(now)]
            self._next_deadline = now + self.config.tick_s
            if self.gate.expired(now):
                self.error = (f'no action arrived on {self._action_topic()} within {self.config.policy_timeout_s:g} s: '
                              f'start a policy in this ROS domain, or raise policy_timeout_s (0 waits forever)')
                return False
            first = self.gate.open and not self._counting
            if self.stepper.done or first:
                record = self.stepper.reset(now, self.config.seed if first else None)
                self._counting = self.gate.open
                self._sources.clear()
                self._compute_ms.clear()
            else:
                record = self.stepper.tick(now)
            summary = self.stepper.finish() if self.stepper.done else None
            ended = (dict(self._sources), list(self._compute_ms)) if summary is not None else ({}, [])
        for late, verdict in verdicts:
            self._judge(late.obs_seq, verdict)
        if first and self.config.wait_for_policy:
            self.get_logger().info(f'policy heard after {self.gate.waited_s:.1f} s: episode 0 of the count starts')
            self._write_result({'counting': True})
        self._publish_observation(record, ns)
        if summary is None or not self._counting:
            return True
        if summary.actions_applied == 0 and self.episodes_done == 0 and self.config.wait_for_policy:
            self._counting = False  # the policy was heard but no action of its arrived in time: not counted
            self.get_logger().info(f'episode 0 ended after {summary.length} ticks without an action applied: '
                                   f'not counted, it starts again')
            return True
        return self._end_episode(summary, ns, *ended)

    def _action_topic(self) -> str:
        return self._action_sub.topic_name

    def _meanwhile(self) -> str:
        plan = self.config.start_plan
        return f'running the start plan {list(plan)}' if plan else 'holding the initial action'

    def _publish_observation(self, record: ObsRecord, ns: int) -> None:
        self._obs_pub.publish(obs_to_msg(record, ns, self.run_id))

    def _end_episode(self, summary: EpisodeSummary, ns: int, sources: dict[str, int], compute_ms: list[float]) -> bool:
        self._result_pub.publish(summary_to_msg(summary, self.episodes_done, ns))
        self._write_result({'seq': self.episodes_done, 'episode': int(summary.episode),
                            'episode_return': float(summary.episode_return), 'length': int(summary.length),
                            'success': bool(summary.success), 'actions_applied': int(summary.actions_applied),
                            'ticks_held': int(summary.ticks_held),
                            'e2e_samples_ms': [float(x) for x in summary.e2e_ms], 'sources': sources,
                            'compute_samples_ms': compute_ms})
        self.episodes_done += 1
        self.get_logger().info(
            f'episode {self.episodes_done - 1}: return {summary.episode_return:g}, length {summary.length}, '
            f'e2e p50 {summary.e2e_percentile(50):.1f} ms, held {summary.ticks_held}, '
            f'{self.missed_ticks} of {self.ticks + self.missed_ticks} tick deadlines missed')
        if self.config.episodes == 0 or self.episodes_done < self.config.episodes:
            return True
        self._publish_stats()
        self._result_pub.wait_for_all_acked(Duration(seconds=2))
        self.get_logger().info(f'{self.episodes_done} episodes done, {self.missed_ticks} tick deadlines missed')
        return False

    def _on_action(self, msg: Action, info: MessageInfo) -> None:
        now = self._now()[1] - age_s(info)  # arrived when DDS received it (calf_ros.arrival)
        self.actions_received += 1
        self.losses.on_message(info)
        try:
            action = msg_to_plan(msg, self.stepper.n_actions, self.stepper.action_shape)
        except MessageError as err:
            self._reject(err)
            return
        self._apply_action(ArrivedAction(action.obs_seq, action.episode, action.plan, now, action.source,
                                         action.feedback, action.compute_ms))

    def _reject(self, err: MessageError) -> None:
        self.rejected += 1
        self.get_logger().warning(f'rejected action ({self.rejected} so far): {err}', throttle_duration_sec=1.0)

    def _apply_action(self, action: ArrivedAction) -> None:
        """Offer an action (a plan, with its feedback if any) answering observation ``action.obs_seq``, arrived at
        ``action.now``, or hold it for the next tick if it arrived after the deadline of the tick the thread has
        not run yet; one the stepper refuses (out of the action space, feedback that does not fit) is rejected
        like a malformed message."""
        with self._lock:
            self.gate.heard(action.now)
            if action.now > self._next_deadline or self._late:  # behind the held ones: the stepper takes arrivals in order
                self._late.append(action)
                return
            verdict = self._offer(action)
        self._judge(action.obs_seq, verdict)

    def _due_late_actions(self, deadline: float) -> list[ArrivedAction]:
        """The held actions that arrived by ``deadline``, in order of arrival; the others stay held."""
        due = sorted((action for action in self._late if action.now <= deadline), key=lambda action: action.now)
        if due:
            self._late = deque((action for action in self._late if action.now > deadline), maxlen=LATE_ACTIONS)
        return due

    def _offer(self, action: ArrivedAction) -> Verdict:
        """Hand an action to the stepper (the lock held); if it answers this episode, count it by source and keep
        its compute time."""
        measured = len(self.stepper.e2e_ms)
        verdict = self.stepper.on_action(action.obs_seq, action.episode, action.plan, action.now,
                                         feedback=action.feedback)
        self._window.extend(self.stepper.e2e_ms[measured:])
        self.verdicts[verdict] += 1
        if verdict in SOURCE_VERDICTS:
            if action.source in self._sources or len(self._sources) < MAX_SOURCES:
                self._sources[action.source] += 1
            if 0.0 <= action.compute_ms <= MAX_COMPUTE_MS:  # NaN fails both
                self._compute_ms.append(float(action.compute_ms))
        return verdict

    def _judge(self, obs_seq: int, verdict: Verdict) -> None:
        if verdict is Verdict.INVALID:
            self._reject(MessageError(f'action for obs {obs_seq}: outside the action space '
                                      f'{self.stepper.env.action_space}, or feedback that does not fit its plan'))

    def _on_lost(self, info: QoSMessageLostInfo) -> None:
        self.losses.on_reported(info.total_count_change)

    def _publish_stats(self) -> None:
        """Counters since the start; latency percentiles over the actions since the last report."""
        with self._lock:
            window, self._window = self._window, []
        percentiles = np.percentile(window, (50, 95, 99)) if window else (np.nan,) * 3
        self._stats_pub.publish(link_stats_msg(
            next(self._stats_seq), self.get_fully_qualified_name(), LinkStats.DIRECTION_END_TO_END, self._now()[0],
            percentiles, received=self.actions_received, delivered=self.verdicts[Verdict.ACCEPTED],
            rejected=self.rejected, dropped_middleware=self.losses.count))

    def destroy_node(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._results_file is not None:
            self._results_file.close()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    return run_node('env_node', EnvNode, args, finished=lambda node: node.finished.is_set(),
                    error=lambda node: node.error, realtime=True)


if __name__ == '__main__':
    sys.exit(main())
