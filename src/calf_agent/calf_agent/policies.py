"""Actor-critic networks in CleanRL's form: an MLP agent and an LSTM agent.

Both take flat float observations and output ``plan_horizon`` independent categorical
heads of ``n_actions`` each. With ``plan_horizon == 1`` actions have shape ``[B]``,
otherwise ``[B, H]`` (a ``MultiDiscrete([n_actions] * H)`` action). An optional ``mask``
``[B, H]`` restricts the logprob sum to the plan elements the env executed.

``MlpAgent(plan_head='time')`` replaces the H output heads by one time-conditioned actor
π(a | obs, j): element j sees the observation and its tick offset (j + 1) / H, so elements
that rarely run in training share what the frequent ones learn.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

LstmState = tuple[Tensor, Tensor]


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights and constant bias (CleanRL's init)."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(in_dim: int, hidden: tuple[int, ...]) -> nn.Sequential:
    """Tanh MLP trunk ``in_dim -> hidden[0] -> ... -> hidden[-1]``."""
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [layer_init(nn.Linear(in_dim, size)), nn.Tanh()]
        in_dim = size
    return nn.Sequential(*layers)


def categorical_heads(logits: Tensor, plan_horizon: int, action: Tensor | None = None,
                      deterministic: bool = False, mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Sample (or score ``action``) from H independent categoricals.

    Returns ``(action, logprob, entropy)``; logprob and entropy are summed over heads, the
    logprob only over heads where ``mask`` (``[B, H]``, 0/1) is set when one is given.
    """
    logp = logits.view(logits.shape[0], plan_horizon, -1).log_softmax(-1)
    if action is None:
        flat = logp.view(-1, logp.shape[-1])
        idx = flat.argmax(-1) if deterministic else torch.multinomial(flat.exp(), 1)
        action = idx.view(-1, plan_horizon)
    else:
        action = action.view(-1, plan_horizon).long()
    per_head = logp.gather(-1, action.unsqueeze(-1)).squeeze(-1)
    logprob = (per_head if mask is None else per_head * mask.view_as(per_head)).sum(-1)
    entropy = -(logp.exp() * logp).sum((-1, -2))
    if plan_horizon == 1:
        action = action.squeeze(-1)
    return action, logprob, entropy


PLAN_HEADS = ('independent', 'time')


def as_batch(obs: np.ndarray | Tensor) -> Tensor:
    """A float32 ``[B, obs_dim]`` tensor from one observation or a batch."""
    x = torch.as_tensor(obs, dtype=torch.float32)
    return x.unsqueeze(0) if x.dim() == 1 else x


def new_episode_state(agent: Any, state: tuple[Tensor, ...] | None,
                      rows: np.ndarray | None = None) -> tuple[Tensor, ...] | None:
    """``state`` (``act``'s, ``[1, B, ...]`` each) with the rows that start a new episode cleared (``rows``, a
    ``[B]`` mask; None: every row). Cleared means zero, but for the columns the agent keeps across episodes
    (``agent.kept_across_episodes``, a slice of the last axis): what it learned about the link, which does not
    restart because an episode did."""
    if state is None or (rows is not None and not rows.any()):
        return state
    index = slice(None) if rows is None else torch.as_tensor(np.flatnonzero(rows))
    kept = getattr(agent, 'kept_across_episodes', None)
    cleared_state = []
    for tensor in state:
        tensor = tensor.clone()  # act() returns inference tensors, read-only outside it
        cleared = torch.ones(tensor.shape[-1], dtype=torch.bool)
        if kept is not None:
            cleared[kept] = False
        tensor[:, index] = torch.where(cleared, 0.0, tensor[:, index])
        cleared_state.append(tensor)
    return tuple(cleared_state)


class MlpAgent(nn.Module):
    """Separate tanh MLPs for actor and critic (CleanRL ppo.py)."""

    kind = 'mlp'

    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...] = (64, 64),
                 plan_horizon: int = 1, plan_head: str = 'independent') -> None:
        super().__init__()
        _check_dims(obs_dim, n_actions, hidden, plan_horizon)
        if plan_head not in PLAN_HEADS:
            raise ValueError(f'unknown plan_head {plan_head!r}: choose one of {", ".join(PLAN_HEADS)}')
        self.obs_dim, self.n_actions = obs_dim, n_actions
        self.hidden, self.plan_horizon, self.plan_head = tuple(hidden), plan_horizon, plan_head
        timed = plan_head == 'time'
        self.critic = nn.Sequential(mlp(obs_dim, hidden), layer_init(nn.Linear(hidden[-1], 1), 1.0))
        self.actor = nn.Sequential(mlp(obs_dim + timed, hidden),
                                   layer_init(nn.Linear(hidden[-1], n_actions * (1 if timed else plan_horizon)),
                                              0.01))

    def spec(self) -> dict[str, Any]:
        """The constructor arguments, for checkpoints (``plan_head`` only when not the default)."""
        spec = {'kind': self.kind, 'obs_dim': self.obs_dim, 'n_actions': self.n_actions,
                'hidden': list(self.hidden), 'plan_horizon': self.plan_horizon}
        return spec if self.plan_head == 'independent' else {**spec, 'plan_head': self.plan_head}

    def logits(self, x: Tensor) -> Tensor:
        """Actor logits ``[B, H * n_actions]``, element-major."""
        if self.plan_head == 'independent':
            return self.actor(x)
        offsets = torch.arange(1, self.plan_horizon + 1, dtype=x.dtype) / self.plan_horizon
        timed = torch.cat([x.unsqueeze(1).expand(-1, self.plan_horizon, -1),
                           offsets.view(1, -1, 1).expand(x.shape[0], -1, 1)], -1)
        return self.actor(timed).flatten(1)

    def get_value(self, x: Tensor) -> Tensor:
        """State values, shape ``[B]``."""
        return self.critic(x).squeeze(-1)

    def get_action_and_value(self, x: Tensor, action: Tensor | None = None, mask: Tensor | None = None
                             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(action, logprob, entropy, value)``; samples when ``action`` is None."""
        return (*categorical_heads(self.logits(x), self.plan_horizon, action, mask=mask), self.get_value(x))

    @torch.inference_mode()
    def act(self, obs: np.ndarray, state: None = None, deterministic: bool = False, seq: Any = None,
            applied_seq: Any = None) -> tuple[np.ndarray, None]:
        """Actions for one observation ``[obs_dim]`` or a batch ``[B, obs_dim]``; state, seq and applied_seq are unused."""
        logits = self.logits(as_batch(obs))
        return categorical_heads(logits, self.plan_horizon, None, deterministic)[0].numpy(), None


class LstmAgent(nn.Module):
    """MLP encoder, one LSTM layer, linear actor and critic heads (CleanRL ppo_atari_lstm)."""

    kind = 'lstm'

    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...] = (64,),
                 plan_horizon: int = 1, lstm_size: int = 128) -> None:
        super().__init__()
        _check_dims(obs_dim, n_actions, hidden, plan_horizon)
        self.obs_dim, self.n_actions = obs_dim, n_actions
        self.hidden, self.plan_horizon, self.lstm_size = tuple(hidden), plan_horizon, lstm_size
        self.encoder = mlp(obs_dim, hidden)
        self.lstm = nn.LSTM(hidden[-1], lstm_size)
        for name, param in self.lstm.named_parameters():
            if 'bias' in name:
                nn.init.constant_(param, 0)
            elif 'weight' in name:
                nn.init.orthogonal_(param, 1.0)
        self.actor = layer_init(nn.Linear(lstm_size, n_actions * plan_horizon), 0.01)
        self.critic = layer_init(nn.Linear(lstm_size, 1), 1.0)

    def spec(self) -> dict[str, Any]:
        """The constructor arguments, for checkpoints."""
        return {'kind': self.kind, 'obs_dim': self.obs_dim, 'n_actions': self.n_actions,
                'hidden': list(self.hidden), 'plan_horizon': self.plan_horizon,
                'lstm_size': self.lstm_size}

    def initial_state(self, batch_size: int) -> LstmState:
        """Zero ``(h, c)``, each ``[1, batch_size, lstm_size]``."""
        zeros = torch.zeros(1, batch_size, self.lstm_size)
        return zeros, zeros.clone()

    def get_states(self, x: Tensor, state: LstmState, done: Tensor) -> tuple[Tensor, LstmState]:
        """Run a time-major sequence ``x [T*B, obs_dim]`` through the LSTM.

        ``done[t, b]`` is 1 when ``x[t, b]`` starts a new episode: the state is zeroed first.
        The sequence is cut only where some env resets, so long episodes run in one call.
        """
        batch = state[0].shape[1]
        hidden = self.encoder(x).view(-1, batch, self.lstm.input_size)
        done = done.view(-1, batch)
        cuts = torch.nonzero(done.any(1)).flatten().tolist()
        bounds = sorted({0, *cuts}) + [hidden.shape[0]]
        outputs = []
        h, c = state
        for start, end in zip(bounds[:-1], bounds[1:]):
            keep = (1.0 - done[start]).view(1, -1, 1)
            out, (h, c) = self.lstm(hidden[start:end], (keep * h, keep * c))
            outputs.append(out)
        return torch.cat(outputs).flatten(0, 1), (h, c)

    def get_value(self, x: Tensor, state: LstmState, done: Tensor) -> Tensor:
        """State values, shape ``[T*B]``."""
        return self.critic(self.get_states(x, state, done)[0]).squeeze(-1)

    def get_action_and_value(self, x: Tensor, state: LstmState, done: Tensor,
                             action: Tensor | None = None, mask: Tensor | None = None
                             ) -> tuple[Tensor, Tensor, Tensor, Tensor, LstmState]:
        """``(action, logprob, entropy, value, new_state)``; samples when ``action`` is None."""
        out, state = self.get_states(x, state, done)
        return (*categorical_heads(self.actor(out), self.plan_horizon, action, mask=mask),
                self.critic(out).squeeze(-1), state)

    @torch.inference_mode()
    def act(self, obs: np.ndarray, state: LstmState | None = None, deterministic: bool = False,
            seq: Any = None, applied_seq: Any = None) -> tuple[np.ndarray, LstmState]:
        """Actions for one step of ``[obs_dim]`` or ``[B, obs_dim]``; ``state=None`` starts episodes.

        ``seq`` (the observations' ticks) and ``applied_seq`` are unused; model planners need them.
        """
        x = as_batch(obs)
        if state is None:
            state = self.initial_state(x.shape[0])
        out, state = self.get_states(x, state, torch.zeros(x.shape[0]))
        return categorical_heads(self.actor(out), self.plan_horizon, None, deterministic)[0].numpy(), state


Agent = MlpAgent | LstmAgent
AGENT_KINDS: dict[str, type[MlpAgent] | type[LstmAgent]] = {'mlp': MlpAgent, 'lstm': LstmAgent}


def _check_dims(obs_dim: int, n_actions: int, hidden: tuple[int, ...], plan_horizon: int) -> None:
    """Reject sizes that cannot build a network, naming the bad value."""
    if obs_dim < 1 or n_actions < 1 or plan_horizon < 1:
        raise ValueError(f'obs_dim, n_actions and plan_horizon must be >= 1, got '
                         f'{obs_dim}, {n_actions}, {plan_horizon}')
    if not hidden or min(hidden) < 1:
        raise ValueError(f'hidden must be a non-empty tuple of positive sizes, got {hidden!r}')
