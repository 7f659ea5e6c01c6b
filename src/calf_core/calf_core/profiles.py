"""Network profiles: YAML loading and validation, name lookup, and end-to-end latency sampling.

A profile file (a built-in one is ``calf_core/networks/<name>.yaml``) looks like:

    name: wifi_normal            # optional; defaults to the file name
    description: ...             # optional
    compute_ms: 1.0              # policy compute time assumed when sampling E2E latency
    reorder: false               # false = FIFO: no message overtakes an earlier one
    uplink:                      # env -> policy: a list of stage specs (see calf_core.models)
      - {model: lognormal_delay, median_ms: 10, sigma: 0.5}
    downlink: same               # policy -> env: 'same' or a list of stage specs

Files are recognised as network profiles by their `uplink` key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from calf_core.errors import ConfigError
from calf_core.link import Link
from calf_core.models import build_stage
from calf_core.yaml_files import read_yaml

PROFILE_KEYS = ("name", "description", "compute_ms", "reorder", "uplink", "downlink")
NETWORKS_DIR = Path(__file__).resolve().parent / "networks"  # the built-in profiles


@dataclass(frozen=True)
class Profile:
    """A validated network profile: one stage chain per direction."""

    name: str
    description: str
    compute_ms: float  # policy compute time assumed in E2E calibration
    uplink: tuple[dict, ...]  # stage specs, env -> policy
    downlink: tuple[dict, ...]  # stage specs, policy -> env
    reorder: bool

    def make_links(self, rng: np.random.Generator) -> tuple[Link, Link]:
        """Build fresh (uplink, downlink) links, each with its own child generator spawned from rng."""
        up_rng, down_rng = rng.spawn(2)
        return (
            Link([build_stage(spec) for spec in self.uplink], up_rng, self.reorder),
            Link([build_stage(spec) for spec in self.downlink], down_rng, self.reorder),
        )


class E2EStats(NamedTuple):
    """End-to-end latency (U + c + D) over delivered round trips, and loss fractions."""

    p50_ms: float
    p95_ms: float
    mean_ms: float
    obs_loss: float  # observations lost / observations sent
    action_loss: float  # actions lost / actions sent
    round_trip_loss: float  # 1 - delivered round trips / observations sent
    n: int  # observations sent


def _stage_specs(name: str, direction: str, value: Any) -> tuple[dict, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"profile {name!r}: {direction} must be a list of stage specs, got {value!r}")
    specs = tuple(dict(spec) if isinstance(spec, dict) else spec for spec in value)
    for i, spec in enumerate(specs):
        try:
            build_stage(spec)
        except ConfigError as err:
            raise ConfigError(f"profile {name!r} {direction}[{i}]: {err}") from None
    return specs


def profile_from_dict(data: dict, name: str) -> Profile:
    """Validate a parsed profile; `name` is used when the data has no `name` key."""
    if not isinstance(data, dict):
        raise ConfigError(f"profile {name!r}: must be a mapping, got {data!r}")
    for key in data:
        if key not in PROFILE_KEYS:
            raise ConfigError(f"profile {name!r}: unknown key {key!r} (allowed: {', '.join(PROFILE_KEYS)})")
    name = data.get("name", name)
    for key in ("uplink", "downlink"):
        if key not in data:
            raise ConfigError(f"profile {name!r}: missing key {key!r}")
    compute_ms = data.get("compute_ms", 1.0)
    if isinstance(compute_ms, bool) or not isinstance(compute_ms, (int, float)) or not 0.0 <= compute_ms < math.inf:
        raise ConfigError(f"profile {name!r}: compute_ms must be a number >= 0, got {compute_ms!r}")
    reorder = data.get("reorder", True)
    if not isinstance(reorder, bool):
        raise ConfigError(f"profile {name!r}: reorder must be true or false, got {reorder!r}")
    uplink = _stage_specs(name, "uplink", data["uplink"])
    downlink = uplink if data["downlink"] == "same" else _stage_specs(name, "downlink", data["downlink"])
    return Profile(
        name=str(name),
        description=str(data.get("description", "")),
        compute_ms=float(compute_ms),
        uplink=uplink,
        downlink=downlink,
        reorder=reorder,
    )


def available_profiles() -> list[str]:
    """Names of the built-in network profiles."""
    return sorted(path.stem for path in NETWORKS_DIR.glob("*.yaml"))


def load_profile(name_or_path: str) -> Profile:
    """Load a profile by bare name (a built-in one), from a .yaml/.yml path, or
    from a trace bag (replayed message by message, see ``calf_core.traces``)."""
    from calf_core.traces import is_bag_path, resolve_network  # traces builds on this module
    if is_bag_path(name_or_path):
        return resolve_network(name_or_path)
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = NETWORKS_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ConfigError(
                f"unknown network profile {name_or_path!r} (available: {', '.join(available_profiles())})"
            )
    return profile_from_dict(read_yaml(path, 'profile'), path.stem)


def sample_e2e(profile: Profile, n: int, seed: int, dt_s: float = 0.02) -> E2EStats:
    """Send n observations dt_s apart; each delivered one gets compute_ms then the downlink.

    The latency of a round trip is the first arrival of its action minus the observation's
    send time. Actions are sent in the order their observations arrive.
    """
    if n < 1:
        raise ValueError(f"sample_e2e: n must be >= 1, got {n}")
    uplink, downlink = profile.make_links(np.random.default_rng(seed))
    compute_s = profile.compute_ms / 1e3
    obs_arrivals = []
    for k in range(n):
        arrivals = uplink.transmit(k * dt_s)
        if arrivals:
            obs_arrivals.append((arrivals[0], k * dt_s))
    obs_arrivals.sort()
    e2e_ms = []
    for arrive_s, send_s in obs_arrivals:
        arrivals = downlink.transmit(arrive_s + compute_s)
        if arrivals:
            e2e_ms.append((arrivals[0] - send_s) * 1e3)
    latencies = np.asarray(e2e_ms) if e2e_ms else np.array([math.nan])
    return E2EStats(
        p50_ms=float(np.percentile(latencies, 50)),
        p95_ms=float(np.percentile(latencies, 95)),
        mean_ms=float(latencies.mean()),
        obs_loss=1.0 - len(obs_arrivals) / n,
        action_loss=1.0 - len(e2e_ms) / len(obs_arrivals) if obs_arrivals else math.nan,
        round_trip_loss=1.0 - len(e2e_ms) / n,
        n=n,
    )
