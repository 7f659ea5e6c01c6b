"""Training regimes (paper, Table 2) and the networked, represented envs PPO trains on."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Callable

import gymnasium as gym

from calf_agent.representation import HistoryWrapper, Representation
from calf_agent.trainer import TrainConfig, TrainResult, cartpole_defaults, minigrid_defaults, train
from calf_env.envs import env_spec, make_networked_env
from calf_shim.errors import ConfigError
from calf_shim.profiles import Profile, load_profile, sample_e2e

REGIMES: dict[str, str] = {'baseline': 'sim_clean', 'delay_only': 'delay_only', 'full': 'full_net_aware'}
"""Regime name -> the network profile it trains under."""


def regime_profile(regime: str) -> str:
    try:
        return REGIMES[regime]
    except KeyError:
        raise ConfigError(f'unknown regime {regime!r}: choose one of {", ".join(REGIMES)}') from None


def typical_delay_ticks(profile: Profile, dt: float) -> int:
    """d: the profile's median end-to-end latency in env ticks, rounded up (0 for a clean link)."""
    p50_ms = sample_e2e(profile, n=20_000, seed=0, dt_s=dt).p50_ms
    return 0 if not p50_ms > 0 else math.ceil(p50_ms / (dt * 1e3) - 1e-9)


def default_representation(env: str, profile: Profile) -> Representation:
    """Paper, Table 3: CartPole stacks k = d + 1 frames and the d in-flight actions; MiniGrid's LSTM
    sees one frame."""
    if env == 'minigrid':
        return Representation(frames=1, actions=0)
    d = typical_delay_ticks(profile, env_spec(env).dt)
    return Representation(frames=d + 1, actions=d)


def vec_env_factory(env: str, profile: Profile, rep: Representation, seed: int, plan_horizon: int = 1,
                    make_inner: Callable[[], gym.Env] | None = None) -> Callable[[int], gym.vector.VectorEnv]:
    """A factory of ``n`` networked envs with independent link seeds, as the trainer expects.

    ``make_inner`` builds a variant of ``env`` to put behind the network (e.g. a sub-task).
    """

    def make_one(index: int) -> Callable[[], gym.Env]:
        return lambda: HistoryWrapper(make_networked_env(env, profile, seed=seed * 1000 + index,
                                                         plan_horizon=plan_horizon,
                                                         env=make_inner() if make_inner else None), rep)

    def make(n: int) -> gym.vector.VectorEnv:
        return gym.vector.SyncVectorEnv([make_one(i) for i in range(n)],
                                        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)

    return make


def train_policy(env: str, network: str, seed: int, out_dir: Path, steps: int | None = None,
                 regime: str | None = None, rep: Representation | None = None, plan_horizon: int = 1,
                 progress: bool = True, mask_unexecuted: bool = True, plan_head: str = 'independent') -> TrainResult:
    """Train PPO on ``env`` behind ``network`` and write the checkpoint into ``out_dir``.

    Plan policies (``plan_horizon > 1``) learn only from executed plan elements unless
    ``mask_unexecuted`` is False; an MLP plan actor is ``plan_head`` ('time': π(a | obs, j),
    'independent': one head per element; the LSTM agent always has independent heads).
    """
    if steps is not None and steps <= 0:
        raise ConfigError(f'--steps must be > 0, got {steps}')
    profile = load_profile(network)
    rep = rep or default_representation(env, profile)
    base: TrainConfig = cartpole_defaults() if env_spec(env).name == 'cartpole' else minigrid_defaults()
    meta = {'env': env, 'regime': regime or 'custom', 'network': profile.name,
            'representation': rep.as_dict(), 'plan_horizon': plan_horizon}
    cfg = replace(base, seed=seed, total_steps=steps or base.total_steps, meta=meta,
                  mask_unexecuted=mask_unexecuted and plan_horizon > 1,
                  plan_head=plan_head if plan_horizon > 1 and base.agent == 'mlp' else 'independent')
    return train(cfg, vec_env_factory(env, profile, rep, seed, plan_horizon), out_dir, progress=progress)
