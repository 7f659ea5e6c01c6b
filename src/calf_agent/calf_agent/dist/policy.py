"""Any PPO agent (MLP, LSTM, Gaussian) as distributed training uses it: raw features in, the behaviour
distribution's parameters out, so that a worker logs them and the learner measures drift against them.

A distribution's parameters ``[B, P]`` are, for categorical heads, the ``H * n`` log-probabilities of
every action; for a Gaussian, its ``H * A`` means followed by its ``A`` log-stds. A Gaussian agent
normalises raw features with the running statistics its weights carry (``obs_norm``); a worker uses
them frozen, the learner folds every batch into them before an update.
"""
from __future__ import annotations

import torch
from torch import Tensor

from calf_agent.gaussian import GaussianAgent, gaussian_heads
from calf_agent.policies import LstmAgent, LstmState, MlpAgent, categorical_heads

PpoAgent = MlpAgent | LstmAgent | GaussianAgent
PPO_KINDS = ('mlp', 'lstm', 'gaussian')
"""Agent kinds a worker builds from a weights message."""


def normalised(agent: PpoAgent, obs: Tensor) -> Tensor:
    """The network's input for raw features ``obs``: normalised for a Gaussian agent, else as is."""
    return agent.obs_norm(obs) if isinstance(agent, GaussianAgent) else obs


def param_size(agent: PpoAgent) -> int:
    """``P``, the width of one row of distribution parameters."""
    if isinstance(agent, GaussianAgent):
        return (agent.plan_horizon + 1) * agent.action_dim
    return agent.plan_horizon * agent.n_actions


def state_size(agent: PpoAgent) -> int:
    """Width of the recurrent state a batch carries per env (0 for feed-forward agents)."""
    return agent.lstm_size if isinstance(agent, LstmAgent) else 0


def action_shape(agent: PpoAgent) -> tuple[int, ...]:
    """One env's action: ``()`` or ``(H,)`` indices, ``(A,)`` or ``(H, A)`` values."""
    plan = () if agent.plan_horizon == 1 else (agent.plan_horizon,)
    return (*plan, agent.action_dim) if isinstance(agent, GaussianAgent) else plan


def params(agent: PpoAgent, x: Tensor, state: LstmState | None = None, done: Tensor | None = None
           ) -> tuple[Tensor, LstmState | None]:
    """Distribution parameters ``[T*B, P]`` for network inputs ``x`` (time-major for an LSTM, from
    ``state`` with ``done`` flags), and the LSTM's state after them."""
    if isinstance(agent, GaussianAgent):
        mean = agent.actor_mean(x)
        return torch.cat([mean, agent.actor_logstd.view(1, -1).expand(len(x), -1)], 1), None
    if isinstance(agent, LstmAgent):
        assert state is not None and done is not None
        out, state = agent.get_states(x, state, done)
        logits = agent.actor(out)
    else:
        logits = agent.logits(x)
    return logits.view(len(x), agent.plan_horizon, -1).log_softmax(-1).flatten(1), state


def _split(agent: GaussianAgent, p: Tensor) -> tuple[Tensor, Tensor]:
    """A Gaussian's ``[B, H, A]`` means and ``[B, 1, A]`` log-stds from its parameters."""
    horizon, dim = agent.plan_horizon, agent.action_dim
    return p[:, :horizon * dim].view(-1, horizon, dim), p[:, horizon * dim:].view(-1, 1, dim)


def sample(agent: PpoAgent, p: Tensor) -> Tensor:
    """Actions drawn from parameters ``p``, in the agent's action shape per row."""
    if isinstance(agent, GaussianAgent):
        action = gaussian_heads(*_split(agent, p))[0]
        return action.squeeze(1) if agent.plan_horizon == 1 else action
    return categorical_heads(p, agent.plan_horizon)[0]


def score(agent: PpoAgent, p: Tensor, action: Tensor, mask: Tensor | None = None) -> Tensor:
    """Log-probabilities ``[B]`` of ``action`` under ``p``, over the plan elements ``mask`` marks."""
    if isinstance(agent, GaussianAgent):
        return gaussian_heads(*_split(agent, p), action, mask=mask)[1]
    return categorical_heads(p, agent.plan_horizon, action, mask=mask)[1]


def mean_kl(agent: PpoAgent, reference: Tensor, current: Tensor) -> float:
    """Mean over rows of KL(reference ‖ current), summed over plan elements and action dimensions (at least 0:
    float rounding can make a KL near 0 negative)."""
    if isinstance(agent, GaussianAgent):
        (m0, s0), (m1, s1) = _split(agent, reference), _split(agent, current)
        kl = s1 - s0 + ((2 * s0).exp() + (m0 - m1) ** 2) / (2 * (2 * s1).exp()) - 0.5
        return max(0.0, float(kl.sum((-1, -2)).mean()))
    heads = agent.plan_horizon
    ref, cur = reference.view(len(reference), heads, -1), current.view(len(current), heads, -1)
    return max(0.0, float((ref.exp() * (ref - cur)).sum((-1, -2)).mean()))


def batch_params(agent: PpoAgent, obs: Tensor, dones: Tensor, state: tuple[Tensor, Tensor]) -> Tensor:
    """Parameters ``[T*N, P]`` of ``agent`` on a batch's raw ``obs [T, N, D]``, from its initial ``state``
    (``[N, S]`` h and c rows, unused by feed-forward agents)."""
    x = normalised(agent, obs.flatten(0, 1))
    lstm = (state[0].unsqueeze(0), state[1].unsqueeze(0)) if isinstance(agent, LstmAgent) else None
    return params(agent, x, lstm, dones.flatten())[0]

