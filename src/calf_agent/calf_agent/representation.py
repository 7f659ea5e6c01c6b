"""State representations for delayed observations (paper, Table 3): frame stack and action history.

``HistoryFeatures`` is the one implementation: the training wrapper and the policy node both feed
it the observations the policy receives and the actions the policy sent.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import gymnasium as gym
import numpy as np


@dataclass(frozen=True)
class Representation:
    """Frame stack of ``frames`` observations plus a one-hot history of the last ``actions`` actions."""

    frames: int = 1
    actions: int = 0

    def __post_init__(self) -> None:
        if self.frames < 1 or self.actions < 0:
            raise ValueError(f'frames must be >= 1 and actions >= 0, got {self.frames} and {self.actions}')

    def feature_size(self, obs_size: int, n_actions: int) -> int:
        return self.frames * obs_size + self.actions * n_actions

    def as_dict(self) -> dict[str, int]:
        return {'frames': self.frames, 'actions': self.actions}


class HistoryFeatures:
    """Builds the policy input from the observations received and the actions sent."""

    def __init__(self, rep: Representation, obs_size: int, n_actions: int) -> None:
        self.rep, self.obs_size, self.n_actions = rep, obs_size, n_actions
        self._frames: deque[np.ndarray] = deque(maxlen=rep.frames)
        self._actions: deque[int] = deque(maxlen=max(rep.actions, 1))

    def reset(self, obs: np.ndarray) -> np.ndarray:
        """Start an episode: the first observation fills the whole stack, no actions yet."""
        first = np.asarray(obs, dtype=np.float32).reshape(-1)
        self._frames.clear()
        self._frames.extend([first] * self.rep.frames)
        self._actions.clear()
        return self.features()

    def update(self, obs: np.ndarray, sent_action: int) -> np.ndarray:
        """Add the action sent for the previous observation and the newly received observation."""
        self._frames.append(np.asarray(obs, dtype=np.float32).reshape(-1))
        if self.rep.actions:
            self._actions.append(int(sent_action))
        return self.features()

    def features(self) -> np.ndarray:
        parts = list(self._frames)
        if self.rep.actions:
            history = np.zeros((self.rep.actions, self.n_actions), dtype=np.float32)
            for row, action in enumerate(reversed(self._actions)):
                history[row, action] = 1.0
            parts.append(history.reshape(-1))
        return np.concatenate(parts)


class HistoryWrapper(gym.Wrapper):
    """Gymnasium wrapper applying ``HistoryFeatures`` to a (networked) env's observations."""

    def __init__(self, env: gym.Env, rep: Representation) -> None:
        super().__init__(env)
        obs_size = int(np.prod(env.observation_space.shape))
        space = env.action_space
        n_actions = int(space.n if isinstance(space, gym.spaces.Discrete) else space.nvec[0])
        self.history = HistoryFeatures(rep, obs_size, n_actions)
        size = rep.feature_size(obs_size, n_actions)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.history.reset(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        first = int(np.asarray(action).reshape(-1)[0])
        return self.history.update(obs, first), reward, terminated, truncated, info
