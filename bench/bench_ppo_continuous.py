"""Continuous control on a clean link: CALF's Gaussian PPO vs Stable-Baselines3 PPO with rl-zoo's hyperparameters.

For each task and seed, SB3 trains for the whole budget first; its final return is the mean of its
last 20 training episodes. CALF then trains with ``stop_return`` at that return less 5 % of its
magnitude, on the same budget: its time to reach it is compared with SB3's wall-clock for the
whole budget (goal: <= 1.0x). Both use one torch thread; every run is a fresh process and the clock
covers env and model construction plus learning, not imports. Both train on the plain gymnasium
env (a clean link adds no delay).

SB3 runs rl-zoo's settings: Pendulum-v1 (4 envs, n_steps 1024, gamma 0.9, lr 1e-3, 10 epochs,
gSDE, 1e5 steps) and InvertedPendulum (VecNormalize, 1 env, n_steps 32, batch 64, gamma 0.999,
lr 2.22e-4, clip 0.4, 5 epochs; rl-zoo's budget is 1e6 steps, this bench gives both 1e5 by default).

    python bench/bench_ppo_continuous.py [--tasks Pendulum-v1 InvertedPendulum-v5] [--seeds 1 2 3]
        [--budget 100000] [--out results/continuous_vs_sb3]
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

WINDOW = 20
MARGIN = 0.05


class Run(NamedTuple):
    """One training run: the windowed return it ended with (or first reached the target at)."""

    library: str
    task: str
    seed: int
    steps: int
    wall_s: float
    final_return: float
    reached: bool  # CALF: the target was reached; SB3: always True (it sets the target)


def calf_config(task: str, seed: int, budget: int, target: float) -> Any:
    """CALF's settings for ``task``: ``continuous_defaults()``; for Pendulum with rl-zoo's gamma, learning rate
    and minibatch size of 64, without gSDE, on 8 envs x 256 steps."""
    import dataclasses

    from calf_agent.ppo import PPOConfig
    from calf_agent.trainer import continuous_defaults

    base = continuous_defaults()
    if task == 'Pendulum-v1':
        base = dataclasses.replace(base, num_envs=8, num_steps=256, ppo=PPOConfig(
            learning_rate=1e-3, anneal_lr=False, gamma=0.9, gae_lambda=0.95, num_minibatches=32, update_epochs=10,
            clip_coef=0.2, ent_coef=0.0))
    return dataclasses.replace(base, seed=seed, total_steps=budget, stop_return=target, return_window=WINDOW,
                               torch_threads=1)


def run_calf(task: str, seed: int, budget: int, target: float) -> Run:
    """CALF's PPO until the windowed return reaches ``target`` or the budget is spent."""
    import gymnasium as gym

    from calf_agent.training import train

    def make(num_envs: int) -> gym.vector.VectorEnv:
        return gym.make_vec(task, num_envs, vectorization_mode='sync',
                            vector_kwargs={'autoreset_mode': gym.vector.AutoresetMode.SAME_STEP})

    cfg = calf_config(task, seed, budget, target)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        result = train(cfg, make, Path(out), progress=False)
        wall = time.perf_counter() - start
    return Run('calf', task, seed, result.global_steps, wall, result.mean_return, result.solved)


def run_sb3(task: str, seed: int, budget: int) -> Run:
    """SB3 PPO with rl-zoo's hyperparameters for ``task``, for the whole budget."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    start = time.perf_counter()
    if task == 'Pendulum-v1':
        env = make_vec_env(task, n_envs=4, seed=seed)
        model = PPO('MlpPolicy', env, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
                    learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4, seed=seed,
                    device='cpu', verbose=0)
    else:
        env = VecNormalize(make_vec_env(task, n_envs=1, seed=seed), gamma=0.999)
        model = PPO('MlpPolicy', env, batch_size=64, n_steps=32, gamma=0.999, learning_rate=0.000222425,
                    ent_coef=1.37976e-07, clip_range=0.4, n_epochs=5, gae_lambda=0.9, max_grad_norm=0.3,
                    vf_coef=0.19816, seed=seed, device='cpu', verbose=0)
    model.learn(budget)
    wall = time.perf_counter() - start
    episodes = list(model.ep_info_buffer)[-WINDOW:]
    final = statistics.fmean(e['r'] for e in episodes) if episodes else math.nan
    return Run('sb3', task, seed, model.num_timesteps, wall, final, True)


def target_of(sb3_final: float) -> float:
    """SB3's final return less ``MARGIN`` of its magnitude."""
    return sb3_final - MARGIN * abs(sb3_final)


def summarise(runs: list[Run]) -> dict[str, Any]:
    """Per-task medians and the wall-clock ratio, printed and returned."""
    summary: dict[str, Any] = {}
    for task in dict.fromkeys(r.task for r in runs):
        calf = [r for r in runs if r.task == task and r.library == 'calf']
        sb3 = [r for r in runs if r.task == task and r.library == 'sb3']
        ratios = [c.wall_s / s.wall_s for c, s in zip(calf, sb3) if c.reached]
        summary[task] = {
            'sb3_final_return_median': statistics.median(r.final_return for r in sb3),
            'sb3_wall_s_median': statistics.median(r.wall_s for r in sb3),
            'calf_reached': f'{sum(r.reached for r in calf)}/{len(calf)}',
            'calf_wall_s_median': statistics.median(r.wall_s for r in calf),
            'calf_return_median': statistics.median(r.final_return for r in calf),
            'wall_ratio_per_seed': [round(x, 3) for x in ratios],
            'wall_ratio_median': statistics.median(ratios) if ratios else None,
        }
        print(task, json.dumps(summary[task]))
    return summary


def write(out: Path, runs: list[Run], summary: dict[str, Any], command: str) -> None:
    """``out``.json (every run and the summary) and ``out``.md (a table)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix('.json').write_text(json.dumps({'command': command, 'runs': [r._asdict() for r in runs],
                                                    'summary': summary}, indent=2) + '\n')
    lines = [f'Command: `{command}`', '',
             '| task | seed | SB3 final return | SB3 wall s | CALF target | CALF reached | CALF steps | '
             'CALF wall s | ratio |', '|---|---|---|---|---|---|---|---|---|']
    for sb3, calf in zip(runs[0::2], runs[1::2]):
        ratio = f'{calf.wall_s / sb3.wall_s:.2f}' if calf.reached else 'missed'
        lines.append(f'| {sb3.task} | {sb3.seed} | {sb3.final_return:.1f} | {sb3.wall_s:.1f} | '
                     f'{target_of(sb3.final_return):.1f} | {calf.reached} ({calf.final_return:.1f}) | {calf.steps} | '
                     f'{calf.wall_s:.1f} | {ratio} |')
    out.with_suffix('.md').write_text('\n'.join(lines) + '\n')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--tasks', nargs='+', default=['Pendulum-v1', 'InvertedPendulum-v5'])
    parser.add_argument('--seeds', type=int, nargs='+', default=[1, 2, 3])
    parser.add_argument('--budget', type=int, default=100_000)
    parser.add_argument('--out', type=Path, default=None, help='write OUT.json and OUT.md')
    args = parser.parse_args()
    runs: list[Run] = []
    with ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context('spawn'), max_tasks_per_child=1) as pool:
        for task in args.tasks:
            for seed in args.seeds:
                sb3 = pool.submit(run_sb3, task, seed, args.budget).result()
                print(sb3, flush=True)
                calf = pool.submit(run_calf, task, seed, args.budget, target_of(sb3.final_return)).result()
                print(calf, flush=True)
                runs += [sb3, calf]
    summary = summarise(runs)
    if args.out:
        command = ('python bench/bench_ppo_continuous.py --tasks ' + ' '.join(args.tasks) + ' --seeds '
                   + ' '.join(map(str, args.seeds)) + f' --budget {args.budget} --out {args.out}')
        write(args.out, runs, summary, command)


if __name__ == '__main__':
    main()
