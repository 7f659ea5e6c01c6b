"""Training a model planner (``calf train --planner model``): an ensemble dynamics model fitted beside a PPO base
policy, on data from the base policy and then from the planner itself behind the training network (DAgger-style
refit rounds).

The planning agent itself, and how it rolls the delivered observation forward, is in ``calf_agent.plan_agent``;
the model and its multi-step training in ``calf_agent.dynamics``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from calf_agent.checkpoint import RESERVED, load_checkpoint, save_checkpoint
from calf_agent.dynamics import EnsembleDynamics, FitConfig, Transitions, fit, open_loop
from calf_agent.errors import CheckpointError
from calf_agent.evaluate import one_torch_thread
from calf_agent.plan_agent import PLANNER_BASES, Action, BaseAgent, PlanningAgent, plan_row
from calf_agent.policies import MlpAgent, new_episode_state
from calf_agent.regimes import TAIL_QUANTILE, delay_ticks, first_element, plan_coverage, silence_lengths, tail_horizon
from calf_core.envs import env_spec, make_env, make_networked_env
from calf_core.errors import ConfigError
from calf_core.limits import MAX_PLAN_HORIZON
from calf_core.network import resolve_network
from calf_core.profiles import Profile
from calf_core.task_spec import HoldMode, TaskSpec
from calf_core.timing import ObsRecord, task_actions


def env_fallbacks(spec: TaskSpec, space: gym.Space) -> tuple[list[Action], Action | None]:
    """``(start_plan, hold_action)`` of a planner for ``spec``: what its env applies before the first plan
    (the safe start plan, else its start plan, else the action it holds) and when a plan runs out."""
    actions = task_actions(spec, space)
    hold = None if spec.hold is HoldMode.LAST else actions.noop
    before = spec.safe_start or actions.start_plan or (actions.initial if hold is None else hold,)
    return [_stored(a) for a in before], None if hold is None else _stored(hold)


def _stored(action: Any) -> Action:
    """An action as JSON holds it: an int, or a list of floats."""
    return int(action) if np.ndim(action) == 0 else [float(v) for v in np.asarray(action).reshape(-1)]


EXPLORE = {False: 0.3, True: 0.1}
"""Rate of uniformly random actions in the model's training data, for discrete and continuous actions. A
balancing robot (InvertedDoublePendulum-v5) falls within a few random torques, so at 0.3 its data is mostly
falls; at 0.1 its velocities' errors three ticks ahead are 25-45 % lower (results/NOTES.md)."""


def collect_transitions(env_name: str, policy: BaseAgent, steps: int, seed: int, explore: float | None = None
                        ) -> Transitions:
    """``steps`` transitions of the bare env under ``policy``, with a random action at rate ``explore``
    (default ``EXPLORE``)."""
    env: gym.Env = make_env(env_name)
    continuous = not isinstance(policy, MlpAgent)
    explore = EXPLORE[continuous] if explore is None else explore
    rng = np.random.default_rng(seed)
    obs_list, actions, next_list, follows = [], [], [], []
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        if rng.random() < explore:
            action = (rng.uniform(policy.low.numpy(), policy.high.numpy()).astype(np.float32) if continuous
                      else int(rng.integers(policy.n_actions)))
        else:
            action = policy.act(obs, deterministic=True)[0][0]
        next_obs, _, terminated, truncated, _ = env.step(action)
        obs_list.append(obs)
        actions.append(action)
        next_list.append(next_obs)
        follows.append(not (terminated or truncated))
        obs = env.reset()[0] if terminated or truncated else next_obs
    return Transitions(np.asarray(obs_list, dtype=np.float32),
                       np.asarray(actions, dtype=np.float32 if continuous else np.int64),
                       np.asarray(next_list, dtype=np.float32), np.asarray(follows, dtype=bool))


class _TickLog:
    """The transitions a NetworkedEnv runs, from its tick listener: the state, the action it applied (a plan's
    element or its hold) and the state that followed."""

    def __init__(self) -> None:
        self.rows: list[tuple[np.ndarray, Any, np.ndarray, int]] = []
        self._last: np.ndarray | None = None
        self._episode = 0

    def __call__(self, record: ObsRecord) -> None:
        if record.applied is None:  # a reset
            self._episode += 1
        elif self._last is not None:
            self.rows.append((self._last, record.applied.action, record.obs, self._episode))
        self._last = record.obs

    def transitions(self, steps: int, continuous: bool) -> Transitions:
        rows = self.rows[:steps]
        episodes = np.asarray([r[3] for r in rows])
        return Transitions(np.asarray([r[0] for r in rows], np.float32),
                           np.asarray([r[1] for r in rows], np.float32 if continuous else np.int64),
                           np.asarray([r[2] for r in rows], np.float32),
                           np.append(episodes[1:] == episodes[:-1], False) if len(rows) else np.zeros(0, bool))


def collect_planned(agent: PlanningAgent, env_name: str, profile: Profile, steps: int, seed: int,
                    start_plan: tuple[Any, ...] | None = None) -> Transitions:
    """``steps`` transitions that ``agent`` drives behind ``profile`` (NetworkedEnv, virtual time): the states
    its plans meet, late and lost ones included."""
    env = make_networked_env(env_name, profile, seed=seed, plan_horizon=agent.plan_horizon, start_plan=start_plan)
    log = _TickLog()
    env.tick_listener = log
    episode, state = 0, None
    while len(log.rows) < steps:
        obs, info = env.reset(seed=seed * 1_000_003 + episode)
        episode += 1
        state, done = new_episode_state(agent, state), False
        while not done and len(log.rows) < steps:
            plans, state = agent.act(obs, state, deterministic=True, seq=[info['obs_seq']],
                                     applied_seq=[info['applied_obs_seq']])
            obs, _, terminated, truncated, info = env.step(plan_row(plans, 0))
            done = terminated or truncated
    return log.transitions(steps, agent.continuous)


@dataclass(frozen=True)
class PlannerConfig:
    """The dynamics model's size, data budget and training: see ``train_planner``."""

    transitions: int = 50_000  # env ticks of training data in all, split evenly over the rounds
    epochs: int = 10  # the first fit's; each refit runs half as many, on all data so far
    members: int = 5
    hidden: tuple[int, ...] = (200, 200)
    rollout: int | None = None  # steps of the open-loop loss (default: the plan horizon)
    refits: int = 2  # rounds of planner-driven data behind the network, each followed by a refit
    cut_quantile: float | None = 0.99  # the disagreement cut: this quantile of the held-out disagreement
    silence_lengths: bool = False  # automatic horizon: plans as long as the silence before them calls for
    lead_window: int = 20  # the adaptive lead's memory of round trips (PlanningAgent); 0: the fixed lead
    lead_quantile: float = 0.9  # which of them sets the lead (capped by the fixed lead)
    feedback: bool = False  # plans carry first-order feedback (continuous bases: PlanningAgent)

    def __post_init__(self) -> None:
        if min(self.transitions, self.epochs, self.members) < 1 or min(self.refits, self.lead_window) < 0:
            raise ValueError('transitions, epochs and members must be >= 1, refits and lead_window >= 0')
        if self.cut_quantile is not None and not 0 < self.cut_quantile <= 1:
            raise ValueError(f'cut_quantile must be in (0, 1] or None, got {self.cut_quantile}')


SINGLE_MODEL = PlannerConfig(epochs=30, members=1, hidden=(64, 64), rollout=1, refits=0, cut_quantile=None)
"""The planner before the ensemble: one small MLP on one-step changes of base-policy data. It fits in a
fraction of the default's time and predicts tasks with smooth dynamics as well (CartPole, InvertedPendulum),
but not the double pendulum."""
MAX_MODEL_EPOCHS = 10_000
"""The most epochs ``calf train --model-epochs`` accepts."""
LONG_FIT_EPOCHS = 60
"""The long fit's first epochs (refits: half): six times the default's gradient steps, which left HalfCheetah's
model underfitted (its feedback plans behind Wi-Fi-D: 73 % of the clean return with the default fit, 91 % with
this one; results/robots_half_cheetah.md)."""
RECIPES = {'ensemble': PlannerConfig(), 'ensemble-feedback': PlannerConfig(feedback=True),
           'ensemble-feedback-long': PlannerConfig(feedback=True, epochs=LONG_FIT_EPOCHS), 'single': SINGLE_MODEL,
           'single-silence': replace(SINGLE_MODEL, silence_lengths=True),
           'single-feedback': replace(SINGLE_MODEL, feedback=True)}
"""The model planner's recipes by name (an experiment row's ``model``)."""


AUTO = 'auto'
"""``plan_horizon`` of a planner whose horizon comes from the link's tail (``auto_horizon``); ``auto:NETWORK``
takes the tail of NETWORK instead of the training network's."""
MODEL_TOLERANCE = 0.1
"""An automatic horizon ends before the tick at which the model's open-loop RMSE (held-out, per value, in units
of that value's std, averaged over the values) exceeds this."""
MIN_HORIZON = 2


def tail_network(plan_horizon: int | str, network: str) -> str | None:
    """The network whose tail an automatic ``plan_horizon`` covers (None for a fixed horizon)."""
    if not isinstance(plan_horizon, str):
        return None
    if plan_horizon != AUTO and not plan_horizon.startswith(AUTO + ':'):
        raise ConfigError(f'plan horizon must be a number of ticks, auto or auto:NETWORK, got {plan_horizon!r}')
    return plan_horizon.partition(':')[2] or network


def predictable_ticks(relative_rmse: np.ndarray, tolerance: float = MODEL_TOLERANCE) -> int:
    """How many ticks ahead the model predicts within ``tolerance``: the ticks before the first whose relative
    open-loop RMSE (``relative_rmse[j]`` after j + 1 ticks) exceeds it; all of them if none does."""
    over = np.flatnonzero(np.asarray(relative_rmse) > tolerance)
    return int(over[0]) if len(over) else len(relative_rmse)


def auto_horizon(tail: int, predictable: int) -> int:
    """The plan horizon: the link's tail (``regimes.tail_horizon``) capped by what the model predicts, at least
    ``MIN_HORIZON`` and at most ``MAX_PLAN_HORIZON``."""
    return max(MIN_HORIZON, min(tail, predictable, MAX_PLAN_HORIZON))


@one_torch_thread()
def train_planner(base_dir: Path | str, out_dir: Path | str, network: str, plan_horizon: int | str, seed: int,
                  lead: int | None = None, cfg: PlannerConfig | None = None,
                  progress: bool = True) -> dict[str, Any]:
    """Fit an ensemble dynamics model beside the base checkpoint ``base_dir`` and save the planner in ``out_dir``.

    Round 0's data comes from the base policy on the bare env (with random actions, ``EXPLORE``); each refit
    round's from the planner itself behind ``network``, so that the model learns the states its plans lead to.
    The held-out data (fresh base-policy episodes) gives the open-loop error per tick recorded in meta.json and
    calibrates the disagreement cut. The rollout lead adapts to the round trips the observations report
    (``cfg.lead_window``, ``cfg.lead_quantile``), at most the training link's p95 rule; a given ``lead`` is fixed
    instead. An automatic ``plan_horizon`` (``AUTO``) plans over the tail of the link's
    silences (``regimes.tail_horizon``) and is then cut to the ticks the fitted model predicts
    (``predictable_ticks``, on the held-out data). With ``cfg.silence_lengths`` its plans are also cut to the
    length the silence before them calls for (``regimes.silence_lengths`` of the same link:
    ``PlanningAgent.lengths``); off by default, as on CartPole behind outage_burst the cut plans of one planner
    scored 424 against 482 whole (results/outages.md).
    """
    cfg = cfg or PlannerConfig()
    base, base_meta = load_checkpoint(base_dir)
    rep = base_meta.get('representation', {})
    if not isinstance(base, PLANNER_BASES) or base.plan_horizon != 1 or rep.get('frames', 1) != 1 \
            or rep.get('actions', 0) != 0:
        raise CheckpointError(f'{base_dir} cannot be a planner\'s base: it needs an MLP policy with single '
                              'actions on the plain observation (train it with `calf train --regime baseline`)')
    if cfg.feedback and isinstance(base, MlpAgent):
        raise ConfigError(f'{base_dir} takes discrete actions: feedback plans need a continuous (Box) policy')
    env = base_meta['env']
    spec = env_spec(env)
    start_plan, hold_action = env_fallbacks(spec, make_env(env).action_space)
    profile = resolve_network(network)
    tail_name = tail_network(plan_horizon, network)
    coverage = None if tail_name is None else plan_coverage(resolve_network(tail_name), spec.dt)
    tail = None if coverage is None else tail_horizon(coverage)
    requested = plan_horizon
    plan_horizon = auto_horizon(tail, MAX_PLAN_HORIZON) if tail is not None else int(plan_horizon)
    fixed_lead = lead
    if lead is None:
        lead = first_element(delay_ticks(profile, spec.dt)[1], plan_horizon)  # p95: the plan is there by then
    if not 0 <= lead < plan_horizon:
        raise ConfigError(f'the plan lead must be in [0, {plan_horizon}) for plan horizon {plan_horizon}, got {lead}')
    torch.manual_seed(seed)
    actions = {'action_dim': base.action_dim} if not isinstance(base, MlpAgent) else {'n_actions': base.n_actions}
    model = EnsembleDynamics(base.obs_dim, **actions, hidden=cfg.hidden, members=cfg.members)
    agent = PlanningAgent(base, model.spec(), plan_horizon, lead, start_plan, hold_action,
                          lead_window=cfg.lead_window if fixed_lead is None else 0, lead_quantile=cfg.lead_quantile,
                          feedback=cfg.feedback)
    agent.model = model
    rounds = cfg.refits + 1
    per_round = max(1, cfg.transitions // rounds)
    fit_cfg = FitConfig(epochs=cfg.epochs, rollout=cfg.rollout or plan_horizon)
    optimizer = torch.optim.Adam(model.parameters(), fit_cfg.learning_rate)
    safe_start = tuple(spec.safe_start) if spec.safe_start else None
    parts: list[Transitions] = []
    history: list[dict[str, Any]] = []
    for round_index in range(rounds):
        if round_index == 0:
            parts.append(collect_transitions(env, base, per_round, seed))
            model.normalise(parts[0])
        else:
            parts.append(collect_planned(agent, env, profile, per_round, seed + round_index, safe_start))
            fit_cfg = replace(fit_cfg, epochs=max(1, cfg.epochs // 2))
        loss = fit(model, Transitions.concat(parts), fit_cfg, seed + round_index, progress, optimizer)
        history.append({'source': 'base' if round_index == 0 else f'planner behind {network}',
                        'transitions': len(parts[-1]), 'train_loss': loss})
    held_out = collect_transitions(env, base, 200 * plan_horizon * 2, seed + 1)  # round 0 ran seed
    errors, spread = open_loop(model, held_out, plan_horizon)
    relative = np.sqrt(errors.mean(0)) / np.maximum(held_out.next_obs.std(0), 1e-8)
    predictable = predictable_ticks(relative.mean(1))
    if coverage is not None and tail is not None:
        plan_horizon = agent.plan_horizon = auto_horizon(tail, predictable)
        agent.lead = lead = min(lead, plan_horizon - 1)
        agent.lengths = silence_lengths(coverage, plan_horizon) if cfg.silence_lengths else None
        errors, spread = errors[:, :plan_horizon], spread[:, :plan_horizon]
    cut = None if cfg.cut_quantile is None else float(np.quantile(spread, cfg.cut_quantile))
    agent.disagreement_cut = cut if cut is not None and cut > 0 else None
    rmse = np.sqrt(errors.mean(0))
    dynamics = {'transitions': sum(len(p) for p in parts), 'epochs': cfg.epochs, 'members': cfg.members,
                'hidden': list(cfg.hidden), 'rollout': fit_cfg.rollout, 'rounds': history,
                'train_loss': history[-1]['train_loss'],
                f'rollout_rmse_{plan_horizon}_ticks': [float(v) for v in rmse[-1]],
                'rollout_rmse_by_tick': [[float(v) for v in row] for row in rmse],
                'disagreement_by_tick': [float(v) for v in spread.mean(0)],
                'disagreement_cut': agent.disagreement_cut, 'cut_quantile': cfg.cut_quantile,
                'predictable_ticks': predictable, 'model_tolerance': MODEL_TOLERANCE}
    meta = {'env': env, 'regime': 'model planner', 'network': network, 'plan_horizon': plan_horizon,
            'representation': {'frames': 1, 'actions': 0},
            **({'start_plan': start_plan} if spec.safe_start else {}),
            'planner': {'kind': 'model', 'lead': lead, 'lead_window': agent.lead_window,
                        'lead_quantile': agent.lead_quantile, 'feedback': cfg.feedback, 'base': str(base_dir),
                        'base_seed': base_meta.get('seed'), 'dynamics': dynamics}}
    if tail is not None:
        meta['planner']['horizon'] = {'requested': requested, 'tail_network': tail_name, 'tail_quantile': TAIL_QUANTILE,
                                      'tail_ticks': tail, 'predictable_ticks': predictable,
                                      'silence_lengths': silence_lengths(coverage, plan_horizon),
                                      'plans_cut_by_silence': agent.lengths is not None}
    save_checkpoint(out_dir, agent, meta)
    return meta


def with_feedback(planner_dir: Path | str, out_dir: Path | str) -> Path:
    """The model planner of ``planner_dir`` with feedback plans (``PlanningAgent.feedback``), saved in ``out_dir``:
    the same model and base, its plans carrying the base's gains. ConfigError for a discrete base."""
    agent, meta = load_checkpoint(planner_dir)
    if not isinstance(agent, PlanningAgent) or not agent.continuous:
        raise ConfigError(f'{planner_dir} is not a model planner over a continuous (Box) policy: feedback plans need one')
    agent.feedback = True
    kept = {key: value for key, value in meta.items() if key not in RESERVED}
    return save_checkpoint(out_dir, agent, {**kept, 'planner': {**meta['planner'], 'feedback': True}})
