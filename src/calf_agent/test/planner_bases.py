"""What the planner tests share: CartPole and InvertedPendulum bases fitted by supervised learning (seconds, not
a PPO run), and ``calf train``'s exit code for options it refuses."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from calf_agent.checkpoint import save_checkpoint
from calf_agent.gaussian import GaussianAgent
from calf_agent.policies import MlpAgent
from calf_bringup import cli


def balancing_law(obs: np.ndarray) -> np.ndarray:
    """A linear CartPole controller that keeps the pole up for 500 ticks from any reset."""
    return (obs @ np.array([0.1, 0.5, 10.0, 2.0]) > 0).astype(np.int64)


def supervise(actor: torch.nn.Module, loss: Callable[[], torch.Tensor]) -> None:
    """300 Adam steps of supervised learning on ``actor``'s weights."""
    optimizer = torch.optim.Adam(actor.parameters(), 1e-2)
    for _ in range(300):
        value = loss()
        optimizer.zero_grad()
        value.backward()
        optimizer.step()


def save_base(agent: torch.nn.Module, env: str, out: Path) -> Path:
    """``agent`` saved as a planner's base: single actions on the plain observation of ``env``."""
    return save_checkpoint(out, agent.eval(), {'env': env, 'representation': {'frames': 1, 'actions': 0},
                                               'plan_horizon': 1, 'seed': 0})


def balancing_base(out: Path, samples: int = 20_000) -> Path:
    """An MLP fitted to ``balancing_law`` on ``samples`` states drawn across CartPole's range, saved in ``out``."""
    torch.manual_seed(0)
    agent = MlpAgent(4, 2)
    states = np.random.default_rng(0).uniform([-2.4, -2, -0.21, -2], [2.4, 2, 0.21, 2], (samples, 4))
    x, y = torch.as_tensor(states, dtype=torch.float32), torch.as_tensor(balancing_law(states))
    supervise(agent.actor, lambda: torch.nn.functional.cross_entropy(agent.logits(x), y))
    return save_base(agent, 'cartpole', out)


PENDULUM_GAINS = np.float32([1.0, 10.0, 1.0, 1.0])


def pendulum_law(obs: np.ndarray) -> np.ndarray:
    """A linear InvertedPendulum controller (torque 3 tanh(x + 10 theta + x' + theta')) that balances for 1000 ticks."""
    return 3.0 * np.tanh(obs @ PENDULUM_GAINS)


def pendulum_gaussian_base(out: Path) -> Path:
    """A Gaussian policy on InvertedPendulum-v5 whose mean is fitted to ``pendulum_law``, saved in ``out``."""
    torch.manual_seed(0)
    agent = GaussianAgent(4, 1, [-3.0], [3.0], hidden=(32, 32))
    states = np.random.default_rng(0).uniform([-1, -0.2, -2, -2], [1, 0.2, 2, 2], (20_000, 4)).astype(np.float32)
    x, y = torch.as_tensor(states), torch.as_tensor(pendulum_law(states))[:, None]
    supervise(agent.actor_mean, lambda: ((agent.actor_mean(agent.obs_norm(x)) - y) ** 2).mean())
    return save_base(agent, 'InvertedPendulum-v5', out)


def train_exit_code(argv: list[str], out: Path) -> int:
    """``calf train ARGV --out OUT``'s exit code, argparse's own refusals included."""
    try:
        return cli.main(['train', *argv, '--out', str(out)])
    except SystemExit as exit_:  # argparse's own errors
        return exit_.code  # type: ignore[return-value]
