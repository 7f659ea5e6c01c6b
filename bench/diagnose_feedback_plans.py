"""Would plans with feedback survive Wi-Fi-D? A model planner's plans, open loop against first-order feedback.

Plays a planner checkpoint over a SAC actor behind a network in virtual time, twice on the same episodes:
- open loop: each plan element j is the actor's action u_j at the model's predicted state x_j, as today;
- with feedback: the env applies u_j + K_j (o - x_j), clipped to the action bounds, where o is its own
  observation at that tick and K_j the actor's Jacobian at x_j. That is the actor's action at the true state,
  to first order.

Both use a planning loop of their own: a fixed lead (the checkpoint's), no disagreement cut, and model rollouts
that apply the previous plan's feedback on the lead ticks, as the env will. Without that last part the
feedback drives the state away from what the next plan assumes, and the episode falls within a second.

This is a diagnosis, not a deployment path. The feedback reaches the env through a hook on its plan executor,
keyed by the plan's observation and element, because actions on the wire carry no gains.

    python bench/diagnose_feedback_plans.py --policy PLANNER_DIR --network wifi_degraded --episodes 20
"""
from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import torch

from calf_agent.checkpoint import load_checkpoint
from calf_agent.evaluate import one_torch_thread
from calf_agent.plan_agent import PlanningAgent
from calf_agent.sac import SacActor
from calf_core.envs import make_networked_env
from calf_core.network import resolve_network

Element = tuple[np.ndarray, np.ndarray, np.ndarray]
"""A plan element: the action u [A], the actor's Jacobian K [A, obs] and the predicted observation x [obs]."""


def action_and_jacobian(actor: SacActor, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The deterministic action [A] for raw observation ``x`` and its Jacobian [A, obs]."""
    def act(z: torch.Tensor) -> torch.Tensor:
        return actor.scale(actor.unit_mean(actor.obs_norm(z[None])))[0]

    with torch.inference_mode(False), torch.enable_grad():
        z = torch.tensor(x, dtype=torch.float32)
        return act(z).detach().numpy(), torch.autograd.functional.jacobian(act, z).numpy()


def play(agent: PlanningAgent, env_name: str, network: str, seed: int, feedback: bool) -> float:
    """One episode's return with open-loop plans, or with feedback plans."""
    actor, model, horizon, lead = agent.base, agent.model, agent.plan_horizon, agent.lead
    env = make_networked_env(env_name, resolve_network(network), seed=seed, plan_horizon=horizon)
    low, high = env.stepper.env.action_space.low, env.stepper.env.action_space.high
    current: dict[str, np.ndarray] = {}  # the env's own observation at its newest tick
    env.tick_listener = lambda record: current.__setitem__('obs', np.asarray(record.obs, np.float32))
    obs, info = env.reset(seed=seed)
    sent: dict[tuple[int, int], Element] = {}  # (the plan's obs_seq, element) -> what the env applies
    executor = env.stepper.executor
    planned_action = executor.action_for_tick

    def action_for_tick(tick: int) -> Any:
        applied = planned_action(tick)
        element = sent.get((applied.plan_seq, applied.index)) if feedback and not applied.held else None
        if element is None:
            return applied
        u, gain, x = element
        return applied._replace(action=np.clip(u + gain @ (current['obs'] - x), low, high).astype(np.float32))

    executor.action_for_tick = action_for_tick
    previous: dict[int, Element] = {}  # tick -> the element the newest plan holds for it
    total, done = 0.0, False
    while not done:
        seq = info['obs_seq']
        states = torch.as_tensor(obs, dtype=torch.float32)[None, None].expand(model.members, -1, -1)
        plan, newest = [], {}
        with torch.inference_mode():
            for j in range(horizon):
                tick, x = seq + 1 + j, states.mean(0)[0].numpy()
                if j < lead and tick in previous:  # the env runs the previous plan's element here
                    u, gain, x_then = newest[tick] = previous[tick]
                    applied = np.clip(u + gain @ (x - x_then), low, high) if feedback else u
                elif j < lead:  # before any plan: the MuJoCo tasks' zero start plan and hold
                    u = applied = np.zeros_like(low)
                else:
                    u, gain = action_and_jacobian(actor, x)
                    newest[tick] = (u, gain, x)
                    applied = u
                if tick in newest:
                    sent[(seq, j)] = newest[tick]
                plan.append(np.asarray(u, np.float32).reshape(low.shape))
                states = model.rollout_step(states, torch.as_tensor(np.asarray(applied, np.float32)).reshape(1, -1))
        previous = newest
        obs, reward, terminated, truncated, info = env.step(np.stack(plan))
        total += float(reward)
        done = terminated or truncated
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--policy', required=True, help='a model planner checkpoint over a SAC actor')
    parser.add_argument('--network', default='wifi_degraded')
    parser.add_argument('--episodes', type=int, default=20)
    parser.add_argument('--seed', type=int, default=100)
    args = parser.parse_args()
    agent, meta = load_checkpoint(args.policy)
    if not isinstance(agent, PlanningAgent) or not isinstance(agent.base, SacActor):
        parser.error('--policy must be a model planner over a SAC actor')
    print(f'{meta["env"]} behind {args.network}, {args.episodes} episodes from seed {args.seed}, lead {agent.lead}')
    with one_torch_thread():
        for name, feedback in (('open loop', False), ('feedback', True)):
            returns = [play(agent, meta['env'], args.network, args.seed + k, feedback) for k in range(args.episodes)]
            print(f'{name:>10}: {np.mean(returns):8.1f} ± {np.std(returns):6.1f}  per episode '
                  f'{np.round(returns).tolist()}', flush=True)


if __name__ == '__main__':
    main()
