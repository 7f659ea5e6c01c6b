"""State representations for delayed observations (paper, Table 3): frame stack and action history,
optionally followed by the delay state and the age of the newest observation.

``HistoryBatch`` is the one implementation, for ``n`` rows at once; ``HistoryFeatures`` is its
one-row form. The training wrappers (``HistoryWrapper`` per env, ``VectorHistoryWrapper`` over a
vector env) and the policy node all feed it the observations the policy receives and the actions
the policy sent.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

TICK_SCALE = 10.0
"""Tick counts in the delay state are divided by this (typical values fall in 0..1)."""
MAX_TICKS = 50
"""Tick counts in the delay state are capped here before scaling."""


@dataclass(frozen=True)
class Representation:
    """Frame stack of ``frames`` observations plus a history of the last ``actions`` actions sent: one-hot
    for discrete actions, the values themselves for continuous (Box) ones (zeros before the first).

    With ``delay_state`` the features go on with what the env reports about the action it applied
    at the newest observation's tick (``Observation.applied_obs_seq`` and ``applied_index``), the
    augmented state of delay-aware RL, all from env-side sequence numbers (no clock is shared):

    - per remembered action, 1 if it was still in flight at that tick (it answered an observation
      newer than the one the applied action answered), else 0;
    - per older frame, how many ticks before the newest one it was emitted;
    - the applied action's delay: newest seq - applied_obs_seq, in ticks (0 before the first action);
    - 1 if the env was holding (no plan element ran at that tick), else 0.

    Tick counts are capped at ``MAX_TICKS`` and divided by ``TICK_SCALE``. With ``obs_age`` the
    features end with the newest observation's age in seconds (its arrival, or the decision, minus
    its stamp: NetworkedEnv's ``info['obs_age_ms'] / 1e3``; simulation only).
    """

    frames: int = 1
    actions: int = 0
    obs_age: bool = False
    delay_state: bool = False
    history_element: int = 0
    """Which element of each sent plan the action history remembers: the one expected to run, ``d`` behind a
    link of ``d`` ticks (0, the first, for single actions and by default)."""

    def __post_init__(self) -> None:
        if self.frames < 1 or self.actions < 0 or self.history_element < 0:
            raise ValueError(f'frames must be >= 1, actions and history_element >= 0, got {self.frames}, '
                             f'{self.actions} and {self.history_element}')
        for key in ('obs_age', 'delay_state'):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f'{key} must be true or false, got {getattr(self, key)!r}')

    def feature_size(self, obs_size: int, n_actions: int) -> int:
        """The policy input size; ``n_actions`` is one history action's width (a Box action's size)."""
        return self.frames * obs_size + self.actions * n_actions + self.extra_size + int(self.obs_age)

    @property
    def extra_size(self) -> int:
        """Features of the delay state (0 without it)."""
        return self.actions + self.frames - 1 + 2 if self.delay_state else 0

    def delay_state_columns(self, feature_size: int) -> tuple[int, int]:
        """Where the delay state lies in features of ``feature_size``: ``(start, stop)``, empty without it. Its
        values are already scaled (0..1 and ticks / ``TICK_SCALE``), and nearly constant on a steady link."""
        stop = feature_size - int(self.obs_age)
        return stop - self.extra_size, stop

    def as_dict(self) -> dict[str, int | bool]:
        """The fields, leaving out the flags that are off (so older readers load the result)."""
        return {'frames': self.frames, 'actions': self.actions, **({'obs_age': True} if self.obs_age else {}),
                **({'delay_state': True} if self.delay_state else {}),
                **({'history_element': self.history_element} if self.history_element else {})}


class ObsFacts(NamedTuple):
    """Env-side facts about observations, one value per row: its seq, and the applied action's
    ``applied_obs_seq`` and ``applied_index`` at its tick (-1 and -1 on the reset observation)."""

    seq: np.ndarray
    applied_obs_seq: np.ndarray
    applied_index: np.ndarray


class HistoryBatch:
    """Builds the policy inputs of ``n`` rows (envs) from the observations received and the actions sent.

    Each row keeps its last ``frames`` observations (oldest first), its last ``actions`` sent actions
    (newest first; -1 where none was sent yet, or zeros for ``continuous`` actions of ``n_actions``
    values), the age of its newest observation and, for the delay state, the seqs of its frames and of
    the observations its actions answered.
    """

    def __init__(self, rep: Representation, obs_size: int, n_actions: int, n: int, continuous: bool = False) -> None:
        self.rep, self.obs_size, self.n_actions, self.n = rep, obs_size, n_actions, n
        self.continuous = continuous
        self._frames = np.zeros((n, rep.frames, obs_size), np.float32)
        self._actions = (np.zeros((n, rep.actions, n_actions), np.float32) if continuous
                         else np.full((n, rep.actions), -1, np.int64))
        self._age_s = np.zeros(n)
        self._frame_seqs = np.zeros((n, rep.frames), np.int64)
        self._action_seqs = np.full((n, rep.actions), -1, np.int64)  # the obs seq each action answered
        self._applied = np.full((n, 2), -1, np.int64)  # applied_obs_seq, applied_index at the newest frame

    def reset(self, rows: np.ndarray, obs: np.ndarray, age_s: np.ndarray | None = None,
              facts: ObsFacts | None = None) -> None:
        """Start episodes in ``rows``: each first observation fills its whole stack, no actions yet.

        ``age_s`` holds the observations' ages in seconds and ``facts`` their env-side facts, each
        required when the representation uses it.
        """
        self._frames[rows] = np.asarray(obs, dtype=np.float32).reshape(len(rows), 1, self.obs_size)
        self._actions[rows] = 0 if self.continuous else -1
        self._set_age(rows, age_s)
        if self.rep.delay_state:
            facts = _required(facts)
            self._frame_seqs[rows] = np.asarray(facts.seq, np.int64).reshape(len(rows), 1)
            self._action_seqs[rows] = -1
            self._set_applied(rows, facts)

    def update(self, rows: np.ndarray, obs: np.ndarray, sent_action: np.ndarray,
               age_s: np.ndarray | None = None, facts: ObsFacts | None = None) -> None:
        """Add, in ``rows``, the action sent for the previous observation (``[rows]`` indices or ``[rows, A]``
        values) and the newly received one."""
        frames = self._frames[rows]
        frames[:, :-1] = frames[:, 1:]
        frames[:, -1] = np.asarray(obs, dtype=np.float32).reshape(len(rows), self.obs_size)
        self._frames[rows] = frames
        if self.rep.actions:
            actions = self._actions[rows]
            actions[:, 1:] = actions[:, :-1]
            actions[:, 0] = np.asarray(sent_action, dtype=actions.dtype).reshape(actions[:, 0].shape)
            self._actions[rows] = actions
        self._set_age(rows, age_s)
        if self.rep.delay_state:
            facts = _required(facts)
            seqs = self._frame_seqs[rows]
            if self.rep.actions:  # the action just recorded answered the previous newest frame
                answered = self._action_seqs[rows]
                answered[:, 1:] = answered[:, :-1]
                answered[:, 0] = seqs[:, -1]
                self._action_seqs[rows] = answered
            seqs[:, :-1] = seqs[:, 1:]
            seqs[:, -1] = np.asarray(facts.seq, np.int64).reshape(len(rows))
            self._frame_seqs[rows] = seqs
            self._set_applied(rows, facts)

    def features(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The features of ``rows`` (default: all), ``(len(rows), feature_size)`` float32."""
        frames = self._frames[rows]
        parts = [frames.reshape(len(frames), -1)]
        if self.rep.actions:
            actions = self._actions[rows]
            history = actions if self.continuous else (actions[:, :, None] == np.arange(self.n_actions)).astype(np.float32)
            parts.append(history.reshape(len(frames), -1))
        if self.rep.delay_state:
            parts.append(self._delay_state(rows))
        if self.rep.obs_age:
            parts.append(self._age_s[rows].astype(np.float32)[:, None])
        return np.concatenate(parts, axis=1)

    def _delay_state(self, rows: np.ndarray | slice) -> np.ndarray:
        """The delay-state features of ``rows`` (see ``Representation``)."""
        seqs, answered = self._frame_seqs[rows], self._action_seqs[rows]
        applied_seq, applied_index = self._applied[rows].T
        newest = seqs[:, -1:]
        in_flight = (answered > applied_seq[:, None]).astype(np.float32)
        frame_gaps = _ticks(newest - seqs[:, :-1])
        lag = _ticks(np.where(applied_seq >= 0, newest[:, 0] - applied_seq, 0))[:, None]
        held = ((applied_index < 0) & (newest[:, 0] > 0)).astype(np.float32)[:, None]
        return np.concatenate([in_flight, frame_gaps, lag, held], axis=1)

    def _set_applied(self, rows: np.ndarray, facts: ObsFacts) -> None:
        self._applied[rows, 0] = np.asarray(facts.applied_obs_seq, np.int64).reshape(len(rows))
        self._applied[rows, 1] = np.asarray(facts.applied_index, np.int64).reshape(len(rows))

    def _set_age(self, rows: np.ndarray, age_s: np.ndarray | None) -> None:
        if self.rep.obs_age:
            if age_s is None:
                raise ValueError('this representation appends the observation age: pass age_s')
            self._age_s[rows] = np.asarray(age_s, dtype=np.float64).reshape(len(rows))


def _ticks(count: np.ndarray) -> np.ndarray:
    return (np.minimum(count, MAX_TICKS) / TICK_SCALE).astype(np.float32)


def _required(facts: ObsFacts | None) -> ObsFacts:
    if facts is None:
        raise ValueError('this representation reads the delay state: pass the observations\' facts')
    return facts


class HistoryFeatures:
    """``HistoryBatch`` for one env: the policy input from the observations received and the actions sent."""

    _ROW = np.zeros(1, np.int64)

    def __init__(self, rep: Representation, obs_size: int, n_actions: int, continuous: bool = False) -> None:
        self.rep, self.obs_size, self.n_actions, self.continuous = rep, obs_size, n_actions, continuous
        self._batch = HistoryBatch(rep, obs_size, n_actions, 1, continuous)

    def reset(self, obs: np.ndarray, age_s: float | None = None, facts: ObsFacts | None = None) -> np.ndarray:
        """Start an episode: the first observation fills the whole stack, no actions yet.

        ``age_s`` is the observation's age in seconds and ``facts`` its env-side facts (scalars), each
        required when the representation uses it.
        """
        self._batch.reset(self._ROW, obs, None if age_s is None else float(age_s), facts)
        return self.features()

    def update(self, obs: np.ndarray, sent_action: int | np.ndarray, age_s: float | None = None,
               facts: ObsFacts | None = None) -> np.ndarray:
        """Add the action sent for the previous observation (an index, or a Box action's values) and the newly
        received observation."""
        self._batch.update(self._ROW, obs, sent_action, None if age_s is None else float(age_s), facts)
        return self.features()

    def features(self) -> np.ndarray:
        return self._batch.features()[0]


def observation_age_s(rep: Representation, info: dict) -> Any:
    """The observation age(s) in seconds from a networked env's info (an array for a vector env's), when
    ``rep`` reads it; else None."""
    return np.asarray(info['obs_age_ms'], dtype=np.float64) / 1e3 if rep.obs_age else None


def observation_facts(rep: Representation, info: dict) -> ObsFacts | None:
    """The observations' env-side facts from a networked env's info (arrays for a vector env's), when ``rep``
    reads them; else None."""
    if not rep.delay_state:
        return None
    return ObsFacts(info['obs_seq'], info['applied_obs_seq'], info['applied_index'])


INFO_KEYS = ('obs_age_ms', 'obs_seq', 'applied_obs_seq', 'applied_index')
"""The entries of a networked env's info that ``observation_age_s`` and ``observation_facts`` read."""


def stacked_infos(infos: Sequence[dict]) -> dict[str, np.ndarray]:
    """Several networked envs' infos as one vector env's, for ``observation_age_s`` and ``observation_facts``:
    an array per entry they read, one row per info."""
    return {key: np.array([info[key] for info in infos]) for key in INFO_KEYS}


def history_actions(space: gym.Space) -> int:
    """The width of one action in the history for ``space`` (a plan's element): the number of discrete
    actions (one-hot), or a Box action's size."""
    if isinstance(space, gym.spaces.Box):
        return int(space.shape[-1])
    return int(space.n if isinstance(space, gym.spaces.Discrete) else space.nvec[0])


def remembered_actions(actions: Any, n: int, continuous: bool, width: int, element: int = 0) -> np.ndarray:
    """The element of ``n`` sent plans (or single actions) the action history keeps (``element``, or the plan's
    last if it is shorter): ``[n]`` indices, or ``[n, width]`` values."""
    plans = np.asarray(actions, dtype=np.float32).reshape(n, -1, width) if continuous else \
        np.asarray(actions).reshape(n, -1)
    return plans[:, min(element, plans.shape[1] - 1)]


class HistoryWrapper(gym.Wrapper):
    """Gymnasium wrapper applying ``HistoryFeatures`` to a (networked) env's observations."""

    def __init__(self, env: gym.Env, rep: Representation) -> None:
        super().__init__(env)
        obs_size = int(np.prod(env.observation_space.shape))
        n_actions = history_actions(env.action_space)
        self.history = HistoryFeatures(rep, obs_size, n_actions, isinstance(env.action_space, gym.spaces.Box))
        size = rep.feature_size(obs_size, n_actions)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        rep = self.history.rep
        return self.history.reset(obs, observation_age_s(rep, info), observation_facts(rep, info)), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        rep = self.history.rep
        sent = remembered_actions(action, 1, self.history.continuous, self.history.n_actions, rep.history_element)[0]
        features = self.history.update(obs, sent, observation_age_s(rep, info), observation_facts(rep, info))
        return features, reward, terminated, truncated, info


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
        n_actions = history_actions(env.single_action_space)
        self.history = HistoryBatch(rep, obs_size, n_actions, env.num_envs,
                                    isinstance(env.single_action_space, gym.spaces.Box))
        self._rows = np.arange(env.num_envs)
        size = rep.feature_size(obs_size, n_actions)
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, env.num_envs)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        rep = self.history.rep
        self.history.reset(self._rows, obs, observation_age_s(rep, info), observation_facts(rep, info))
        return self.history.features(), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        rep = self.history.rep
        sent = remembered_actions(actions, self.num_envs, self.history.continuous, self.history.n_actions,
                                  rep.history_element)
        ended = np.flatnonzero(info['_final_obs']) if 'final_obs' in info else np.zeros(0, np.int64)
        if ended.size:  # the ended episodes' last step, as HistoryWrapper.step saw it before the reset
            final_raw = np.stack([info['final_obs'][i] for i in ended])
            self.history.update(ended, final_raw, sent[ended], *_rows_of(rep, info['final_info'], ended))
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i, features in zip(ended, self.history.features(ended)):
                final_obs[i] = features
            info = {**info, 'final_obs': final_obs}
            self.history.reset(ended, obs[ended], *_rows_of(rep, info, ended))
        going = np.ones(self.num_envs, bool)
        going[ended] = False
        going = np.flatnonzero(going)
        self.history.update(going, obs[going], sent[going], *_rows_of(rep, info, going))
        return self.history.features(), reward, terminated, truncated, info


def _rows_of(rep: Representation, info: dict, rows: np.ndarray) -> tuple[Any, ObsFacts | None]:
    """The ages and facts ``rep`` reads for ``rows`` of a vector env's info (None where it reads none)."""
    age = observation_age_s(rep, info)
    facts = observation_facts(rep, info)
    return (None if age is None else age[rows],
            None if facts is None else ObsFacts(*(np.asarray(values)[rows] for values in facts)))
