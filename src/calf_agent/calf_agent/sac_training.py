"""The SAC training loop (CleanRL's sac_continuous_action) over the trainer's vector env contract.

The vector env is the PPO trainer's (``calf_agent.trainer``: ``SAME_STEP`` autoreset, flat Box
observations) with ``Box`` actions of shape ``(A,)``. Each vector step stores one transition per env
(a truncated episode's ``info['final_obs']`` as its next observation, bootstrapped; a terminated one
not) and, once more than ``learning_starts`` (uniform random) transitions are stored, makes one gradient
step per env. Observations are stored raw
and normalised by the actor's running statistics when sampled; actions are stored in ``[-1, 1]``.
The logs, the checkpoint (the actor and its normaliser) and the result are the PPO trainer's. Every
``train_state.EVERY_STEPS`` env steps or ``EVERY_SECONDS`` it writes a snapshot that ``resume`` continues
from (``calf_agent.train_state``), on a fresh episode.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from calf_agent.representation import Representation
from calf_agent.sac import ReplayBuffer, SacActor, SacLearner
from calf_agent.seeding import seed_everything
from calf_agent.train_state import EVERY_STEPS, ResumableLoop, Snapshots, check_resume, remove_snapshot
from calf_agent.trainer import Episodes, TrainConfig, TrainResult, check_env, finish, run_log

CSV_FIELDS = ('global_step', 'episodes', 'episodic_return', 'episodic_length', 'critic_loss', 'actor_loss',
              'alpha', 'entropy', 'q_value', 'sps', 'time_s')
LOG_EVERY = 1_000
"""Env steps between progress.csv rows (and ``stop_return`` checks)."""


def train_sac(cfg: TrainConfig, make_vec_env: Callable[[int], gym.vector.VectorEnv], out_dir: Path,
              progress: bool = True, resume: bool = False, snapshot_every: int = EVERY_STEPS) -> TrainResult:
    """Train SAC on ``make_vec_env(cfg.num_envs)``; log and checkpoint into ``out_dir`` as ``trainer.train_ppo`` does,
    with a snapshot every ``snapshot_every`` env steps at most. ``resume``: continue from the snapshot in
    ``out_dir`` (ConfigError if there is none, or if there is one and ``resume`` is False)."""
    out_dir = Path(out_dir)
    check_resume(out_dir, resume)
    rng = seed_everything(cfg.seed, cfg.torch_threads)
    envs = make_vec_env(cfg.num_envs)
    try:
        check_env(envs, cfg.num_envs)
        rep = Representation(**cfg.meta.get('representation', {}))  # what the checkpoint's features will be
        actor = build_actor(envs.single_observation_space, envs.single_action_space, cfg.hidden, rep)
        loop = _Loop(cfg, actor, RecordEpisodeStatistics(envs), rng)
        loop.run(out_dir, progress, Snapshots(out_dir, snapshot_every), resume)
    finally:
        envs.close()
    result = finish(cfg, actor, out_dir, loop.global_step, loop.updates, loop.elapsed, loop.episodes, loop.solved)
    remove_snapshot(out_dir)
    return result


def build_actor(obs_space: gym.Space, action_space: gym.Space, hidden: tuple[int, ...],
                rep: Representation | None = None) -> SacActor:
    """An actor sized to the spaces, the delay state of ``rep`` left unstandardised; ValueError naming the space
    unless actions are a bounded Box ``(A,)``.

    The delay state is scaled already and nearly constant on a steady link: standardised, its values at an
    episode's first ticks (no action applied yet) reached the clip of ±10, and SAC at a constant 5 ticks on
    Pendulum-v1 learned nothing (-1240 after 15,000 steps; -357 with the delay state as it is)."""
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise ValueError(f'SAC trains single continuous actions, a Box of shape (A,), got {action_space}')
    low, high = (np.broadcast_to(b, action_space.shape).tolist() for b in (action_space.low, action_space.high))
    obs_dim = int(obs_space.shape[0])
    unscaled = rep.delay_state_columns(obs_dim) if rep is not None else (0, 0)
    return SacActor(obs_dim, int(action_space.shape[0]), low, high, hidden, unscaled)


def explore(actor: SacActor, obs: np.ndarray, uniform: bool, rng: np.random.Generator) -> np.ndarray:
    """Actions in ``[-1, 1]`` for raw ``obs`` ``[n, obs_dim]``: uniform (before ``learning_starts``), else sampled
    from the actor."""
    if uniform:
        return rng.uniform(-1.0, 1.0, (len(obs), actor.action_dim)).astype(np.float32)
    with torch.inference_mode():
        return actor.sample(actor.obs_norm(torch.from_numpy(obs)))[0].numpy()


class _Loop(ResumableLoop):
    """State of one run: acting, storing, updating and logging."""

    def __init__(self, cfg: TrainConfig, actor: SacActor, envs: gym.vector.VectorEnv,
                 rng: np.random.Generator) -> None:
        self.cfg, self.actor, self.envs, self.rng = cfg, actor, envs, rng
        self.learner = SacLearner(actor, cfg.sac)
        capacity = min(cfg.sac.buffer_size, cfg.total_steps + cfg.num_envs)  # never more rows than transitions
        self.buffer = ReplayBuffer(capacity, actor.obs_dim, actor.action_dim)
        self.episodes = Episodes(cfg.return_window)
        self.global_step = self.updates = 0
        self.elapsed = 0.0
        self.solved = False

    def arrays(self) -> dict[str, np.ndarray]:
        b = self.buffer
        return {'obs': b.obs, 'next_obs': b.next_obs, 'actions': b.actions, 'rewards': b.rewards,
                'terminated': b.terminated}

    def run(self, out_dir: Path, progress: bool, snapshots: Snapshots, resume: bool = False) -> None:
        """Step the envs until the budget is spent or ``stop_return`` is reached; ``resume``: from the snapshot,
        on a fresh episode (seeded by the step)."""
        cfg, sac, n = self.cfg, self.cfg.sac, self.cfg.num_envs
        rows = self.resume(out_dir) if resume else []
        snapshots.restart(self.global_step)
        start = time.perf_counter() - self.elapsed
        obs = np.asarray(self.envs.reset(seed=cfg.seed + self.global_step)[0], dtype=np.float32)
        stats: dict[str, torch.Tensor] = {}
        total = -(-cfg.total_steps // n) * n  # the budget is a minimum: whole vector steps
        logged = self.global_step
        with run_log(out_dir, CSV_FIELDS, total, progress, rows) as log:
            while self.global_step < total:
                self.actor.obs_norm.update(obs)
                unit = self._explore(obs)
                next_obs, reward, term, trunc, info = self.envs.step(self.actor.scale(torch.from_numpy(unit)).numpy())
                next_obs = np.asarray(next_obs, dtype=np.float32)
                stored = next_obs
                if (term | trunc).any():
                    stored = next_obs.copy()
                    for i in np.flatnonzero(term | trunc):
                        stored[i] = info['final_obs'][i]
                self.buffer.add(obs, unit, reward, stored, term)
                self.episodes.record(info)
                obs = next_obs
                self.global_step += n
                if self.global_step > sac.learning_starts:  # the random transitions are stored
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

    def _explore(self, obs: np.ndarray) -> np.ndarray:
        return explore(self.actor, obs, self.global_step < self.cfg.sac.learning_starts, self.rng)

    def _update(self) -> dict[str, torch.Tensor]:
        """One gradient step on a batch sampled from the buffer, observations normalised as now."""
        obs, actions, rewards, next_obs, terminated = self.buffer.sample(self.cfg.sac.batch_size, self.rng)
        norm = self.actor.obs_norm
        with torch.no_grad():
            obs, next_obs = norm(obs), norm(next_obs)
        self.updates += 1
        return self.learner.update(obs, actions, rewards, next_obs, terminated)

    def _row(self, stats: dict[str, torch.Tensor]) -> dict[str, float]:
        return progress_row(self.global_step, self.episodes, self.cfg.return_window, stats, self.elapsed)


def progress_row(global_step: int, episodes: Episodes, window: int, stats: dict[str, torch.Tensor],
                 elapsed: float) -> dict[str, float]:
    """One progress.csv row (the losses of the last update; nan before the first)."""
    return {
        'global_step': global_step,
        'episodes': len(episodes.returns),
        'episodic_return': episodes.mean_return(window),
        'episodic_length': episodes.mean_length(),
        **{key: float(stats[key]) if key in stats else float('nan')
           for key in ('critic_loss', 'actor_loss', 'alpha', 'entropy', 'q_value')},
        'sps': global_step / max(elapsed, 1e-9),
        'time_s': elapsed,
    }
