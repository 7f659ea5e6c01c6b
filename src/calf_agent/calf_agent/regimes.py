"""Training regimes (paper, Table 2) and the networked, represented envs PPO and SAC train on."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import gymnasium as gym
import numpy as np

from calf_agent.bpql_training import train_bpql
from calf_agent.representation import Representation, VectorHistoryWrapper
from calf_agent.task_training import for_task
from calf_agent.train_state import EVERY_STEPS
from calf_agent.trainer import (
    TrainConfig,
    TrainResult,
    cartpole_defaults,
    continuous_defaults,
    minigrid_defaults,
    sac_defaults,
)
from calf_agent.training import train
from calf_core.envs import env_spec, make_env, make_networked_env
from calf_core.errors import ConfigError
from calf_core.network import resolve_network
from calf_core.profiles import Profile, sample_e2e, uplink_arrivals
from calf_core.sync_vector import SyncVectorEnv
from calf_core.task_spec import ALGOS, SAC_ALGOS, HoldMode, SuccessRule, TaskSpec
from calf_core.vector_networked import CartPoleBatch, EnvBatch, VectorNetworkedCartPole, VectorNetworkedEnv

REGIMES: dict[str, str] = {'baseline': 'sim_clean', 'delay_only': 'delay_only', 'full': 'full_net_aware'}
"""Regime name -> the network profile it trains under (paper, Table 2). Training on randomised delays is
``--network randomised_delay`` or ``randomised_full`` (README, "Delay-aware training")."""


def regime_profile(regime: str) -> str:
    try:
        return REGIMES[regime]
    except KeyError:
        raise ConfigError(f'unknown regime {regime!r}: choose one of {", ".join(REGIMES)}') from None


def delay_ticks(profile: Profile, dt: float) -> tuple[int, int]:
    """The profile's end-to-end latency at p50 (d) and p95 in env ticks, rounded up (0 for a clean link),
    from one sample."""
    stats = sample_e2e(profile, n=20_000, seed=0, dt_s=dt)
    return _ticks(stats.p50_ms, dt), _ticks(stats.p95_ms, dt)


def first_element(d: int, plan_horizon: int) -> int:
    """The plan element that runs first behind a round trip of ``d`` ticks, rounded up (``delay_ticks``): a plan
    answering tick s's observation arrives after tick s + d - 1, so its element d - 1 runs at tick s + d."""
    return min(max(d - 1, 0), plan_horizon - 1)


TAIL_QUANTILE = 0.999
"""The share of ticks an automatic plan horizon covers (``tail_horizon``), and of plans a silence-aware plan
length covers (``silence_lengths``)."""
SILENCE_BUCKETS = 8
"""Silence-aware plan lengths are kept for silences of 1 .. this many ticks (the last: this many or more)."""


class PlanCoverage(NamedTuple):
    """What a link does to plans, from ``plan_coverage``."""

    ages: np.ndarray  # per tick after the first plan: t - s, the age of the newest plan at the env (s: its obs)
    silences: np.ndarray  # per plan that ran: ticks since the observation the policy answered before it
    needs: np.ndarray  # per plan that ran: the largest age it reached while the newest (the length it needed)


def plan_coverage(profile: Profile, dt: float, ticks: int = 100_000, seed: int = 0) -> PlanCoverage:
    """How ``profile`` ages the plans of a policy that answers every observation (virtual time, one long run):
    observation k is sent at k * dt; the policy answers each observation newer than the last it answered,
    ``compute_ms`` after it arrives; tick t runs the newest plan that has arrived, answering observation s, and
    its element t - s - 1 (``timing.element_for_tick``)."""
    compute_s = profile.compute_ms / 1e3
    uplink, downlink = profile.make_links(np.random.default_rng(seed))
    plans: list[tuple[float, int, int]] = []  # (arrival, obs seq, silence before it) of each plan that arrives
    answered = -1
    for arrive_s, send_s in uplink_arrivals(uplink, ticks, dt):
        seq = round(send_s / dt)
        if seq <= answered:
            continue
        silence, answered = seq - answered, seq
        arrivals = downlink.transmit(arrive_s + compute_s)
        if arrivals:
            plans.append((arrivals[0], seq, silence))
    if not plans:
        return PlanCoverage(*(np.zeros(0, dtype=np.int64),) * 3)
    plans.sort()
    arrival, seqs, silences = (np.asarray(column) for column in zip(*plans))
    newest = _running_argmax(seqs)  # of the plans arrived so far, the one answering the newest observation
    tick = np.arange(1, ticks)
    arrived = np.searchsorted(arrival, tick * dt, side='left') - 1  # the last plan arrived before the tick
    seen = arrived >= 0
    running = newest[arrived[seen]]
    ages = tick[seen] - seqs[running]
    needs = np.zeros(len(plans), dtype=np.int64)
    np.maximum.at(needs, running, ages)
    ran = np.zeros(len(plans), dtype=bool)
    ran[running] = True
    return PlanCoverage(ages, silences[ran], needs[ran])


def _running_argmax(values: np.ndarray) -> np.ndarray:
    """For each i, the index of the largest of ``values[: i + 1]`` (the first such)."""
    best = np.maximum.accumulate(values)
    first = np.flatnonzero(np.r_[True, best[1:] != best[:-1]])  # where a new largest value appears
    return first[np.searchsorted(first, np.arange(len(values)), side='right') - 1]


def tail_horizon(coverage: PlanCoverage, quantile: float = TAIL_QUANTILE) -> int:
    """The plan horizon that covers ``quantile`` of the ticks: that quantile of the plans' ages, so a plan lasts
    through the silences (outages, stalls, loss bursts) the link produces up to its tail; at least 1."""
    return max(1, math.ceil(np.quantile(coverage.ages, quantile) - 1e-9)) if len(coverage.ages) else 1


def silence_lengths(coverage: PlanCoverage, horizon: int, quantile: float = TAIL_QUANTILE) -> list[int]:
    """Plan lengths by the silence the policy heard before it answered: entry g - 1 covers ``quantile`` of the
    plans sent after a silence of at least g ticks (``SILENCE_BUCKETS`` entries, the last for that many or more),
    never decreasing with g, and at most ``horizon``. On a link whose outages last, a plan sent as the link comes
    back from one must last longer than one sent while it is good."""
    lengths, longest = [], 1
    for g in range(1, SILENCE_BUCKETS + 1):
        needs = coverage.needs[coverage.silences >= g]
        if len(needs):
            longest = max(longest, math.ceil(np.quantile(needs, quantile) - 1e-9))
        lengths.append(min(horizon, longest))
    return lengths


def _ticks(latency_ms: float, dt: float) -> int:
    return 0 if not latency_ms > 0 else math.ceil(latency_ms / (dt * 1e3) - 1e-9)


def is_continuous(env: str) -> bool:
    """Whether ``env`` takes continuous (Box) actions."""
    return isinstance(make_env(env).action_space, gym.spaces.Box)


def train_algo(env: str, algo: str | None = None) -> str:
    """The algorithm ``env`` trains with: ``algo``, else its spec's ``algo``, else ppo. SAC and BPQL need single
    Box actions: anything else is a one-line ConfigError."""
    chosen = algo or env_spec(env).algo or 'ppo'
    if chosen not in ALGOS:
        raise ConfigError(f'unknown algo {chosen!r}: choose one of {", ".join(ALGOS)}')
    space = make_env(env).action_space if chosen in SAC_ALGOS else None
    if space is not None and not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
        raise ConfigError(f'{chosen.upper()} trains continuous actions (a Box of shape (A,)), and {env}\'s actions are {space}: '
                          f'train it with --algo ppo')
    return chosen


def train_defaults(env: str, algo: str | None = None) -> TrainConfig:
    """The settings ``env`` trains with by default under ``algo`` (see ``train_algo``): SAC's, or PPO's for
    continuous actions, CartPole or MiniGrid, with the task spec's ``agent`` and ``ppo`` settings over them."""
    chosen = train_algo(env, algo)
    if chosen in SAC_ALGOS:
        base = replace(sac_defaults(), algo=chosen)
    elif is_continuous(env):
        base = continuous_defaults()
    else:
        base = cartpole_defaults() if env_spec(env).name == 'cartpole' else minigrid_defaults()
    return for_task(env_spec(env), base)


def default_representation(env: str, profile: Profile, delay_state: bool | None = None) -> Representation:
    """Paper, Table 3, plus the delay state on a delayed link. d is the profile's median E2E latency in
    ticks: an MLP policy (CartPole, continuous-action tasks) stacks k = d + 1 frames and remembers its d
    in-flight actions; an LSTM (MiniGrid) sees one frame. With the delay state (the default when d > 0,
    or ``delay_state=True``) a policy remembers its last max(d, d95) actions instead (d95: the p95
    latency in ticks, so the actions in flight fit)."""
    spec = env_spec(env)
    d, d95 = delay_ticks(profile, spec.dt)
    lstm = train_defaults(env).agent == 'lstm'
    if not (d > 0 if delay_state is None else delay_state):
        return Representation(frames=1, actions=0) if lstm else Representation(frames=d + 1, actions=d)
    actions = max(d, d95)
    return Representation(frames=1 if lstm else d + 1, actions=actions, delay_state=True)


FAST_PATH_MIN_ENVS = 32
"""From this many envs the vector path trains about as fast as the SyncVectorEnv path, and faster with more
(``bench/bench_train_fast_path.py``, 2026-12-06, vector over sync, PPO steps/s: CartPole under full_net_aware
0.70-0.80x at 8 envs, 0.87-0.98x at 32, 1.37-1.46x at 128; InvertedPendulum-v5 under wifi_degraded 0.82-0.87x at
16, 1.16x at 64); below it, its per-pass array work costs more than it saves."""


def vec_env_factory(env: str, profile: Profile, rep: Representation, seed: int, plan_horizon: int = 1,
                    make_inner: Callable[[], gym.Env] | None = None,
                    fast: bool | None = None) -> Callable[[int], gym.vector.VectorEnv]:
    """A factory of ``n`` networked envs with independent link seeds, as the trainer expects.

    ``make_inner`` builds a variant of ``env`` to put behind the network (e.g. a sub-task). From
    ``FAST_PATH_MIN_ENVS`` envs with ``fast=None`` (any number with ``fast=True``, never with ``fast=False``)
    the envs are one ``VectorNetworkedEnv`` (``vector_env``), under any profile; otherwise a ``SyncVectorEnv``
    of ``NetworkedEnv``s (``calf_core.sync_vector``'s: gymnasium's, with a cheaper info merge). Either way one
    ``VectorHistoryWrapper`` makes the features of all rows at once (as many ``HistoryWrapper``s would, at a
    fraction of the cost), and the trainer's reset seed makes the run deterministic.
    """
    min_envs = 1 if fast else math.inf if fast is False else FAST_PATH_MIN_ENVS

    def make_one(index: int) -> Callable[[], gym.Env]:
        return lambda: make_networked_env(env, profile, seed=seed * 1000 + index, plan_horizon=plan_horizon,
                                          env=make_inner() if make_inner else None)

    def make(n: int) -> gym.vector.VectorEnv:
        envs = vector_env(env, profile, n, plan_horizon, make_inner) if n >= min_envs else \
            SyncVectorEnv([make_one(i) for i in range(n)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        return VectorHistoryWrapper(envs, rep)

    return make


def vector_env(env: str, profile: Profile, n: int, plan_horizon: int = 1,
               make_inner: Callable[[], gym.Env] | None = None) -> VectorNetworkedEnv:
    """``n`` copies of ``env`` (or of ``make_inner``'s variant) behind ``profile`` in one VectorNetworkedEnv: on
    ``CartPoleBatch`` when the env is gymnasium's CartPole-v1 under a task its physics in numpy follows, else on
    ``EnvBatch`` (the envs stepped one by one)."""
    spec = env_spec(env)
    if make_inner is None and _numpy_cartpole(spec):
        return VectorNetworkedCartPole(n, profile, plan_horizon, start_plan=spec.start_plan,
                                       initial_action=0 if spec.initial_action is None else spec.initial_action)
    inner = [make_inner() if make_inner else make_env(env, spec) for _ in range(n)]
    return VectorNetworkedEnv(EnvBatch(inner), spec, inner[0].observation_space, inner[0].action_space, profile,
                              plan_horizon)


def _numpy_cartpole(spec: TaskSpec) -> bool:
    """Whether ``CartPoleBatch`` runs ``spec``: CartPole-v1 at its own step, held actions, success at the time limit."""
    return (spec.env == 'CartPole-v1' and spec.dt == CartPoleBatch.TAU and spec.hold is HoldMode.LAST
            and spec.success is SuccessRule.TIME_LIMIT)


def train_policy(env: str, network: str, seed: int, out_dir: Path, steps: int | None = None,
                 regime: str | None = None, rep: Representation | None = None, plan_horizon: int = 1,
                 progress: bool = True, mask_unexecuted: bool = True, plan_head: str = 'independent',
                 num_envs: int | None = None, algo: str | None = None, smoothness: float | None = None,
                 resume: bool = False, snapshot_every: int = EVERY_STEPS) -> TrainResult:
    """Train ``env`` behind ``network`` with ``algo`` (default: the spec's, else PPO) into ``out_dir``.

    Continuous-action envs train a Gaussian policy with ``continuous_defaults()`` under PPO, a SAC actor with
    ``sac_defaults()`` under SAC or BPQL (on ``NetworkedEnv``s, its critic on their true states); either way with the representation ``rep`` (default: the regime's).
    ``num_envs`` (default: the env's PPO default, 8 for CartPole) envs collect each rollout; from
    ``FAST_PATH_MIN_ENVS`` on, in one vector env.

    Plan policies (``plan_horizon > 1``) learn only from executed plan elements unless
    ``mask_unexecuted`` is False; an MLP plan actor is ``plan_head`` ('time': π(a | obs, j),
    'independent': one head per element; the LSTM agent always has independent heads). ``smoothness``
    (SAC and BPQL): the weight of CAPS's temporal smoothness term in the actor's loss. SAC and BPQL snapshot
    every ``snapshot_every`` env steps; ``resume`` continues from the snapshot (``calf_agent.train_state``).
    """
    if steps is not None and steps <= 0:
        raise ConfigError(f'--steps must be > 0, got {steps}')
    if num_envs is not None and num_envs < 1:
        raise ConfigError(f'--envs must be >= 1, got {num_envs}')
    profile = resolve_network(network)
    base = train_defaults(env, algo)
    if base.algo in SAC_ALGOS and plan_horizon > 1:
        raise ConfigError(f'{base.algo.upper()} trains single actions: drop --plan-horizon, or train plans with '
                          '--algo ppo')
    if smoothness is not None and base.algo not in SAC_ALGOS:
        raise ConfigError(f'--smoothness shapes SAC and BPQL actors: add --algo sac, or drop it for {base.algo}')
    rep = rep or default_representation(env, profile)
    meta = {'env': env, 'regime': regime or 'custom', 'network': profile.name,
            'representation': rep.as_dict(), 'plan_horizon': plan_horizon}
    if smoothness is not None:
        meta['smoothness'] = smoothness
    try:
        cfg = replace(base, seed=seed, total_steps=steps or base.total_steps, meta=meta,
                      num_envs=num_envs or base.num_envs,
                      mask_unexecuted=mask_unexecuted and plan_horizon > 1,
                      plan_head=plan_head if plan_horizon > 1 and base.agent == 'mlp' else 'independent',
                      sac=base.sac if smoothness is None else replace(base.sac, smoothness=smoothness))
    except ValueError as err:
        raise ConfigError(f'bad training settings: {err}') from None
    if cfg.algo == 'bpql':
        return train_bpql(cfg, lambda i: make_networked_env(env, profile, seed=seed * 1000 + i), rep, out_dir,
                          progress=progress, resume=resume, snapshot_every=snapshot_every)
    return train(cfg, vec_env_factory(env, profile, rep, seed, plan_horizon), out_dir, progress=progress,
                 resume=resume, snapshot_every=snapshot_every)
