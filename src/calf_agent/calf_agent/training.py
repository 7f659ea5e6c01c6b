"""One entry point for training a policy on a vector env: PPO (``calf_agent.trainer``) or SAC
(``calf_agent.sac_training``), chosen by ``TrainConfig.algo``. BPQL needs the networked envs themselves (their
true states): ``calf_agent.bpql_training.train_bpql``, which ``calf_agent.regimes.train_policy`` chooses."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gymnasium as gym

from calf_agent.sac_training import train_sac
from calf_agent.trainer import TrainConfig, TrainResult, train_ppo


def train(cfg: TrainConfig, make_vec_env: Callable[[int], gym.vector.VectorEnv], out_dir: Path,
          progress: bool = True) -> TrainResult:
    """Train with ``cfg.algo`` on ``make_vec_env(cfg.num_envs)``; log and checkpoint into ``out_dir``
    (``progress.csv``, TensorBoard events under ``tb/``, ``policy.safetensors`` and ``meta.json``)."""
    if cfg.algo == 'bpql':
        raise ValueError('bpql trains on networked envs and their true states: use calf_agent.bpql_training.train_bpql')
    run = train_sac if cfg.algo == 'sac' else train_ppo
    return run(cfg, make_vec_env, out_dir, progress)
