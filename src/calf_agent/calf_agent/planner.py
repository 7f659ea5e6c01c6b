"""Model-based action plans: a learned model rolls the delivered observation forward, tick by tick.

``PlanningAgent`` answers observation k with a plan for ticks k+1 ... k+H. It predicts the state
before each of those ticks with a learned dynamics model and applies its base policy (PPO trained
on the bare env) to each prediction. The rollout is arrival-aware: the plan cannot arrive before
the env has run ``lead`` more ticks, and on those ticks the env runs the newest plan sent earlier
(or its start plan, before any plan has arrived). The rollout uses those actions there and copies
them into the new plan. A plan that arrives early therefore changes nothing, and one that arrives
up to ``lead`` ticks late meets the states it predicted.

It learns or uses only what a deployment has: the base policy and the dynamics model learn from
the simulator, ``lead`` is the training profile's p95 end-to-end latency in ticks, and the start
plan is the env-side cycle the deployment configures (the env node's ``start_plan`` parameter).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm

from calf_agent.checkpoint import load_checkpoint, save_checkpoint
from calf_agent.errors import CheckpointError
from calf_agent.policies import MlpAgent, as_batch, make_agent, mlp
from calf_agent.regimes import delay_ticks
from calf_core.envs import env_spec, make_env
from calf_core.errors import ConfigError
from calf_core.profiles import load_profile

PlanState = tuple[Tensor]
"""``(memory,)``, memory ``[1, B, 2 + H]``: a flag that a plan was sent, its obs seq, the plan.
All zeros (a fresh episode) means no plan was sent yet."""


class DynamicsModel(nn.Module):
    """``s' = s + f(s, a)``: an MLP on normalised inputs that predicts the normalised change of state."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...] = (64, 64)) -> None:
        super().__init__()
        self.obs_dim, self.n_actions, self.hidden = obs_dim, n_actions, tuple(hidden)
        self.net = nn.Sequential(mlp(obs_dim + n_actions, self.hidden), nn.Linear(self.hidden[-1], obs_dim))
        for name, size in (('x_mean', obs_dim + n_actions), ('x_std', obs_dim + n_actions),
                           ('y_mean', obs_dim), ('y_std', obs_dim)):
            self.register_buffer(name, torch.zeros(size) if 'mean' in name else torch.ones(size))

    def spec(self) -> dict[str, Any]:
        return {'obs_dim': self.obs_dim, 'n_actions': self.n_actions, 'hidden': list(self.hidden)}

    def _inputs(self, obs: Tensor, action: Tensor) -> Tensor:
        onehot = nn.functional.one_hot(action.long(), self.n_actions).to(obs.dtype)
        return (torch.cat([obs, onehot], -1) - self.x_mean) / self.x_std

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        """The predicted next observation ``[B, obs_dim]``."""
        return obs + self.net(self._inputs(obs, action)) * self.y_std + self.y_mean

    def fit(self, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray, epochs: int, seed: int,
            batch: int = 256, lr: float = 1e-3, progress: bool = False) -> float:
        """Fit to transitions by Adam on the normalised squared error; return the last epoch's loss."""
        x_obs, x_act = torch.as_tensor(obs, dtype=torch.float32), torch.as_tensor(actions)
        delta = torch.as_tensor(next_obs, dtype=torch.float32) - x_obs
        raw = torch.cat([x_obs, nn.functional.one_hot(x_act.long(), self.n_actions).float()], -1)
        self.x_mean.copy_(raw.mean(0))
        self.x_std.copy_(raw.std(0).clamp_min(1e-6))
        self.y_mean.copy_(delta.mean(0))
        self.y_std.copy_(delta.std(0).clamp_min(1e-6))
        target = (delta - self.y_mean) / self.y_std
        optimizer = torch.optim.Adam(self.net.parameters(), lr)
        generator = torch.Generator().manual_seed(seed)
        loss = math.nan
        for _ in tqdm(range(epochs), desc='dynamics model', unit='epoch', disable=not progress):
            order, total = torch.randperm(len(x_obs), generator=generator), 0.0
            for start in range(0, len(order), batch):
                idx = order[start:start + batch]
                step_loss = ((self.net(self._inputs(x_obs[idx], x_act[idx])) - target[idx]) ** 2).mean()
                optimizer.zero_grad()
                step_loss.backward()
                optimizer.step()
                total += step_loss.item() * len(idx)
            loss = total / len(order)
        return loss


class PlanningAgent(nn.Module):
    """Plans of H actions from an arrival-aware rollout of ``model`` under the ``base`` policy."""

    kind = 'model_plan'

    def __init__(self, base: dict[str, Any], model: dict[str, Any], plan_horizon: int, lead: int,
                 start_plan: list[int]) -> None:
        super().__init__()
        self.base = make_agent(base)
        if not isinstance(self.base, MlpAgent) or self.base.plan_horizon != 1:
            raise ValueError('the base policy of a model planner must be an MLP agent with single actions')
        self.model = DynamicsModel(model['obs_dim'], model['n_actions'], tuple(model['hidden']))
        if not 0 <= lead < plan_horizon:
            raise ValueError(f'lead must be in [0, plan_horizon), got {lead} with plan_horizon {plan_horizon}')
        if not start_plan or any(not 0 <= a < self.base.n_actions for a in start_plan):
            raise ValueError(f'start_plan must be non-empty actions in 0..{self.base.n_actions - 1}, '
                             f'got {start_plan}')
        self.plan_horizon, self.lead, self.start_plan = plan_horizon, lead, list(start_plan)
        self.obs_dim, self.n_actions = self.base.obs_dim, self.base.n_actions

    def spec(self) -> dict[str, Any]:
        return {'kind': self.kind, 'base': self.base.spec(), 'model': self.model.spec(),
                'plan_horizon': self.plan_horizon, 'lead': self.lead, 'start_plan': self.start_plan}

    @torch.inference_mode()
    def act(self, obs: np.ndarray, state: PlanState | None = None, deterministic: bool = False,
            seq: Any = None) -> tuple[np.ndarray, PlanState]:
        """Plans ``[B, H]`` for observations ``[B, obs_dim]`` taken at ticks ``seq`` ``[B]``.

        ``state`` is what the previous call returned (None, or zeroed rows, at episode starts).
        """
        if seq is None:
            raise ValueError('a model planner needs the tick (seq) of every observation')
        x = as_batch(obs)
        seq_t = torch.as_tensor(np.asarray(seq), dtype=torch.long).reshape(-1)
        memory = (state[0][0] if state is not None
                  else torch.zeros(x.shape[0], 2 + self.plan_horizon))
        sent, prev_seq, prev_plan = memory[:, 0] > 0, memory[:, 1].long(), memory[:, 2:].long()
        start = torch.as_tensor(self.start_plan)
        plan = []
        for j in range(self.plan_horizon):
            tick = seq_t + 1 + j
            if j < self.lead:
                index = (tick - prev_seq - 1).clamp(0, self.plan_horizon - 1)
                action = torch.where(sent, prev_plan.gather(1, index.view(-1, 1)).squeeze(1),
                                     start[(tick - 1) % len(start)])
            else:
                logits = self.base.logits(x)
                action = (logits.argmax(-1) if deterministic
                          else torch.distributions.Categorical(logits=logits).sample())
            plan.append(action)
            x = self.model(x, action)
        plans = torch.stack(plan, 1)
        memory = torch.cat([torch.ones(len(plans), 1), seq_t.view(-1, 1).float(), plans.float()], 1)
        return plans.numpy(), (memory.unsqueeze(0),)


def collect_transitions(env_name: str, policy: MlpAgent, steps: int, seed: int, explore: float = 0.3
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``steps`` transitions of the bare env under ``policy``, with a random action at rate ``explore``."""
    env: gym.Env = make_env(env_name)
    rng = np.random.default_rng(seed)
    obs_list, actions, next_list = [], [], []
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        if rng.random() < explore:
            action = int(rng.integers(policy.n_actions))
        else:
            action = int(policy.act(obs, deterministic=True)[0][0])
        next_obs, _, terminated, truncated, _ = env.step(action)
        obs_list.append(obs)
        actions.append(action)
        next_list.append(next_obs)
        obs = env.reset()[0] if terminated or truncated else next_obs
    return (np.asarray(obs_list, dtype=np.float32), np.asarray(actions, dtype=np.int64),
            np.asarray(next_list, dtype=np.float32))


def rollout_error(model: DynamicsModel, env_name: str, policy: MlpAgent, horizon: int, seed: int,
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
    if not isinstance(base, MlpAgent) or base.plan_horizon != 1 or rep.get('frames', 1) != 1 \
            or rep.get('actions', 0) != 0:
        raise CheckpointError(f'{base_dir} cannot be a planner\'s base: it needs an MLP policy with single '
                              'actions on the plain observation (train it with `calf train --regime baseline`)')
    spec = env_spec(base_meta['env'])
    if not spec.safe_start:
        raise ConfigError(f'the model planner needs a safe start plan, and env {spec.name!r} has none')
    if lead is None:
        lead = min(delay_ticks(load_profile(network), spec.dt)[1], plan_horizon - 1)
    if not 0 <= lead < plan_horizon:
        raise ConfigError(f'the plan lead must be in [0, {plan_horizon}) for plan horizon {plan_horizon}, got {lead}')
    torch.manual_seed(seed)
    model = DynamicsModel(base.obs_dim, base.n_actions)
    loss = model.fit(*collect_transitions(spec.name, base, transitions, seed), epochs=epochs, seed=seed,
                     progress=progress)
    agent = PlanningAgent(base.spec(), model.spec(), plan_horizon, lead, list(spec.safe_start))
    agent.base.load_state_dict(base.state_dict())
    agent.model.load_state_dict(model.state_dict())
    dynamics = {'transitions': transitions, 'epochs': epochs, 'train_loss': loss,
                f'rollout_rmse_{plan_horizon}_ticks': rollout_error(model, spec.name, base, plan_horizon,
                                                                      seed + 1)}
    meta = {'env': spec.name, 'regime': 'model planner', 'network': network, 'plan_horizon': plan_horizon,
            'representation': {'frames': 1, 'actions': 0}, 'start_plan': list(spec.safe_start),
            'planner': {'kind': 'model', 'lead': lead, 'base': str(base_dir), 'base_seed': base_meta.get('seed'),
                        'dynamics': dynamics}}
    save_checkpoint(out_dir, agent, meta)
    return meta
