"""The environments CALF runs, with their tick period and hold rule, and their networked builds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import yaml

from calf_core.errors import ConfigError
from calf_core.link import Link
from calf_core.networked_env import NetworkedEnv
from calf_core.profiles import Profile
from calf_core.timing import HoldMode, Stepper

MINIGRID_DONE = 6  # MiniGrid's `done` action does nothing in DoorKey: the no-op


@dataclass(frozen=True)
class EnvSpec:
    """How one task is ticked and what it does without a fresh action."""

    name: str
    gym_id: str
    dt: float  # tick period (seconds)
    hold: HoldMode
    noop_action: int | None
    initial_action: int
    success_on_truncation: bool
    safe_start: tuple[int, ...] = ()  # a policy-free action cycle that keeps the task recoverable while
    # the first plan is on its way (CartPole: alternating pushes keep the pole up for >= 20 ticks)


ENV_SPECS: dict[str, EnvSpec] = {
    'cartpole': EnvSpec('cartpole', 'CartPole-v1', 0.02, HoldMode.LAST, None, 0, True, (0, 1)),
    'minigrid': EnvSpec('minigrid', 'MiniGrid-DoorKey-5x5-v0', 0.1, HoldMode.NOOP, MINIGRID_DONE,
                        MINIGRID_DONE, False),
}


def env_spec(name: str) -> EnvSpec:
    """The spec for ``name`` (``cartpole`` or ``minigrid``), or a ConfigError naming the choices."""
    try:
        return ENV_SPECS[name]
    except KeyError:
        raise ConfigError(f'unknown env {name!r}: choose one of {", ".join(ENV_SPECS)}') from None


class FlatImageObservation(gym.ObservationWrapper):
    """MiniGrid's partial view as a flat float32 vector (the image only)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        image = env.observation_space['image']
        self.observation_space = gym.spaces.Box(0.0, float(image.high.max()), (int(np.prod(image.shape)),),
                                                np.float32)

    def observation(self, observation: dict) -> np.ndarray:
        return np.asarray(observation['image'], dtype=np.float32).reshape(-1)


def make_env(name: str) -> gym.Env:
    """A fresh gymnasium env for ``name`` with a flat float observation."""
    spec = env_spec(name)
    if name == 'minigrid':
        import minigrid  # noqa: F401  (registers the MiniGrid ids)
        return FlatImageObservation(gym.make(spec.gym_id))
    return gym.make(spec.gym_id)


def parse_start_plan(value: Any) -> tuple[int, ...]:
    """A start plan given as a list of actions, or as its YAML text (``''``: none), else a ConfigError."""
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value) if value.strip() else []
        except yaml.YAMLError:
            pass  # reported below, as the text it is
    if not isinstance(value, (list, tuple)) or not all(isinstance(a, int) and not isinstance(a, bool)
                                                       for a in value):
        raise ConfigError(f'start_plan must be a list of integer actions such as [0, 1], got {value!r}')
    return tuple(value)


def make_stepper(name: str, env: gym.Env | None = None, start_plan: tuple[int, ...] = ()) -> Stepper:
    """The tick-driven stepper for ``name``, as the env node runs it."""
    spec = env_spec(name)
    return Stepper(env if env is not None else make_env(name), spec.hold, spec.initial_action,
                   spec.noop_action, spec.success_on_truncation, start_plan=start_plan)


def make_networked_env(name: str, profile: Profile, seed: int | None = None, plan_horizon: int = 1,
                       links: tuple[Link, Link] | None = None, env: gym.Env | None = None,
                       start_plan: tuple[int, ...] = ()) -> NetworkedEnv:
    """``name`` (or ``env``, a variant of it) behind ``profile``'s uplink and downlink, in virtual time.

    ``start_plan`` is the env-side action cycle run until the first plan arrives (default: hold the
    initial action).
    """
    spec = env_spec(name)
    uplink, downlink = links if links is not None else profile.make_links(np.random.default_rng(seed))
    inner = env if env is not None else make_env(name)
    return NetworkedEnv(inner, uplink, downlink, spec.dt, profile.compute_ms, spec.hold, spec.noop_action,
                        spec.initial_action, plan_horizon, spec.success_on_truncation, seed, start_plan)
