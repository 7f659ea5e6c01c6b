"""Virtual-time evaluation of each placement of the policy (``calf eval --placement ... --backend sim``).

- ``flat_desktop``: ``evaluate_sim`` behind the profile.
- ``flat_edge``: ``evaluate_sim`` behind ``sim_clean``: the policy sits beside the env.
- ``hierarchical``: ``evaluate_hierarchy_sim``, an event simulation of the live hierarchical graph
  under the timing rules of ``calf_core.timing``. Edge sub-policies and the arbiter sit beside the
  env: they see each observation when it is emitted, and their actions reach the env at once (the
  ``sim_clean`` link, no compute time). Desktop sub-policies share one network link, as they
  share the shim: each observation crosses the uplink once and reaches all of them; each of their
  actions crosses the downlink after the profile's compute time. Of the observations that reach
  the desktop at one instant (a stall releasing them) the sub-policies see only the newest
  (``calf_core.timing.keep_newest``), and one busy computing keeps only the newest that arrives
  meanwhile, as ``NetworkedEnv`` does: both run on the event core of ``calf_core.events``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calf_agent.arbiter import Arbiter, make_arbiter
from calf_agent.evaluate import EpisodeLog, evaluate_sim, one_torch_thread
from calf_agent.hierarchy import EDGE_NETWORK, PLACEMENTS, Hierarchy, load_hierarchy
from calf_agent.policy_runner import PolicyRunner
from calf_core import progress as progress_bars
from calf_core.envs import make_stepper
from calf_core.errors import ConfigError
from calf_core.events import ACTION, OBS, TICK, BusyPolicy, Event, EventQueue
from calf_core.link import Link
from calf_core.networked_env import MESSAGE_OVERHEAD_BYTES
from calf_core.profiles import Profile, load_profile
from calf_core.timing import EpisodeSummary, ObsRecord, ReceivedObservation, Stepper, keep_newest, split_plan


def evaluate_placement_sim(placement: str, policy: Path | str, profile: Profile, episodes: int, seed: int,
                           keep_samples: bool = False, progress: bool = False) -> dict[str, Any]:
    """The ``calf eval`` report of the policy at ``placement`` in virtual time; ``policy`` is a hierarchy for
    hierarchical. The report's ``graph`` key names the placement (the result format's name for it)."""
    if placement not in PLACEMENTS:
        raise ConfigError(f'unknown placement {placement!r}: choose one of {", ".join(PLACEMENTS)}')
    if placement == 'hierarchical':
        return evaluate_hierarchy_sim(policy, profile, episodes, seed, keep_samples, progress)
    link = load_profile(EDGE_NETWORK) if placement == 'flat_edge' else profile
    report = evaluate_sim(policy, link, episodes, seed, keep_samples=keep_samples, progress=progress)
    return {**report, 'network': profile.name, 'graph': placement}


@dataclass
class _Desktop:
    """A desktop sub-policy: its runner, busy while it computes (keeping the newest arrival)."""

    name: str
    runner: PolicyRunner
    policy: BusyPolicy = field(repr=False)


class HierarchySim:
    """One hierarchy playing episodes behind one profile, in virtual time."""

    def __init__(self, hierarchy: Hierarchy, profile: Profile) -> None:
        self.hierarchy, self.profile = hierarchy, profile
        runners = {sub.name: PolicyRunner.from_checkpoint(hierarchy.checkpoint(sub)) for sub in hierarchy.subpolicies}
        self.edge = {sub.name: runners[sub.name] for sub in hierarchy.subpolicies if sub.placement == 'edge'}
        self._queue = EventQueue()
        self.desktop = [_Desktop(sub.name, runners[sub.name], BusyPolicy(self._queue, (sub.name, None)))
                        for sub in hierarchy.subpolicies if sub.placement == 'desktop']
        self.stepper: Stepper = make_stepper(hierarchy.env)
        self.arbiter: Arbiter = make_arbiter(hierarchy.env, hierarchy.sources, hierarchy.silence_timeout_s,
                                             hierarchy.gating)
        self.dt_ns, self.compute_ns = _ns(self.stepper.spec.dt), _ns(profile.compute_ms / 1e3)
        obs_size = next(iter(runners.values())).obs_size
        self.obs_bytes, self.action_bytes = MESSAGE_OVERHEAD_BYTES + 4 * obs_size, MESSAGE_OVERHEAD_BYTES + 8
        self.obs_lost = self.actions_lost = 0
        self._uplink: Link | None = None
        self._downlink: Link | None = None
        self._start_ns = 0  # episodes follow each other on one clock, as the env node's do

    def play(self, seed: int) -> EpisodeSummary:
        """One episode with env and links seeded by ``seed``, one tick after the previous one ended.

        The links are built once and run on across episodes (``Link.reseed``), as NetworkedEnv's do."""
        if self._uplink is None or self._downlink is None:
            self._uplink, self._downlink = self.profile.make_links(np.random.default_rng(seed))
        else:
            for link, rng in zip((self._uplink, self._downlink), np.random.default_rng(seed).spawn(2)):
                link.reseed(rng)
        self._queue.clear()
        for desktop in self.desktop:
            desktop.policy.reset()
        start = self._start_ns
        self._emit(self.stepper.reset(start / 1e9, seed=seed), start)
        while not self.stepper.done:
            next_tick_ns = start + (self.stepper.tick_index + 1) * self.dt_ns
            if self._queue.due_before(next_tick_ns, TICK):
                self._handle(self._queue.pop())
            else:
                self._emit(self.stepper.tick(next_tick_ns / 1e9), next_tick_ns)
        self._start_ns = next_tick_ns + self.dt_ns
        return self.stepper.finish()

    def _emit(self, record: ObsRecord, now_ns: int) -> None:
        """Observation ``record`` reaches the arbiter and the edge sub-policies now, the desktop later."""
        received = ReceivedObservation.of(record)
        self.arbiter.on_observation(received)
        for name, runner in self.edge.items():
            plan = runner.on_observation(received)
            if plan is not None:
                self._arrive(name, record, plan, now_ns)
        if self.desktop:
            arrivals = self._uplink.transmit(record.stamp_s, self.obs_bytes)
            self.obs_lost += not arrivals
            for arrive_s in arrivals:
                self._queue.push(_ns(arrive_s), OBS, (None, record))

    def _handle(self, event: Event) -> None:
        if event.rank == ACTION:
            self._arrive(*event.payload, event.time_ns)
            return
        name, record = event.payload
        if event.rank == OBS:  # of the observations reaching the desktop at this instant, the newest (keep_newest)
            arriving = [record, *(payload[1] for payload in self._queue.pop_at(event.time_ns, OBS))]
            record = arriving[keep_newest([r.seq for r in arriving])]
        for desktop in self.desktop:
            if name in (None, desktop.name):
                self._offer(desktop, record if event.rank == OBS else desktop.policy.waiting, event)

    def _offer(self, desktop: _Desktop, record: ObsRecord | None, event: Event) -> None:
        """The desktop sub-policy takes ``record`` now, or keeps it as the newest while busy."""
        if record is None or not desktop.policy.offer(event.time_ns, record):
            return
        plan = desktop.runner.on_observation(ReceivedObservation.of(record))
        if plan is None:
            return
        send_ns = event.time_ns + self.compute_ns
        desktop.policy.busy_until_ns = send_ns  # computing until it sends
        arrivals = self._downlink.transmit(send_ns / 1e9, self.action_bytes)
        self.actions_lost += not arrivals
        for arrive_s in arrivals:
            self._queue.push(_ns(arrive_s), ACTION, (desktop.name, record, plan))

    def _arrive(self, name: str, record: ObsRecord, plan: Any, now_ns: int) -> None:
        """An action of sub-policy ``name`` reaches the arbiter, which may pass it to the env."""
        if self.arbiter.on_action(name, record.episode, record.seq, now_ns / 1e9).forward:
            actions, feedback = split_plan(plan)
            self.stepper.on_action(record.seq, record.episode, actions, now_ns / 1e9, feedback=feedback)


@one_torch_thread()
def evaluate_hierarchy_sim(hierarchy_dir: Path | str, profile: Profile, episodes: int, seed: int,
                           keep_samples: bool = False, progress: bool = False) -> dict[str, Any]:
    """Play ``episodes`` episodes of the hierarchy, its desktop side behind ``profile``."""
    hierarchy = load_hierarchy(hierarchy_dir)
    sim = HierarchySim(hierarchy, profile)
    log = EpisodeLog()
    with progress_bars.bar(episodes, 'episode', 'eval', allowed=progress) as bar:
        for index in range(episodes):
            summary = sim.play(seed + index)
            log.add(summary.episode_return, summary.length, summary.success, summary.e2e_ms)
            bar.update(1)
    log.obs_lost, log.actions_lost = sim.obs_lost, sim.actions_lost
    total = sum(sim.arbiter.forwarded.values()) or 1
    return log.report('sim', profile, keep_samples, policy=str(hierarchy_dir), seed=seed, graph='hierarchical',
                      forwarded_share={name: round(n / total, 4) for name, n in sim.arbiter.forwarded.items()})


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)
