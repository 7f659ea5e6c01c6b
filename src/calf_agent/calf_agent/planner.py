"""Training a model planner (``calf train --planner model``): a dynamics model fitted beside a PPO base policy.

The planning agent itself, and how it rolls the delivered observation forward, is in ``calf_agent.plan_agent``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from calf_agent.checkpoint import load_checkpoint, save_checkpoint
from calf_agent.errors import CheckpointError
from calf_agent.gaussian import GaussianAgent
from calf_agent.plan_agent import Action, BaseAgent, DynamicsModel, PlanningAgent
from calf_agent.policies import MlpAgent
from calf_agent.regimes import delay_ticks
from calf_core.envs import env_spec, make_env
from calf_core.errors import ConfigError
from calf_core.network import resolve_network
from calf_core.task_spec import HoldMode, TaskSpec
from calf_core.timing import task_actions


def env_fallbacks(spec: TaskSpec, space: gym.Space) -> tuple[list[Action], Action | None]:
    """``(start_plan, hold_action)`` of a planner for ``spec``: what its env applies before the first plan
    (the safe start plan, else its start plan, else the action it holds) and when a plan runs out."""
    actions = task_actions(spec, space)
    hold = None if spec.hold is HoldMode.LAST else actions.noop
    before = spec.safe_start or actions.start_plan or (actions.initial if hold is None else hold,)
    return [_stored(a) for a in before], None if hold is None else _stored(hold)


def _stored(action: Any) -> Action:
    """An action as JSON holds it: an int, or a list of floats."""
    return int(action) if np.ndim(action) == 0 else [float(v) for v in np.asarray(action).reshape(-1)]


EXPLORE = {False: 0.3, True: 0.1}
"""Rate of uniformly random actions in the model's training data, for discrete and continuous actions. A
balancing robot (InvertedDoublePendulum-v5) falls within a few random torques, so at 0.3 its data is mostly
falls; at 0.1 its velocities' errors three ticks ahead are 25-45 % lower (results/NOTES.md)."""


def collect_transitions(env_name: str, policy: BaseAgent, steps: int, seed: int, explore: float | None = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``steps`` transitions of the bare env under ``policy``, with a random action at rate ``explore``
    (default ``EXPLORE``)."""
    env: gym.Env = make_env(env_name)
    continuous = isinstance(policy, GaussianAgent)
    explore = EXPLORE[continuous] if explore is None else explore
    rng = np.random.default_rng(seed)
    obs_list, actions, next_list = [], [], []
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        if rng.random() < explore:
            action = (rng.uniform(policy.low.numpy(), policy.high.numpy()).astype(np.float32) if continuous
                      else int(rng.integers(policy.n_actions)))
        else:
            action = policy.act(obs, deterministic=True)[0][0]
        next_obs, _, terminated, truncated, _ = env.step(action)
        obs_list.append(obs)
        actions.append(action)
        next_list.append(next_obs)
        obs = env.reset()[0] if terminated or truncated else next_obs
    return (np.asarray(obs_list, dtype=np.float32), np.asarray(actions, dtype=np.float32 if continuous else np.int64),
            np.asarray(next_list, dtype=np.float32))


def rollout_error(model: DynamicsModel, env_name: str, policy: BaseAgent, horizon: int, seed: int,
                  starts: int = 200) -> list[float]:
    """RMSE per observation value of ``horizon``-tick open-loop predictions on fresh trajectories."""
    obs, actions, next_obs = collect_transitions(env_name, policy, starts * horizon * 2, seed)
    errors = []
    with torch.inference_mode():
        for begin in range(0, len(obs) - horizon, horizon * 2):
            if not np.allclose(obs[begin + 1:begin + horizon], next_obs[begin:begin + horizon - 1]):
                continue  # an episode ended inside the window
            x = torch.as_tensor(obs[begin:begin + 1])
            for j in range(horizon):
                x = model(x, torch.as_tensor(actions[begin + j:begin + j + 1]))
            errors.append((x[0].numpy() - next_obs[begin + horizon - 1]) ** 2)
    return [float(v) for v in np.sqrt(np.mean(errors, axis=0))]


def train_planner(base_dir: Path | str, out_dir: Path | str, network: str, plan_horizon: int, seed: int,
                  lead: int | None = None, transitions: int = 50_000, epochs: int = 30,
                  progress: bool = True) -> dict[str, Any]:
    """Fit a dynamics model beside the base checkpoint ``base_dir`` and save the planner in ``out_dir``."""
    base, base_meta = load_checkpoint(base_dir)
    rep = base_meta.get('representation', {})
    if not isinstance(base, (MlpAgent, GaussianAgent)) or base.plan_horizon != 1 or rep.get('frames', 1) != 1 \
            or rep.get('actions', 0) != 0:
        raise CheckpointError(f'{base_dir} cannot be a planner\'s base: it needs an MLP policy with single '
                              'actions on the plain observation (train it with `calf train --regime baseline`)')
    env = base_meta['env']
    spec = env_spec(env)
    start_plan, hold_action = env_fallbacks(spec, make_env(env).action_space)
    if lead is None:
        lead = min(delay_ticks(resolve_network(network), spec.dt)[1], plan_horizon - 1)
    if not 0 <= lead < plan_horizon:
        raise ConfigError(f'the plan lead must be in [0, {plan_horizon}) for plan horizon {plan_horizon}, got {lead}')
    torch.manual_seed(seed)
    actions = {'action_dim': base.action_dim} if isinstance(base, GaussianAgent) else {'n_actions': base.n_actions}
    model = DynamicsModel(base.obs_dim, **actions)
    loss = model.fit(*collect_transitions(env, base, transitions, seed), epochs=epochs, seed=seed, progress=progress)
    agent = PlanningAgent(base, model.spec(), plan_horizon, lead, start_plan, hold_action)
    agent.model.load_state_dict(model.state_dict())
    dynamics = {'transitions': transitions, 'epochs': epochs, 'train_loss': loss,
                f'rollout_rmse_{plan_horizon}_ticks': rollout_error(model, env, base, plan_horizon, seed + 1)}
    meta = {'env': env, 'regime': 'model planner', 'network': network, 'plan_horizon': plan_horizon,
            'representation': {'frames': 1, 'actions': 0},
            **({'start_plan': start_plan} if spec.safe_start else {}),
            'planner': {'kind': 'model', 'lead': lead, 'base': str(base_dir), 'base_seed': base_meta.get('seed'),
                        'dynamics': dynamics}}
    save_checkpoint(out_dir, agent, meta)
    return meta
