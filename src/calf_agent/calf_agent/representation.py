"""State representations for delayed observations (paper, Table 3): frame stack and action history,
optionally followed by the age of the newest observation.

``HistoryBatch`` is the one implementation, for ``n`` rows at once; ``HistoryFeatures`` is its
one-row form. The training wrappers (``HistoryWrapper`` per env, ``VectorHistoryWrapper`` over a
vector env) and the policy node all feed it the observations the policy receives and the actions
the policy sent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


class HistoryBatch:
    """Builds the policy inputs of ``n`` rows (envs) from the observations received and the actions sent.

    Each row keeps its last ``frames`` observations (oldest first), its last ``actions`` sent actions
    (newest first, -1 where none was sent yet) and the age of its newest observation.
    """

    def __init__(self, rep: Representation, obs_size: int, n_actions: int, n: int) -> None:
        self.rep, self.obs_size, self.n_actions, self.n = rep, obs_size, n_actions, n
        self._frames = np.zeros((n, rep.frames, obs_size), np.float32)
        self._actions = np.full((n, rep.actions), -1, np.int64)
        self._age_s = np.zeros(n)

    def reset(self, rows: np.ndarray, obs: np.ndarray, age_s: np.ndarray | None = None) -> None:
        """Start episodes in ``rows``: each first observation fills its whole stack, no actions yet.

        ``age_s`` holds the observations' ages in seconds, required when the representation uses them.
        """
        self._frames[rows] = np.asarray(obs, dtype=np.float32).reshape(len(rows), 1, self.obs_size)
        self._actions[rows] = -1
        self._set_age(rows, age_s)

    def update(self, rows: np.ndarray, obs: np.ndarray, sent_action: np.ndarray,
               age_s: np.ndarray | None = None) -> None:
        """Add, in ``rows``, the action sent for the previous observation and the newly received one."""
        frames = self._frames[rows]
        frames[:, :-1] = frames[:, 1:]
        frames[:, -1] = np.asarray(obs, dtype=np.float32).reshape(len(rows), self.obs_size)
        self._frames[rows] = frames
        if self.rep.actions:
            actions = self._actions[rows]
            actions[:, 1:] = actions[:, :-1]
            actions[:, 0] = np.asarray(sent_action, dtype=np.int64).reshape(len(rows))
            self._actions[rows] = actions
        self._set_age(rows, age_s)

    def features(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The features of ``rows`` (default: all), ``(len(rows), feature_size)`` float32."""
        frames = self._frames[rows]
        parts = [frames.reshape(len(frames), -1)]
        if self.rep.actions:
            actions = self._actions[rows]
            history = (actions[:, :, None] == np.arange(self.n_actions)).astype(np.float32)
            parts.append(history.reshape(len(frames), -1))
        if self.rep.obs_age:
            parts.append(self._age_s[rows].astype(np.float32)[:, None])
        return np.concatenate(parts, axis=1)

    def _set_age(self, rows: np.ndarray, age_s: np.ndarray | None) -> None:
        if self.rep.obs_age:
            if age_s is None:
                raise ValueError('this representation appends the observation age: pass age_s')
            self._age_s[rows] = np.asarray(age_s, dtype=np.float64).reshape(len(rows))


class HistoryFeatures:
    """``HistoryBatch`` for one env: the policy input from the observations received and the actions sent."""

    _ROW = np.zeros(1, np.int64)

    def __init__(self, rep: Representation, obs_size: int, n_actions: int) -> None:
        self.rep, self.obs_size, self.n_actions = rep, obs_size, n_actions
        self._batch = HistoryBatch(rep, obs_size, n_actions, 1)

    def reset(self, obs: np.ndarray, age_s: float | None = None) -> np.ndarray:
        """Start an episode: the first observation fills the whole stack, no actions yet.

        ``age_s`` is the observation's age in seconds, required when the representation uses it.
        """
        self._batch.reset(self._ROW, obs, None if age_s is None else float(age_s))
        return self.features()

    def update(self, obs: np.ndarray, sent_action: int, age_s: float | None = None) -> np.ndarray:
        """Add the action sent for the previous observation and the newly received observation."""
        self._batch.update(self._ROW, obs, sent_action, None if age_s is None else float(age_s))
        return self.features()

    def features(self) -> np.ndarray:
        return self._batch.features()[0]


def observation_age_s(rep: Representation, info: dict) -> Any:
    """The observation age(s) in seconds from a networked env's info (an array for a vector env's), when
    ``rep`` reads it; else None."""
    return np.asarray(info['obs_age_ms'], dtype=np.float64) / 1e3 if rep.obs_age else None


def history_actions(space: gym.Space, rep: Representation) -> int:
    """The discrete actions one-hot in the history of ``space`` (a plan's element), 0 for continuous actions,
    which have no action history (ValueError if ``rep`` asks for one)."""
    if isinstance(space, gym.spaces.Box):
        if rep.actions:
            raise ValueError(f'an action history ({rep.actions} actions) needs discrete actions, got {space}: '
                             'use actions: 0')
        return 0
    return int(space.n if isinstance(space, gym.spaces.Discrete) else space.nvec[0])


class HistoryWrapper(gym.Wrapper):
    """Gymnasium wrapper applying ``HistoryFeatures`` to a (networked) env's observations."""

    def __init__(self, env: gym.Env, rep: Representation) -> None:
        super().__init__(env)
        obs_size = int(np.prod(env.observation_space.shape))
        n_actions = history_actions(env.action_space, rep)
        self.history = HistoryFeatures(rep, obs_size, n_actions)
        size = rep.feature_size(obs_size, n_actions)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.history.reset(obs, observation_age_s(self.history.rep, info)), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        first = int(np.asarray(action).reshape(-1)[0])
        age_s = observation_age_s(self.history.rep, info)
        return self.history.update(obs, first, age_s), reward, terminated, truncated, info


class VectorHistoryWrapper(gym.vector.VectorWrapper):
    """``HistoryWrapper`` for a whole ``SAME_STEP`` vector env (e.g. ``VectorNetworkedCartPole``), in arrays.

    A row whose episode ended gets the new episode's first features, and ``info['final_obs']`` holds
    the features of the ended episode's last observation (with the action sent for it), as a
    ``SyncVectorEnv`` of ``HistoryWrapper`` envs gives them. The ages come from ``info['obs_age_ms']``
    (and ``info['final_info']['obs_age_ms']`` for final observations).
    """

    def __init__(self, env: gym.vector.VectorEnv, rep: Representation) -> None:
        super().__init__(env)
        obs_size = int(np.prod(env.single_observation_space.shape))
        n_actions = history_actions(env.single_action_space, rep)
        self.history = HistoryBatch(rep, obs_size, n_actions, env.num_envs)
        self._rows = np.arange(env.num_envs)
        size = rep.feature_size(obs_size, n_actions)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, env.num_envs)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.history.reset(self._rows, obs, observation_age_s(self.history.rep, info))
        return self.history.features(), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        sent = np.asarray(actions).reshape(self.num_envs, -1)[:, 0]
        ended = np.flatnonzero(info['_final_obs']) if 'final_obs' in info else np.zeros(0, np.int64)
        if ended.size:  # the ended episodes' last step, as HistoryWrapper.step saw it before the reset
            final_age = observation_age_s(self.history.rep, info['final_info'])
            final_raw = np.stack([info['final_obs'][i] for i in ended])
            self.history.update(ended, final_raw, sent[ended], None if final_age is None else final_age[ended])
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i, features in zip(ended, self.history.features(ended)):
                final_obs[i] = features
            info = {**info, 'final_obs': final_obs}
            age = observation_age_s(self.history.rep, info)
            self.history.reset(ended, obs[ended], None if age is None else age[ended])
        going = np.ones(self.num_envs, bool)
        going[ended] = False
        going = np.flatnonzero(going)
        age = observation_age_s(self.history.rep, info)
        self.history.update(going, obs[going], sent[going], None if age is None else age[going])
        return self.history.features(), reward, terminated, truncated, info
