"""A rollout worker's core: ``N`` networked envs in virtual time and a local copy of the policy.

The worker runs the env its own command line names (``calf worker --env``): a weights message for
another env is refused (``foreign_env``), so nothing from the wire chooses what code the worker
imports. The message's network must be a built-in profile or the worker's own ``--network``; its
agent spec passes the checkpoint schema and weight budget (``checkpoint_meta``) before anything is
built (``bad_spec``). ``collect`` runs ``num_steps`` vector steps with the local policy and returns
them as a ``TrajectoryBatch`` logging the behaviour distribution, for the learner's lag correction
and drift measurement.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from calf_agent.checkpoint_meta import agent_shapes, check_meta
from calf_agent.dist_wire import (
    CHUNK_BYTES,
    Chunk,
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
    split,
)
from calf_agent.errors import CheckpointError
from calf_agent.policies import MlpAgent, categorical_heads, make_agent
from calf_agent.regimes import vec_env_factory
from calf_agent.representation import Representation
from calf_agent.seeding import seed_everything
from calf_core.profiles import available_profiles, load_profile

ENV_CONFIG_KEYS = frozenset({'env', 'network', 'regime', 'representation', 'plan_horizon', 'num_steps'})
"""What a learner's ``env_config`` holds: the workers' env settings."""
MAX_NUM_STEPS = 4096
"""Most steps per env in one batch a learner may ask for."""


def make_worker_envs(env_config: dict[str, Any], num_envs: int, seed: int) -> gym.vector.VectorEnv:
    """The vector env ``env_config`` describes (the fast path where it applies), with episode statistics."""
    profile = load_profile(env_config['network'])
    rep = Representation(**env_config['representation'])
    make = vec_env_factory(env_config['env'], profile, rep, seed, int(env_config.get('plan_horizon', 1)))
    return RecordEpisodeStatistics(make(num_envs))


class RolloutWorker:
    """Collects batches of its own env with the newest weights it was given."""

    def __init__(self, worker_id: str, env: str, key: bytes, num_envs: int, seed: int,
                 chunk_bytes: int = CHUNK_BYTES, log: Callable[[str], None] = lambda line: None,
                 network: str = '') -> None:
        """``env`` (as ``calf train --env``) and ``network`` (empty: built-in profiles only) are local choices."""
        if num_envs < 1:
            raise ValueError(f'num_envs must be >= 1, got {num_envs}')
        self.worker_id, self.env, self.network = worker_id, env, network
        self.num_envs, self.seed, self.chunk_bytes = num_envs, seed, chunk_bytes
        self.reassembler = Reassembler(log=log)
        self.sealer, self.opener = Sealer(key, worker_id), Opener(key)
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
        self._checked: tuple[dict[str, Any], dict[str, tuple[int, ...]]] | None = None  # a spec that passed, its shapes
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
            message = self.opener.decode(frame, chunk.sender)
            if not isinstance(message, WeightsMessage) or message.target != self.worker_id:
                raise Refused('corrupt', f'a {type(message).__name__} for {shown(getattr(message, "target", "?"))} '
                                         f'is no weights message for {self.worker_id!r}')
            return self.apply(message)
        except Refused as err:
            self.reassembler.refuse(err.reason, f'weights message {chunk.message_id}: {err}')
            return False

    def hello(self) -> list[Chunk]:
        """The chunks announcing this worker and the learner run and version it follows."""
        return self._outgoing(Kind.HELLO, self.sealer.encode(Hello(self.worker_id, self.learner_run, self.version)))

    def next_batch(self, num_steps: int) -> list[Chunk]:
        """Collect one batch and return it as chunks to publish."""
        return self._outgoing(Kind.BATCH, self.sealer.encode(self.collect(num_steps)))

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
        """Load ``weights`` if newer than the copy (or from a restarted learner); whether they were loaded.

        Refused (``foreign_env`` or ``bad_spec``) if they are for another env or build no bounded MLP.
        """
        if weights.learner_run == self.learner_run and weights.version <= self.version:
            return False
        self._check_env_config(weights.env_config)
        if self.env_config is not None and weights.env_config != self.env_config:
            raise Refused('foreign_env', f'the learner now trains {weights.env_config}, this worker runs '
                                         f'{self.env_config}: restart the worker')
        agent = self._agent(weights)
        if self.envs is None:
            envs = make_worker_envs({**weights.env_config, 'env': self.env}, self.num_envs, self.seed)
            space = envs.single_action_space
            found = (int(envs.single_observation_space.shape[0]), int(space.n if hasattr(space, 'n') else -1))
            if found != (agent.obs_dim, agent.n_actions):
                envs.close()
                raise Refused('bad_spec', f'the policy takes {agent.obs_dim} observation values and {agent.n_actions} '
                                          f'actions, this worker\'s envs {found[0]} and {found[1]}')
            self.env_config, self.envs = weights.env_config, envs
        self.agent, self.version, self.learner_run = agent.eval(), weights.version, weights.learner_run
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

    def _agent(self, weights: WeightsMessage) -> MlpAgent:
        """The policy ``weights`` describe, its spec checked as a checkpoint's before it is built."""
        spec = weights.agent_spec
        try:
            if spec.get('kind') != 'mlp':
                raise CheckpointError(f'distributed training runs MLP agents only, got {str(spec.get("kind"))[:40]!r}')
            if self._checked is None or self._checked[0] != spec:  # a spec is checked once, not per version
                check_meta({'env': self.env, 'agent': spec, 'representation': weights.env_config['representation'],
                            'plan_horizon': weights.env_config['plan_horizon']}, 'weights message')
                self._checked = spec, agent_shapes(spec)
            found = {k: tuple(v.shape) for k, v in weights.state.items()}
            if found != self._checked[1]:
                raise CheckpointError('holds tensors of other names or shapes than the spec builds')
            agent = make_agent(spec)
            agent.load_state_dict(weights.state)
        except (CheckpointError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise Refused('bad_spec', f'weights version {weights.version} build no policy: '
                                      f'{" ".join(str(exc).split())[:200]}') from None
        return cast(MlpAgent, agent)  # kind 'mlp' builds an MlpAgent

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
