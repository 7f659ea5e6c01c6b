"""Evaluate a checkpoint in virtual time (``calf eval --backend sim``), episodes batched across envs."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from calf_agent.checkpoint import load_checkpoint
from calf_agent.gaussian import acts_continuously
from calf_agent.plan_agent import plan_actions, plan_row
from calf_agent.policies import new_episode_state
from calf_agent.policy_runner import check_action_space, check_observation_size
from calf_agent.representation import (
    HistoryBatch,
    Representation,
    history_actions,
    observation_age_s,
    observation_facts,
    remembered_actions,
    stacked_infos,
)
from calf_core import progress as progress_bars
from calf_core.envs import make_networked_env
from calf_core.profiles import Profile


def percentiles_ms(samples: Any) -> dict[str, Any]:
    """The p50 and p95 of ``samples`` (ms; None if there are none) and their count."""
    values = np.asarray(samples, dtype=float)
    pct = (lambda q: round(float(np.percentile(values, q)), 3)) if values.size else (lambda q: None)
    return {'p50': pct(50), 'p95': pct(95), 'samples': int(values.size)}


@dataclass
class EpisodeLog:
    """Per-episode outcomes gathered by either evaluation backend."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    episode_e2e_ms: list[list[float]] = field(default_factory=list)  # per episode, in arrival order
    compute_ms: list[float] = field(default_factory=list)  # the policy's measured answer times (live only)
    obs_lost: int = 0
    actions_lost: int = 0

    def add(self, episode_return: float, length: int, success: bool, e2e_ms: Any) -> None:
        self.returns.append(float(episode_return))
        self.lengths.append(int(length))
        self.successes.append(bool(success))
        self.episode_e2e_ms.append([float(x) for x in e2e_ms])
        self.e2e_ms.extend(self.episode_e2e_ms[-1])

    def report(self, backend: str, profile: Profile, keep_samples: bool = False, **extra: Any) -> dict[str, Any]:
        """The stable JSON of ``calf eval``; ``keep_samples`` adds every E2E latency sample, flat and per episode.
        ``policy_compute_ms`` gives the policy's measured answer times (none in virtual time) beside the
        ``compute_ms`` that ``profile`` assumes.

        ``mode`` repeats ``backend`` for readers of the previous release; it goes with ``--mode``."""
        return {'backend': backend, 'mode': backend, 'network': profile.name, 'episodes': len(self.returns),
                'mean_return': float(np.mean(self.returns)), 'std_return': float(np.std(self.returns)),
                'success_rate': float(np.mean(self.successes)), 'mean_length': float(np.mean(self.lengths)),
                'e2e_latency_ms': percentiles_ms(self.e2e_ms),
                'policy_compute_ms': {**percentiles_ms(self.compute_ms), 'profile_assumes': profile.compute_ms},
                'obs_lost': self.obs_lost, 'actions_lost': self.actions_lost,
                'returns': self.returns, **extra,
                **({'e2e_samples_ms': self.e2e_ms, 'episode_e2e_samples_ms': self.episode_e2e_ms}
                   if keep_samples else {})}


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Evaluation's forward passes are small: more torch threads only contend for the cores (ten times
    slower on a loaded machine). The caller's setting is restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@one_torch_thread()
def evaluate_sim(policy_dir: Path | str, profile: Profile, episodes: int, seed: int,
                 batch: int = 16, keep_samples: bool = False, progress: bool = False) -> dict[str, Any]:
    """Run ``episodes`` episodes of the checkpoint behind ``profile`` in NetworkedEnv, ``batch`` at a time
    (one forward pass per tick for all of them, their features built together); ``progress``: a bar over episodes
    (``calf_core.progress``).

    The env runs the checkpoint's ``start_plan`` (if it names one) until the first plan arrives.
    """
    agent, meta = load_checkpoint(policy_dir)
    rep = Representation(**meta.get('representation', {}))
    horizon = int(meta.get('plan_horizon', 1))
    envs = [make_networked_env(meta['env'], profile, seed=seed + i, plan_horizon=horizon,
                               start_plan=_start_plan(meta))
            for i in range(min(batch, episodes))]
    check_action_space(agent, envs[0].action_space, meta['env'])
    width = history_actions(envs[0].action_space)
    continuous = acts_continuously(agent)
    obs_size = int(np.prod(envs[0].observation_space.shape))
    check_observation_size(agent, rep, obs_size, width, meta['env'])
    history = HistoryBatch(rep, obs_size, width, len(envs), continuous)  # every env's features, built at once
    log, started = EpisodeLog(), 0
    running = np.ones(len(envs), dtype=bool)  # envs still playing an episode
    seqs = np.zeros(len(envs), dtype=np.int64)
    applied = np.full(len(envs), -1, dtype=np.int64)  # each observation's applied_obs_seq
    for i, env in enumerate(envs):
        seqs[i], applied[i] = _start(env, history, i, seed + started)
        started += 1
    state = None
    state_reset = np.ones(len(envs), dtype=bool)
    with progress_bars.bar(episodes, 'episode', 'eval', allowed=progress) as bar:
        while running.any():
            state = new_episode_state(agent, state, state_reset)
            plans, state = agent.act(history.features(), state, deterministic=True, seq=seqs, applied_seq=applied)
            actions = plan_actions(plans)
            state_reset[:] = False
            going: list[int] = []
            observed: list[tuple[np.ndarray, dict]] = []
            for i in np.flatnonzero(running):
                obs, _, terminated, truncated, info = envs[i].step(plan_row(plans, i))
                if not (terminated or truncated):
                    going.append(i)
                    observed.append((obs, info))
                    seqs[i], applied[i] = info['obs_seq'], info['applied_obs_seq']
                    continue
                summary = envs[i].stepper.finish()
                log.add(summary.episode_return, summary.length, summary.success, info['episode_e2e_ms'])
                log.obs_lost += info['obs_lost']
                log.actions_lost += info['actions_lost']
                bar.update(1)
                running[i] = False
                if started < episodes:
                    seqs[i], applied[i] = _start(envs[i], history, i, seed + started)
                    running[i] = state_reset[i] = True
                    started += 1
            if going:
                rows = np.array(going)
                sent = remembered_actions(actions[rows], len(rows), continuous, width, rep.history_element)
                infos = stacked_infos([info for _, info in observed])
                history.update(rows, np.stack([obs for obs, _ in observed]), sent, observation_age_s(rep, infos),
                               observation_facts(rep, infos))
    return log.report('sim', profile, keep_samples, policy=str(policy_dir), seed=seed)


def _start(env: Any, history: HistoryBatch, row: int, seed: int) -> tuple[int, int]:
    """Reset ``env`` (``history``'s ``row``) for a new episode; return the tick of the observation and its
    ``applied_obs_seq``."""
    obs, info = env.reset(seed=seed)
    rep, infos = history.rep, stacked_infos([info])
    history.reset(np.array([row]), obs[None], observation_age_s(rep, infos), observation_facts(rep, infos))
    return int(info['obs_seq']), int(info['applied_obs_seq'])


def _start_plan(meta: dict[str, Any]) -> tuple[Any, ...] | None:
    """The checkpoint's start plan, or None for the task spec's."""
    plan = meta.get('start_plan')
    return None if plan is None else tuple(tuple(a) if isinstance(a, list) else a for a in plan)
