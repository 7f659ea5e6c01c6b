"""Tiny-budget training runs: CartPole learns, MiniGrid+LSTM runs, seeds reproduce exactly."""
from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers import FlattenObservation
from safetensors.torch import load_file

from calf_agent.checkpoint import load_checkpoint
from calf_agent.policies import LstmAgent, MlpAgent
from calf_agent.trainer import CSV_FIELDS, TrainConfig, cartpole_defaults, minigrid_defaults
from calf_agent.training import train

SAME_STEP = {'autoreset_mode': gym.vector.AutoresetMode.SAME_STEP}
RANDOM_CARTPOLE_RETURN = 22.0


def make_cartpole(num_envs: int) -> gym.vector.VectorEnv:
    return gym.make_vec('CartPole-v1', num_envs, vectorization_mode='sync', vector_kwargs=SAME_STEP)


def make_minigrid(num_envs: int) -> gym.vector.VectorEnv:
    from minigrid.wrappers import ImgObsWrapper

    return gym.make_vec('MiniGrid-Empty-5x5-v0', num_envs, vectorization_mode='sync',
                        wrappers=[ImgObsWrapper, FlattenObservation], vector_kwargs=SAME_STEP)


@pytest.mark.slow
def test_cartpole_learns_on_a_tiny_budget(tmp_path: Path) -> None:
    cfg = dataclasses.replace(cartpole_defaults(), total_steps=12_288, seed=1)
    result = train(cfg, make_cartpole, tmp_path, progress=False)
    assert result.global_steps == 12_288 and result.iterations == 48 and not result.solved
    first = np.mean(result.episode_returns[:20])
    assert result.mean_return > max(2 * first, 3 * RANDOM_CARTPOLE_RETURN)
    with open(tmp_path / 'progress.csv', newline='') as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 48 and tuple(rows[0]) == CSV_FIELDS
    assert int(rows[-1]['global_step']) == 12_288
    assert any((tmp_path / 'tb').iterdir())
    agent, meta = load_checkpoint(tmp_path)
    assert isinstance(agent, MlpAgent)
    assert meta['steps'] == 12_288 and meta['seed'] == 1 and meta['env'] == 'cartpole'
    assert meta['train_config']['ppo']['update_epochs'] == cfg.ppo.update_epochs


def test_stop_return_ends_training_early(tmp_path: Path) -> None:
    cfg = dataclasses.replace(cartpole_defaults(), total_steps=8192, stop_return=15.0)
    result = train(cfg, make_cartpole, tmp_path, progress=False)
    assert result.solved and result.global_steps < 8192


@pytest.mark.slow
def test_lstm_on_minigrid_runs_and_saves(tmp_path: Path) -> None:
    cfg = dataclasses.replace(minigrid_defaults(), total_steps=512, num_envs=4, num_steps=64,
                              lstm_size=32, meta={'env': 'minigrid', 'regime': 'lstm'})
    result = train(cfg, make_minigrid, tmp_path, progress=False)
    assert result.iterations == 2
    agent, meta = load_checkpoint(tmp_path)
    assert isinstance(agent, LstmAgent) and agent.obs_dim == 147 and agent.n_actions == 7
    assert meta['regime'] == 'lstm'
    actions, state = agent.act(np.zeros(147, dtype=np.float32))
    assert actions.shape == (1,) and 0 <= actions[0] < 7 and state[0].shape == (1, 1, 32)


@pytest.mark.parametrize(('agent', 'make'), [('mlp', make_cartpole), ('lstm', make_minigrid)])
@pytest.mark.slow
def test_same_seed_gives_identical_weights(tmp_path: Path, agent: str, make) -> None:
    cfg = TrainConfig(total_steps=512, num_envs=4, num_steps=64, seed=7, agent=agent,
                      hidden=(32,), lstm_size=16)
    weights = []
    for run in ('a', 'b'):
        train(cfg, make, tmp_path / run, progress=False)
        weights.append(load_file(str(tmp_path / run / 'policy.safetensors')))
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    other = train(dataclasses.replace(cfg, seed=8), make, tmp_path / 'c', progress=False)
    changed = load_file(str(other.out_dir / 'policy.safetensors'))
    assert any(not torch.equal(weights[0][k], changed[k]) for k in changed)


def test_next_step_autoreset_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match='SAME_STEP'):
        train(TrainConfig(total_steps=256, num_envs=2, num_steps=128),
              lambda n: gym.make_vec('CartPole-v1', n, vectorization_mode='sync'), tmp_path,
              progress=False)


def test_budget_is_a_minimum_rounded_up_to_whole_rollouts() -> None:
    for total, rollouts in ((10, 1), (1024, 1), (1025, 2), (50_000, 49)):
        cfg = TrainConfig(total_steps=total, num_envs=8, num_steps=128)
        assert cfg.num_iterations == rollouts
        assert cfg.num_iterations * cfg.batch_size >= total


def test_train_config_validates() -> None:
    with pytest.raises(ValueError, match='unknown agent'):
        TrainConfig(agent='gru')
    with pytest.raises(ValueError, match='must be >= 1'):
        TrainConfig(total_steps=0)
    with pytest.raises(ValueError, match='envs'):
        TrainConfig(agent='lstm', num_envs=2, total_steps=1024)


@pytest.mark.slow
def test_plan_policy_trains_on_executed_elements_behind_a_network(tmp_path: Path) -> None:
    from calf_agent.regimes import train_policy
    result = train_policy('cartpole', 'full_net_aware', 0, tmp_path, steps=512, plan_horizon=4, progress=False)
    agent, meta = load_checkpoint(tmp_path)
    assert result.global_steps == 512 and agent.plan_horizon == 4 and meta['plan_horizon'] == 4
    assert meta['train_config']['mask_unexecuted']
    plan, _ = agent.act(np.zeros(agent.obs_dim, dtype=np.float32), deterministic=True)
    assert plan.shape == (1, 4)


@pytest.mark.slow
def test_cartpole_learns_on_the_fast_path_under_full_net_aware(tmp_path: Path) -> None:
    from calf_agent.regimes import default_representation, vec_env_factory
    from calf_agent.representation import VectorHistoryWrapper
    from calf_core.profiles import load_profile
    profile = load_profile('full_net_aware')
    factory = vec_env_factory('cartpole', profile, default_representation('cartpole', profile), seed=1, fast=True)
    assert isinstance(factory(2), VectorHistoryWrapper)
    cfg = dataclasses.replace(cartpole_defaults(), total_steps=12_288, seed=1)
    result = train(cfg, factory, tmp_path / 'a', progress=False)
    first = np.mean(result.episode_returns[:20])
    assert result.mean_return > max(2 * first, 3 * RANDOM_CARTPOLE_RETURN)
    short = dataclasses.replace(cfg, total_steps=512)
    runs = [train(short, factory, tmp_path / run, progress=False) for run in ('b', 'c')]
    assert runs[0].episode_returns == runs[1].episode_returns
    weights = [load_file(str(run.out_dir / 'policy.safetensors')) for run in runs]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])

