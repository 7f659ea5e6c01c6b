"""Is the dynamics model what limits a model planner? Its learned model against the simulator itself.

Plays a planner checkpoint behind a network twice on the same episodes (virtual time): once as saved, once
with its model replaced by a private copy of the MuJoCo env, restored to the true state of each observation's
tick and stepped with the plan's actions (a perfect model; no deployment has one). Everything else, the base
policy, the horizon and the lead rule, stays the checkpoint's. MuJoCo envs only.

    python bench/diagnose_plan_model.py --policy PLANNER_DIR --network wifi_degraded --episodes 10
"""
from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from calf_agent.checkpoint import load_checkpoint
from calf_agent.evaluate import one_torch_thread
from calf_agent.imitation import SimState, sim_state
from calf_agent.plan_agent import PlanningAgent
from calf_core.envs import make_env, make_networked_env
from calf_core.network import resolve_network


class SimulatorModel(nn.Module):
    """A one-member "dynamics model" that is the simulator: ``start`` restores a state, ``rollout_step`` steps it."""

    members = 1

    def __init__(self, env: str) -> None:
        super().__init__()
        self.env = make_env(env)
        self.env.reset(seed=0)

    def start(self, state: SimState) -> None:
        self.env.unwrapped.set_state(*state)

    def rollout_step(self, states: Tensor, action: Tensor) -> Tensor:
        obs = self.env.unwrapped.step(np.asarray(action, np.float32).reshape(-1))[0]
        return torch.as_tensor(np.asarray(obs, np.float32)).view(1, 1, -1)


def play(agent: PlanningAgent, env_name: str, network: str, seed: int, simulator: SimulatorModel | None) -> float:
    """One episode's return; with ``simulator``, each plan rolls the true state of its observation's tick."""
    env = make_networked_env(env_name, resolve_network(network), seed=seed, plan_horizon=agent.plan_horizon)
    states: dict[int, Any] = {}
    env.tick_listener = lambda record: states.__setitem__(record.seq, sim_state(env.stepper.env))
    obs, info = env.reset(seed=seed)
    states[info['obs_seq']] = sim_state(env.stepper.env)
    plan_state, total, done = None, 0.0, False
    while not done:
        if simulator is not None:
            simulator.start(states[info['obs_seq']])
        plan, plan_state = agent.act(obs, plan_state, deterministic=True, seq=[info['obs_seq']],
                                     applied_seq=[info['applied_obs_seq']])
        obs, reward, terminated, truncated, info = env.step(plan[0])
        total += float(reward)
        done = terminated or truncated
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--policy', required=True, help='a model planner checkpoint over a MuJoCo env')
    parser.add_argument('--network', default='wifi_degraded')
    parser.add_argument('--episodes', type=int, default=10)
    parser.add_argument('--seed', type=int, default=100)
    args = parser.parse_args()
    agent, meta = load_checkpoint(args.policy)
    if not isinstance(agent, PlanningAgent) or sim_state(make_env(meta['env'])) is None:
        parser.error('--policy must be a model planner over a MuJoCo env')
    with one_torch_thread():
        learned = [play(agent, meta['env'], args.network, args.seed + k, None) for k in range(args.episodes)]
        agent.model, agent.disagreement_cut = SimulatorModel(meta['env']), None
        perfect = [play(agent, meta['env'], args.network, args.seed + k, agent.model) for k in range(args.episodes)]
    print(f'{meta["env"]} behind {args.network}, {args.episodes} episodes from seed {args.seed}, lead window '
          f'{agent.lead_window} (0: fixed lead {agent.lead})')
    for name, returns in (('learned model', learned), ('the simulator', perfect)):
        print(f'{name:>14}: {np.mean(returns):8.1f} ± {np.std(returns):6.1f}  per episode {np.round(returns).tolist()}')


if __name__ == '__main__':
    main()
