"""State representations for delayed observations (paper, Table 3): frame stack and action history,
optionally followed by the age of the newest observation.

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
    """Frame stack of ``frames`` observations plus a one-hot history of the last ``actions`` actions.

    With ``obs_age`` the features end with the newest observation's age in seconds (its arrival,
    or the decision, minus its stamp: NetworkedEnv's ``info['obs_age_ms'] / 1e3``).
    """

    frames: int = 1
    actions: int = 0
    obs_age: bool = False

    def __post_init__(self) -> None:
        if self.frames < 1 or self.actions < 0:
            raise ValueError(f'frames must be >= 1 and actions >= 0, got {self.frames} and {self.actions}')
        if not isinstance(self.obs_age, bool):
            raise ValueError(f'obs_age must be true or false, got {self.obs_age!r}')

    def feature_size(self, obs_size: int, n_actions: int) -> int:
        return self.frames * obs_size + self.actions * n_actions + int(self.obs_age)

    def as_dict(self) -> dict[str, int | bool]:
        """The fields, leaving out ``obs_age`` when it is off (so older readers load the result)."""
        return {'frames': self.frames, 'actions': self.actions, **({'obs_age': True} if self.obs_age else {})}


class HistoryFeatures:
    """Builds the policy input from the observations received and the actions sent."""

    def __init__(self, rep: Representation, obs_size: int, n_actions: int) -> None:
        self.rep, self.obs_size, self.n_actions = rep, obs_size, n_actions
        self._frames: deque[np.ndarray] = deque(maxlen=rep.frames)
        self._actions: deque[int] = deque(maxlen=max(rep.actions, 1))
        self._age_s = 0.0

    def reset(self, obs: np.ndarray, age_s: float | None = None) -> np.ndarray:
        """Start an episode: the first observation fills the whole stack, no actions yet.

        ``age_s`` is the observation's age in seconds, required when the representation uses it.
        """
        first = np.asarray(obs, dtype=np.float32).reshape(-1)
        self._frames.clear()
        self._frames.extend([first] * self.rep.frames)
        self._actions.clear()
        self._set_age(age_s)
        return self.features()

    def update(self, obs: np.ndarray, sent_action: int, age_s: float | None = None) -> np.ndarray:
        """Add the action sent for the previous observation and the newly received observation."""
        self._frames.append(np.asarray(obs, dtype=np.float32).reshape(-1))
        if self.rep.actions:
            self._actions.append(int(sent_action))
        self._set_age(age_s)
        return self.features()

    def features(self) -> np.ndarray:
        parts = list(self._frames)
        if self.rep.actions:
            history = np.zeros((self.rep.actions, self.n_actions), dtype=np.float32)
            for row, action in enumerate(reversed(self._actions)):
                history[row, action] = 1.0
            parts.append(history.reshape(-1))
        if self.rep.obs_age:
            parts.append(np.array([self._age_s], dtype=np.float32))
        return np.concatenate(parts)

    def _set_age(self, age_s: float | None) -> None:
        if self.rep.obs_age:
            if age_s is None:
                raise ValueError('this representation appends the observation age: pass age_s')
            self._age_s = float(age_s)


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
        return self.history.reset(obs, self._age_s(info)), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        first = int(np.asarray(action).reshape(-1)[0])
        return self.history.update(obs, first, self._age_s(info)), reward, terminated, truncated, info

    def _age_s(self, info: dict) -> float | None:
        """The observation's age from NetworkedEnv's info, when the representation uses it."""
        return info['obs_age_ms'] / 1e3 if self.history.rep.obs_age else None
