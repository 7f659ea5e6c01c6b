"""The policy side of the timing rules, without ROS: observation in, plan out.

``PolicyRunner`` is what the policy node calls for every observation it receives. It applies
the ``ObservationGate`` (act on the newest observation only; a terminal one ends the episode
without an action), builds the same features the trainer's ``HistoryWrapper`` builds, and keeps
the LSTM state, both reset when a new episode starts. A continuous (Gaussian) policy normalises the
features with the statistics saved in its checkpoint and clips its actions to the bounds.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from calf_agent.checkpoint import load_checkpoint
from calf_agent.errors import CheckpointError
from calf_agent.gaussian import acts_continuously
from calf_agent.plan_agent import FeedbackPlans, plan_actions
from calf_agent.policies import Agent, new_episode_state
from calf_agent.representation import HistoryFeatures, ObsFacts, Representation
from calf_core.timing import FeedbackPlan, ObservationGate, ReceivedObservation

Plan = list[int] | np.ndarray
"""A discrete plan (H action indices) or a continuous one (``[H, A]`` float32)."""


class PolicyRunner:
    """Turns received observations into plans for one agent, episode by episode."""

    def __init__(self, agent: Agent, meta: Mapping[str, Any], deterministic: bool = True) -> None:
        self.agent, self.deterministic = agent, deterministic
        self.env = str(meta.get('env', ''))
        self.rep = _representation(meta)
        if self.rep.obs_age:
            raise CheckpointError('this policy reads the observation age, which a policy node cannot measure without '
                                  'a clock shared with the env: evaluate it with `calf eval --backend sim`, or retrain '
                                  'without --obs-age to deploy it')
        self.continuous = acts_continuously(agent)
        self.n_actions = 0 if self.continuous else int(agent.n_actions)
        self.action_dim = int(agent.action_dim) if self.continuous else 0
        self.plan_horizon = int(agent.plan_horizon)
        if int(meta.get('plan_horizon', self.plan_horizon)) != self.plan_horizon:
            raise CheckpointError(f'meta plan_horizon {meta["plan_horizon"]} differs from the agent\'s '
                                  f'{self.plan_horizon}')
        width = self.action_dim or self.n_actions  # of one action in the history
        self.obs_size = _obs_size(int(agent.obs_dim), width, self.rep)
        self._gate = ObservationGate()
        self._history = HistoryFeatures(self.rep, self.obs_size, width, self.continuous)
        self._state: Any = None
        self._last_sent: int | np.ndarray = 0

    @property
    def anomalies(self) -> dict[str, int]:
        """Observations the gate found suspicious, by kind (see ``ObservationGate``)."""
        return self._gate.anomalies

    @property
    def action_description(self) -> str:
        """E.g. ``2 actions`` or ``continuous actions of 1 value``, for logs."""
        if self.continuous:
            return f'continuous actions of {self.action_dim} value{"s" if self.action_dim > 1 else ""}'
        return f'{self.n_actions} actions'

    @classmethod
    def from_checkpoint(cls, ckpt_dir: Path | str, deterministic: bool = True) -> PolicyRunner:
        """Load ``ckpt_dir``; raises CheckpointError with a one-line reason."""
        agent, meta = load_checkpoint(ckpt_dir)
        return cls(agent, meta, deterministic)

    def on_observation(self, received: ReceivedObservation) -> Plan | FeedbackPlan | None:
        """The plan (H actions; a ``FeedbackPlan`` from a planner with feedback) answering ``received``, or None when
        it is not acted on.

        An observation that ends its episode gets no plan; observations no newer than the last one
        acted on are skipped. A delay-state representation reads which action the env applied at the
        tick (``applied_obs_seq``, ``applied_index``).
        """
        episode, seq, run = received.episode, received.seq, received.run
        obs = np.asarray(received.obs, dtype=np.float32).reshape(-1)
        if obs.size != self.obs_size:
            raise ValueError(f'observation has {obs.size} values, the policy expects {self.obs_size}')
        new_episode = self._gate.is_new_episode(episode) or run != self._gate.run
        if not self._gate.admit(episode, seq, run) or received.ended:
            return None
        facts = ObsFacts(seq, received.applied_obs_seq, received.applied_index) if self.rep.delay_state else None
        if new_episode:
            features = self._history.reset(obs, facts=facts)
            self._state = new_episode_state(self.agent, self._state)
        else:
            features = self._history.update(obs, self._last_sent, facts=facts)
        plans, self._state = self.agent.act(features, self._state, deterministic=self.deterministic, seq=seq,
                                            applied_seq=received.applied_obs_seq)
        actions = plan_actions(plans)
        remembered = min(self.rep.history_element, self.plan_horizon - 1)  # what the action history keeps
        if self.continuous:
            plan = np.asarray(actions, dtype=np.float32).reshape(self.plan_horizon, -1)
            self._last_sent = plan[remembered]
            if isinstance(plans, FeedbackPlans):
                return FeedbackPlan(plan, plans.gains[0], plans.predicted[0])
            return plan
        plan = [int(a) for a in np.asarray(actions).reshape(-1)]
        self._last_sent = plan[remembered]
        return plan


def check_action_space(agent: Agent, space: gym.Space, env: str) -> None:
    """Raise CheckpointError in one line unless ``agent`` acts in ``env``'s action ``space`` (per element)."""
    if acts_continuously(agent):
        fits = isinstance(space, gym.spaces.Box) and space.shape[-1:] == (agent.action_dim,)
        kind = f'a continuous policy ({agent.action_dim} values)'
    else:
        n = space.n if isinstance(space, gym.spaces.Discrete) else (
            space.nvec.reshape(-1)[0] if isinstance(space, gym.spaces.MultiDiscrete) else None)
        fits = n == agent.n_actions
        kind = f'a discrete policy ({agent.n_actions} actions)'
    if not fits:
        raise CheckpointError(f'{kind} cannot act in {env}, whose actions are {space}: '
                              f'train a policy on {env} with `calf train --env {env}`')


def check_observation_size(agent: Agent, rep: Representation, obs_size: int, width: int, env: str) -> None:
    """Raise CheckpointError in one line unless ``agent`` reads what ``rep`` makes of ``env``'s observations
    (``obs_size`` values; ``width``: one history action's)."""
    size = rep.feature_size(obs_size, width)
    if int(agent.obs_dim) != size:
        raise CheckpointError(f'the policy reads {int(agent.obs_dim)} values, but representation {rep.as_dict()} of '
                              f"{env}'s {obs_size}-value observations makes {size}: the checkpoint's meta.json "
                              f'representation is missing or wrong; retrain with `calf train --env {env}`')


def check_policy_env(ckpt_dir: Path | str, env: str) -> None:
    """Raise CheckpointError (one line) if the checkpoint's actions are not ``env``'s (continuous vs discrete).

    A directory without a checkpoint passes: the policy node reports it when it starts.
    """
    from calf_core.envs import make_env

    if not (Path(ckpt_dir) / 'meta.json').is_file():
        return
    agent, _ = load_checkpoint(ckpt_dir)
    check_action_space(agent, make_env(env).action_space, env)


def _representation(meta: Mapping[str, Any]) -> Representation:
    """The checkpoint's frame stack and action history (default: the plain observation)."""
    try:
        return Representation(**meta.get('representation', {}))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f'meta representation {meta.get("representation")!r} is invalid: {exc}') from None


def _obs_size(obs_dim: int, n_actions: int, rep: Representation) -> int:
    """Size of one raw observation, recovered from the agent's input size and the representation
    (``n_actions``: one history action's width)."""
    frames_part = obs_dim - rep.actions * n_actions - rep.extra_size
    if frames_part <= 0 or frames_part % rep.frames:
        raise CheckpointError(f'agent input size {obs_dim} does not fit representation {rep.as_dict()} '
                              f'with {n_actions} actions')
    return frames_part // rep.frames
