"""The PPO training loop (CleanRL ppo.py / ppo_atari_lstm.py) over any gymnasium vector env.

The vector env must autoreset in ``SAME_STEP`` mode, e.g.
``gym.make_vec(id, n, vectorization_mode='sync', vector_kwargs={'autoreset_mode':
gym.vector.AutoresetMode.SAME_STEP})``: then every step is a real transition and a
truncated episode is bootstrapped from ``info['final_obs']``. Observations must be flat
(``Box`` of shape ``(obs_dim,)``) and actions ``Discrete(n)`` or ``MultiDiscrete([n] * H)``, or
``Box`` of shape ``(A,)`` or ``(H, A)`` (a plan): continuous actions train a ``GaussianAgent`` on
running-normalised observations, and are clipped to the bounds as they are sent to the env.
With ``mask_unexecuted`` the env must report ``info['executed']`` (see ``NetworkedEnv``), and the
policy loss of each step counts only the plan elements that ran.

Its config, run log and checkpoint are shared with the SAC loop (``calf_agent.sac_training``, Box actions of
shape ``(A,)``); ``calf_agent.training.train`` runs either, by ``TrainConfig.algo``.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from calf_agent.checkpoint import save_checkpoint
from calf_agent.gaussian import GaussianAgent
from calf_agent.normalize import ReturnNormalizer
from calf_agent.policies import AGENT_KINDS, PLAN_HEADS, Agent, LstmAgent, LstmState, MlpAgent
from calf_agent.ppo import PPOConfig, RolloutBuffer, compute_gae, ppo_loss
from calf_agent.sac import SacConfig
from calf_agent.seeding import seed_everything
from calf_core import atomic
from calf_core import progress as progress_bars
from calf_core.task_spec import ALGOS, SAC_ALGOS

CSV_FIELDS = ('global_step', 'episodes', 'episodic_return', 'episodic_length', 'policy_loss',
              'value_loss', 'entropy', 'approx_kl', 'clipfrac', 'explained_variance',
              'learning_rate', 'sps', 'time_s')


@dataclass(frozen=True)
class TrainConfig:
    """One training run. ``meta`` is copied into the checkpoint's meta.json."""

    algo: Literal['ppo', 'sac', 'bpql'] = 'ppo'
    total_steps: int = 100_000
    num_envs: int = 8
    num_steps: int = 128
    seed: int = 1
    agent: Literal['mlp', 'lstm'] = 'mlp'
    hidden: tuple[int, ...] = (64, 64)
    lstm_size: int = 128
    ppo: PPOConfig = field(default_factory=PPOConfig)
    sac: SacConfig = field(default_factory=SacConfig)  # with algo sac or bpql
    stop_return: float | None = None  # stop once the windowed mean return reaches this
    return_window: int = 20  # episodes in the reported mean return
    torch_threads: int = 1
    mask_unexecuted: bool = False  # policy loss only on executed plan elements (info['executed'])
    plan_head: str = 'independent'  # MLP plan actor: 'independent' heads or one time-conditioned 'time' head
    norm_reward: bool = False  # scale rewards by the running std of the discounted return (continuous control)
    log_std_init: float = 0.0  # initial log-std of a Gaussian (continuous-action) policy
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f'unknown algo {self.algo!r}: choose one of {", ".join(ALGOS)}')
        if self.algo in SAC_ALGOS and self.agent != 'mlp':
            raise ValueError(f'{self.algo} trains an mlp policy, got agent {self.agent!r}')
        if self.agent not in AGENT_KINDS:
            raise ValueError(f'unknown agent {self.agent!r}: choose one of {", ".join(AGENT_KINDS)}')
        if min(self.num_envs, self.num_steps, self.return_window, self.torch_threads) < 1:
            raise ValueError('num_envs, num_steps, return_window and torch_threads must be >= 1')
        if self.total_steps < 1:
            raise ValueError(f'total_steps={self.total_steps} must be >= 1')
        if self.plan_head not in PLAN_HEADS or (self.agent == 'lstm' and self.plan_head != 'independent'):
            raise ValueError(f'plan_head {self.plan_head!r} needs the mlp agent; choose one of {", ".join(PLAN_HEADS)}')
        split = self.num_envs if self.agent == 'lstm' else self.batch_size
        if self.algo == 'ppo' and self.ppo.num_minibatches > split:
            raise ValueError(f'num_minibatches={self.ppo.num_minibatches} exceeds the {split} '
                             f'{"envs" if self.agent == "lstm" else "samples"} of a rollout')

    @property
    def batch_size(self) -> int:
        """Env steps per rollout (SAC: per vector step, ``num_steps`` 1)."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Rollout/update cycles: the budget is a minimum, rounded up to whole rollouts."""
        return -(-self.total_steps // self.batch_size)


@dataclass(frozen=True)
class TrainResult:
    """What a finished run produced."""

    out_dir: Path
    global_steps: int
    iterations: int
    wall_time_s: float
    episode_returns: tuple[float, ...] = field(repr=False)
    mean_return: float  # over the last ``return_window`` episodes (nan if none finished)
    solved: bool  # ``stop_return`` was reached


def cartpole_defaults() -> TrainConfig:
    """Tuned for wall-clock time to solve CartPole-v1 on a small CPU (see bench/)."""
    return TrainConfig(
        total_steps=100_000, num_envs=8, num_steps=32, agent='mlp', hidden=(64, 64),
        ppo=PPOConfig(learning_rate=1e-3, anneal_lr=True, gamma=0.98, gae_lambda=0.8,
                      num_minibatches=1, update_epochs=20, clip_coef=0.2, clip_vloss=False,
                      ent_coef=0.0),
        meta={'env': 'cartpole'})


def minigrid_defaults() -> TrainConfig:
    """LSTM agent on MiniGrid's flat partial view (CleanRL's recurrent PPO settings)."""
    return TrainConfig(
        total_steps=500_000, num_envs=8, num_steps=128, agent='lstm', hidden=(64,), lstm_size=128,
        ppo=PPOConfig(learning_rate=2.5e-4, gamma=0.99, gae_lambda=0.95, num_minibatches=4,
                      update_epochs=4, ent_coef=0.01),
        meta={'env': 'minigrid'})


def continuous_defaults() -> TrainConfig:
    """CleanRL's ppo_continuous_action settings (Gaussian MLP, normalised observations and rewards), with
    4 envs x 512 steps per rollout."""
    return TrainConfig(
        total_steps=200_000, num_envs=4, num_steps=512, agent='mlp', hidden=(64, 64), norm_reward=True,
        ppo=PPOConfig(learning_rate=3e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95, num_minibatches=32,
                      update_epochs=10, clip_coef=0.2, clip_vloss=True, ent_coef=0.0))


def sac_defaults() -> TrainConfig:
    """SAC on one env (CleanRL's and SB3's settings: 256x256 ReLU networks, batch 256, lr 3e-4, gamma 0.99,
    tau 0.005, alpha tuned towards -A), on running-normalised observations."""
    return TrainConfig(algo='sac', total_steps=100_000, num_envs=1, num_steps=1, agent='mlp', hidden=(256, 256),
                       sac=SacConfig())


def train_ppo(cfg: TrainConfig, make_vec_env: Callable[[int], gym.vector.VectorEnv], out_dir: Path,
              progress: bool = True) -> TrainResult:
    """Train PPO on ``make_vec_env(cfg.num_envs)``; log and checkpoint into ``out_dir``.

    Writes ``progress.csv``, TensorBoard events under ``tb/``, ``policy.safetensors`` and
    ``meta.json``. The env is seeded with ``reset(seed=cfg.seed)``.
    """
    if cfg.algo != 'ppo':
        raise ValueError(f'train_ppo trains algo ppo, got {cfg.algo!r}: use calf_agent.training.train')
    out_dir = Path(out_dir)
    rng = seed_everything(cfg.seed, cfg.torch_threads)
    envs = make_vec_env(cfg.num_envs)
    try:
        check_env(envs, cfg.num_envs)
        envs = RecordEpisodeStatistics(envs)
        agent = build_agent(cfg, envs)
        loop = _Loop(cfg, agent, envs, rng, out_dir)
        loop.run(progress)
    finally:
        envs.close()
    return finish(cfg, agent, out_dir, loop.global_step, loop.iteration, loop.elapsed, loop.episodes, loop.solved)


def finish(cfg: TrainConfig, agent: torch.nn.Module, out_dir: Path, global_step: int, iterations: int,
           elapsed: float, episodes: Episodes, solved: bool) -> TrainResult:
    """Save the checkpoint of a finished run (its config in ``meta.json``) and return the run's result."""
    meta = {**cfg.meta, 'algo': cfg.algo, 'seed': cfg.seed, 'steps': global_step, 'train_config': _config_dict(cfg)}
    save_checkpoint(out_dir, agent, meta)
    return TrainResult(Path(out_dir), global_step, iterations, elapsed, tuple(episodes.returns),
                       episodes.mean_return(cfg.return_window), solved)


class Episodes:
    """Finished episodes, collected from ``RecordEpisodeStatistics``: every return, the recent lengths."""

    def __init__(self, window: int) -> None:
        self.returns: list[float] = []
        self.lengths: deque[int] = deque(maxlen=window)

    def record(self, info: Mapping[str, Any]) -> None:
        """Collect the episodes that ended at this vector step."""
        if '_episode' not in info:
            return
        for i in np.flatnonzero(info['_episode']):
            self.returns.append(float(info['episode']['r'][i]))
            self.lengths.append(int(info['episode']['l'][i]))

    def mean_return(self, window: int) -> float:
        """The mean of the last ``window`` returns (nan before the first episode ends)."""
        recent = self.returns[-window:]
        return float(np.mean(recent)) if recent else math.nan

    def mean_length(self) -> float:
        return float(np.mean(self.lengths)) if self.lengths else math.nan


class RunLog:
    """One run's ``progress.csv`` rows, TensorBoard scalars and progress bar."""

    def __init__(self, log: csv.DictWriter, writer: SummaryWriter, bar: tqdm, total_steps: int, done: int = 0) -> None:
        self._log, self._writer, self._bar = log, writer, bar
        self._done, self._total = done, total_steps

    def write(self, row: Mapping[str, float], steps: int) -> None:
        """Log ``row`` (its first field is the step) and advance the bar by ``steps``."""
        self._log.writerow(row)
        fields = list(row)
        for key in fields[1:]:
            self._writer.add_scalar(f'charts/{key}', row[key], row[fields[0]])
        self._done += steps
        progress_bars.report(self._done, self._total)
        self._bar.update(steps)
        self._bar.set_postfix(ret=f'{row["episodic_return"]:.1f}', refresh=False)


@contextmanager
def run_log(out_dir: Path, fields: tuple[str, ...], total_steps: int, progress: bool,
            resumed: Sequence[Mapping[str, float]] = ()) -> Iterator[RunLog]:
    """Open ``out_dir``'s progress.csv (kept if interrupted), TensorBoard events and progress bar over env
    steps (``calf_core.progress`` decides whether it shows; ``progress=False`` never shows it). ``resumed``: the
    rows of the stopped run this one continues, written first; TensorBoard hides that run's later events."""
    out_dir.mkdir(parents=True, exist_ok=True)
    done = int(resumed[-1][fields[0]]) if resumed else 0
    with (atomic.replacing(out_dir / 'progress.csv', 'w', newline='') as csv_file,
          SummaryWriter(str(out_dir / 'tb'), purge_step=done + 1 if resumed else None) as writer,
          progress_bars.bar(total_steps, 'step', allowed=progress, initial=done) as bar):
        log = csv.DictWriter(csv_file, fields)
        log.writeheader()
        log.writerows(resumed)
        yield RunLog(log, writer, bar, total_steps, done)


def check_env(envs: gym.vector.VectorEnv, num_envs: int) -> None:
    """Raise ValueError unless ``envs`` meets the trainer's contract (see the module doc)."""
    if envs.num_envs != num_envs:
        raise ValueError(f'make_vec_env({num_envs}) returned {envs.num_envs} envs')
    mode = envs.metadata.get('autoreset_mode')
    if mode != AutoresetMode.SAME_STEP:
        raise ValueError(f'the trainer needs autoreset_mode SAME_STEP, got {mode}: pass '
                         "vector_kwargs={'autoreset_mode': gym.vector.AutoresetMode.SAME_STEP}")
    space = envs.single_observation_space
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise ValueError(f'the trainer needs a flat Box observation, got {space}: flatten it '
                         '(e.g. gym.wrappers.FlattenObservation)')


def action_layout(space: gym.Space) -> tuple[int, int]:
    """``(n_actions, plan_horizon)`` for Discrete(n) or MultiDiscrete([n] * H); ``(A, H)`` for a Box of
    shape ``(A,)`` or ``(H, A)``."""
    if isinstance(space, gym.spaces.Box) and space.shape and len(space.shape) <= 2:
        return int(space.shape[-1]), 1 if len(space.shape) == 1 else int(space.shape[0])
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n), 1
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1 and len(set(space.nvec)) == 1:
        return int(space.nvec[0]), len(space.nvec)
    raise ValueError(f'the trainer needs Discrete(n), MultiDiscrete([n] * H) or Box (A,) or (H, A) actions, '
                     f'got {space}')


def build_agent(cfg: TrainConfig, envs: gym.vector.VectorEnv) -> Agent:
    """The agent ``cfg`` asks for, sized to the env's spaces."""
    obs_dim = int(envs.single_observation_space.shape[0])
    space = envs.single_action_space
    n_actions, horizon = action_layout(space)
    if isinstance(space, gym.spaces.Box):
        if cfg.agent != 'mlp':
            raise ValueError(f'continuous actions need the mlp agent, got {cfg.agent!r}')
        low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
        if len(space.shape) == 2 and not ((low == low[0]).all() and (high == high[0]).all()):
            raise ValueError(f'a plan of continuous actions needs the same bounds for every element, got {space}')
        return GaussianAgent(obs_dim, n_actions, low.reshape(-1, n_actions)[0].tolist(),
                             high.reshape(-1, n_actions)[0].tolist(), cfg.hidden, horizon, cfg.log_std_init)
    if cfg.agent == 'lstm':
        return LstmAgent(obs_dim, n_actions, cfg.hidden, horizon, cfg.lstm_size)
    return MlpAgent(obs_dim, n_actions, cfg.hidden, horizon, cfg.plan_head)


def _config_dict(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as plain data, without the free-form ``meta`` and the settings of the other algorithm."""
    data = dataclasses.asdict(cfg)
    del data['meta'], data['sac' if cfg.algo == 'ppo' else 'ppo']  # the other algorithm's settings are unused
    return data


class _Loop:
    """State of one run: rollout collection, PPO updates and logging."""

    def __init__(self, cfg: TrainConfig, agent: Agent, envs: gym.vector.VectorEnv,
                 rng: np.random.Generator, out_dir: Path) -> None:
        self.cfg, self.agent, self.envs, self.rng, self.out_dir = cfg, agent, envs, rng, out_dir
        self.recurrent = isinstance(agent, LstmAgent)
        self.continuous = isinstance(agent, GaussianAgent)
        self.reward_norm = ReturnNormalizer(cfg.num_envs, cfg.ppo.gamma) if cfg.norm_reward else None
        self.optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.ppo.learning_rate, eps=1e-5, fused=True)
        action_shape = () if agent.plan_horizon == 1 else (agent.plan_horizon,)
        if self.continuous:
            action_shape = (*action_shape, agent.action_dim)
        self.buffer = RolloutBuffer(cfg.num_steps, cfg.num_envs, agent.obs_dim, action_shape,
                                    cfg.mask_unexecuted, continuous=self.continuous)
        self.episodes = Episodes(cfg.return_window)
        self.global_step = self.iteration = 0
        self.elapsed = 0.0
        self.solved = False

    def run(self, progress: bool) -> None:
        """Iterate rollout + update until the budget is spent or ``stop_return`` is reached."""
        cfg = self.cfg
        start = time.perf_counter()
        obs, _ = self.envs.reset(seed=cfg.seed)
        next_obs = self._observe(obs)
        next_done = torch.zeros(cfg.num_envs)
        state = self.agent.initial_state(cfg.num_envs) if self.recurrent else None
        with run_log(self.out_dir, CSV_FIELDS, cfg.num_iterations * cfg.batch_size, progress) as log:
            while self.iteration < cfg.num_iterations:
                self.iteration += 1
                lr = self._anneal()
                initial_state = state
                next_obs, next_done, state = self._rollout(next_obs, next_done, state)
                stats = self._update(next_obs, next_done, state, initial_state)
                self.elapsed = time.perf_counter() - start
                row = self._row(stats, lr)
                log.write(row, cfg.batch_size)
                if cfg.stop_return is not None and row['episodic_return'] >= cfg.stop_return:
                    self.solved = True
                    break
        self.elapsed = time.perf_counter() - start

    def _anneal(self) -> float:
        """Set and return this iteration's learning rate."""
        ppo = self.cfg.ppo
        frac = 1.0 - (self.iteration - 1) / self.cfg.num_iterations if ppo.anneal_lr else 1.0
        lr = frac * ppo.learning_rate
        self.optimizer.param_groups[0]['lr'] = lr
        return lr

    @torch.inference_mode()
    def _policy(self, obs: Tensor, done: Tensor, state: LstmState | None
                ) -> tuple[Tensor, Tensor, Tensor, LstmState | None]:
        """``(action, logprob, value, new_state)`` for one vector step."""
        if isinstance(self.agent, LstmAgent):
            action, logprob, _, value, state = self.agent.get_action_and_value(obs, state, done)
        else:
            action, logprob, _, value = self.agent.get_action_and_value(obs)
        return action, logprob, value, state

    @torch.inference_mode()
    def _value(self, obs: Tensor, done: Tensor, state: LstmState | None) -> Tensor:
        """Critic values for ``obs``, continuing ``state`` for recurrent agents."""
        if isinstance(self.agent, LstmAgent):
            return self.agent.get_value(obs, state, done)
        return self.agent.get_value(obs)

    def _rollout(self, obs: Tensor, done: Tensor, state: LstmState | None
                 ) -> tuple[Tensor, Tensor, LstmState | None]:
        """Fill the buffer with ``num_steps`` vector steps; return the carried-over obs/done/state."""
        self.buffer.reset()
        gamma = self.cfg.ppo.gamma
        while not self.buffer.full:
            action, logprob, value, state = self._policy(obs, done, state)
            raw_obs, reward, term, trunc, info = self.envs.step(self._executed_action(action))
            reward = reward.astype(np.float32)
            if self.reward_norm is not None:
                reward = self.reward_norm.scale(reward, term | trunc)
            reward = self._bootstrap(reward, term, trunc, info, state, gamma)
            self.buffer.add(obs, done, action, logprob, value, reward)
            if self.buffer.track_executed:
                self.buffer.mark_executed(executed_elements(info))
            obs = self._observe(raw_obs)
            done = torch.as_tensor(term | trunc, dtype=torch.float32)
            self.episodes.record(info)
        self.global_step += self.cfg.batch_size
        return obs, done, state

    def _observe(self, raw: np.ndarray) -> Tensor:
        """The policy input for env observations; a Gaussian agent's normaliser learns from them first."""
        obs = torch.as_tensor(raw, dtype=torch.float32)
        if not self.continuous:
            return obs
        self.agent.obs_norm.update(raw)
        return self.agent.obs_norm(obs)

    def _executed_action(self, action: Tensor) -> np.ndarray:
        """What the env receives: continuous actions clipped to the bounds (the buffer keeps the sample)."""
        return (self.agent.clip(action) if self.continuous else action).numpy()

    def _bootstrap(self, reward: np.ndarray, term: np.ndarray, trunc: np.ndarray,
                   info: Mapping[str, Any], state: LstmState | None, gamma: float) -> np.ndarray:
        """Add ``gamma * V(final_obs)`` to rewards of episodes cut by a time limit."""
        idx = np.flatnonzero(trunc & ~term)
        if idx.size == 0:
            return reward
        final = torch.as_tensor(np.stack([info['final_obs'][i] for i in idx]), dtype=torch.float32)
        if self.continuous:
            final = self.agent.obs_norm(final)
        sub = None if state is None else (state[0][:, idx], state[1][:, idx])
        reward[idx] += gamma * self._value(final, torch.zeros(idx.size), sub).numpy()
        return reward

    def _update(self, next_obs: Tensor, next_done: Tensor, state: LstmState | None,
                initial_state: LstmState | None) -> dict[str, float]:
        """PPO epochs over the buffer; return mean loss stats and explained variance."""
        ppo, buf = self.cfg.ppo, self.buffer
        next_value = self._value(next_obs, next_done, state)
        advantages, returns = compute_gae(buf.rewards, buf.values, buf.dones, next_value, next_done,
                                          ppo.gamma, ppo.gae_lambda)
        if buf.track_executed:
            self._rescore(initial_state)
        mask_of = (lambda mb: mb.masks) if buf.track_executed else (lambda mb: None)
        totals: dict[str, float] = {}
        count = 0
        for _ in range(ppo.update_epochs):
            for mb in buf.minibatches(advantages, returns, ppo.num_minibatches, self.rng, self.recurrent):
                if isinstance(self.agent, LstmAgent):
                    sub = (initial_state[0][:, mb.env_idx], initial_state[1][:, mb.env_idx])
                    _, logprob, entropy, value, _ = self.agent.get_action_and_value(
                        mb.obs, sub, mb.dones, mb.actions, mask_of(mb))
                else:
                    _, logprob, entropy, value = self.agent.get_action_and_value(mb.obs, mb.actions, mask_of(mb))
                loss, stats = ppo_loss(logprob, mb.logprobs, mb.advantages, value, mb.values, mb.returns,
                                       entropy, ppo.clip_coef, ppo.vf_coef, ppo.ent_coef,
                                       ppo.clip_vloss, ppo.norm_adv)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.agent.parameters(), ppo.max_grad_norm, foreach=True)
                self.optimizer.step()
                for key, value_ in stats.items():
                    totals[key] = totals.get(key, 0.0) + value_
                count += 1
            if ppo.target_kl is not None and stats['approx_kl'] > ppo.target_kl:
                break
        means = {key: total / count for key, total in totals.items()}
        means['explained_variance'] = _explained_variance(buf.values, returns)
        return means

    @torch.inference_mode()
    def _rescore(self, initial_state: LstmState | None) -> None:
        """Replace the stored logprobs by their sums over executed elements, under the rollout policy."""
        buf = self.buffer
        obs, actions, masks = buf.obs.flatten(0, 1), buf.actions.flatten(0, 1), buf.masks.flatten(0, 1)
        if isinstance(self.agent, LstmAgent):
            logprob = self.agent.get_action_and_value(obs, initial_state, buf.dones.flatten(0, 1), actions, masks)[1]
        else:
            logprob = self.agent.get_action_and_value(obs, actions, masks)[1]
        buf.logprobs.copy_(logprob.view_as(buf.logprobs))

    def _row(self, stats: Mapping[str, float], lr: float) -> dict[str, float]:
        """One progress.csv row."""
        return {
            'global_step': self.global_step,
            'episodes': len(self.episodes.returns),
            'episodic_return': self.episodes.mean_return(self.cfg.return_window),
            'episodic_length': self.episodes.mean_length(),
            **{key: stats[key] for key in ('policy_loss', 'value_loss', 'entropy', 'approx_kl',
                                           'clipfrac', 'explained_variance')},
            'learning_rate': lr,
            'sps': self.global_step / max(self.elapsed, 1e-9),
            'time_s': self.elapsed,
        }


def executed_elements(info: Mapping[str, Any]) -> np.ndarray:
    """``info['executed']`` per env, taken from ``final_info`` where an episode just ended."""
    executed = np.array(info['executed'])
    if '_final_info' in info:
        for i in np.flatnonzero(info['_final_info']):
            executed[i] = info['final_info']['executed'][i]
    return executed


def _explained_variance(values: Tensor, returns: Tensor) -> float:
    """1 - Var[returns - values] / Var[returns] (nan when returns are constant)."""
    var = returns.var().item()
    return math.nan if var == 0 else 1.0 - (returns - values).var().item() / var
