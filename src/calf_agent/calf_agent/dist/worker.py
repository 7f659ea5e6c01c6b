"""A rollout worker's core: ``N`` networked envs in virtual time and a local copy of any PPO policy.

The worker runs the env its own command line names (``calf worker --env``): a weights message for
another env is refused (``foreign_env``), so nothing from the wire chooses what code the worker
imports. The message's network must be a built-in profile or the worker's own ``--network``; its
agent spec (MLP, LSTM or Gaussian, single actions or plans) passes the checkpoint schema and weight
budget (``checkpoint_meta``) before anything is built (``bad_spec``). A delta is applied only onto
exactly the version it names and only if the result has the learner's checksum; otherwise it is
refused (``stale_base``, ``checksum``) and the next hello asks for a snapshot. ``collect`` runs
``num_steps`` vector steps as the single-process trainer's rollout does (reward scaling and
bootstrapping of truncated episodes as the task's PPO settings say, executed plan elements tracked)
and returns them as a ``TrajectoryBatch`` logging the behaviour distribution, for the learner's lag
correction and drift measurement. While the learner says pause, ``may_collect`` is false (for at most
``pause_timeout_s``, in case the learner is gone); once the learner sent it any control (a learner with flow
control does with the first weights), the worker is paced: after each batch it pauses itself until the
learner lets it go on (the learner knows, and does so after the update that took that batch).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from torch import Tensor

from calf_agent.agents import make_agent
from calf_agent.checkpoint_meta import agent_shapes, check_meta
from calf_agent.dist.delta import apply_delta, checksum
from calf_agent.dist.policy import PPO_KINDS, PpoAgent, action_shape, normalised, params, sample, score, state_size
from calf_agent.dist.wire import (
    CHUNK_BYTES,
    Chunk,
    Control,
    Hello,
    Kind,
    Opener,
    Reassembler,
    Refused,
    Sealer,
    Traffic,
    TrajectoryBatch,
    WeightsMessage,
    shown,
)
from calf_agent.errors import CheckpointError
from calf_agent.gaussian import GaussianAgent
from calf_agent.normalize import ReturnNormalizer
from calf_agent.policies import LstmAgent, LstmState
from calf_agent.ppo import RolloutBuffer
from calf_agent.regimes import train_defaults, vec_env_factory
from calf_agent.representation import Representation
from calf_agent.seeding import seed_everything
from calf_agent.trainer import action_layout, executed_elements
from calf_core.network import resolve_network
from calf_core.profiles import available_profiles

ENV_CONFIG_KEYS = frozenset({'env', 'network', 'regime', 'representation', 'plan_horizon', 'num_steps'})
"""What a learner's ``env_config`` holds: the workers' env settings."""
MAX_NUM_STEPS = 4096
"""Most steps per env in one batch a learner may ask for."""
PAUSE_TIMEOUT_S = 60.0
"""A worker told to pause collects again after this long without a word from the learner: longer than a round's
wait (30 s) and an update on a loaded machine (at 10 s, workers waiting for an InvertedPendulum-v5 round at load 15
went on with the old weights)."""


def make_worker_envs(env_config: dict[str, Any], num_envs: int, seed: int) -> gym.vector.VectorEnv:
    """The vector env ``env_config`` describes (the fast path where it applies), with episode statistics."""
    profile = resolve_network(env_config['network'])
    rep = Representation(**env_config['representation'])
    make = vec_env_factory(env_config['env'], profile, rep, seed, int(env_config.get('plan_horizon', 1)))
    return RecordEpisodeStatistics(make(num_envs))


class RolloutWorker:
    """Collects batches of its own env with the newest weights it was given."""

    def __init__(self, worker_id: str, env: str, key: bytes, num_envs: int, seed: int,
                 chunk_bytes: int = CHUNK_BYTES, log: Callable[[str], None] = lambda line: None,
                 network: str = '', pause_timeout_s: float = PAUSE_TIMEOUT_S) -> None:
        """``env`` (as ``calf train --env``) and ``network`` (empty: built-in profiles only) are local choices."""
        if num_envs < 1:
            raise ValueError(f'num_envs must be >= 1, got {num_envs}')
        self.worker_id, self.env, self.network = worker_id, env, network
        self.num_envs, self.seed, self.chunk_bytes = num_envs, seed, chunk_bytes
        self.ppo_settings = train_defaults(env, 'ppo')  # reward scaling and discount, as calf train's
        self.reassembler = Reassembler(key, log=log)
        self.sealer, self.opener = Sealer(key, worker_id), Opener(key)
        self.sent, self.received = {k: Traffic() for k in (Kind.BATCH, Kind.HELLO)}, Traffic()
        self.agent: PpoAgent | None = None
        self.version = -1
        self.learner_run = 0
        self.needs_snapshot = False  # a delta could not be applied: the next hello asks for a snapshot
        self.paused_at_s: float | None = None  # when the learner said pause (None: not paused)
        self.paced = False  # sent a control once: pauses itself after each batch
        self.pause_timeout_s = pause_timeout_s
        self.env_config: dict[str, Any] | None = None
        self.envs: gym.vector.VectorEnv | None = None
        self.seq = 0
        self.env_steps = 0
        self._next: tuple[Tensor, Tensor, LstmState | None] | None = None
        self._reward_norm: ReturnNormalizer | None = None
        self._checked: tuple[dict[str, Any], dict[str, tuple[int, ...]]] | None = None  # a spec that passed, its shapes
        seed_everything(seed)

    @property
    def ready(self) -> bool:
        return self.agent is not None

    def may_collect(self, now_s: float) -> bool:
        """Whether to collect a batch now: weights arrived and the learner has not said pause (recently)."""
        if self.paused_at_s is not None and now_s - self.paused_at_s > self.pause_timeout_s:
            self.paused_at_s = None
        return self.ready and self.paused_at_s is None

    def receive(self, chunk: Chunk, now_s: float) -> bool:
        """Take one chunk of a weights or control message; whether it completed newer weights, now loaded."""
        if chunk.kind not in (Kind.WEIGHTS, Kind.CONTROL):
            return False
        frame = self.reassembler.add(chunk, now_s)
        self.received.received(chunk, frame is not None)
        if frame is None:
            return False
        try:
            message = self.opener.decode(frame, chunk.sender)
            if not isinstance(message, (WeightsMessage, Control)) or message.target != self.worker_id:
                raise Refused('corrupt', f'a {type(message).__name__} for {shown(getattr(message, "target", "?"))} '
                                         f'is no weights or control message for {self.worker_id!r}')
            if isinstance(message, Control):
                if message.learner_run == self.learner_run:  # any control paces it (the learner paces from the start)
                    self.paused_at_s = now_s if message.pause else None
                    self.paced = True
                return False
            return self.apply(message)
        except Refused as err:
            self.reassembler.refuse(err.reason, f'weights message {chunk.message_id}: {err}')
            return False

    def hello(self) -> list[Chunk]:
        """The chunks announcing this worker and the learner run and version it follows (-1: send a snapshot)."""
        version = -1 if self.needs_snapshot else self.version
        return self._outgoing(Kind.HELLO, Hello(self.worker_id, self.learner_run, version))

    def next_batch(self, num_steps: int, now_s: float = 0.0) -> list[Chunk]:
        """Collect one batch and return it as chunks to publish; a paced worker pauses after it (at ``now_s``)."""
        chunks = self._outgoing(Kind.BATCH, self.collect(num_steps))
        if self.paced:
            self.paused_at_s = now_s
        return chunks

    def _outgoing(self, kind: Kind, message: Hello | TrajectoryBatch) -> list[Chunk]:
        chunks = self.sealer.chunks(message, self.chunk_bytes)
        self.sent[kind].sent(chunks)
        return chunks

    def traffic(self) -> dict[str, dict[str, int]]:
        """Counters per direction: batches and hellos sent, weights received, refusals."""
        return {'batches_sent': self.sent[Kind.BATCH].as_dict(), 'hellos_sent': self.sent[Kind.HELLO].as_dict(),
                'weights_received': self.received.as_dict(), 'refused': dict(self.reassembler.refused)}

    def apply(self, weights: WeightsMessage) -> bool:
        """Load ``weights`` (a snapshot, or a delta onto the version held) if newer than the copy (or from a
        restarted learner); whether they were loaded.

        Refused: ``foreign_env`` or ``bad_spec`` if they are for another env or build no bounded PPO agent,
        ``stale_base`` for a delta onto another version than the one held, ``checksum`` if the result is
        not the learner's; after the last two the next hello asks for a snapshot.
        """
        if weights.learner_run == self.learner_run and (weights.version, self.needs_snapshot) <= (self.version, False):
            return False  # not newer (a snapshot of the version held is taken when one was asked for)
        self._check_env_config(weights.env_config)
        if self.env_config is not None and weights.env_config != self.env_config:
            raise Refused('foreign_env', f'the learner now trains {weights.env_config}, this worker runs '
                                         f'{self.env_config}: restart the worker')
        state = weights.state
        if weights.base_version >= 0:
            if self.agent is None or (weights.learner_run, weights.base_version) != (self.learner_run, self.version):
                self.needs_snapshot = True
                raise Refused('stale_base', f'a delta from version {weights.base_version} of run '
                                            f'{weights.learner_run}, this worker holds version {self.version} of run '
                                            f'{self.learner_run}: asking for a snapshot')
            try:
                state = apply_delta(self.agent.state_dict(), weights.state)
            except ValueError as exc:
                raise Refused('bad_spec', f'weights version {weights.version}: {exc}') from None
        agent = self._agent(weights, state)
        if checksum(agent.state_dict()) != weights.checksum:
            self.needs_snapshot = True
            raise Refused('checksum', f'weights version {weights.version} do not have the learner\'s checksum: '
                                      'asking for a snapshot')
        if self.envs is None:
            envs = make_worker_envs({**weights.env_config, 'env': self.env}, self.num_envs, self.seed)
            space = envs.single_action_space
            found = _described(int(envs.single_observation_space.shape[0]), *action_layout(space),
                               isinstance(space, gym.spaces.Box))
            wanted = _described(agent.obs_dim, *_layout(agent), isinstance(agent, GaussianAgent))
            if found != wanted:
                envs.close()
                raise Refused('bad_spec', f'the policy takes {wanted}, this worker\'s envs {found}')
            self.env_config, self.envs = weights.env_config, envs
            if self.ppo_settings.norm_reward:
                self._reward_norm = ReturnNormalizer(self.num_envs, self.ppo_settings.ppo.gamma)
        self.agent, self.version, self.learner_run = agent.eval(), weights.version, weights.learner_run
        self.needs_snapshot = False
        return True

    def _check_env_config(self, config: dict[str, Any]) -> None:
        """Refuse an env config naming another env, a network this worker did not choose, or bad sizes."""
        if set(config) != ENV_CONFIG_KEYS:
            raise Refused('bad_spec', f'env config fields {sorted(config)[:10]} are not {sorted(ENV_CONFIG_KEYS)}')
        if config['env'] != self.env:
            raise Refused('foreign_env', f'the learner trains env {str(config["env"])[:80]!r}, this worker runs '
                                         f'{self.env!r}: start the worker with that --env, or check the learner')
        network = config['network']
        if not isinstance(network, str) or network != self.network and network not in available_profiles():
            raise Refused('foreign_env', f'the learner\'s network {str(network)[:80]!r} is no built-in profile: '
                                         'start the worker with that --network to allow it')
        steps = config['num_steps']
        if not isinstance(config['regime'], str) or len(config['regime']) > 64 or isinstance(steps, bool) \
                or not isinstance(steps, int) or not 1 <= steps <= MAX_NUM_STEPS:
            raise Refused('bad_spec', f'regime must be a short string and num_steps an integer in [1, '
                                      f'{MAX_NUM_STEPS}], got {str(config["regime"])[:80]!r} and {str(steps)[:40]}')

    def _agent(self, weights: WeightsMessage, state: dict[str, Tensor]) -> PpoAgent:
        """The policy ``weights`` describe holding ``state``, its spec checked as a checkpoint's before it is built."""
        spec = weights.agent_spec
        try:
            if spec.get('kind') not in PPO_KINDS:
                raise CheckpointError(f'distributed training runs PPO agents ({", ".join(PPO_KINDS)}) only, got '
                                      f'{str(spec.get("kind"))[:40]!r}')
            if self._checked is None or self._checked[0] != spec:  # a spec is checked once, not per version
                check_meta({'env': self.env, 'agent': spec, 'representation': weights.env_config['representation'],
                            'plan_horizon': weights.env_config['plan_horizon']}, 'weights message')
                self._checked = spec, agent_shapes(spec)
            found = {k: tuple(v.shape) for k, v in state.items()}
            if found != self._checked[1]:
                raise CheckpointError('holds tensors of other names or shapes than the spec builds')
            agent = make_agent(spec)
            agent.load_state_dict(state)
        except (CheckpointError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise Refused('bad_spec', f'weights version {weights.version} build no policy: '
                                      f'{" ".join(str(exc).split())[:200]}') from None
        return cast(PpoAgent, agent)  # the kinds above build PPO agents

    @torch.no_grad()
    def collect(self, num_steps: int) -> TrajectoryBatch:
        """``num_steps`` vector steps with the local policy, as one batch."""
        if self.agent is None or self.envs is None:
            raise RuntimeError('collect() before any weights arrived')
        envs, agent, n = self.envs, self.agent, self.num_envs
        if self._next is None:
            raw, _ = envs.reset(seed=self.seed)
            state = agent.initial_state(n) if isinstance(agent, LstmAgent) else None
            self._next = torch.as_tensor(raw, dtype=torch.float32), torch.zeros(n), state
        obs, done, state = self._next
        first = state
        continuous = isinstance(agent, GaussianAgent)
        buf = RolloutBuffer(num_steps, n, agent.obs_dim, action_shape(agent), agent.plan_horizon > 1, continuous)
        behaviour, returns = [], []
        gamma = self.ppo_settings.ppo.gamma
        while not buf.full:
            x = normalised(agent, obs)
            p, state = params(agent, x, state, done)
            action = sample(agent, p)
            raw, reward, term, trunc, info = envs.step((agent.clip(action) if continuous else action).numpy())
            reward = reward.astype(np.float32)
            if self._reward_norm is not None:
                reward = self._reward_norm.scale(reward, term | trunc)
            for i in np.flatnonzero(trunc & ~term):  # bootstrap an episode cut by a time limit
                final = normalised(agent, torch.as_tensor(np.asarray(info['final_obs'][i], np.float32)).view(1, -1))
                sub = None if state is None else (state[0][:, i:i + 1], state[1][:, i:i + 1])
                value = agent.get_value(final, sub, torch.zeros(1)) if isinstance(agent, LstmAgent) \
                    else agent.get_value(final)
                reward[i] += gamma * float(value[0])
            buf.add(obs, done, action, torch.zeros(n), torch.zeros(n), reward)
            if buf.track_executed:
                buf.mark_executed(executed_elements(info))
            if '_episode' in info:
                returns += [float(r) for r in info['episode']['r'][info['_episode']]]
            behaviour.append(p)
            obs = torch.as_tensor(raw, dtype=torch.float32)
            done = torch.as_tensor(term | trunc, dtype=torch.float32)
        self._next = obs, done, state
        self.seq += 1
        self.env_steps += num_steps * n
        dist = torch.stack(behaviour)
        logprobs = score(agent, dist.flatten(0, 1), buf.actions.flatten(0, 1), buf.masks.flatten(0, 1))
        rows = state_size(agent)
        h, c = (first[0][0], first[1][0]) if first is not None else (torch.zeros(n, rows), torch.zeros(n, rows))
        return TrajectoryBatch(
            self.worker_id, self.seq, self.version, self.learner_run, obs=buf.obs, actions=buf.actions,
            logprobs=logprobs.view(num_steps, n), behaviour=dist, rewards=buf.rewards, dones=buf.dones,
            next_obs=obs, next_done=done, masks=buf.masks.view(num_steps, n, -1), state_h=h.contiguous(),
            state_c=c.contiguous(), episode_returns=returns)

    def close(self) -> None:
        if self.envs is not None:
            self.envs.close()


def _described(obs_dim: int, actions: int, horizon: int, continuous: bool) -> str:
    """Observation and action sizes for a refusal."""
    return (f'{obs_dim} observation values and {"a Box of " if continuous else ""}{actions} actions'
            + (f' in plans of {horizon}' if horizon > 1 else ''))


def _layout(agent: PpoAgent) -> tuple[int, int]:
    """``(n_actions or action dim, plan_horizon)``, as ``trainer.action_layout`` reads an action space."""
    return (agent.action_dim if isinstance(agent, GaussianAgent) else agent.n_actions), agent.plan_horizon
