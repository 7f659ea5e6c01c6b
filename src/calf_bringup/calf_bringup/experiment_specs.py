"""What each reproduced table trains and evaluates, beside the paper's published numbers."""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple


class Row(NamedTuple):
    """One trained condition: a name, the profile it trains under, its plan horizon and planner.

    ``planner='model'`` wraps the Baseline row's checkpoint of the same seed in a model planner
    (``calf_agent.planner``) fitted behind ``network``, whose rollout lead adapts to the link it runs on, at most
    ``network``'s p95 round trip; ``planner='imitation'`` trains a
    student of that checkpoint behind ``network`` by DAgger (``calf_agent.imitation``). ``delay_state`` turns the
    delay state on or off in the representation (None: the default for the env and profile). ``algo``
    is the training algorithm, ppo or sac (None: the env's default, its spec's ``algo`` else ppo). A model
    planner's ``plan_horizon`` may be ``'auto'`` (``calf_agent.planner.auto_horizon``), and ``model`` names its
    recipe in ``calf_agent.planner.RECIPES`` (None: the default ensemble).
    """

    name: str
    network: str
    plan_horizon: int | str = 1
    planner: str = 'ppo'
    delay_state: bool | None = None
    algo: str | None = None
    model: str | None = None


BASED_PLANNERS = ('model', 'imitation')
"""Row planners built on the Baseline row's checkpoint of the same seed."""


class Column(NamedTuple):
    """One evaluation condition."""

    name: str
    network: str


class TableSpec(NamedTuple):
    name: str
    title: str
    env: str
    metric: str  # key of the eval JSON: mean_return or success_rate
    scale: float  # multiply the metric for display (100 for success rates in %)
    steps: int  # PPO steps per training run
    rows: tuple[Row, ...]
    columns: tuple[Column, ...]
    paper: dict[str, tuple[str, ...]]  # row -> the paper's cells, in column order
    reference: tuple[str, str] | None = None  # (row, column) whose mean is 100 %: cells are also given as percentages


COLUMNS = (Column('Sim-Clean', 'sim_clean'), Column('Sim+Net', 'full_net_aware'), Column('Real-Eth', 'real_eth'),
           Column('Wi-Fi-N', 'wifi_normal'), Column('Wi-Fi-D', 'wifi_degraded'))
REGIME_ROWS = (Row('Baseline', 'sim_clean'), Row('Delay-Only', 'delay_only'),
               Row('Full Net-Aware', 'full_net_aware'))  # calf_agent.regimes.REGIMES, without importing torch
PLAN_HORIZON = 16  # at or above the p99 hold length on wifi_degraded (issue 11)
PLANS_ROW = Row('Full + plans', 'full_net_aware', PLAN_HORIZON, 'model')

TABLES: dict[str, TableSpec] = {
    'table4': TableSpec(
        'table4', 'CartPole: mean episode return (± std across seeds)', 'cartpole', 'mean_return', 1.0, 200_000,
        (*REGIME_ROWS, PLANS_ROW), COLUMNS,
        {'Baseline': ('495 ± 7', '310 ± 48', '288 ± 62', '173 ± 71', '92 ± 54'),
         'Delay-Only': ('482 ± 11', '468 ± 16', '425 ± 32', '348 ± 49', '218 ± 58'),
         'Full Net-Aware': ('476 ± 9', '472 ± 13', '458 ± 22', '442 ± 27', '378 ± 41')}),
    'table5': TableSpec(
        'table5', 'MiniGrid DoorKey-5x5: success rate % (± std across seeds)', 'minigrid', 'success_rate', 100.0,
        500_000, REGIME_ROWS, COLUMNS,
        {'Baseline': ('94 ± 4', '76 ± 9', '73 ± 11', '61 ± 13', '44 ± 16'),
         'Delay-Only': ('91 ± 5', '87 ± 6', '84 ± 7', '77 ± 9', '64 ± 11'),
         'Full Net-Aware': ('89 ± 4', '87 ± 5', '85 ± 6', '81 ± 7', '74 ± 9')}),
    'table6': TableSpec(
        'table6', 'CartPole ablation: mean episode return on Wi-Fi-D (± std across seeds)', 'cartpole',
        'mean_return', 1.0, 200_000,
        (Row('Baseline (none)', 'sim_clean'), Row('Latency-Only (50 ms)', 'delay_only'),
         Row('Stochastic Add. Delay (σ=40 ms)', 'ablation_jitter'), Row('Loss-Only (10 %)', 'ablation_loss'),
         Row('Combined (full model)', 'full_net_aware')),
        (Column('Wi-Fi-D', 'wifi_degraded'),),
        {'Baseline (none)': ('92 ± 54',), 'Latency-Only (50 ms)': ('275 ± 52',),
         'Stochastic Add. Delay (σ=40 ms)': ('315 ± 47',), 'Loss-Only (10 %)': ('308 ± 49',),
         'Combined (full model)': ('378 ± 41',)}),
}

# What moves the single-action numbers on CartPole: the paper's full profile with and without the delay state,
# delay randomisation, and an upper bound for this policy class, a policy trained on the deployment link itself;
# evaluated on Wi-Fi-D and on Wi-Fi-D without its stalls, without its loss, and with its delay alone (profiles
# in results/profiles, so the experiment runs from the workspace root).
TABLES['delay_study'] = TableSpec(
    'delay_study', 'CartPole, single actions: what the training changes; mean episode return (± std across seeds)',
    'cartpole', 'mean_return', 1.0, 200_000,
    (Row('Full, frame stack + actions (paper)', 'full_net_aware', delay_state=False),
     Row('Full + delay state', 'full_net_aware'),
     Row('Full, randomised delay + delay state', 'randomised_full'),
     Row('Trained on Wi-Fi-D itself + delay state', 'wifi_degraded', delay_state=True)),
    (Column('Sim-Clean', 'sim_clean'), Column('Wi-Fi-N', 'wifi_normal'), Column('Wi-Fi-D', 'wifi_degraded'),
     Column('Wi-Fi-D, no stalls', 'results/profiles/wifi_degraded_no_stalls.yaml'),
     Column('Wi-Fi-D, no loss', 'results/profiles/wifi_degraded_no_loss.yaml'),
     Column('Wi-Fi-D delay alone', 'results/profiles/wifi_degraded_delay_only.yaml')), {})

# Table 4's regimes trained on randomised delays instead (calf train --network randomised_delay|randomised_full).
TABLES['table4_randomised'] = TableSpec(
    'table4_randomised', 'CartPole, the regimes trained on randomised delays: mean episode return (± std across seeds)',
    'cartpole', 'mean_return', 1.0, 200_000,
    (REGIME_ROWS[0], Row('Delay-Only, randomised', 'randomised_delay'), Row('Full Net-Aware, randomised', 'randomised_full')),
    COLUMNS, {})

# A MiniGrid task the network can hurt: moving obstacles, the last action repeated on ticks without a fresh one
# (calf_core/tasks/minigrid_dynamic.yaml). The paper has no such table; DoorKey (table5) stays for comparison.
TABLES['table5_dynamic'] = TableSpec(
    'table5_dynamic', 'MiniGrid Dynamic-Obstacles-Random-5x5: success rate % (± std across seeds)',
    'minigrid_dynamic', 'success_rate', 100.0, 200_000, REGIME_ROWS, COLUMNS, {})

# Continuous control: InvertedDoublePendulum-v5 (MuJoCo, 50 ms ticks, Gaussian PPO, hold zero). Its plans
# (the model planner over the Baseline policy) cover 10 ticks, 500 ms, about CartPole's H = 24.
TABLES['table4_mujoco'] = TableSpec(
    'table4_mujoco', 'InvertedDoublePendulum-v5: mean episode return (± std across seeds)',
    'InvertedDoublePendulum-v5', 'mean_return', 1.0, 300_000,
    (Row('Baseline', 'sim_clean'), Row('Full Net-Aware', 'full_net_aware'),
     Row('Full + plans', 'full_net_aware', 10, 'model')), COLUMNS, {})

# The same rows on InvertedPendulum-v5 (40 ms ticks), a task whose dynamics a small model predicts well over
# 12 ticks (480 ms), unlike InvertedDoublePendulum-v5's.
TABLES['table4_inverted_pendulum'] = TableSpec(
    'table4_inverted_pendulum', 'InvertedPendulum-v5: mean episode return (± std across seeds)',
    'InvertedPendulum-v5', 'mean_return', 1.0, 100_000,
    (Row('Baseline', 'sim_clean'), Row('Full Net-Aware', 'full_net_aware'),
     Row('Full + plans', 'full_net_aware', 12, 'model')), COLUMNS, {})

# The live trace is a bag recorded from the node graph under wifi_degraded (results/traces/README.md), so the
# plans experiment runs from the workspace root.
TABLES['plans'] = TableSpec(
    'plans', 'CartPole: action plans against single actions, for the full regime\'s network: mean episode '
    'return (± std across seeds)', 'cartpole', 'mean_return', 1.0, 200_000,
    (Row('Full (single actions)', 'full_net_aware'), Row('Full + PPO plans', 'full_net_aware', PLAN_HORIZON),
     PLANS_ROW, Row('Full + plans, H = 24', 'full_net_aware', 24, 'model')),
    (Column('Sim-Clean', 'sim_clean'), Column('Wi-Fi-N', 'wifi_normal'), Column('Wi-Fi-D', 'wifi_degraded'),
     Column('Wi-Fi-D live trace', 'results/traces/wifi_degraded_live')), {})

# Robots: continuous control behind the link, against the delayed-RL literature. Every row is trained once under
# its training link and evaluated in every column: the five network conditions, then constant delays of 2, 5 and
# 10 ticks (profiles in results/profiles: the action answering tick t's observation runs at tick t + 1 + k, as a
# k-step delay in the literature). SAC on a clean link is the Baseline and the undelayed reference; augmented SAC
# (the observation plus the actions in flight and the delay state) is the literature's delayed-RL baseline; the
# imitation student learns from the same seed's Baseline by DAgger; Full + plans is the model planner over that
# same SAC Baseline (a smooth expert: results/NOTES.md), open loop and with feedback plans (each element corrected
# by the env's observation as it applies it: PlanningAgent). Each row's own training gets the table's step budget; the student and the
# planner also use their Baseline's. HalfCheetah adds the literature's setting as a training link: augmented SAC
# trained at a constant 5 ticks, and feedback plans fitted there (a planner's lead never exceeds its training link's
# p95, so plans fitted behind full_net_aware cannot cover 5 ticks of 50 ms); and both feedback planners again with
# the long model fit (planner.LONG_FIT_EPOCHS), which the default fit's underfitted model called for.


def constant_delay(ticks: int, dt_ms: int) -> str:
    """The profile of a constant delay of ``ticks`` ticks of ``dt_ms`` (results/profiles, named from the workspace
    root)."""
    return f'results/profiles/constant_{ticks}_ticks_{dt_ms}ms.yaml'


def robots_table(name: str, env: str, dt_ms: int, steps: int, extra_rows: tuple[Row, ...] = ()) -> TableSpec:
    """A robots table for ``env`` (ticks of ``dt_ms``) with ``steps`` env steps per training run."""
    constant = tuple(Column(f'{k} ticks', constant_delay(k, dt_ms)) for k in (2, 5, 10))
    rows = (Row('Baseline (SAC)', 'sim_clean', algo='sac'), Row('Augmented SAC', 'full_net_aware', algo='sac'),
            Row('BPQL (SAC)', 'full_net_aware', algo='bpql'),
            Row('Imitation (DAgger)', 'full_net_aware', planner='imitation', algo='sac'),
            Row('Full + plans', 'full_net_aware', 10, 'model', algo='sac'),
            Row('Full + feedback plans', 'full_net_aware', 10, 'model', algo='sac', model='ensemble-feedback'),
            *extra_rows)
    return TableSpec(name, f'{env}: mean episode return (± std across seeds)', env, 'mean_return', 1.0, steps,
                     rows, (*COLUMNS, *constant), {}, (rows[0].name, COLUMNS[0].name))


TABLES['robots_double_pendulum'] = robots_table('robots_double_pendulum', 'InvertedDoublePendulum-v5', 50, 100_000)
TABLES['robots_reacher'] = robots_table('robots_reacher', 'Reacher-v5', 20, 100_000)
TABLES['robots_half_cheetah'] = robots_table(
    'robots_half_cheetah', 'HalfCheetah-v5', 50, 200_000,
    (Row('Augmented SAC, trained at 5 ticks', constant_delay(5, 50), algo='sac'),
     Row('BPQL (SAC), trained at 5 ticks', constant_delay(5, 50), algo='bpql'),
     Row('Full + feedback plans, fitted at 5 ticks', constant_delay(5, 50), 10, 'model',
         algo='sac', model='ensemble-feedback'),
     Row('Full + feedback plans, long fit', 'full_net_aware', 10, 'model', algo='sac',
         model='ensemble-feedback-long'),
     Row('Full + feedback plans, long fit at 5 ticks', constant_delay(5, 50), 10, 'model',
         algo='sac', model='ensemble-feedback-long')))

# SAC and the delay state (issue 29). Behind a constant delay the delay state is nearly constant; standardised
# with the observations, its values at an episode's first ticks reached ±10 and SAC learned nothing, so it now
# reaches the actor as it is (calf_agent.sac_training.build_actor). Pendulum-v1, 50 ms ticks: augmented SAC at a
# constant 5 ticks with and without the delay state, against SAC on a clean link.
TABLES['delay_state_sac'] = TableSpec(
    'delay_state_sac', 'Pendulum-v1, SAC behind a constant delay: mean episode return (± std across seeds)',
    'Pendulum-v1', 'mean_return', 1.0, 15_000,
    (Row('SAC on a clean link', 'sim_clean', algo='sac'),
     Row('Augmented SAC at 5 ticks, actions in flight', constant_delay(5, 50), delay_state=False, algo='sac'),
     Row('Augmented SAC at 5 ticks, + delay state', constant_delay(5, 50), algo='sac')),
    (Column('Sim-Clean', 'sim_clean'), Column('2 ticks', constant_delay(2, 50)),
     Column('5 ticks', constant_delay(5, 50))), {}, ('SAC on a clean link', 'Sim-Clean'))

# Outages (issue 31): Wi-Fi-D and the four harsh built-in profiles, whose outages last 100 ms to over a second.
# Plans with the Table-4 horizon against plans whose horizon covers the silences of outage_burst, the harshest,
# up to their 99.9th percentile (calf train --plan-horizon auto:outage_burst), whole or cut to the length the
# silence before them calls for (--silence-lengths); all trained behind full_net_aware over the Baseline of the same seed, with the single-model
# recipe (planner.RECIPES). A continuous task adds the adaptive plans with feedback (--feedback-plans): each element
# corrected at the edge by the state it meets, through the Baseline's gains.
OUTAGE_COLUMNS = (Column('Sim-Clean', 'sim_clean'), Column('Wi-Fi-D', 'wifi_degraded'),
                  Column('Outage-Burst', 'outage_burst'), Column('Scan-Stall', 'scan_stall'),
                  Column('Congested-Uplink', 'congested_uplink'), Column('Shared-Outage', 'shared_outage'))


def outages_table(name: str, env: str, steps: int, fixed_horizon: int, continuous: bool = False) -> TableSpec:
    """An outages table for ``env``: Baseline, Full, plans with ``fixed_horizon`` and adaptive plans; for a
    ``continuous`` task also adaptive feedback plans."""
    feedback = (Row('Adaptive feedback plans (auto:outage_burst)', 'full_net_aware', 'auto:outage_burst', 'model',
                    model='single-feedback'),) if continuous else ()
    rows = (Row('Baseline', 'sim_clean'), Row('Full Net-Aware', 'full_net_aware'),
            Row(f'Full + plans, H = {fixed_horizon}', 'full_net_aware', fixed_horizon, 'model', model='single'),
            Row('Adaptive plans (auto:outage_burst)', 'full_net_aware', 'auto:outage_burst', 'model', model='single'),
            Row('Adaptive plans, cut by silence', 'full_net_aware', 'auto:outage_burst', 'model',
                model='single-silence'), *feedback)
    return TableSpec(name, f'{env} behind outages: mean episode return (± std across seeds)', env, 'mean_return',
                     1.0, steps, rows, OUTAGE_COLUMNS, {}, (rows[0].name, OUTAGE_COLUMNS[0].name))


TABLES['outages_cartpole'] = outages_table('outages_cartpole', 'cartpole', 200_000, PLAN_HORIZON)
TABLES['outages_inverted_pendulum'] = outages_table('outages_inverted_pendulum', 'InvertedPendulum-v5', 100_000, 12,
                                                   continuous=True)
TABLE_GROUPS = {'robots': ('robots_double_pendulum', 'robots_reacher', 'robots_half_cheetah'),
                'outages': ('outages_cartpole', 'outages_inverted_pendulum')}
"""Names that run several tables: ``calf experiment robots``."""

ENV_TABLE_PREFIX = 'env_'


def env_table(env: str) -> TableSpec:
    """A Table-4-style table for a user's env (``calf experiment --env ENV``): Baseline and Full Net-Aware,
    trained for the env's default PPO steps, evaluated under the five network conditions.

    ``env`` is the resolved ``--env`` string (a built-in, a gymnasium id, an entry point or a spec file).
    """
    from calf_agent.regimes import train_defaults
    short = Path(env).stem if env.endswith(('.yaml', '.yml')) else env
    name = ENV_TABLE_PREFIX + env_slug(short)
    return TableSpec(name, f'{short}: mean episode return (± std across seeds)', env, 'mean_return', 1.0,
                     train_defaults(env).total_steps, REGIME_ROWS[::2], COLUMNS, {})


def env_slug(env: str) -> str:
    """``env`` as one file-name component: a spec file's path or an entry point, its separators replaced."""
    return re.sub(r'[^A-Za-z0-9_.-]+', '_', env).strip('_')


TABLE9_PAPER = {'Local (Pi only)': (5.2, 9.8), 'Ethernet (Pi ↔ Desktop)': (8.7, 14.3),
                'Wi-Fi-Normal': (34.5, 68.2), 'Real-Wi-Fi-Degraded': (82.1, 152.7)}
TABLE9_PROFILES = {'Local (Pi only)': 'sim_clean', 'Ethernet (Pi ↔ Desktop)': 'real_eth',
                   'Wi-Fi-Normal': 'wifi_normal', 'Real-Wi-Fi-Degraded': 'wifi_degraded'}
