"""BPQL's training loop: SAC's actor on what the link delivers, its critic on the true state (``calf_agent.bpql``).

``cfg.num_envs`` networked envs (``HistoryWrapper(NetworkedEnv)``, the features every CALF policy sees)
are driven one decision each per loop step; each env's ``SemiMdp`` listens to its ticks, and every
completed transition goes to the replay buffer. As in SAC's loop, the first ``learning_starts`` decisions
act uniformly at random, then each decision is followed by one gradient step. The budget counts decisions,
as SAC's does. The features are normalised by the actor's running statistics (saved with it), the true
states by the critic's own (training only). The logs, the checkpoint and the result are SAC's, with
``method: bpql`` in ``meta.json``; so are its snapshots (``calf_agent.train_state``, BPQL's state normaliser
included): a resumed run starts fresh episodes, its semi-MDPs empty.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from calf_agent.bpql import BeliefReplay, SemiMdp
from calf_agent.normalize import RunningNorm
from calf_agent.representation import HistoryWrapper, Representation
from calf_agent.sac import SacActor, SacLearner
from calf_agent.sac_training import CSV_FIELDS, LOG_EVERY, build_actor, explore, progress_row
from calf_agent.seeding import seed_everything
from calf_agent.train_state import EVERY_STEPS, ResumableLoop, Snapshots, check_resume, remove_snapshot
from calf_agent.trainer import Episodes, TrainConfig, TrainResult, finish, run_log
from calf_core.errors import ConfigError
from calf_core.networked_env import NetworkedEnv


def train_bpql(cfg: TrainConfig, make_env: Callable[[int], NetworkedEnv], rep: Representation, out_dir: Path,
               progress: bool = True, resume: bool = False, snapshot_every: int = EVERY_STEPS) -> TrainResult:
    """Train BPQL on ``make_env(i)`` for i < ``cfg.num_envs`` seen through ``rep``; log, snapshot and checkpoint
    into ``out_dir`` as SAC does. ConfigError unless the env's actions are a Box of shape (A,)."""
    out_dir = Path(out_dir)
    check_resume(out_dir, resume)
    rng = seed_everything(cfg.seed, cfg.torch_threads)
    raw = [make_env(i) for i in range(cfg.num_envs)]
    envs = [HistoryWrapper(env, rep) for env in raw]
    try:
        space = raw[0].stepper.env.action_space
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
            raise ConfigError(f'BPQL trains continuous actions (a Box of shape (A,)), and this env\'s actions are '
                              f'{space}: train it with --algo ppo')
        actor = build_actor(envs[0].observation_space, space, cfg.hidden, rep)
        loop = _Loop(cfg, actor, envs, raw, rng)
        loop.run(out_dir, progress, Snapshots(out_dir, snapshot_every), resume)
    finally:
        for env in envs:
            env.close()
    cfg = replace(cfg, meta={**cfg.meta, 'method': 'bpql'})
    result = finish(cfg, actor, out_dir, loop.global_step, loop.updates, loop.elapsed, loop.episodes, loop.solved)
    remove_snapshot(out_dir)
    return result


class _Loop(ResumableLoop):
    """State of one run: acting, assembling transitions, updating and logging."""

    def __init__(self, cfg: TrainConfig, actor: SacActor, envs: list[HistoryWrapper], raw: list[NetworkedEnv],
                 rng: np.random.Generator) -> None:
        self.cfg, self.actor, self.envs, self.rng = cfg, actor, envs, rng
        state_dim = int(np.prod(raw[0].observation_space.shape))
        self.learner = SacLearner(actor, cfg.sac, critic_obs_dim=state_dim)
        self.state_norm = RunningNorm(state_dim)
        self.mdps = [SemiMdp(cfg.sac.gamma) for _ in raw]
        for env, mdp in zip(raw, self.mdps):
            env.tick_listener = mdp.on_record
        capacity = min(cfg.sac.buffer_size, cfg.total_steps + cfg.num_envs)  # at most one per decision
        self.buffer = BeliefReplay(capacity, actor.obs_dim, state_dim, actor.action_dim)
        self.episodes = Episodes(cfg.return_window)
        self.global_step = self.updates = 0
        self.elapsed = 0.0
        self.solved = False

    def arrays(self) -> dict[str, np.ndarray]:
        return self.buffer.arrays

    def norms(self) -> dict[str, torch.nn.Module]:
        return {'state_norm': self.state_norm}

    def run(self, out_dir: Path, progress: bool, snapshots: Snapshots, resume: bool = False) -> None:
        """Drive the envs until the budget is spent or ``stop_return`` is reached; ``resume``: from the snapshot,
        on fresh episodes (seeded by the step)."""
        cfg, n = self.cfg, self.cfg.num_envs
        rows = self.resume(out_dir) if resume else []
        snapshots.restart(self.global_step)
        start = time.perf_counter() - self.elapsed
        features, seqs = [], []
        for i, env in enumerate(self.envs):
            obs, info = env.reset(seed=cfg.seed * 1000 + i + self.global_step)
            features.append(np.asarray(obs, np.float32))
            seqs.append(int(info['obs_seq']))
        returns, lengths = np.zeros(n), np.zeros(n, np.int64)
        stats: dict[str, torch.Tensor] = {}
        total = -(-cfg.total_steps // n) * n
        logged = self.global_step
        with run_log(out_dir, CSV_FIELDS, total, progress, rows) as log:
            while self.global_step < total:
                x = np.stack(features)
                self.actor.obs_norm.update(x)
                unit = self._explore(x)
                scaled = self.actor.scale(torch.from_numpy(unit)).numpy()
                for i, (env, mdp) in enumerate(zip(self.envs, self.mdps)):
                    mdp.decide(seqs[i], x[i], unit[i])
                    obs, reward, terminated, truncated, info = env.step(scaled[i])
                    returns[i] += reward
                    lengths[i] += info['ticks']
                    if terminated or truncated:
                        self.episodes.returns.append(float(returns[i]))
                        self.episodes.lengths.append(int(lengths[i]))
                        returns[i], lengths[i] = 0.0, 0
                        obs, info = env.reset()
                    features[i], seqs[i] = np.asarray(obs, np.float32), int(info['obs_seq'])
                    for transition in mdp.take():
                        self.state_norm.update(transition.state[None])
                        self.buffer.add(transition)
                self.global_step += n
                if self.global_step > cfg.sac.learning_starts and self.buffer.size:
                    for _ in range(n):
                        stats = self._update()
                if self.global_step - logged >= LOG_EVERY or self.global_step >= total:
                    self.elapsed = time.perf_counter() - start
                    row = self._row(stats)
                    log.write(row, self.global_step - logged)
                    rows.append(row)
                    logged = self.global_step
                    if cfg.stop_return is not None and row['episodic_return'] >= cfg.stop_return:
                        self.solved = True
                        break
                    if self.global_step < total and snapshots.due(self.global_step):
                        snapshots.write(*self.snapshot(rows), self.global_step)
        self.elapsed = time.perf_counter() - start

    def _explore(self, x: np.ndarray) -> np.ndarray:
        return explore(self.actor, x, self.global_step < self.cfg.sac.learning_starts, self.rng)

    def _update(self) -> dict[str, torch.Tensor]:
        """One gradient step on a batch: features by the actor's statistics, states by the critic's."""
        batch = self.buffer.sample(self.cfg.sac.batch_size, self.rng)
        with torch.no_grad():
            obs, next_obs = self.actor.obs_norm(batch['features']), self.actor.obs_norm(batch['next_features'])
            states, next_states = self.state_norm(batch['state']), self.state_norm(batch['next_state'])
        self.updates += 1
        return self.learner.update(obs, batch['action'], batch['reward'], next_obs, batch['terminated'],
                                   states=states, next_states=next_states, discounts=batch['discount'])

    def _row(self, stats: dict[str, torch.Tensor]) -> dict[str, float]:
        return progress_row(self.global_step, self.episodes, self.cfg.return_window, stats, self.elapsed)
