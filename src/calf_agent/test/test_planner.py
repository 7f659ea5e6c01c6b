"""The model planner: learned CartPole and InvertedPendulum models (ensembles fitted on multi-step rollouts),
arrival-aware plans, the disagreement cut, and what they buy under delay."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from planner_bases import balancing_base, pendulum_gaussian_base, save_base, train_exit_code

from calf_agent.checkpoint import load_checkpoint
from calf_agent.dynamics import (
    DynamicsModel,
    EnsembleDynamics,
    FitConfig,
    Transitions,
    disagreement,
    fit,
    make_dynamics,
    multi_step_loss,
    open_loop,
)
from calf_agent.errors import CheckpointError
from calf_agent.evaluate import evaluate_sim, one_torch_thread
from calf_agent.plan_agent import FeedbackPlans, PlanningAgent
from calf_agent.planner import PlannerConfig, collect_transitions, env_fallbacks, train_planner, with_feedback
from calf_agent.policy_runner import PolicyRunner
from calf_agent.sac import SacActor
from calf_bringup import cli
from calf_core.envs import env_spec, make_env
from calf_core.errors import ConfigError
from calf_core.profiles import load_profile
from calf_core.timing import FeedbackPlan, ReceivedObservation

SLOW_LINK = """name: fixed_60ms
description: 60 ms each way, no loss (an end-to-end delay of six CartPole ticks).
compute_ms: 0.0
reorder: false
uplink:
  - {model: fixed_delay, latency_ms: 60.0}
downlink: same
"""


@pytest.fixture(scope='module', autouse=True)
def one_thread() -> Iterator[None]:
    """Small networks: one torch thread, as training and evaluation use (two contend on a loaded machine)."""
    with one_torch_thread():
        yield


@pytest.fixture(scope='module')
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLP policy fitted to ``balancing_law`` by supervised learning (seconds, not a PPO run)."""
    return balancing_base(tmp_path_factory.mktemp('base') / 'base')


SMALL = PlannerConfig(transitions=20_000, epochs=10, members=2, hidden=(64, 64), rollout=2, refits=1,
                      cut_quantile=None)
"""A planner small enough for fast tests: two members, 2-step rollouts, one refit, no cut."""
TINY = PlannerConfig(transitions=100, epochs=1, members=1, hidden=(8,), rollout=1, refits=0)


@pytest.fixture(scope='module')
def planner_dir(base_dir: Path) -> Path:
    out = base_dir.parent / 'planner'
    train_planner(base_dir, out, 'delay_only', plan_horizon=16, seed=0, lead=6, cfg=SMALL, progress=False)
    return out


@pytest.mark.slow
def test_dynamics_model_predicts_far_better_than_no_change(base_dir: Path) -> None:
    base, _ = load_checkpoint(base_dir)
    data = collect_transitions('cartpole', base, 12_000, seed=1)
    train, test = Transitions(*(a[:10_000] for a in data)), Transitions(*(a[10_000:] for a in data))
    torch.manual_seed(0)
    model = EnsembleDynamics(4, 2, hidden=(64, 64), members=3)
    model.normalise(train)
    fit(model, train, FitConfig(epochs=10), seed=0)
    with torch.inference_mode():
        predicted = model.rollout_step(torch.as_tensor(test.obs)[None].repeat(3, 1, 1),
                                       torch.as_tensor(test.actions)).mean(0).numpy()
    model_error = np.mean((predicted - test.next_obs) ** 2)
    no_change_error = np.mean((test.obs - test.next_obs) ** 2)
    assert model_error < no_change_error / 20, (model_error, no_change_error)


@pytest.mark.slow
def test_plans_copy_what_runs_before_they_can_arrive(planner_dir: Path) -> None:
    """Elements before ``lead`` repeat the start plan, then the previous plan; later ones follow the model. An
    episode's first element is the base's action at the observation, which runs only if the plan arrives at once."""
    agent, meta = load_checkpoint(planner_dir)
    assert isinstance(agent, PlanningAgent) and (agent.lead, agent.plan_horizon) == (6, 16)
    assert meta['start_plan'] == [0, 1] and meta['planner']['lead'] == 6
    obs = np.array([0.0, 0.0, 0.05, 0.0], dtype=np.float32)
    first, state = agent.act(obs, None, deterministic=True, seq=[0])
    assert first[0, 1:6].tolist() == [1, 0, 1, 0, 1]  # tick t runs start_plan[(t - 1) % 2]
    x = torch.as_tensor(obs)[None, None].repeat(agent.model.members, 1, 1)  # [members, 1, obs]
    assert first[0, 0] == int(agent.base.logits(x.mean(0)).argmax(-1)[0])
    for j in range(16):  # the rollout: start_plan[0] at tick 1, base policy on the members' mean state from element 6 on
        if j >= 6:
            assert first[0, j] == int(agent.base.logits(x.mean(0)).argmax(-1)[0]), j
        x = agent.model.rollout_step(x, torch.as_tensor(first[:, j] if j else [0]))
    second, _ = agent.act(obs, state, deterministic=True, seq=[3])  # answers observation 3
    assert second[0, :6].tolist() == first[0, 3:9].tolist()


@pytest.mark.slow
def test_plans_survive_a_six_tick_delay_that_single_actions_do_not(tmp_path: Path, base_dir: Path,
                                                                     planner_dir: Path) -> None:
    (tmp_path / 'slow.yaml').write_text(SLOW_LINK)
    slow = load_profile(tmp_path / 'slow.yaml')
    single = evaluate_sim(base_dir, slow, episodes=8, seed=0)
    planned = evaluate_sim(planner_dir, slow, episodes=8, seed=0)
    assert single['e2e_latency_ms']['p50'] == planned['e2e_latency_ms']['p50'] == pytest.approx(120.0)
    assert planned['mean_return'] >= 450 and single['mean_return'] < 200, (planned['returns'], single['returns'])


@pytest.mark.slow
def test_policy_runner_keeps_the_planner_state_per_episode(planner_dir: Path) -> None:
    runner = PolicyRunner.from_checkpoint(planner_dir)
    obs = np.array([0.0, 0.0, 0.02, 0.0], dtype=np.float32)
    first = runner.on_observation(ReceivedObservation(0, 0, obs))
    later = runner.on_observation(ReceivedObservation(0, 2, obs))
    assert len(first) == len(later) == 16 and later[:6] == first[2:8]
    assert runner.on_observation(ReceivedObservation(1, 0, obs)) == first  # a new episode forgets


@pytest.mark.slow
def test_planner_needs_a_single_action_mlp_base_and_a_lead_below_the_horizon(tmp_path: Path, base_dir: Path,
                                                                              planner_dir: Path) -> None:
    with pytest.raises(CheckpointError, match='cannot be a planner\'s base'):
        train_planner(planner_dir, tmp_path / 'nested', 'delay_only', 16, 0, cfg=TINY)
    with pytest.raises(ConfigError, match=r'lead must be in \[0, 4\)'):
        train_planner(base_dir, tmp_path / 'bad', 'delay_only', 4, 0, lead=4, cfg=TINY)
    with pytest.raises(CheckpointError, match='no checkpoint at'):
        train_planner(tmp_path / 'missing', tmp_path / 'out', 'delay_only', 16, 0)


@pytest.mark.slow
def test_planner_meta_records_the_dynamics_error(planner_dir: Path) -> None:
    dynamics = json.loads((planner_dir / 'meta.json').read_text())['planner']['dynamics']
    rmse = dynamics['rollout_rmse_16_ticks']
    assert len(rmse) == 4 and max(rmse) < 0.05, rmse


# Continuous actions: InvertedPendulum-v5 (MuJoCo, 40 ms ticks, hold zero), the base a Gaussian policy.

@pytest.fixture(scope='module')
def pendulum_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Gaussian policy whose mean is fitted to ``pendulum_law`` by supervised learning."""
    return pendulum_gaussian_base(tmp_path_factory.mktemp('pendulum') / 'base')


@pytest.fixture(scope='module')
def pendulum_planner(pendulum_base: Path) -> Path:
    out = pendulum_base.parent / 'planner'
    train_planner(pendulum_base, out, 'full_net_aware', plan_horizon=8, seed=0,
                  cfg=replace(SMALL, cut_quantile=0.99), progress=False)
    return out


def test_a_sac_actor_is_a_planners_base(tmp_path: Path) -> None:
    """A smooth SAC expert plans like a Gaussian one: from element ``lead`` on, its deterministic action on the
    members' mean state; the planner round-trips through its checkpoint."""
    torch.manual_seed(0)
    actor = SacActor(4, 1, [-3.0], [3.0], hidden=(32, 32))
    base = save_base(actor, 'InvertedPendulum-v5', tmp_path / 'base')
    train_planner(base, tmp_path / 'planner', 'full_net_aware', plan_horizon=6, seed=0, cfg=TINY, progress=False)
    agent, meta = load_checkpoint(tmp_path / 'planner')
    assert isinstance(agent.base, SacActor) and agent.continuous and meta['agent']['base']['kind'] == 'sac'
    agent.disagreement_cut = None
    obs = np.array([0.0, 0.05, 0.0, 0.0], dtype=np.float32)
    plan, _ = agent.act(obs, None, deterministic=True, seq=[0])
    x = torch.as_tensor(obs)[None, None].repeat(agent.model.members, 1, 1)
    for j in range(6):
        if j >= agent.lead or j == 0:
            expected = agent.base.act(x.mean(0).detach().numpy(), deterministic=True)[0]
            assert plan[0, j] == pytest.approx(expected[0], abs=1e-6), j
        x = agent.model.rollout_step(x, torch.as_tensor(plan[:, j] if j else [[0.0]]))  # zero runs at tick 1


@pytest.mark.slow
def test_continuous_plans_copy_the_env_side_then_follow_the_model(pendulum_planner: Path) -> None:
    """Hold zero: before any plan the env applies zero torque, and it holds zero once a plan runs out."""
    agent, meta = load_checkpoint(pendulum_planner)
    agent.disagreement_cut = None  # the cut has its own test
    lead = agent.lead  # full_net_aware's p95 round trip: 4 ticks of 40 ms, so element 3 runs first
    assert isinstance(agent, PlanningAgent) and agent.continuous and lead == meta['planner']['lead'] == 3
    assert (agent.start_plan, agent.hold_action) == ([[0.0]], [0.0]) and 'start_plan' not in meta
    obs = np.array([0.0, 0.05, 0.0, 0.0], dtype=np.float32)
    first, state = agent.act(obs, None, deterministic=True, seq=[0])
    assert first.shape == (1, 8, 1) and first.dtype == np.float32
    assert first[0, 1:lead, 0].tolist() == [0.0] * (lead - 1)
    x = torch.as_tensor(obs)[None, None].repeat(agent.model.members, 1, 1)
    for j in range(8):  # element 0 and from ``lead`` on: the base policy's mean on the members' mean state, clipped
        if j >= lead or j == 0:
            expected = agent.base.clip(agent.base.actor_mean(agent.base.obs_norm(x.mean(0)))).detach()
            assert first[0, j] == pytest.approx(float(expected[0, 0]), abs=1e-6), j
        x = agent.model.rollout_step(x, torch.as_tensor(first[:, j] if j else [[0.0]]))  # zero torque at tick 1
    second, state = agent.act(obs, state, deterministic=True, seq=[2])  # elements 2.. of the first plan run on
    assert second[0, :lead].tolist() == first[0, 2:2 + lead].tolist()
    late, _ = agent.act(obs, state, deterministic=True, seq=[9])  # obs 2's plan covers ticks 3..10, then zeros
    assert late[0, :lead, 0].tolist() == [second[0, 7, 0]] + [0.0] * (lead - 1) and second[0, 7, 0] != 0.0


@pytest.mark.slow
def test_continuous_plans_survive_the_full_profile_where_single_torques_fall(pendulum_base: Path,
                                                                           pendulum_planner: Path) -> None:
    network = load_profile('full_net_aware')
    single = evaluate_sim(pendulum_base, network, episodes=6, seed=0)
    planned = evaluate_sim(pendulum_planner, network, episodes=6, seed=0)
    assert planned['mean_return'] >= 900 and single['mean_return'] < 500, (planned['returns'], single['returns'])


@pytest.mark.slow
def test_policy_runner_sends_continuous_plans(pendulum_planner: Path) -> None:
    runner = PolicyRunner.from_checkpoint(pendulum_planner)
    assert runner.continuous and runner.action_description == 'continuous actions of 1 value'
    plan = runner.on_observation(ReceivedObservation(0, 0, np.zeros(4, np.float32)))
    assert isinstance(plan, np.ndarray) and plan.shape == (8, 1) and np.all(np.abs(plan) <= 3.0)


@pytest.mark.slow
def test_feedback_plans_carry_the_base_policys_gains_at_each_predicted_state(pendulum_planner: Path,
                                                                            tmp_path: Path) -> None:
    """From element ``lead`` on: the base's Jacobian at the members' mean state, and that state; on the lead ticks
    the env runs the previous plan (none yet: zero torque without feedback), and the next plan copies its
    elements with their feedback."""
    agent, _ = load_checkpoint(with_feedback(pendulum_planner, tmp_path / 'feedback'))
    agent.disagreement_cut = None
    lead = agent.lead
    obs = np.array([0.0, 0.05, 0.0, 0.0], dtype=np.float32)
    first, state = agent.act(obs, None, deterministic=True, seq=[0])
    assert isinstance(first, FeedbackPlans)
    assert (first.actions.shape, first.gains.shape, first.predicted.shape) == ((1, 8, 1), (1, 8, 1, 4), (1, 8, 4))
    assert not first.gains[0, :lead].any()
    x = torch.as_tensor(obs)[None, None].repeat(agent.model.members, 1, 1)
    for j in range(8):
        if j >= lead:
            z = x.mean(0).clone().requires_grad_(True)
            gain = torch.autograd.grad(agent.base.mean_action(z).sum(), z)[0]
            assert first.gains[0, j, 0] == pytest.approx(gain[0].numpy(), abs=1e-5), j
            assert first.predicted[0, j] == pytest.approx(x.mean(0)[0].detach().numpy(), abs=1e-6), j
        x = agent.model.rollout_step(x, torch.as_tensor(first.actions[:, j] if j else [[0.0]])).detach()
    second, _ = agent.act(obs, state, deterministic=True, seq=[2])  # elements 2.. of the first plan run on
    assert second.actions[0, :lead].tolist() == first.actions[0, 2:2 + lead].tolist()
    assert np.array_equal(second.gains[0, :lead], first.gains[0, 2:2 + lead])
    assert np.array_equal(second.predicted[0, :lead], first.predicted[0, 2:2 + lead])


@pytest.mark.slow
def test_feedback_plans_run_through_evaluation_and_the_policy_runner(pendulum_planner: Path, tmp_path: Path) -> None:
    feedback = with_feedback(pendulum_planner, tmp_path / 'feedback')
    report = evaluate_sim(feedback, load_profile('full_net_aware'), episodes=4, seed=0)
    assert report['mean_return'] >= 900, report['returns']
    plan = PolicyRunner.from_checkpoint(feedback).on_observation(ReceivedObservation(0, 0, np.zeros(4, np.float32)))
    assert isinstance(plan, FeedbackPlan) and plan.actions.shape == (8, 1) and plan.gains.shape == (8, 1, 4)


@pytest.mark.slow
def test_feedback_needs_a_continuous_base(base_dir: Path, planner_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='feedback plans need a continuous'):
        train_planner(base_dir, tmp_path / 'p', 'full_net_aware', plan_horizon=4, seed=0,
                      cfg=replace(TINY, feedback=True), progress=False)
    with pytest.raises(ConfigError, match='not a model planner over a continuous'):
        with_feedback(planner_dir, tmp_path / 'q')


def test_env_fallbacks_follow_the_executor() -> None:
    """What a planner assumes the env applies before its first plan and after one runs out."""
    def fallbacks(name: str) -> tuple:
        return env_fallbacks(env_spec(name), make_env(name).action_space)

    assert fallbacks('cartpole') == ([0, 1], None)  # the safe start plan, then hold last
    assert fallbacks('minigrid') == ([6], 6)  # hold noop, before and after plans
    assert fallbacks('InvertedPendulum-v5') == ([[0.0]], [0.0])  # hold zero
    assert fallbacks('Reacher-v5') == ([[0.0, 0.0]], [0.0, 0.0])


@pytest.mark.slow
def test_planner_refuses_mismatched_parts(pendulum_base: Path) -> None:
    base, _ = load_checkpoint(pendulum_base)
    with pytest.raises(ValueError, match='same actions'):
        PlanningAgent(base, {'obs_dim': 4, 'n_actions': 2, 'hidden': [8]}, 8, 2, [[0.0]])
    with pytest.raises(ValueError, match='1 values'):
        PlanningAgent(base, {'obs_dim': 4, 'action_dim': 1, 'hidden': [8]}, 8, 2, [[0.0, 1.0]])


# The dynamics model: windows of one episode, the ensemble, the multi-step loss, the cut, old checkpoints.

def test_transitions_windows_stay_in_one_episode() -> None:
    follows = np.array([True, True, False, True, True, True, False])  # episodes: transitions 0-2 and 3-6
    data = Transitions(*(np.zeros((7, 1), np.float32) for _ in range(3)), follows)
    assert data.window_starts(1).tolist() == list(range(7))
    assert data.window_starts(3).tolist() == [0, 3, 4]
    assert data.window_starts(5).tolist() == []
    assert Transitions.concat([data, data]).window_starts(4).tolist() == [3, 10]


def test_ensemble_members_roll_their_own_states() -> None:
    torch.manual_seed(0)
    model = EnsembleDynamics(3, action_dim=2, hidden=(16, 16), members=4)
    states = torch.randn(4, 5, 3)
    assert model.step(states, model.encode(torch.randn(5, 2))[None]).shape == (4, 5, 3)
    same = model.rollout_step(states[:1].repeat(4, 1, 1), torch.zeros(5, 2))
    assert same.shape == (4, 5, 3) and not torch.allclose(same[0], same[1])  # the members differ
    spread = disagreement(same, model.y_std)
    assert spread.shape == (5,) and bool((spread > 0).all()) and not disagreement(same[:1], model.y_std).any()
    assert model.spec() == {'obs_dim': 3, 'action_dim': 2, 'hidden': [16, 16], 'members': 4}
    assert isinstance(make_dynamics(model.spec()), EnsembleDynamics)
    assert isinstance(make_dynamics({'obs_dim': 3, 'action_dim': 2, 'hidden': [16]}), DynamicsModel)
    discrete = EnsembleDynamics(4, n_actions=3, hidden=(8,), members=2)
    assert discrete.rollout_step(torch.zeros(2, 6, 4), torch.tensor([0, 1, 2, 0, 1, 2])).shape == (2, 6, 4)
    with pytest.raises(ValueError, match='1 to 64 members, got 0'):
        EnsembleDynamics(3, action_dim=1, members=0)


def linear_system(episodes: int, ticks: int, seed: int) -> Transitions:
    """Random actions on a lightly damped oscillator ``s' = A s + B a``."""
    rng = np.random.default_rng(seed)
    a_mat = np.array([[1.0, 0.05], [-0.05, 0.98]], np.float32)
    b_mat = np.array([[0.0], [0.05]], np.float32)
    rows = []
    for _ in range(episodes):
        s = rng.uniform(-1, 1, 2).astype(np.float32)
        for t in range(ticks):
            a = rng.uniform(-1, 1, 1).astype(np.float32)
            rows.append((s, a, a_mat @ s + b_mat @ a, t < ticks - 1))
            s = rows[-1][2]
    return Transitions(*(np.array([r[i] for r in rows]) for i in range(4)))


@pytest.mark.slow
def test_multi_step_loss_falls_on_a_linear_system() -> None:
    """Fitted on 8-step rollouts, the 8-step open-loop loss ends far below where it started."""
    data = linear_system(40, 100, seed=0)
    torch.manual_seed(0)
    model = EnsembleDynamics(2, action_dim=1, hidden=(32, 32), members=3)
    model.normalise(data)
    tensors = (torch.as_tensor(data.obs), model.encode(torch.as_tensor(data.actions)), torch.as_tensor(data.next_obs))
    idx = torch.as_tensor(data.window_starts(8)[::4][:256])[None].repeat(3, 1)
    with torch.no_grad():
        before = multi_step_loss(model, *tensors, idx, 8).item()
    fit(model, data, FitConfig(epochs=20, rollout=8), seed=0)
    with torch.no_grad():
        after = multi_step_loss(model, *tensors, idx, 8).item()
    assert after < before / 20, (before, after)
    errors, _ = open_loop(model, linear_system(5, 100, seed=1), 8)
    rmse = np.sqrt(errors.mean(0))[-1]
    assert max(rmse) < 0.05, rmse  # 8 ticks ahead on fresh episodes, states of size ~1


@torch.no_grad()
def cut_plans(agent: PlanningAgent, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """``agent``'s first plan without and with a cut between the disagreement before elements 4 and 5."""
    agent.disagreement_cut = None
    free, _ = agent.act(obs, None, deterministic=True, seq=[0])
    x, spread = torch.as_tensor(obs)[None, None].repeat(agent.model.members, 1, 1), []
    for j in range(8):
        spread.append(float(disagreement(x, agent.model.y_std)[0]))
        x = agent.model.rollout_step(x, torch.as_tensor(free[:, j] if j else [agent.start_plan[0]]))
    agent.disagreement_cut = (spread[4] + spread[5]) / 2
    cut, _ = agent.act(obs, None, deterministic=True, seq=[0])
    return free, cut, spread


@pytest.mark.slow
def test_disagreement_cuts_the_plan_to_the_hold_rule(base_dir: Path, pendulum_base: Path) -> None:
    """From the first element after the lead whose state the members disagree on, the plan is what the env
    would apply had it ended there: zero torque (hold zero), or its last element (hold last)."""
    torch.manual_seed(0)  # untrained members: their disagreement grows along the rollout
    pendulum = PlanningAgent(load_checkpoint(pendulum_base)[0], {'obs_dim': 4, 'action_dim': 1, 'hidden': [16],
                                                                 'members': 3}, 8, 2, [[0.0]], [0.0])
    free, cut, spread = cut_plans(pendulum, np.array([0.0, 0.05, 0.0, 0.0], np.float32))
    assert spread[0] == 0.0 and all(a < b for a, b in zip(spread[1:], spread[2:])), spread
    assert cut[0, :5].tolist() == free[0, :5].tolist() and cut[0, 5:, 0].tolist() == [0.0] * 3
    assert np.all(free[0, 5:, 0] != 0.0)
    cartpole = PlanningAgent(load_checkpoint(base_dir)[0], {'obs_dim': 4, 'n_actions': 2, 'hidden': [16],
                                                            'members': 3}, 8, 2, [0, 1], None)
    free, cut, spread = cut_plans(cartpole, np.array([0.0, 0.0, 0.05, 0.0], np.float32))
    assert all(a < b for a, b in zip(spread[1:], spread[2:])), spread
    assert cut[0, :5].tolist() == free[0, :5].tolist() and cut[0, 5:].tolist() == [free[0, 4]] * 3


@pytest.mark.slow
def test_planner_meta_records_the_ensemble_and_its_cut(pendulum_planner: Path) -> None:
    agent, meta = load_checkpoint(pendulum_planner)
    dynamics = meta['planner']['dynamics']
    assert (dynamics['members'], dynamics['rollout'], agent.model.members) == (2, 2, 2)
    assert [r['source'] for r in dynamics['rounds']] == ['base', 'planner behind full_net_aware']
    assert sum(r['transitions'] for r in dynamics['rounds']) == dynamics['transitions'] == 20_000
    by_tick = dynamics['rollout_rmse_by_tick']
    assert len(by_tick) == 8 and all(len(row) == 4 for row in by_tick) and by_tick[-1] == dynamics['rollout_rmse_8_ticks']
    assert len(dynamics['disagreement_by_tick']) == 8 and dynamics['cut_quantile'] == 0.99
    assert dynamics['disagreement_cut'] == agent.disagreement_cut == meta['agent']['disagreement_cut'] > 0
    assert meta['agent']['model']['members'] == 2


@pytest.mark.slow
def test_planner_checkpoints_from_before_the_ensemble_still_load(tmp_path: Path, pendulum_base: Path) -> None:
    """An old checkpoint names a single MLP (no ``members``) and holds its weights under ``model.net``."""
    base, _ = load_checkpoint(pendulum_base)
    old = PlanningAgent(base, {'obs_dim': 4, 'action_dim': 1, 'hidden': [64, 64]}, 8, 4, [[0.0]], [0.0])
    assert isinstance(old.model, DynamicsModel)
    save_base(old, 'InvertedPendulum-v5', tmp_path / 'old')
    meta = json.loads((tmp_path / 'old' / 'meta.json').read_text())
    assert 'members' not in meta['agent']['model'] and 'disagreement_cut' not in meta['agent']
    agent, _ = load_checkpoint(tmp_path / 'old')
    assert {'model.net.0.0.weight', 'model.net.1.weight', 'model.y_std'} <= set(agent.state_dict())
    obs = np.array([0.0, 0.05, 0.0, 0.0], np.float32)
    plan, _ = agent.act(obs, None, deterministic=True, seq=[0])
    with torch.inference_mode():  # the old rule: s + net((s, a) normalised) * y_std + y_mean
        x = torch.as_tensor(obs)[None]
        for j in range(4):
            ran = torch.as_tensor(plan[:, j] if j else [[0.0]])  # zero torque until a first plan arrives
            inputs = (torch.cat([x, ran], -1) - agent.model.x_mean) / agent.model.x_std
            x = x + agent.model.net(inputs) * agent.model.y_std + agent.model.y_mean
        expected = agent.base.clip(agent.base.actor_mean(agent.base.obs_norm(x)))
    assert plan[0, 4, 0] == pytest.approx(float(expected[0, 0]), abs=1e-6)


@pytest.mark.parametrize(('field', 'value', 'message'), [
    ('members', 0, 'an ensemble has 1 to 64 members, got 0'),
    ('members', 10 ** 9, 'an ensemble has 1 to 64 members'),
    ('disagreement_cut', -1.0, 'disagreement_cut must be a positive number or absent, got -1.0'),
    ('disagreement_cut', 'x', 'disagreement_cut must be a positive number'),
])
@pytest.mark.slow
def test_a_bad_ensemble_spec_is_one_line(tmp_path: Path, pendulum_planner: Path, field: str, value: object,
                                         message: str) -> None:
    for name in ('meta.json', 'policy.safetensors'):
        (tmp_path / name).write_bytes((pendulum_planner / name).read_bytes())
    meta = json.loads((tmp_path / 'meta.json').read_text())
    (meta['agent']['model'] if field == 'members' else meta['agent'])[field] = value
    (tmp_path / 'meta.json').write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=message) as error:
        load_checkpoint(tmp_path)
    assert '\n' not in str(error.value) and 'calf train' in str(error.value)


@pytest.mark.parametrize(('argv', 'message'), [
    (['--ensemble', '3'], "calf train: error: --ensemble sizes the model planner's dynamics ensemble: add --planner "
                          'model'),
    (['--planner', 'model', '--plan-horizon', '4', '--ensemble', '65'], 'calf train: error: argument --ensemble'),
    (['--model-epochs', '60'], "calf train: error: --model-epochs sets how long the model planner's dynamics "
                               'model is fitted: add --planner model'),
    (['--planner', 'model', '--plan-horizon', '4', '--model-epochs', '0'], 'calf train: error: argument --model-epochs'),
    (['--feedback-plans'], "calf train: error: --feedback-plans gives the model planner's plans feedback: add "
                           '--planner model'),
    (['--planner', 'model', '--plan-horizon', '4', '--feedback-plans'],
     "calf train: error: --feedback-plans corrects continuous actions, and cartpole's are discrete: drop it"),
])
def test_bad_planner_options_exit_2_with_one_line(argv: list[str], message: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert train_exit_code(argv, tmp_path / 'out') == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith(message), err
    assert not (tmp_path / 'out').exists()


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two planners: minutes on a loaded machine
@pytest.mark.slow
def test_the_refitted_ensemble_predicts_better_than_a_one_step_single_model(tmp_path: Path,
                                                                           pendulum_base: Path) -> None:
    """Same data budget and seed on InvertedPendulum-v5: the open-loop error 12 ticks ahead (held-out
    base-policy episodes) of the default planner is below that of one MLP fitted on one-step changes, and
    its checkpoint runs where the policy node runs it (PolicyRunner) and behind Wi-Fi-D."""
    budget = {'transitions': 12_000, 'epochs': 10}
    single = PlannerConfig(**budget, members=1, hidden=(64, 64), rollout=1, refits=0, cut_quantile=None)
    errors = {}
    for name, cfg in (('single', single), ('ensemble', PlannerConfig(**budget))):
        meta = train_planner(pendulum_base, tmp_path / name, 'full_net_aware', 12, 0, cfg=cfg, progress=False)
        errors[name] = float(np.sum(np.square(meta['planner']['dynamics']['rollout_rmse_12_ticks'])))
    assert errors['ensemble'] < errors['single'], errors
    runner = PolicyRunner.from_checkpoint(tmp_path / 'ensemble')
    plan = runner.on_observation(ReceivedObservation(0, 0, np.array([0.0, 0.05, 0.0, 0.0], np.float32)))
    assert isinstance(plan, np.ndarray) and plan.shape == (12, 1) and np.all(np.abs(plan) <= 3.0)
    report = evaluate_sim(tmp_path / 'ensemble', load_profile('wifi_degraded'), episodes=4, seed=0)
    assert report['mean_return'] >= 900, report['returns']


@pytest.mark.slow
@pytest.mark.timeout(1200)  # SAC, then the default planner (50,000 ticks of model data): minutes on a loaded machine
def test_calf_train_plans_a_continuous_task_end_to_end(tmp_path: Path) -> None:
    """``calf train --algo sac --planner model --feedback-plans --model-epochs 4`` on a MuJoCo env: SAC on the
    bare env, then the continuous planner over it with feedback plans (the robots tables' best row), its model
    fitted as long as asked."""
    out = tmp_path / 'plans'
    assert cli.main(['train', '--env', 'InvertedPendulum-v5', '--algo', 'sac', '--planner', 'model',
                     '--feedback-plans', '--plan-horizon', '6', '--model-epochs', '4', '--steps', '2048',
                     '--out', str(out), '--quiet']) == 0
    agent, meta = load_checkpoint(out)
    assert isinstance(agent, PlanningAgent) and agent.continuous and meta['plan_horizon'] == 6
    assert isinstance(agent.base, SacActor) and agent.feedback
    assert meta['planner']['base'] == str(out / 'base') and len(meta['planner']['dynamics']['rollout_rmse_6_ticks']) == 4
    assert meta['planner']['dynamics']['epochs'] == 4
    report = evaluate_sim(out, load_profile('wifi_degraded'), episodes=2, seed=0)
    assert report['episodes'] == 2 and report['e2e_latency_ms']['samples'] > 0
