"""Training of a hierarchy's sub-policies (``calf train-hierarchy``).

Each sub-policy trains on its sub-task (``calf_agent.subtasks``) behind the network it will meet
when deployed: an ``edge`` sub-policy runs beside the env, so it trains under ``sim_clean``; a
``desktop`` one under the regime's profile. Sub-policies see the regime's frame stack (k = d + 1)
but no action history: the actions the env applied come from whichever sub-policy the arbiter
followed, so a sub-policy's own past actions are not what happened.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from calf_agent.arbiter import make_gate
from calf_agent.hierarchy import EDGE_NETWORK, Hierarchy, SubPolicy, save_hierarchy
from calf_agent.regimes import default_representation, regime_profile, vec_env_factory
from calf_agent.representation import Representation
from calf_agent.subtasks import make_subtask_env, subtasks
from calf_agent.trainer import TrainResult, cartpole_defaults, minigrid_defaults
from calf_agent.training import train
from calf_core.errors import ConfigError
from calf_core.network import resolve_network

SILENCE_TIMEOUT_S = {'cartpole': 0.2, 'minigrid': 1.0}  # about 10 ticks of each env


def subpolicy_representation(env: str, network: str) -> Representation:
    """The regime's frame stack without action history (see the module doc)."""
    return replace(default_representation(env, resolve_network(network)), actions=0, delay_state=False)


def train_subpolicy(env: str, sub: SubPolicy, regime: str, seed: int, out_dir: Path, steps: int | None,
                    progress: bool) -> TrainResult:
    """PPO on ``sub``'s sub-task behind its network; the checkpoint goes to ``out_dir``."""
    profile = resolve_network(sub.network)
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
    save_hierarchy(hierarchy)
    return hierarchy, results
