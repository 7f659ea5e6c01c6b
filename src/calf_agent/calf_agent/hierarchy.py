"""A trained hierarchy: sub-policy checkpoints plus ``hierarchy.json`` (``calf train-hierarchy``).

``DIR/hierarchy.json`` names the env, each sub-policy (its checkpoint folder ``DIR/<name>/``,
where it runs and the network it trained under), the gating rule's parameters, the fallback
order and the arbiter's silence timeout. The graph builder, the arbiter node and the virtual-time
evaluation all read it from here.

Each sub-policy trains on its sub-task (``calf_agent.subtasks``) behind the network it will meet
when deployed: an ``edge`` sub-policy runs beside the env, so it trains under ``sim_clean``; a
``desktop`` one under the regime's profile. Sub-policies see a frame stack (k = d + 1) but no
action history: the actions the env applied come from whichever sub-policy the arbiter
followed, so a sub-policy's own past actions are not what happened.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from calf_agent.arbiter import make_gate
from calf_agent.regimes import default_representation, regime_profile, vec_env_factory
from calf_agent.representation import Representation
from calf_agent.subtasks import make_subtask_env, subtasks
from calf_agent.trainer import TrainResult, cartpole_defaults, minigrid_defaults, train
from calf_shim.errors import ConfigError
from calf_shim.profiles import load_profile

HIERARCHY_FILE = 'hierarchy.json'
FORMAT = 1
EDGE_NETWORK = 'sim_clean'  # what an edge sub-policy meets: the env is on the same machine
SILENCE_TIMEOUT_S = {'cartpole': 0.2, 'minigrid': 1.0}  # about 10 ticks of each env
PLACEMENTS = ('edge', 'desktop')


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
    try:
        doc = json.loads(file.read_text())
        subs = tuple(SubPolicy(**sub) for sub in doc['subpolicies'])
        hierarchy = Hierarchy(doc['env'], doc['regime'], int(doc['seed']), subs, dict(doc['gating']),
                              float(doc['silence_timeout_s']), file.resolve().parent)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f'{file} is not a valid hierarchy ({" ".join(str(err).split())})') from None
    bad = [sub.placement for sub in subs if sub.placement not in PLACEMENTS]
    if bad or len(subs) < 2:
        raise ConfigError(f'{file}: needs two or more sub-policies placed on {" or ".join(PLACEMENTS)}')
    make_gate(hierarchy.env, hierarchy.gating)
    return hierarchy


def subpolicy_representation(env: str, network: str) -> Representation:
    """The regime's frame stack without action history (see the module doc)."""
    return replace(default_representation(env, load_profile(network)), actions=0)


def train_subpolicy(env: str, sub: SubPolicy, regime: str, seed: int, out_dir: Path, steps: int | None,
                    progress: bool) -> TrainResult:
    """PPO on ``sub``'s sub-task behind its network; the checkpoint goes to ``out_dir``."""
    profile = load_profile(sub.network)
    rep = subpolicy_representation(env, sub.network)
    base = cartpole_defaults() if env == 'cartpole' else minigrid_defaults()
    meta = {'env': env, 'subtask': sub.name, 'placement': sub.placement, 'regime': regime,
            'network': profile.name, 'representation': rep.as_dict(), 'plan_horizon': 1}
    cfg = replace(base, seed=seed, total_steps=steps or base.total_steps, meta=meta)
    factory = vec_env_factory(env, profile, rep, seed, make_inner=lambda: make_subtask_env(env, sub.name))
    return train(cfg, factory, out_dir, progress=progress)


def train_hierarchy(env: str, regime: str, seed: int, out: Path, steps: int | None = None,
                    progress: bool = True) -> tuple[Hierarchy, dict[str, TrainResult]]:
    """Train every sub-policy of ``env`` into ``out/<name>/`` and write ``out/hierarchy.json``."""
    if steps is not None and steps <= 0:
        raise ConfigError(f'--steps must be > 0, got {steps}')
    desktop_network = regime_profile(regime)
    subs = tuple(SubPolicy(task.name, task.placement, EDGE_NETWORK if task.placement == 'edge' else desktop_network,
                           task.name) for task in subtasks(env))
    hierarchy = Hierarchy(env, regime, seed, subs, make_gate(env).params(), SILENCE_TIMEOUT_S[env],
                          Path(out).resolve())
    results = {sub.name: train_subpolicy(env, sub, regime, seed, hierarchy.checkpoint(sub), steps, progress)
               for sub in subs}
    (hierarchy.root / HIERARCHY_FILE).write_text(json.dumps(hierarchy.to_json(), indent=2) + '\n')
    return hierarchy, results
