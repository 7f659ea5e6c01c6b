"""Where a MuJoCo env's tick goes behind NetworkedEnv: MuJoCo's own step, timed inside each loop.

A NetworkedEnv tick beside a MuJoCo env costs more than the same code beside an env that does nothing. This
times ``mujoco.mj_step`` itself (a wall-clock timer around each call) in three loops over the same env:

- bare: gymnasium's ``benchmark_step`` loop, ``env.step(action_space.sample())``;
- networked: the same loop through ``calf_core.wrap(env, network=...)``;
- replay: the actions the networked env applied, stepped on a bare env back to back, nothing in between.

Replay steps the same states as the networked loop, so what its ``mj_step`` saves is time the networked loop
loses to the work between the calls (caches and branch predictors refilled after Python's work), which counts
as CALF's overhead per tick. The bare loop's states are its own. Medians over ``--repeats``.

    python bench/diagnose_mujoco_tick.py [--env HalfCheetah-v5] [--network wifi_degraded] [--steps 20000]
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium.envs.mujoco import mujoco_env

import calf_core
from calf_core.envs import make_env
from calf_core.timing import ObsRecord


class StepTimer:
    """``mujoco.mj_step`` as gymnasium's MuJoCo envs call it, with each call's wall-clock time summed."""

    def __init__(self) -> None:
        self.real, self.ns, self.calls = mujoco.mj_step, 0, 0
        mujoco_env.mujoco = self  # the module gymnasium's envs call mj_step through

    def __getattr__(self, name: str) -> Any:
        return getattr(mujoco, name)

    def mj_step(self, *args: Any, **kwargs: Any) -> None:
        start = time.perf_counter_ns()
        self.real(*args, **kwargs)
        self.ns += time.perf_counter_ns() - start
        self.calls += 1

    def mean_us(self, run: Any) -> float:
        """Mean µs per ``mj_step`` call during ``run()``."""
        self.ns = self.calls = 0
        run()
        return self.ns / self.calls / 1e3


def sampled(env: gym.Env, steps: int, seed: int = 0) -> None:
    """``benchmark_step``'s loop: random actions, a reset at each episode end."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()


def applied_actions(env_id: str, network: str, steps: int) -> list[np.ndarray | None]:
    """The actions a networked env applied at its ticks over ``steps`` random decisions; None marks a reset."""
    env = calf_core.wrap(make_env(env_id), network=network)
    applied: list[np.ndarray | None] = []

    def listen(record: ObsRecord) -> None:
        if record.applied is not None:  # None: the reset observation
            applied.append(record.applied.action)

    env.tick_listener = listen
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
            applied.append(None)
    return applied


def replay(env: gym.Env, actions: list[np.ndarray | None]) -> None:
    """Step ``actions`` on ``env`` back to back, resetting where one is None."""
    env.reset(seed=0)
    for action in actions:
        if action is None:
            env.reset()
        else:
            env.step(action)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--env', default='HalfCheetah-v5')
    parser.add_argument('--network', default='wifi_degraded')
    parser.add_argument('--steps', type=int, default=20_000)
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args()
    timer = StepTimer()
    bare, networked = make_env(args.env), calf_core.wrap(make_env(args.env), network=args.network)
    actions = applied_actions(args.env, args.network, args.steps)
    loops = {'bare': lambda: sampled(bare, args.steps), 'networked': lambda: sampled(networked, args.steps),
             'replay': lambda: replay(bare, actions)}
    runs: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(args.repeats):
        for name, run in loops.items():
            runs[name].append(timer.mean_us(run))
    print(f'{args.env} behind {args.network}: µs per mj_step call, medians of {args.repeats} x {args.steps} steps')
    median = {name: statistics.median(values) for name, values in runs.items()}
    for name, value in median.items():
        print(f'{name:<10}{value:>8.1f}')
    print(f'the networked loop\'s mj_step is {median["networked"] - median["replay"]:.1f} µs slower than the same '
          f'states replayed back to back')


if __name__ == '__main__':
    main()
