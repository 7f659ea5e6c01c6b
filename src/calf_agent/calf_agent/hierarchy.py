"""A trained hierarchy as described by ``DIR/hierarchy.json`` (written by ``calf train-hierarchy``).

``hierarchy.json`` names the env, each sub-policy (its checkpoint folder ``DIR/<name>/``, where it
runs and the network it trained under), the gating rule's parameters, the fallback order and the
arbiter's silence timeout. The graph builder, the arbiter node and the virtual-time evaluation
read it through ``load_hierarchy``. No torch here: launch files import this module.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from calf_agent.arbiter import make_gate
from calf_core import atomic
from calf_core.errors import ConfigError
from calf_core.yaml_files import read_json

HIERARCHY_FILE = 'hierarchy.json'
FORMAT = 1
EDGE_NETWORK = 'sim_clean'  # what a policy beside the env meets: no network
SIDES = ('edge', 'desktop')
"""Where a sub-policy runs (its ``placement`` in hierarchy.json): beside the env, or across the network."""
PLACEMENTS = ('flat_desktop', 'flat_edge', 'hierarchical')
"""Where the policy runs (``--placement``; paper, Table 7): one policy across the network, one policy beside the
env, or a hierarchy with sub-policies on both sides."""


@dataclass(frozen=True)
class SubPolicy:
    name: str
    placement: str  # 'edge' or 'desktop'
    network: str  # the profile it trained under
    checkpoint: str  # folder, relative to the hierarchy directory


@dataclass(frozen=True)
class Hierarchy:
    env: str
    regime: str
    seed: int
    subpolicies: tuple[SubPolicy, ...]  # in fallback order
    gating: dict[str, Any]
    silence_timeout_s: float
    root: Path  # the directory holding hierarchy.json

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(sub.name for sub in self.subpolicies)

    def checkpoint(self, sub: SubPolicy) -> Path:
        return self.root / sub.checkpoint

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        del doc['root']
        return {'format': FORMAT, **doc}


def load_hierarchy(path: Path | str) -> Hierarchy:
    """Read ``path`` (a hierarchy directory or its hierarchy.json); ConfigError with the reason."""
    path = Path(path)
    file = path / HIERARCHY_FILE if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f'no {HIERARCHY_FILE} at {path}: run `calf train-hierarchy ... --out {path}` first')
    doc = read_json(file, 'hierarchy')
    try:
        subs = tuple(SubPolicy(**sub) for sub in doc['subpolicies'])
        hierarchy = Hierarchy(doc['env'], doc['regime'], int(doc['seed']), subs, dict(doc['gating']),
                              float(doc['silence_timeout_s']), file.resolve().parent)
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(f'{file} is not a valid hierarchy ({" ".join(str(err).split())})') from None
    bad = [sub.placement for sub in subs if sub.placement not in SIDES]
    if bad or len(subs) < 2:
        raise ConfigError(f'{file}: needs two or more sub-policies placed on {" or ".join(SIDES)}')
    make_gate(hierarchy.env, hierarchy.gating)
    return hierarchy


def save_hierarchy(hierarchy: Hierarchy) -> Path:
    """Write ``hierarchy.json`` into ``hierarchy.root``; return its path."""
    file = hierarchy.root / HIERARCHY_FILE
    atomic.write_text(file, json.dumps(hierarchy.to_json(), indent=2) + '\n')
    return file
