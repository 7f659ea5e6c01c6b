"""Time to solve CartPole-v1: CALF's PPO (``cartpole_defaults()``) vs Stable-Baselines3 PPO.

SB3 uses rl-zoo's CartPole-v1 hyperparameters (n_envs 8, n_steps 32, batch 256,
gae_lambda 0.8, gamma 0.98, n_epochs 20, ent_coef 0, lr lin 1e-3, clip lin 0.2, 1e5 steps).
"Solved" means the mean return of the last 20 training episodes reaches 475; both runs stop
there. Both use the same torch thread count (``--threads``, default 1, which is fastest
for these small networks). Each run is a fresh process (no shared torch state), runs alternate between the two
libraries, and the clock covers env and model construction plus learning, not imports.

    python bench/bench_ppo_cartpole.py [--seeds 1 2 3] [--budget 100000] [--threads 1]
"""
from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import NamedTuple

SOLVED = 475.0
WINDOW = 20


class Run(NamedTuple):
    """One training run until solved or out of budget."""

    library: str
    seed: int
    solved: bool
    steps: int
    wall_s: float


def run_calf(seed: int, budget: int, threads: int) -> Run:
    """CALF's PPO with its CartPole defaults, stopping at the solve threshold."""
    import gymnasium as gym

    from calf_agent.trainer import cartpole_defaults
    from calf_agent.training import train

    def make(num_envs: int) -> gym.vector.VectorEnv:
        return gym.make_vec('CartPole-v1', num_envs, vectorization_mode='sync',
                            vector_kwargs={'autoreset_mode': gym.vector.AutoresetMode.SAME_STEP})

    cfg = dataclasses.replace(cartpole_defaults(), seed=seed, total_steps=budget, stop_return=SOLVED,
                              return_window=WINDOW, torch_threads=threads)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        result = train(cfg, make, Path(out), progress=False)
        wall = time.perf_counter() - start
    return Run('calf', seed, result.solved, result.global_steps, wall)


def run_sb3(seed: int, budget: int, threads: int) -> Run:
    """SB3 PPO with rl-zoo's CartPole-v1 hyperparameters, stopping at the solve threshold."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    class StopWhenSolved(BaseCallback):
        solved = False

        def _on_step(self) -> bool:
            episodes = list(self.model.ep_info_buffer)[-WINDOW:]
            self.solved = len(episodes) > 0 and statistics.fmean(e['r'] for e in episodes) >= SOLVED
            return not self.solved

    torch.set_num_threads(threads)
    start = time.perf_counter()
    env = make_vec_env('CartPole-v1', n_envs=8, seed=seed)
    model = PPO('MlpPolicy', env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=lambda left: left * 1e-3, clip_range=lambda left: left * 0.2,
                seed=seed, device='cpu', verbose=0)
    callback = StopWhenSolved()
    model.learn(budget, callback=callback)
    wall = time.perf_counter() - start
    return Run('sb3', seed, callback.solved, model.num_timesteps, wall)


def summarise(runs: list[Run]) -> None:
    """Print each run, the medians per library and the wall-clock ratio."""
    for run in runs:
        print(f'{run.library:5s} seed={run.seed} solved={run.solved!s:5s} steps={run.steps:7d} '
              f'wall={run.wall_s:6.1f}s')
    medians = {}
    for library in ('calf', 'sb3'):
        mine = [r for r in runs if r.library == library]
        medians[library] = statistics.median(r.wall_s for r in mine)
        print(f'{library:5s} median: wall={medians[library]:.1f}s '
              f'steps={statistics.median(r.steps for r in mine):.0f} '
              f'solved={sum(r.solved for r in mine)}/{len(mine)}')
    print(f'wall-clock ratio calf/sb3 = {medians["calf"] / medians["sb3"]:.2f}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seeds', type=int, nargs='+', default=[1, 2, 3])
    parser.add_argument('--budget', type=int, default=100_000)
    parser.add_argument('--threads', type=int, default=1, help='torch threads for both libraries')
    args = parser.parse_args()
    runs = []
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context('spawn'),
                             max_tasks_per_child=1) as pool:
        for seed in args.seeds:
            for fn in (run_calf, run_sb3):
                runs.append(pool.submit(fn, seed, args.budget, args.threads).result())
                print(runs[-1], flush=True)
    summarise(runs)


if __name__ == '__main__':
    main()
