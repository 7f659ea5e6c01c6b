"""A user's own task for the env-resolution tests: an entry point with a spec file beside it."""
from __future__ import annotations

import gymnasium as gym
import numpy as np


class Wheel(gym.Env):
    """A wheel whose speed follows a velocity command in [-1, 1]; no dt of its own."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.applied: list[float] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.applied = []
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.applied.append(float(np.asarray(action).reshape(-1)[0]))
        return np.array([len(self.applied)], np.float32), 1.0, False, len(self.applied) >= 20, {}


def make_wheel() -> gym.Env:
    return Wheel()


NOT_CALLABLE = 3
