"""A rollout worker's core: ``N`` networked envs in virtual time and a local copy of the policy.

The learner's weights message says which envs to build (``env_config``), so a worker needs nothing
but the learner's address. ``collect`` runs ``num_steps`` vector steps with the local policy and
returns them as a ``TrajectoryBatch`` logging the behaviour distribution, for the learner's lag
correction and drift measurement.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from calf_agent.dist_wire import (
    CHUNK_BYTES,
    Chunk,
    Hello,
    Kind,
    Reassembler,
    Traffic,
    TrajectoryBatch,
    WeightsMessage,
    decode,
    encode,
    split,
)
from calf_agent.policies import MlpAgent, categorical_heads, make_agent
from calf_agent.regimes import vec_env_factory
from calf_agent.representation import Representation
from calf_agent.seeding import seed_everything
from calf_core.errors import MessageError
from calf_core.profiles import load_profile


def make_worker_envs(env_config: dict[str, Any], num_envs: int, seed: int) -> gym.vector.VectorEnv:
    """The vector env ``env_config`` describes (the fast path where it applies), with episode statistics."""
    profile = load_profile(env_config['network'])
    rep = Representation(**env_config['representation'])
    make = vec_env_factory(env_config['env'], profile, rep, seed, int(env_config.get('plan_horizon', 1)))
    return RecordEpisodeStatistics(make(num_envs))


class RolloutWorker:
    """Collects batches with the newest weights it was given."""

    def __init__(self, worker_id: str, num_envs: int, seed: int, chunk_bytes: int = CHUNK_BYTES,
                 log: Callable[[str], None] = lambda line: None) -> None:
        if num_envs < 1:
            raise ValueError(f'num_envs must be >= 1, got {num_envs}')
        self.worker_id, self.num_envs, self.seed, self.chunk_bytes = worker_id, num_envs, seed, chunk_bytes
        self.reassembler = Reassembler(log=log)
        self.sent, self.received = {k: Traffic() for k in (Kind.BATCH, Kind.HELLO)}, Traffic()
        self._message_id = 0
        self.agent: MlpAgent | None = None
        self.version = -1
        self.learner_run = 0
        self.env_config: dict[str, Any] | None = None
        self.envs: gym.vector.VectorEnv | None = None
        self.seq = 0
        self.env_steps = 0
        self._next: tuple[torch.Tensor, torch.Tensor] | None = None
        seed_everything(seed)

    @property
    def ready(self) -> bool:
        return self.agent is not None

    def receive(self, chunk: Chunk, now_s: float) -> bool:
        """Take one chunk of a weights message; whether it completed newer weights, now loaded."""
        if chunk.kind != Kind.WEIGHTS:
            return False
        frame = self.reassembler.add(chunk, now_s)
        self.received.received(chunk, frame is not None)
        if frame is None:
            return False
        try:
            message = decode(frame)
            if not isinstance(message, WeightsMessage) or message.target != self.worker_id:
                raise MessageError(f'a {type(message).__name__} for {getattr(message, "target", "?")!r} '
                                   f'is no weights message for {self.worker_id!r}')
            return self.apply(message)
        except MessageError as err:
            self.reassembler.refuse('corrupt', f'weights message {chunk.message_id}: {err}')
            return False

    def hello(self) -> list[Chunk]:
        """The chunks announcing this worker (sent until the first weights arrive)."""
        return self._outgoing(Kind.HELLO, encode(Hello(self.worker_id)))

    def next_batch(self, num_steps: int) -> list[Chunk]:
        """Collect one batch and return it as chunks to publish."""
        return self._outgoing(Kind.BATCH, encode(self.collect(num_steps)))

    def _outgoing(self, kind: Kind, frame: bytes) -> list[Chunk]:
        self._message_id += 1
        chunks = split(frame, kind, self.worker_id, self._message_id, self.chunk_bytes)
        self.sent[kind].sent(chunks)
        return chunks

    def traffic(self) -> dict[str, dict[str, int]]:
        """Counters per direction: batches and hellos sent, weights received, refusals."""
        return {'batches_sent': self.sent[Kind.BATCH].as_dict(), 'hellos_sent': self.sent[Kind.HELLO].as_dict(),
                'weights_received': self.received.as_dict(), 'refused': dict(self.reassembler.refused)}

    def apply(self, weights: WeightsMessage) -> bool:
        """Load ``weights`` if newer than the copy (or from a restarted learner); whether they were loaded."""
        if weights.learner_run == self.learner_run and weights.version <= self.version:
            return False
        if self.env_config is not None and weights.env_config != self.env_config:
            raise MessageError(f'the learner now trains {weights.env_config}, this worker runs {self.env_config}: '
                               'restart the worker')
        try:
            agent = make_agent(weights.agent_spec)
            agent.load_state_dict(weights.state)
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise MessageError(f'weights version {weights.version} do not build a policy: '
                               f'{" ".join(str(exc).split())[:200]}') from None
        if not isinstance(agent, MlpAgent):
            raise MessageError(f'distributed training runs MLP agents only, got {weights.agent_spec.get("kind")!r}')
        if self.envs is None:
            self.env_config = weights.env_config
            self.envs = make_worker_envs(weights.env_config, self.num_envs, self.seed)
        self.agent, self.version, self.learner_run = agent.eval(), weights.version, weights.learner_run
        return True

    @torch.no_grad()
    def collect(self, num_steps: int) -> TrajectoryBatch:
        """``num_steps`` vector steps with the local policy, as one batch."""
        if self.agent is None or self.envs is None:
            raise RuntimeError('collect() before any weights arrived')
        envs, agent, n = self.envs, self.agent, self.num_envs
        if self._next is None:
            obs, _ = envs.reset(seed=self.seed)
            self._next = torch.as_tensor(obs, dtype=torch.float32), torch.zeros(n)
        obs, done = self._next
        rows: dict[str, list[Any]] = {k: [] for k in ('obs', 'actions', 'logprobs', 'logits', 'rewards', 'dones',
                                                      'terminated', 'truncated')}
        final_index, final_obs, returns = [], [], []
        for t in range(num_steps):
            logits = agent.logits(obs)
            action, logprob, _ = categorical_heads(logits, agent.plan_horizon)
            raw, reward, term, trunc, info = envs.step(action.numpy())
            for i in np.flatnonzero(trunc & ~term):
                final_index.append((t, int(i)))
                final_obs.append(np.asarray(info['final_obs'][i], dtype=np.float32))
            if '_episode' in info:
                returns += [float(r) for r in info['episode']['r'][info['_episode']]]
            for key, value in (('obs', obs), ('actions', action), ('logprobs', logprob),
                               ('logits', logits.view(n, agent.plan_horizon, -1).log_softmax(-1).flatten(1)),
                               ('rewards', torch.as_tensor(reward, dtype=torch.float32)), ('dones', done),
                               ('terminated', torch.as_tensor(term)), ('truncated', torch.as_tensor(trunc))):
                rows[key].append(value)
            obs = torch.as_tensor(raw, dtype=torch.float32)
            done = torch.as_tensor(term | trunc, dtype=torch.float32)
        self._next = obs, done
        self.seq += 1
        self.env_steps += num_steps * n
        dim = obs.shape[1]
        return TrajectoryBatch(
            self.worker_id, self.seq, self.version, self.learner_run, obs=torch.stack(rows['obs']),
            actions=torch.stack(rows['actions']).long(), logprobs=torch.stack(rows['logprobs']),
            behaviour_logits=torch.stack(rows['logits']), rewards=torch.stack(rows['rewards']),
            dones=torch.stack(rows['dones']), terminated=torch.stack(rows['terminated']).bool(),
            truncated=torch.stack(rows['truncated']).bool(), next_obs=obs, next_done=done,
            final_index=torch.tensor(final_index, dtype=torch.int64).view(-1, 2),
            final_obs=torch.as_tensor(np.array(final_obs, dtype=np.float32)).view(-1, dim),
            episode_returns=returns)

    def close(self) -> None:
        if self.envs is not None:
            self.envs.close()
