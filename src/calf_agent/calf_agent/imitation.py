"""Imitation behind the link: a clean-link expert distilled into a delay-aware student by DAgger.

In simulation the true state at every tick is known. The student acts on what the link delivers (its
representation: frames, the actions in flight and the delay state) and sends plans of H actions; the
expert, a policy trained on a clean link that acts on the state alone, labels each plan element that
the env applied with the action it would have taken in the state where that element was applied.
DAgger gathers these labels in rounds in which the student drives (in round r, each decision is the
expert's, on the true state at that instant, with probability ``beta_decay ** r``: DAgger's mixture, so
that the first rounds visit the states the expert keeps the robot in), keeps them all (up to a bound)
and refits the student's actor to them by regression. This is delayed RL by imitation (DIDA's idea),
with CALF's links, plans and hold rule in the loop.

A plan is labelled as a whole where the simulator can restore a state (a gymnasium ``MujocoEnv``, the
user's own MuJoCo robots included): from the state where its first element ran, the plan is rolled
forward in a private copy of the env, and each later element gets the expert's action in the state it
would run in. An element only runs if every element before it in the same plan ran, so these are the
states it meets, and the link need not lose a message for the student to learn its later elements.
Other envs label the elements the env applied only.

The student is an ordinary Gaussian policy checkpoint: ``calf eval``, the policy node and the
adapter policy node run it as they run a PPO policy.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from calf_agent.checkpoint import load_checkpoint, save_checkpoint
from calf_agent.gaussian import GaussianAgent, acts_continuously
from calf_agent.regimes import default_representation, delay_ticks, first_element
from calf_agent.representation import (
    HistoryFeatures,
    Representation,
    observation_age_s,
    observation_facts,
    remembered_actions,
)
from calf_agent.seeding import seed_everything
from calf_agent.trainer import TrainResult, run_log
from calf_core.envs import env_spec, make_env, make_networked_env
from calf_core.errors import ConfigError
from calf_core.network import resolve_network
from calf_core.networked_env import NetworkedEnv
from calf_core.profiles import Profile
from calf_core.timing import ObsRecord

CSV_FIELDS = ('global_step', 'episodic_return', 'episodes', 'labels', 'loss', 'round')


@dataclass(frozen=True)
class ImitationConfig:
    """DAgger's budget and regression settings."""

    total_steps: int = 200_000  # env ticks the student drives, a minimum: rounds are whole
    rounds: int = 10
    num_envs: int = 8
    epochs: int = 4  # passes over the aggregated labels after each round
    minibatch: int = 256
    learning_rate: float = 1e-3
    hidden: tuple[int, ...] = (256, 256)
    max_labels: int = 500_000  # decisions kept; the oldest go first
    noise: float = 0.1  # exploration: Gaussian noise on the student's actions, as a fraction of the half range
    beta_decay: float = 0.5  # round r sends the expert's plan instead of the student's with probability decay ** r
    seed: int = 0
    torch_threads: int = 1

    def __post_init__(self) -> None:
        counts = (self.total_steps, self.rounds, self.num_envs, self.epochs, self.minibatch, self.max_labels)
        if min(counts) < 1:
            raise ValueError('total_steps, rounds, num_envs, epochs, minibatch and max_labels must be >= 1')
        if not (0 < self.learning_rate < 1) or not (0 <= self.noise <= 1) or not (0 <= self.beta_decay < 1):
            raise ValueError(f'learning_rate must be in (0, 1), noise in [0, 1] and beta_decay in [0, 1), got '
                             f'{self.learning_rate}, {self.noise} and {self.beta_decay}')


class Expert:
    """A clean-link policy that acts on the state alone: labels states with deterministic actions."""

    def __init__(self, ckpt_dir: Path | str, env: str) -> None:
        self.agent, meta = load_checkpoint(ckpt_dir)
        rep = Representation(**meta.get('representation', {}))
        if not acts_continuously(self.agent) or getattr(self.agent, 'base', None) is not None:
            raise ConfigError(f'expert {ckpt_dir} is not a continuous-action policy: train one on a clean link, '
                              f'e.g. `calf train --env {env} --regime baseline`')
        if rep != Representation() or int(meta.get('plan_horizon', 1)) != 1:
            raise ConfigError(f'expert {ckpt_dir} acts on {rep.as_dict()} with plans of '
                              f'{meta.get("plan_horizon", 1)}: an expert must act on the state alone, single '
                              f'actions (train it with --regime baseline)')
        if meta.get('env') != env:
            raise ConfigError(f'expert {ckpt_dir} was trained on {meta.get("env")}, not {env}')

    def label(self, states: np.ndarray) -> np.ndarray:
        """The expert's actions ``[n, A]`` in ``states`` ``[n, obs]``."""
        actions, _ = self.agent.act(states, deterministic=True)
        return np.asarray(actions, dtype=np.float32).reshape(len(states), -1)


class Labels:
    """The aggregated data set: features, per-element targets and which elements have one (a ring)."""

    def __init__(self, capacity: int, feature_size: int, plan_horizon: int, action_dim: int) -> None:
        self.x = np.zeros((capacity, feature_size), np.float32)
        self.y = np.zeros((capacity, plan_horizon, action_dim), np.float32)
        self.mask = np.zeros((capacity, plan_horizon), np.float32)
        self.size = self.next = 0

    def add(self, x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> None:
        for start in range(0, len(x), len(self.x)):
            self._add(x[start:start + len(self.x)], y[start:start + len(self.x)], mask[start:start + len(self.x)])

    def _add(self, x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> None:
        rows = (self.next + np.arange(len(x))) % len(self.x)
        self.x[rows], self.y[rows], self.mask[rows] = x, y, mask
        self.next = (self.next + len(x)) % len(self.x)
        self.size = min(self.size + len(x), len(self.x))


SimState = tuple[np.ndarray, np.ndarray]
"""A MuJoCo env's ``(qpos, qvel)``."""


def sim_state(env: gym.Env) -> SimState | None:
    """``env``'s simulator state if it can be restored (a gymnasium ``MujocoEnv``), else None."""
    inner = env.unwrapped
    data = getattr(inner, 'data', None)
    if data is None or not callable(getattr(inner, 'set_state', None)):
        return None
    return data.qpos.copy(), data.qvel.copy()


class PlanRoller:
    """A private copy of the env that rolls a plan forward from a restored state."""

    def __init__(self, env: str) -> None:
        self.env = make_env(env)
        self.env.reset(seed=0)

    def states(self, start: SimState, state: np.ndarray, plan: np.ndarray, first: int) -> list[np.ndarray]:
        """The states in which elements ``first``, ``first + 1``, ... of ``plan`` run, from ``start`` (whose
        observation is ``state``), up to the plan's end or the end of the episode."""
        inner = self.env.unwrapped
        inner.set_state(*start)
        states = [state]
        for action in plan[first:-1]:
            obs, _, terminated, _, _ = inner.step(action)
            if terminated:
                break
            states.append(np.asarray(obs, np.float32))
        return states


@dataclass
class Decision:
    """One decision (answering observation ``seq``): its features and plan, the plan elements the env applied
    with the states they were applied in, and the simulator state before its first applied element (None
    where the env cannot restore one)."""

    seq: int
    features: np.ndarray
    plan: np.ndarray
    elements: list[int]
    states: list[np.ndarray]
    start: SimState | None = None

    def add(self, element: int, state: np.ndarray, start: SimState | None) -> None:
        if not self.elements:
            self.start = start
        self.elements.append(element)
        self.states.append(state)

    def whole_plan(self, roller: PlanRoller) -> None:
        """Label every element from the first applied one on, with the states ``roller`` finds them in."""
        if self.start is None or not self.elements:
            return
        first = self.elements[0]
        self.states = roller.states(self.start, self.states[0], self.plan, first)
        self.elements = list(range(first, first + len(self.states)))


class StudentRollout:
    """One NetworkedEnv that the student drives, and the labels its ticks give.

    The env reports every tick (``NetworkedEnv.tick_listener``): which plan element it applied, and the
    state it applied it in (the previous tick's observation, and the simulator's state then where it can
    be restored, when ``whole_plans`` asks for it). A decision is labelled once no later element of its plan
    can run: a newer plan was applied, or the episode ended.
    """

    def __init__(self, env: NetworkedEnv, history: HistoryFeatures, whole_plans: bool = False) -> None:
        self.env, self.history, self.whole_plans = env, history, whole_plans
        env.tick_listener = self._on_tick
        self._state: np.ndarray | None = None
        self._sim: SimState | None = None
        # (plan_seq, element, state it was applied in, the simulator's state then)
        self._applied: list[tuple[int, int, np.ndarray, SimState | None]] = []
        self._decisions: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # obs_seq -> (features, plan)
        self.features = np.zeros(0, np.float32)
        self.state = np.zeros(0, np.float32)
        self.seq = self.ticks = 0
        self.episode_return = 0.0

    def _on_tick(self, record: ObsRecord) -> None:
        applied = record.applied
        if applied is not None and applied.index >= 0 and self._state is not None:
            self._applied.append((applied.plan_seq, applied.index, self._state, self._sim))
        self._state = self.state = record.obs
        self._sim = sim_state(self.env.stepper.env) if self.whole_plans else None

    def start(self, seed: int) -> None:
        self._state = self._sim = None
        self._applied.clear()
        self._decisions.clear()
        obs, info = self.env.reset(seed=seed)
        rep = self.history.rep
        self.features = self.history.reset(obs, observation_age_s(rep, info), observation_facts(rep, info))
        self.seq, self.episode_return = int(info['obs_seq']), 0.0

    def act(self, plan: np.ndarray) -> bool:
        """Send ``plan`` for the current decision; True when the episode ended. ``ticks``: the ticks it took."""
        self._decisions[self.seq] = self.features.copy(), np.asarray(plan, np.float32).reshape(-1, self.history.n_actions)
        obs, reward, terminated, truncated, info = self.env.step(plan)
        self.episode_return += float(reward)
        self.ticks = int(info['ticks'])
        if terminated or truncated:
            return True
        rep = self.history.rep
        sent = remembered_actions(plan, 1, True, self.history.n_actions, rep.history_element)[0]
        self.features = self.history.update(obs, sent, observation_age_s(rep, info), observation_facts(rep, info))
        self.seq = int(info['obs_seq'])
        return False

    def harvest(self, ended: bool) -> list[Decision]:
        """Every complete decision that had an element applied, with its elements and their states."""
        newest = max((seq for seq, *_ in self._applied), default=-1)
        done: dict[int, Decision] = {}
        kept = []
        for seq, index, state, sim in self._applied:
            if not (ended or seq < newest):
                kept.append((seq, index, state, sim))
            elif seq in self._decisions:
                done.setdefault(seq, Decision(seq, *self._decisions[seq], [], [])).add(index, state, sim)
        self._applied = kept
        for seq in [s for s in self._decisions if ended or s < newest]:
            del self._decisions[seq]
        return list(done.values())


def distil(expert_dir: Path | str, env: str, profile: Profile, rep: Representation, plan_horizon: int,
           cfg: ImitationConfig, out_dir: Path, meta: dict[str, Any], progress: bool = True) -> TrainResult:
    """Train a student for ``env`` behind ``profile`` by DAgger from ``expert_dir``; save it to ``out_dir``."""
    expert = Expert(expert_dir, env)
    rng = seed_everything(cfg.seed, cfg.torch_threads)
    envs = [make_networked_env(env, profile, seed=cfg.seed * 1000 + i, plan_horizon=plan_horizon)
            for i in range(cfg.num_envs)]
    space = envs[0].stepper.env.action_space
    if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
        raise ConfigError(f'imitation trains continuous actions (a Box of shape (A,)); {env}\'s are {space}')
    obs_size = int(np.prod(envs[0].observation_space.shape))
    action_dim = int(space.shape[0])
    roller = PlanRoller(env) if plan_horizon > 1 and sim_state(envs[0].stepper.env) is not None else None
    rollouts = [StudentRollout(e, HistoryFeatures(rep, obs_size, action_dim, continuous=True), roller is not None)
                for e in envs]
    student = GaussianAgent(rep.feature_size(obs_size, action_dim), action_dim, space.low, space.high,
                            cfg.hidden, plan_horizon, log_std_init=-1.0)
    optimizer = torch.optim.Adam(student.actor_mean.parameters(), lr=cfg.learning_rate)
    labels = Labels(cfg.max_labels, student.obs_dim, plan_horizon, action_dim)
    per_round = math.ceil(cfg.total_steps / cfg.rounds)
    half_range = (space.high - space.low).astype(np.float32) / 2
    returns: list[float] = []
    started, ticks, loss = 0, 0, math.nan
    begin = time.perf_counter()
    for rollout in rollouts:
        rollout.start(cfg.seed * 1_000_003 + started)
        started += 1
    with run_log(out_dir, CSV_FIELDS, per_round * cfg.rounds, progress) as log:
        for round_index in range(cfg.rounds):
            round_ticks, round_returns, gathered = 0, [], []
            while round_ticks < per_round:
                features = np.stack([r.features for r in rollouts])
                plans, _ = student.act(features, deterministic=True)
                plans = plans.reshape(len(rollouts), plan_horizon, action_dim)
                plans = np.clip(plans + rng.normal(0, cfg.noise, plans.shape).astype(np.float32) * half_range,
                                space.low, space.high).astype(np.float32)
                expert_rows = rng.random(len(rollouts)) < cfg.beta_decay ** round_index
                if expert_rows.any():  # DAgger's mixture: the expert, on the true state now, drives these envs
                    states = np.stack([r.state for r, e in zip(rollouts, expert_rows) if e])
                    plans[expert_rows] = expert.label(states)[:, None, :]
                for rollout, plan in zip(rollouts, plans):
                    ended = rollout.act(plan if plan_horizon > 1 else plan[0])
                    round_ticks += rollout.ticks
                    if ended:
                        gathered += rollout.harvest(ended=True)
                        round_returns.append(rollout.episode_return)
                        rollout.start(cfg.seed * 1_000_003 + started)
                        started += 1
            for rollout in rollouts:
                gathered += rollout.harvest(ended=False)
            if roller is not None:
                for decision in gathered:
                    decision.whole_plan(roller)
            new = _add_labels(labels, gathered, expert, plan_horizon, action_dim)
            if len(new):
                student.obs_norm.update(new)  # each decision's features once
            loss = _fit(student, optimizer, labels, cfg, rng)
            ticks += round_ticks
            returns += round_returns
            log.write({'global_step': ticks, 'episodic_return': float(np.mean(round_returns)) if round_returns
                       else math.nan, 'episodes': len(round_returns), 'labels': labels.size, 'loss': loss,
                       'round': round_index}, round_ticks)
    save_checkpoint(out_dir, student, {**meta, 'plan_horizon': plan_horizon, 'representation': rep.as_dict(),
                                       'expert': str(expert_dir), 'dagger_rounds': cfg.rounds,
                                       'labels': 'whole plans' if roller is not None else 'applied elements'})
    window = returns[-max(1, len(returns) // cfg.rounds):]
    return TrainResult(out_dir, ticks, cfg.rounds, time.perf_counter() - begin, tuple(returns),
                       float(np.mean(window)) if window else math.nan, False)


def _add_labels(labels: Labels, decisions: list[Decision], expert: Expert, plan_horizon: int,
                action_dim: int) -> np.ndarray:
    """Label the applied elements' states with the expert, and keep the decisions; their features."""
    if not decisions:
        return np.zeros((0, labels.x.shape[1]), np.float32)
    targets = expert.label(np.stack([state for d in decisions for state in d.states]))
    x = np.stack([d.features for d in decisions])
    y = np.zeros((len(decisions), plan_horizon, action_dim), np.float32)
    mask = np.zeros((len(decisions), plan_horizon), np.float32)
    rows = np.repeat(np.arange(len(decisions)), [len(d.elements) for d in decisions])
    elements = np.concatenate([d.elements for d in decisions])
    y[rows, elements], mask[rows, elements] = targets, 1.0
    labels.add(x, y, mask)
    return x


def _fit(student: GaussianAgent, optimizer: torch.optim.Optimizer, labels: Labels, cfg: ImitationConfig,
         rng: np.random.Generator) -> float:
    """Regress the actor's plan on the labelled elements; the mean loss of the last epoch."""
    x, y, mask = (torch.as_tensor(a[:labels.size]) for a in (labels.x, labels.y, labels.mask))
    losses: list[float] = []
    for _ in range(cfg.epochs):
        losses = []
        for batch in np.array_split(rng.permutation(labels.size), max(1, labels.size // cfg.minibatch)):
            index = torch.as_tensor(batch)
            mean = student.actor_mean(student.obs_norm(x[index])).view(len(batch), *y.shape[1:])
            weight = mask[index]
            loss = (((mean - y[index]) ** 2).sum(-1) * weight).sum() / weight.sum().clamp(min=1.0)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return float(np.mean(losses)) if losses else math.nan



def train_student(expert_dir: Path | str, env: str, network: str, seed: int, out_dir: Path,
                  steps: int | None = None, plan_horizon: int = 1, rep: Representation | None = None,
                  regime: str | None = None, num_envs: int | None = None, progress: bool = True) -> TrainResult:
    """``calf train --expert``: a student of ``env`` behind ``network``, taught by ``expert_dir`` (see ``distil``).

    The student's representation is ``rep``, else the one PPO and SAC get behind ``network``.
    """
    profile = resolve_network(network)
    try:
        cfg = ImitationConfig(total_steps=steps or ImitationConfig.total_steps, seed=seed,
                              num_envs=num_envs or ImitationConfig.num_envs)
    except ValueError as err:
        raise ConfigError(f'bad imitation settings: {err}') from None
    meta = {'env': env, 'regime': regime or 'custom', 'network': profile.name, 'method': 'dagger', 'seed': seed}
    if rep is None:  # a plan's history keeps the element expected to run behind the link's typical delay
        rep = replace(default_representation(env, profile),
                      history_element=first_element(delay_ticks(profile, env_spec(env).dt)[0], plan_horizon))
    return distil(expert_dir, env, profile, rep, plan_horizon, cfg, out_dir, meta, progress)
