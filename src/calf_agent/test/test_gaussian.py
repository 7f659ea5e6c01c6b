"""Continuous actions: the Gaussian heads, the running normalisers, the agent, its checkpoint and runner."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Normal

from calf_agent.checkpoint import load_checkpoint, save_checkpoint
from calf_agent.errors import CheckpointError
from calf_agent.evaluate import evaluate_sim
from calf_agent.gaussian import GaussianAgent, gaussian_heads
from calf_agent.normalize import ReturnNormalizer, RunningNorm
from calf_agent.policies import MlpAgent
from calf_agent.policy_runner import PolicyRunner, check_action_space
from calf_agent.regimes import default_representation, train_policy
from calf_agent.representation import HistoryWrapper, Representation
from calf_agent.trainer import continuous_defaults
from calf_agent.training import train
from calf_core.profiles import load_profile
from calf_core.timing import ReceivedObservation


def test_gaussian_heads_match_torch_normal() -> None:
    torch.manual_seed(0)
    mean, log_std = torch.randn(5, 3, 2), torch.randn(1, 1, 2)
    action, logprob, entropy = gaussian_heads(mean, log_std)
    normal = Normal(mean, log_std.exp().expand_as(mean))
    assert action.shape == (5, 3, 2)
    torch.testing.assert_close(logprob, normal.log_prob(action).sum((-1, -2)))
    torch.testing.assert_close(entropy, normal.entropy().sum((-1, -2)))


def test_gaussian_heads_score_only_executed_elements_and_act_on_the_mean() -> None:
    mean, log_std = torch.zeros(2, 3, 1), torch.zeros(1, 1, 1)
    action = torch.tensor([[[1.0], [2.0], [3.0]], [[0.0], [0.0], [0.0]]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    _, logprob, _ = gaussian_heads(mean, log_std, action, mask=mask)
    per_element = Normal(0.0, 1.0).log_prob(action).squeeze(-1)
    torch.testing.assert_close(logprob, torch.stack([per_element[0, 0] + per_element[0, 2], torch.tensor(0.0)]))
    chosen, _, _ = gaussian_heads(torch.full((1, 1, 2), 0.7), log_std, deterministic=True)
    assert chosen.tolist() == [[[pytest.approx(0.7), pytest.approx(0.7)]]]


def test_running_norm_matches_numpy_over_batches() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal([3.0, -1.0], [2.0, 0.5], size=(300, 2))
    norm = RunningNorm(2)
    for batch in np.array_split(data, 7):
        norm.update(batch)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-6)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-4)
    scaled = norm(torch.tensor([[3.0, -1.0], [1e6, -1e6]]))
    assert scaled[1].tolist() == [10.0, -10.0] and abs(float(scaled[0, 0]) - (3.0 - data[:, 0].mean()) / data[:, 0].std()) < 1e-3


def test_return_normalizer_divides_by_the_discounted_return_std_and_restarts_on_done() -> None:
    scaler = ReturnNormalizer(num_envs=2, gamma=0.5)
    first = scaler.scale(np.array([1.0, 2.0]), np.array([False, True]))
    assert scaler.returns.tolist() == [1.0, 0.0]
    np.testing.assert_allclose(first, np.array([1.0, 2.0]) / np.sqrt(scaler.stats.var.item() + 1e-8), rtol=1e-6)
    scaler.scale(np.array([1.0, 1.0]), np.array([False, False]))
    assert scaler.returns.tolist() == [1.5, 1.0]


def make_agent(plan_horizon: int = 1) -> GaussianAgent:
    torch.manual_seed(0)
    return GaussianAgent(3, 2, [-1.0, 0.0], [1.0, 0.5], hidden=(8,), plan_horizon=plan_horizon)


def test_agent_samples_unclipped_and_acts_clipped() -> None:
    agent = make_agent(plan_horizon=4)
    with torch.no_grad():
        agent.actor_logstd.fill_(2.0)
        action, logprob, entropy, value = agent.get_action_and_value(torch.zeros(64, 3))
    assert action.shape == (64, 4, 2) and logprob.shape == entropy.shape == value.shape == (64,)
    assert float(action.abs().max()) > 1.0
    acted, _ = agent.act(np.zeros((64, 3), np.float32))
    assert acted.shape == (64, 4, 2)
    assert acted[..., 0].min() >= -1.0 and acted[..., 0].max() <= 1.0
    assert acted[..., 1].min() >= 0.0 and acted[..., 1].max() <= 0.5


def test_checkpoint_keeps_the_normaliser_and_the_runner_applies_it(tmp_path: Path) -> None:
    agent = make_agent()
    agent.obs_norm.update(np.array([[10.0, 0.0, 0.0], [12.0, 2.0, 2.0]]))
    save_checkpoint(tmp_path, agent, {'env': 'test'})
    loaded, meta = load_checkpoint(tmp_path)
    assert isinstance(loaded, GaussianAgent) and meta['agent']['kind'] == 'gaussian'
    torch.testing.assert_close(loaded.obs_norm.mean, agent.obs_norm.mean)
    obs = np.array([11.0, 1.0, 1.0], np.float32)
    expected = agent.act(obs, deterministic=True)[0].reshape(1, 2)
    runner = PolicyRunner(loaded, meta)
    plan = runner.on_observation(ReceivedObservation(0, 0, obs))
    assert isinstance(plan, np.ndarray) and plan.dtype == np.float32
    np.testing.assert_allclose(plan, expected)
    assert runner.continuous and runner.obs_size == 3 and runner.plan_horizon == 1


def test_runner_feeds_a_continuous_policy_the_action_it_sent_last(tmp_path: Path) -> None:
    """An action history of one Box action: one observation value and the 2 values of the last sent action."""
    agent = make_agent()
    save_checkpoint(tmp_path, agent, {'env': 'test', 'representation': {'frames': 1, 'actions': 1}})
    runner = PolicyRunner.from_checkpoint(tmp_path)
    assert runner.obs_size == 1
    first = runner.on_observation(ReceivedObservation(0, 0, np.array([0.3])))
    np.testing.assert_allclose(first, agent.act(np.float32([0.3, 0.0, 0.0]), deterministic=True)[0])
    second = runner.on_observation(ReceivedObservation(0, 1, np.array([0.7])))
    np.testing.assert_allclose(second, agent.act(np.float32([0.7, *first[0]]), deterministic=True)[0])
    assert not np.allclose(first[0], 0.0)


@pytest.mark.parametrize(('agent', 'space', 'fits'), [
    (make_agent(), gym.spaces.Box(-1, 1, (2,)), True),
    (make_agent(), gym.spaces.Box(-1, 1, (3, 2)), True),
    (make_agent(), gym.spaces.Discrete(2), False),
    (make_agent(), gym.spaces.Box(-1, 1, (1,)), False),
    (MlpAgent(3, 2, (8,)), gym.spaces.Discrete(2), True),
    (MlpAgent(3, 2, (8,)), gym.spaces.Box(-1, 1, (2,)), False),
])
def test_a_policy_is_refused_for_an_env_of_another_action_kind(agent, space, fits: bool) -> None:
    if fits:
        check_action_space(agent, space, 'my-env')
        return
    with pytest.raises(CheckpointError) as err:
        check_action_space(agent, space, 'my-env')
    assert '\n' not in str(err.value) and 'my-env' in str(err.value)


def make_pendulum(num_envs: int) -> gym.vector.VectorEnv:
    return gym.make_vec('Pendulum-v1', num_envs, vectorization_mode='sync',
                        vector_kwargs={'autoreset_mode': gym.vector.AutoresetMode.SAME_STEP})


@pytest.mark.slow
def test_box_actions_train_a_gaussian_policy_and_save_its_statistics(tmp_path: Path) -> None:
    cfg = dataclasses.replace(
        continuous_defaults(), total_steps=1024, num_envs=2, num_steps=256, meta={'env': 'Pendulum-v1'},
        ppo=dataclasses.replace(continuous_defaults().ppo, num_minibatches=4, update_epochs=2))
    result = train(cfg, make_pendulum, tmp_path, progress=False)
    assert result.global_steps == 1024 and len(result.episode_returns) == 4
    agent, meta = load_checkpoint(tmp_path)
    assert isinstance(agent, GaussianAgent) and agent.spec()['low'] == [-2.0] and agent.spec()['high'] == [2.0]
    assert float(agent.obs_norm.count) == pytest.approx(1024 + 2, abs=1e-3)  # every received observation
    assert meta['train_config']['norm_reward'] is True
    assert json.loads((tmp_path / 'meta.json').read_text())['agent']['kind'] == 'gaussian'


def test_history_wrapper_stacks_frames_and_remembers_the_torques_of_a_continuous_env() -> None:
    env = HistoryWrapper(gym.make('Pendulum-v1'), Representation(frames=2))
    first, _ = env.reset(seed=0)
    assert env.observation_space.shape == (6,) and np.array_equal(first[:3], first[3:])
    second = env.step(np.array([1.5], np.float32))[0]
    assert np.array_equal(second[:3], first[3:]) and not np.array_equal(second[3:], first[3:])
    env = HistoryWrapper(gym.make('Pendulum-v1'), Representation(frames=1, actions=2))
    assert env.observation_space.shape == (5,)
    assert env.reset(seed=0)[0][3:].tolist() == [0.0, 0.0]  # no torque sent yet
    assert env.step(np.array([1.5], np.float32))[0][3:].tolist() == [1.5, 0.0]  # newest first
    assert env.step(np.array([-0.5], np.float32))[0][3:].tolist() == [-0.5, 1.5]


@pytest.mark.slow
def test_the_full_regime_gives_a_continuous_policy_its_torques_in_flight_and_the_delay_state(tmp_path: Path) -> None:
    """Behind full_net_aware (E2E p50 about 2 ticks of 40 ms), as for CartPole: frames, the torques it sent, the
    delay state; the checkpoint evaluates in virtual time with the same features."""
    rep = default_representation('InvertedPendulum-v5', load_profile('full_net_aware'))
    assert rep.actions >= 2 and rep.delay_state and rep.frames >= 2
    result = train_policy('InvertedPendulum-v5', 'full_net_aware', seed=0, out_dir=tmp_path / 'full', steps=2048,
                          regime='full', progress=False)
    agent, meta = load_checkpoint(result.out_dir)
    assert Representation(**meta['representation']) == rep
    assert agent.obs_dim == rep.feature_size(4, 1)  # 4 observation values per frame, 1 torque per action
    report = evaluate_sim(result.out_dir, load_profile('wifi_normal'), episodes=2, seed=0)
    assert report['episodes'] == 2 and report['e2e_latency_ms']['samples'] > 0
