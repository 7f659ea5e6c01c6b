"""Model-based action plans: a learned model rolls the delivered observation forward, tick by tick.

``PlanningAgent`` answers observation k with a plan for ticks k+1 ... k+H. It predicts the state
before each of those ticks with a learned dynamics model and applies its base policy (PPO trained
on the bare env) to each prediction. The rollout is arrival-aware: the plan cannot arrive before
the env has run ``lead`` more ticks, and on those ticks the env runs the newest plan sent earlier
(before any plan has arrived: its start plan, or the action it holds). The rollout uses those actions
there and copies them into the new plan. A plan that arrives early therefore changes nothing, and one
that arrives up to ``lead`` ticks late meets the states it predicted.

Discrete and continuous (Box) actions plan alike: the base is an ``MlpAgent`` (plans ``[B, H]`` of
indices) or a ``GaussianAgent`` (plans ``[B, H, A]``, clipped to the bounds). The model needs a fully
observed state, so the base acts on one plain observation.

It learns or uses only what a deployment has: the base policy and the dynamics model learn from
the simulator, ``lead`` is the training profile's p95 end-to-end latency in ticks, and the actions
before the first plan are the env side's own (the task's safe start plan, which the checkpoint asks
the env to run, or its start plan, initial action and hold rule).
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
from calf_agent.gaussian import GaussianAgent
from calf_agent.policies import MlpAgent, as_batch, make_agent, mlp
from calf_agent.regimes import delay_ticks
from calf_core.envs import env_spec, make_env
from calf_core.errors import ConfigError
from calf_core.profiles import load_profile
from calf_core.task_spec import HoldMode, TaskSpec
from calf_core.timing import task_actions

PlanState = tuple[Tensor]
"""``(memory,)``, memory ``[1, B, 2 + H * A]``: a flag that a plan was sent, its obs seq, the plan
(A = 1 for discrete actions). All zeros (a fresh episode) means no plan was sent yet."""

BaseAgent = MlpAgent | GaussianAgent
Action = int | list[float]
"""One action as a planner spec stores it: an index, or a Box action's values."""


class DynamicsModel(nn.Module):
    """``s' = s + f(s, a)``: an MLP on normalised inputs that predicts the normalised change of state.

    Discrete actions (``n_actions``) enter one-hot, continuous ones (``action_dim`` values) as they are.
    """

    def __init__(self, obs_dim: int, n_actions: int = 0, hidden: tuple[int, ...] = (64, 64),
                 action_dim: int = 0) -> None:
        super().__init__()
        if (n_actions > 0) == (action_dim > 0):
            raise ValueError(f'give n_actions (discrete) or action_dim (continuous), got {n_actions} and {action_dim}')
        self.obs_dim, self.n_actions, self.action_dim, self.hidden = obs_dim, n_actions, action_dim, tuple(hidden)
        inputs = obs_dim + n_actions + action_dim
        self.net = nn.Sequential(mlp(inputs, self.hidden), nn.Linear(self.hidden[-1], obs_dim))
        for name, size in (('x_mean', inputs), ('x_std', inputs), ('y_mean', obs_dim), ('y_std', obs_dim)):
            self.register_buffer(name, torch.zeros(size) if 'mean' in name else torch.ones(size))

    def spec(self) -> dict[str, Any]:
        actions = {'n_actions': self.n_actions} if self.n_actions else {'action_dim': self.action_dim}
        return {'obs_dim': self.obs_dim, **actions, 'hidden': list(self.hidden)}

    def _encode(self, action: Tensor) -> Tensor:
        """``[B]`` indices one-hot, or ``[B, A]`` values as floats."""
        if self.n_actions:
            return nn.functional.one_hot(action.long(), self.n_actions).float()
        return action.float().reshape(-1, self.action_dim)

    def _inputs(self, obs: Tensor, action: Tensor) -> Tensor:
        return (torch.cat([obs, self._encode(action)], -1) - self.x_mean) / self.x_std

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        """The predicted next observation ``[B, obs_dim]``."""
        return obs + self.net(self._inputs(obs, action)) * self.y_std + self.y_mean

    def fit(self, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray, epochs: int, seed: int,
            batch: int = 256, lr: float = 1e-3, progress: bool = False) -> float:
        """Fit to transitions by Adam on the normalised squared error; return the last epoch's loss."""
        x_obs, x_act = torch.as_tensor(obs, dtype=torch.float32), torch.as_tensor(actions)
        delta = torch.as_tensor(next_obs, dtype=torch.float32) - x_obs
        raw = torch.cat([x_obs, self._encode(x_act)], -1)
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
    """Plans of H actions from an arrival-aware rollout of ``model`` under the ``base`` policy.

    ``start_plan`` is what the env applies before the first plan arrives, cycled (a held action is a
    one-element cycle); ``hold_action`` is what it applies when a plan runs out, None for the plan's
    last element (hold last).
    """

    kind = 'model_plan'

    def __init__(self, base: dict[str, Any], model: dict[str, Any], plan_horizon: int, lead: int,
                 start_plan: list[Action], hold_action: Action | None = None) -> None:
        super().__init__()
        self.base: BaseAgent = make_agent(base)  # type: ignore[assignment]
        if not isinstance(self.base, (MlpAgent, GaussianAgent)) or self.base.plan_horizon != 1:
            raise ValueError('the base policy of a model planner must be an MLP or Gaussian agent with single actions')
        self.continuous = isinstance(self.base, GaussianAgent)
        self.action_dim = self.base.action_dim if self.continuous else 0
        self.n_actions = 0 if self.continuous else self.base.n_actions
        self.model = DynamicsModel(model['obs_dim'], model.get('n_actions', 0), tuple(model['hidden']),
                                   model.get('action_dim', 0))
        if (self.model.n_actions, self.model.action_dim) != (self.n_actions, self.action_dim):
            raise ValueError('the dynamics model and the base policy must take the same actions')
        if not 0 <= lead < plan_horizon:
            raise ValueError(f'lead must be in [0, plan_horizon), got {lead} with plan_horizon {plan_horizon}')
        self.plan_horizon, self.lead = plan_horizon, lead
        if not start_plan:
            raise ValueError('start_plan must hold at least one action')
        self.start_plan, self.hold_action = list(start_plan), hold_action
        self._start = torch.stack([self._action_tensor(a, 'start_plan') for a in start_plan])
        self._hold = None if hold_action is None else self._action_tensor(hold_action, 'hold_action')
        self.obs_dim = self.base.obs_dim

    def _action_tensor(self, action: Action, name: str) -> Tensor:
        """One action of this planner's kind: an index tensor, or ``[A]`` values."""
        if self.continuous:
            values = torch.as_tensor(action, dtype=torch.float32).reshape(-1)
            if values.numel() != self.action_dim:
                raise ValueError(f'{name} actions must have {self.action_dim} values, got {action!r}')
            return values
        if isinstance(action, bool) or not isinstance(action, int) or not 0 <= action < self.n_actions:
            raise ValueError(f'{name} actions must be in 0..{self.n_actions - 1}, got {action!r}')
        return torch.tensor(action)

    def spec(self) -> dict[str, Any]:
        spec = {'kind': self.kind, 'base': self.base.spec(), 'model': self.model.spec(),
                'plan_horizon': self.plan_horizon, 'lead': self.lead, 'start_plan': self.start_plan}
        return spec if self.hold_action is None else {**spec, 'hold_action': self.hold_action}

    def _env_action(self, tick: Tensor, sent: Tensor, prev_seq: Tensor, prev_plan: Tensor) -> Tensor:
        """What the env applies at ``tick`` ``[B]`` if no newer plan arrives: the previous plan's element, its
        hold once it runs out, or the start plan before any plan."""
        index = tick - prev_seq - 1
        held = index >= self.plan_horizon
        element = prev_plan[torch.arange(len(tick)), index.clamp(0, self.plan_horizon - 1)]
        if self._hold is not None:
            element = torch.where(_rows(held, element), self._hold.to(element.dtype), element)
        start = self._start[(tick - 1) % len(self._start)].to(element.dtype)
        return torch.where(_rows(sent, element), element, start)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, state: PlanState | None = None, deterministic: bool = False,
            seq: Any = None) -> tuple[np.ndarray, PlanState]:
        """Plans ``[B, H]`` (or ``[B, H, A]``) for observations ``[B, obs_dim]`` taken at ticks ``seq`` ``[B]``.

        ``state`` is what the previous call returned (None, or zeroed rows, at episode starts).
        """
        if seq is None:
            raise ValueError('a model planner needs the tick (seq) of every observation')
        x = as_batch(obs)
        seq_t = torch.as_tensor(np.asarray(seq), dtype=torch.long).reshape(-1)
        width = max(self.action_dim, 1)
        memory = (state[0][0] if state is not None
                  else torch.zeros(x.shape[0], 2 + self.plan_horizon * width))
        sent, prev_seq = memory[:, 0] > 0, memory[:, 1].long()
        prev_plan = memory[:, 2:].view(-1, self.plan_horizon, width)
        prev_plan = prev_plan if self.continuous else prev_plan[..., 0].long()
        plan = []
        for j in range(self.plan_horizon):
            if j < self.lead:
                action = self._env_action(seq_t + 1 + j, sent, prev_seq, prev_plan)
            else:
                action = torch.as_tensor(self.base.act(x, deterministic=deterministic)[0])
            plan.append(action)
            x = self.model(x, action)
        plans = torch.stack(plan, 1)
        memory = torch.cat([torch.ones(len(plans), 1), seq_t.view(-1, 1).float(),
                            plans.float().reshape(len(plans), -1)], 1)
        return plans.numpy(), (memory.unsqueeze(0),)


def _rows(mask: Tensor, like: Tensor) -> Tensor:
    """A ``[B]`` mask shaped to broadcast over ``like``'s rows (``[B]`` or ``[B, A]``)."""
    return mask.view(-1, *([1] * (like.dim() - 1)))


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
        lead = min(delay_ticks(load_profile(network), spec.dt)[1], plan_horizon - 1)
    if not 0 <= lead < plan_horizon:
        raise ConfigError(f'the plan lead must be in [0, {plan_horizon}) for plan horizon {plan_horizon}, got {lead}')
    torch.manual_seed(seed)
    actions = {'action_dim': base.action_dim} if isinstance(base, GaussianAgent) else {'n_actions': base.n_actions}
    model = DynamicsModel(base.obs_dim, **actions)
    loss = model.fit(*collect_transitions(env, base, transitions, seed), epochs=epochs, seed=seed, progress=progress)
    agent = PlanningAgent(base.spec(), model.spec(), plan_horizon, lead, start_plan, hold_action)
    agent.base.load_state_dict(base.state_dict())
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
