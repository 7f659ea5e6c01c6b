"""Network profiles: loading and validating them (``load_profile``: a built-in name or a YAML file), a trace's
replay profile (``trace_profile``), and end-to-end latency sampling. ``--network`` takes a trace bag too: its one
entry point is :func:`calf_core.network.resolve_network`.

A profile file (a built-in one is ``calf_core/networks/<name>.yaml``) looks like:

    name: wifi_normal            # optional; defaults to the file name
    description: ...             # optional
    compute_ms: 1.0              # policy compute time (default 1.0)
    reorder: false               # default false = FIFO; or {uplink: true, downlink: false}
    uplink:                      # env -> policy: a list of stage specs
      - {model: lognormal_delay, median_ms: 10, sigma: 0.5}
    downlink: same               # policy -> env: 'same' or a list of stage specs
    shared:                      # optional: one process both directions meet (after their own stages)
      - {model: stall, duration_ms: 200, period_ms: {dist: uniform, low: 3000, high: 5000}}

Every key, stage and unit is in ``calf_core.profile_schema`` (``calf profile schema``), which
validates the whole file before any link is built. Files are recognised as network profiles by
their `uplink` key. A file is read up to ``MAX_YAML_PROFILE_BYTES`` as YAML, or up to
``MAX_PROFILE_BYTES`` as one JSON object (JSON is YAML; a long trace replay is written so, its
series in the compact form).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from heapq import heappop, heappush
from pathlib import Path
from typing import NamedTuple

import numpy as np

from calf_core.errors import ConfigError, shown
from calf_core.link import Link, SharedProcess
from calf_core.models import build_stage
from calf_core.profile_schema import (
    DIRECTION_KEYS,
    MAX_PROFILE_BYTES,
    MAX_YAML_PROFILE_BYTES,
    PROFILE_KEYS,
    check_profile_keys,
    check_shared_stage,
    check_stage,
)
from calf_core.traces import BAG_SUFFIXES, Trace, replay_profile_dict
from calf_core.yaml_files import read_document

NETWORKS_DIR = Path(__file__).resolve().parent / "networks"  # the built-in profiles


class Reorder(NamedTuple):
    """Whether each direction may reorder messages (False: FIFO)."""

    uplink: bool
    downlink: bool


@dataclass(frozen=True)
class Profile:
    """A validated network profile: one stage chain per direction, and the stages both directions share."""

    name: str
    description: str
    compute_ms: float  # policy compute time assumed in E2E calibration
    uplink: tuple[dict, ...]  # stage specs, env -> policy
    downlink: tuple[dict, ...]  # stage specs, policy -> env
    reorder: Reorder
    defaults: tuple[str, ...] = ()  # the top-level keys the file left out (their defaults apply)
    shared: tuple[dict, ...] = ()  # stage specs both directions meet as one process, after their own stages

    def make_shared(self) -> SharedProcess | None:
        """A fresh process of the shared stages (None without any): one per link, met by both directions."""
        return SharedProcess([build_stage(spec) for spec in self.shared]) if self.shared else None

    def make_links(self, rng: np.random.Generator) -> tuple[Link, Link]:
        """Build fresh (uplink, downlink) links, each with its own child generator spawned from rng; with
        shared stages, both end in the same ``SharedProcess``."""
        up_rng, down_rng = rng.spawn(2)
        shared = self.make_shared()
        ends = ([shared.end(0)], [shared.end(1)]) if shared is not None else ([], [])
        return (
            Link([*(build_stage(spec) for spec in self.uplink), *ends[0]], up_rng, self.reorder.uplink),
            Link([*(build_stage(spec) for spec in self.downlink), *ends[1]], down_rng, self.reorder.downlink),
        )


class Latency(NamedTuple):
    """Percentiles of one E2E latency population (milliseconds) and its size."""

    p50_ms: float
    p95_ms: float
    mean_ms: float
    n: int


class E2EStats(NamedTuple):
    """End-to-end latency (U + c + D) and loss fractions, by sampling a profile.

    ``all_messages``: every observation gets an action (``compute_ms`` after it arrives): the
    latency of every delivered round trip. ``acted_on``: the policy acts as CALF's does (only on an
    observation newer than the last one it acted on; while computing it keeps only the newest
    arrival): the latency of each action that reaches the env, the figure ``calf eval`` reports.
    Under jitter and reordering the slowest observations are overtaken and never acted on, so
    ``acted_on`` runs below ``all_messages``.
    """

    all_messages: Latency
    acted_on: Latency
    obs_loss: float  # observations lost / observations sent
    action_loss: float  # actions lost / actions sent (all-messages policy)
    round_trip_loss: float  # 1 - delivered round trips / observations sent (all-messages policy)
    n: int  # observations sent

    @property
    def p50_ms(self) -> float:
        return self.all_messages.p50_ms

    @property
    def p95_ms(self) -> float:
        return self.all_messages.p95_ms

    @property
    def mean_ms(self) -> float:
        return self.all_messages.mean_ms


def _stage_specs(name: str, direction: str, value: list) -> tuple[dict, ...]:
    """The validated stage specs; a trace replay's series are kept as the arrays they parse to."""
    specs = []
    for i, spec in enumerate(value):
        try:
            params = check_stage(spec)
        except ConfigError as err:
            raise ConfigError(f"profile {name!r} {direction}[{i}]: {err}") from None
        specs.append({**spec, **{k: v for k, v in params.items() if k in spec and isinstance(v, np.ndarray)}})
    return tuple(specs)


def profile_from_dict(data: dict, name: str) -> Profile:
    """Validate a parsed profile against the schema; `name` is used when the data has no `name` key."""
    if isinstance(data, dict) and "uplink" in data and isinstance(data.get("name"), str):
        name = data["name"]
    values = check_profile_keys(data, name)
    uplink = _stage_specs(name, "uplink", values["uplink"])
    downlink = uplink if values["downlink"] == "same" else _stage_specs(name, "downlink", values["downlink"])
    shared = _stage_specs(name, "shared", values.get("shared", []))
    for i, spec in enumerate(shared):
        try:
            check_shared_stage(spec)
        except ConfigError as err:
            raise ConfigError(f"profile {name!r} shared[{i}]: {err}") from None
    return Profile(
        name=str(name),
        description=values.get("description", ""),
        compute_ms=float(values["compute_ms"]),
        uplink=uplink,
        downlink=downlink,
        reorder=Reorder(*(values["reorder"][d] for d in DIRECTION_KEYS)),
        defaults=tuple(key.name for key in PROFILE_KEYS if key.name not in data and key.default is not None),
        shared=shared,
    )

MAX_NAME_BYTES = 255
"""The longest file name (one path component) a file system takes."""


def available_profiles() -> list[str]:
    """Names of the built-in network profiles."""
    return sorted(path.stem for path in NETWORKS_DIR.glob("*.yaml"))


def check_network_name(name_or_path: str | Path) -> None:
    """A ConfigError if a part of ``name_or_path`` is longer than a file name can be (the file system would refuse
    it with an OSError)."""
    if any(len(part.encode()) > MAX_NAME_BYTES for part in Path(name_or_path).parts):
        raise ConfigError(f'network {shown(str(name_or_path))} has a name longer than {MAX_NAME_BYTES} bytes: give '
                          f'a built-in profile name, a profile file or a trace bag')


def load_profile(name_or_path: str | Path) -> Profile:
    """A network profile: a built-in profile's bare name or a .yaml/.yml/.json profile file. (What ``--network``
    names, a trace bag included, is :func:`calf_core.network.resolve_network`'s.)"""
    check_network_name(name_or_path)
    path = Path(name_or_path)
    if path.suffix in BAG_SUFFIXES:
        raise ConfigError(f'{shown(str(name_or_path))} is a trace bag, not a profile file: replay it with '
                          f'calf_core.network.resolve_network (what --network takes)')
    if path.suffix not in (".yaml", ".yml", ".json"):
        path = NETWORKS_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ConfigError(
                f"unknown network profile {str(name_or_path)!r} (available: {', '.join(available_profiles())})"
            )
    return profile_from_dict(read_document(path, 'profile', MAX_PROFILE_BYTES, MAX_YAML_PROFILE_BYTES), path.stem)


def trace_profile(trace: Trace, name: str, mode: str = 'random_offset', compute_ms: float = 1.0) -> Profile:
    """A Profile that replays the trace, so NetworkedEnv and the shim use it like any other profile.

    'random_offset' starts each episode (each link reset) at a seeded random row; 'loop' at row 0."""
    return profile_from_dict(replay_profile_dict(trace, name, mode, compute_ms, compact=False), name)


def sample_e2e(profile: Profile, n: int, seed: int, dt_s: float = 0.02) -> E2EStats:
    """Send n observations dt_s apart through fresh links; see `E2EStats` for the two latency figures.

    The latency of a round trip is the first arrival of its action minus the observation's send
    time. The two policies run on separate pairs of links seeded alike.
    """
    if n < 1:
        raise ValueError(f"sample_e2e: n must be >= 1, got {n}")
    compute_s = profile.compute_ms / 1e3
    uplink, downlink = profile.make_links(np.random.default_rng(seed))
    delivered = 0
    e2e_ms = []
    for arrive_s, send_s in uplink_arrivals(uplink, n, dt_s):
        delivered += 1
        arrivals = downlink.transmit(arrive_s + compute_s)
        if arrivals:
            e2e_ms.append((arrivals[0] - send_s) * 1e3)
    uplink, downlink = profile.make_links(np.random.default_rng(seed))
    acted = _acted_on_e2e_ms(uplink_arrivals(uplink, n, dt_s), downlink, compute_s)
    return E2EStats(
        all_messages=_latency(e2e_ms),
        acted_on=_latency(acted),
        obs_loss=1.0 - delivered / n,
        action_loss=1.0 - len(e2e_ms) / delivered if delivered else math.nan,
        round_trip_loss=1.0 - len(e2e_ms) / n,
        n=n,
    )


def uplink_arrivals(uplink: Link, n: int, dt_s: float) -> Iterator[tuple[float, float]]:
    """(first arrival, send time) of each delivered observation, in arrival order. Each arrival is handed out
    before any later observation is sent, so the caller's downlink sends interleave with the uplink's in time
    order, as in a run (a shared process sees both directions go forward together)."""
    pending: list[tuple[float, float]] = []
    for k in range(n):
        send_s = k * dt_s
        while pending and pending[0][0] <= send_s:  # no observation sent from now on arrives before it
            yield heappop(pending)
        arrivals = uplink.transmit(send_s)
        if arrivals:
            heappush(pending, (arrivals[0], send_s))
    while pending:
        yield heappop(pending)


def _acted_on_e2e_ms(obs_arrivals: Iterable[tuple[float, float]], downlink: Link, compute_s: float) -> list[float]:
    """E2E of the actions a CALF policy sends: it acts only on observations newer than the last one it
    acted on, and while computing keeps only the newest arrival (as NetworkedEnv's policy side does)."""
    e2e_ms: list[float] = []
    last_sent = -math.inf  # send time (= sequence order) of the newest observation acted on
    busy_until = -math.inf
    waiting: tuple[float, float] | None = None

    def act(now_s: float, send_s: float) -> None:
        nonlocal last_sent, busy_until
        last_sent, busy_until = send_s, now_s + compute_s
        arrivals = downlink.transmit(busy_until)
        if arrivals:
            e2e_ms.append((arrivals[0] - send_s) * 1e3)

    for arrive_s, send_s in obs_arrivals:
        if waiting is not None and busy_until <= arrive_s:  # the policy got free before this arrival
            act(busy_until, waiting[1])
            waiting = None
        if send_s <= last_sent:
            continue
        if arrive_s < busy_until:
            if waiting is None or send_s > waiting[1]:
                waiting = (arrive_s, send_s)
            continue
        act(arrive_s, send_s)
    if waiting is not None:
        act(busy_until, waiting[1])
    return e2e_ms


def _latency(e2e_ms: list[float]) -> Latency:
    values = np.asarray(e2e_ms) if e2e_ms else np.array([math.nan])
    return Latency(float(np.percentile(values, 50)), float(np.percentile(values, 95)), float(values.mean()),
                   len(e2e_ms))
