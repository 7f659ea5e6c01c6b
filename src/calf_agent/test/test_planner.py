"""The model planner: learned CartPole and InvertedPendulum models, arrival-aware plans, and what they buy under delay."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from calf_agent.checkpoint import load_checkpoint, save_checkpoint
from calf_agent.errors import CheckpointError
from calf_agent.evaluate import evaluate_sim
from calf_agent.gaussian import GaussianAgent
from calf_agent.plan_agent import DynamicsModel, PlanningAgent
from calf_agent.planner import collect_transitions, env_fallbacks, train_planner
from calf_agent.policies import MlpAgent
from calf_agent.policy_runner import PolicyRunner
from calf_bringup import cli
from calf_core.envs import env_spec, make_env
from calf_core.errors import ConfigError
from calf_core.profiles import load_profile

SLOW_LINK = """name: fixed_60ms
description: 60 ms each way, no loss (an end-to-end delay of six CartPole ticks).
compute_ms: 0.0
reorder: false
uplink:
  - {model: fixed_delay, latency_ms: 60.0}
downlink: same
"""


def balancing_law(obs: np.ndarray) -> np.ndarray:
    """A linear CartPole controller that keeps the pole up for 500 ticks from any reset."""
    return (obs @ np.array([0.1, 0.5, 10.0, 2.0]) > 0).astype(np.int64)


@pytest.fixture(scope='module')
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLP policy fitted to ``balancing_law`` by supervised learning (seconds, not a PPO run)."""
    torch.manual_seed(0)
    agent = MlpAgent(4, 2)
    states = np.random.default_rng(0).uniform([-2.4, -2, -0.21, -2], [2.4, 2, 0.21, 2], (20_000, 4))
    x, y = torch.as_tensor(states, dtype=torch.float32), torch.as_tensor(balancing_law(states))
    fit(agent.actor, lambda: torch.nn.functional.cross_entropy(agent.logits(x), y))
    return save_base(agent, 'cartpole', tmp_path_factory.mktemp('base') / 'base')


def fit(actor: torch.nn.Module, loss: Callable[[], torch.Tensor]) -> None:
    """300 Adam steps of supervised learning on ``actor``'s weights."""
    optimizer = torch.optim.Adam(actor.parameters(), 1e-2)
    for _ in range(300):
        value = loss()
        optimizer.zero_grad()
        value.backward()
        optimizer.step()


def save_base(agent: torch.nn.Module, env: str, out: Path) -> Path:
    """``agent`` saved as a planner's base: single actions on the plain observation of ``env``."""
    return save_checkpoint(out, agent.eval(), {'env': env, 'representation': {'frames': 1, 'actions': 0},
                                               'plan_horizon': 1, 'seed': 0})


@pytest.fixture(scope='module')
def planner_dir(base_dir: Path) -> Path:
    out = base_dir.parent / 'planner'
    train_planner(base_dir, out, 'delay_only', plan_horizon=16, seed=0, lead=6, transitions=20_000, epochs=10,
                  progress=False)
    return out


def test_dynamics_model_predicts_far_better_than_no_change(base_dir: Path) -> None:
    base, _ = load_checkpoint(base_dir)
    obs, actions, next_obs = collect_transitions('cartpole', base, 12_000, seed=1)
    torch.manual_seed(0)
    model = DynamicsModel(4, 2)
    model.fit(obs[:10_000], actions[:10_000], next_obs[:10_000], epochs=10, seed=0)
    with torch.inference_mode():
        predicted = model(torch.as_tensor(obs[10_000:]), torch.as_tensor(actions[10_000:])).numpy()
    model_error = np.mean((predicted - next_obs[10_000:]) ** 2)
    no_change_error = np.mean((obs[10_000:] - next_obs[10_000:]) ** 2)
    assert model_error < no_change_error / 20, (model_error, no_change_error)


def test_plans_copy_what_runs_before_they_can_arrive(planner_dir: Path) -> None:
    """Elements before ``lead`` repeat the start plan, then the previous plan; later ones follow the model."""
    agent, meta = load_checkpoint(planner_dir)
    assert isinstance(agent, PlanningAgent) and (agent.lead, agent.plan_horizon) == (6, 16)
    assert meta['start_plan'] == [0, 1] and meta['planner']['lead'] == 6
    obs = np.array([0.0, 0.0, 0.05, 0.0], dtype=np.float32)
    first, state = agent.act(obs, None, deterministic=True, seq=[0])
    assert first[0, :6].tolist() == [0, 1, 0, 1, 0, 1]  # tick t runs start_plan[(t - 1) % 2]
    x = torch.as_tensor(obs).unsqueeze(0)
    for j in range(16):  # the rollout: base policy on each predicted state from element 6 on
        if j >= 6:
            assert first[0, j] == int(agent.base.logits(x).argmax(-1)[0]), j
        x = agent.model(x, torch.as_tensor(first[:, j]))
    second, _ = agent.act(obs, state, deterministic=True, seq=[3])  # answers observation 3
    assert second[0, :6].tolist() == first[0, 3:9].tolist()


def test_plans_survive_a_six_tick_delay_that_single_actions_do_not(tmp_path: Path, base_dir: Path,
                                                                     planner_dir: Path) -> None:
    (tmp_path / 'slow.yaml').write_text(SLOW_LINK)
    slow = load_profile(tmp_path / 'slow.yaml')
    single = evaluate_sim(base_dir, slow, episodes=8, seed=0)
    planned = evaluate_sim(planner_dir, slow, episodes=8, seed=0)
    assert single['e2e_latency_ms']['p50'] == planned['e2e_latency_ms']['p50'] == pytest.approx(120.0)
    assert planned['mean_return'] >= 450 and single['mean_return'] < 200, (planned['returns'], single['returns'])


def test_policy_runner_keeps_the_planner_state_per_episode(planner_dir: Path) -> None:
    runner = PolicyRunner.from_checkpoint(planner_dir)
    obs = np.array([0.0, 0.0, 0.02, 0.0], dtype=np.float32)
    first = runner.on_observation(episode=0, seq=0, obs=obs, terminated=False)
    later = runner.on_observation(episode=0, seq=2, obs=obs, terminated=False)
    assert len(first) == len(later) == 16 and later[:6] == first[2:8]
    assert runner.on_observation(episode=1, seq=0, obs=obs, terminated=False) == first  # a new episode forgets


def test_planner_needs_a_single_action_mlp_base_and_a_lead_below_the_horizon(tmp_path: Path, base_dir: Path,
                                                                              planner_dir: Path) -> None:
    with pytest.raises(CheckpointError, match='cannot be a planner\'s base'):
        train_planner(planner_dir, tmp_path / 'nested', 'delay_only', 16, 0, transitions=100, epochs=1)
    with pytest.raises(ConfigError, match=r'lead must be in \[0, 4\)'):
        train_planner(base_dir, tmp_path / 'bad', 'delay_only', 4, 0, lead=4, transitions=100, epochs=1)
    with pytest.raises(CheckpointError, match='no checkpoint at'):
        train_planner(tmp_path / 'missing', tmp_path / 'out', 'delay_only', 16, 0)


def test_planner_meta_records_the_dynamics_error(planner_dir: Path) -> None:
    dynamics = json.loads((planner_dir / 'meta.json').read_text())['planner']['dynamics']
    rmse = dynamics['rollout_rmse_16_ticks']
    assert len(rmse) == 4 and max(rmse) < 0.05, rmse


# Continuous actions: InvertedPendulum-v5 (MuJoCo, 40 ms ticks, hold zero), the base a Gaussian policy.

PENDULUM_GAINS = np.float32([1.0, 10.0, 1.0, 1.0])


def pendulum_law(obs: np.ndarray) -> np.ndarray:
    """A linear InvertedPendulum controller (torque 3 tanh(x + 10 theta + x' + theta')) that balances for 1000 ticks."""
    return 3.0 * np.tanh(obs @ PENDULUM_GAINS)


@pytest.fixture(scope='module')
def pendulum_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Gaussian policy whose mean is fitted to ``pendulum_law`` by supervised learning."""
    torch.manual_seed(0)
    agent = GaussianAgent(4, 1, [-3.0], [3.0], hidden=(32, 32))
    states = np.random.default_rng(0).uniform([-1, -0.2, -2, -2], [1, 0.2, 2, 2], (20_000, 4)).astype(np.float32)
    x, y = torch.as_tensor(states), torch.as_tensor(pendulum_law(states))[:, None]
    fit(agent.actor_mean, lambda: ((agent.actor_mean(agent.obs_norm(x)) - y) ** 2).mean())
    return save_base(agent, 'InvertedPendulum-v5', tmp_path_factory.mktemp('pendulum') / 'base')


@pytest.fixture(scope='module')
def pendulum_planner(pendulum_base: Path) -> Path:
    out = pendulum_base.parent / 'planner'
    train_planner(pendulum_base, out, 'full_net_aware', plan_horizon=8, seed=0, transitions=20_000, epochs=10,
                  progress=False)
    return out


def test_continuous_plans_copy_the_env_side_then_follow_the_model(pendulum_planner: Path) -> None:
    """Hold zero: before any plan the env applies zero torque, and it holds zero once a plan runs out."""
    agent, meta = load_checkpoint(pendulum_planner)
    lead = agent.lead  # full_net_aware's p95 E2E in 40 ms ticks
    assert isinstance(agent, PlanningAgent) and agent.continuous and lead == meta['planner']['lead'] == 4
    assert (agent.start_plan, agent.hold_action) == ([[0.0]], [0.0]) and 'start_plan' not in meta
    obs = np.array([0.0, 0.05, 0.0, 0.0], dtype=np.float32)
    first, state = agent.act(obs, None, deterministic=True, seq=[0])
    assert first.shape == (1, 8, 1) and first.dtype == np.float32
    assert first[0, :lead, 0].tolist() == [0.0] * lead
    x = torch.as_tensor(obs).unsqueeze(0)
    for j in range(8):  # from element ``lead`` on: the base policy's mean on each predicted state, clipped
        if j >= lead:
            expected = agent.base.clip(agent.base.actor_mean(agent.base.obs_norm(x))).detach()
            assert first[0, j] == pytest.approx(float(expected[0, 0]), abs=1e-6), j
        x = agent.model(x, torch.as_tensor(first[:, j]))
    second, state = agent.act(obs, state, deterministic=True, seq=[2])  # elements 2.. of the first plan run on
    assert second[0, :lead].tolist() == first[0, 2:2 + lead].tolist()
    late, _ = agent.act(obs, state, deterministic=True, seq=[9])  # obs 2's plan covers ticks 3..10, then zeros
    assert late[0, :lead, 0].tolist() == [second[0, 7, 0]] + [0.0] * (lead - 1) and second[0, 7, 0] != 0.0


def test_continuous_plans_survive_the_full_profile_where_single_torques_fall(pendulum_base: Path,
                                                                           pendulum_planner: Path) -> None:
    network = load_profile('full_net_aware')
    single = evaluate_sim(pendulum_base, network, episodes=6, seed=0)
    planned = evaluate_sim(pendulum_planner, network, episodes=6, seed=0)
    assert planned['mean_return'] >= 900 and single['mean_return'] < 500, (planned['returns'], single['returns'])


def test_policy_runner_sends_continuous_plans(pendulum_planner: Path) -> None:
    runner = PolicyRunner.from_checkpoint(pendulum_planner)
    assert runner.continuous and runner.action_description == 'continuous actions of 1 value'
    plan = runner.on_observation(episode=0, seq=0, obs=np.zeros(4, np.float32), terminated=False)
    assert isinstance(plan, np.ndarray) and plan.shape == (8, 1) and np.all(np.abs(plan) <= 3.0)


def test_env_fallbacks_follow_the_executor() -> None:
    """What a planner assumes the env applies before its first plan and after one runs out."""
    def fallbacks(name: str) -> tuple:
        return env_fallbacks(env_spec(name), make_env(name).action_space)

    assert fallbacks('cartpole') == ([0, 1], None)  # the safe start plan, then hold last
    assert fallbacks('minigrid') == ([6], 6)  # hold noop, before and after plans
    assert fallbacks('InvertedPendulum-v5') == ([[0.0]], [0.0])  # hold zero
    assert fallbacks('Reacher-v5') == ([[0.0, 0.0]], [0.0, 0.0])


def test_planner_refuses_mismatched_parts(pendulum_base: Path) -> None:
    base, _ = load_checkpoint(pendulum_base)
    with pytest.raises(ValueError, match='same actions'):
        PlanningAgent(base, {'obs_dim': 4, 'n_actions': 2, 'hidden': [8]}, 8, 2, [[0.0]])
    with pytest.raises(ValueError, match='1 values'):
        PlanningAgent(base, {'obs_dim': 4, 'action_dim': 1, 'hidden': [8]}, 8, 2, [[0.0, 1.0]])


@pytest.mark.slow
def test_calf_train_plans_a_continuous_task_end_to_end(tmp_path: Path) -> None:
    """``calf train --planner model`` on a MuJoCo env: PPO on the bare env, then the continuous planner."""
    out = tmp_path / 'plans'
    assert cli.main(['train', '--env', 'InvertedPendulum-v5', '--planner', 'model', '--plan-horizon', '6',
                     '--steps', '2048', '--out', str(out), '--quiet']) == 0
    agent, meta = load_checkpoint(out)
    assert isinstance(agent, PlanningAgent) and agent.continuous and meta['plan_horizon'] == 6
    assert meta['planner']['base'] == str(out / 'base') and len(meta['planner']['dynamics']['rollout_rmse_6_ticks']) == 4
    report = evaluate_sim(out, load_profile('wifi_degraded'), episodes=2, seed=0)
    assert report['episodes'] == 2 and report['e2e_latency_ms']['samples'] > 0
