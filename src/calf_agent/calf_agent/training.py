"""One entry point for training a policy on a vector env: PPO (``calf_agent.trainer``) or SAC
(``calf_agent.sac_training``), chosen by ``TrainConfig.algo``. BPQL needs the networked envs themselves (their
true states): ``calf_agent.bpql_training.train_bpql``, which ``calf_agent.regimes.train_policy`` chooses."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gymnasium as gym

from calf_agent.sac_training import train_sac
from calf_agent.train_state import EVERY_STEPS
from calf_agent.trainer import TrainConfig, TrainResult, train_ppo
from calf_core.errors import ConfigError


def train(cfg: TrainConfig, make_vec_env: Callable[[int], gym.vector.VectorEnv], out_dir: Path,
          progress: bool = True, resume: bool = False, snapshot_every: int = EVERY_STEPS) -> TrainResult:
    """Train with ``cfg.algo`` on ``make_vec_env(cfg.num_envs)``; log and checkpoint into ``out_dir``
    (``progress.csv``, TensorBoard events under ``tb/``, ``policy.safetensors`` and ``meta.json``). SAC also
    snapshots every ``snapshot_every`` env steps, and with ``resume`` continues from the snapshot."""
    if cfg.algo == 'bpql':
        raise ValueError('bpql trains on networked envs and their true states: use calf_agent.bpql_training.train_bpql')
    if cfg.algo == 'sac':
        return train_sac(cfg, make_vec_env, out_dir, progress, resume, snapshot_every)
    if resume:
        raise ConfigError('--resume continues a SAC or BPQL training from its snapshot: PPO runs have none')
    return train_ppo(cfg, make_vec_env, out_dir, progress)
