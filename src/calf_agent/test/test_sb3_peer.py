"""Peer check: Stable-Baselines3 trains through NetworkedEnv unchanged, as through any gymnasium env."""
from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.env_checker import check_env

from calf_agent.regimes import default_representation
from calf_agent.representation import HistoryWrapper
from calf_core.envs import make_networked_env
from calf_core.profiles import load_profile


@pytest.mark.slow
def test_sb3_ppo_trains_through_networked_env() -> None:
    profile = load_profile('full_net_aware')
    env = HistoryWrapper(make_networked_env('cartpole', profile, seed=0), default_representation('cartpole', profile))
    check_env(env, warn=False)
    model = PPO('MlpPolicy', env, n_steps=256, batch_size=64, n_epochs=2, seed=0, device='cpu')
    model.learn(total_timesteps=512)
    assert model.num_timesteps >= 512
    obs, _ = env.reset(seed=1)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(np.int64(action))
