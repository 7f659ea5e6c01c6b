"""Adaptive plans (issue 31): the horizon from the link's tail, capped by the model, and plans whose length
follows the silence before them; on real profiles, real envs and a real planner."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from planner_bases import balancing_base, balancing_law, pendulum_gaussian_base, train_exit_code

from calf_agent.agents import make_agent
from calf_agent.checkpoint import load_checkpoint
from calf_agent.evaluate import evaluate_sim, one_torch_thread
from calf_agent.plan_agent import PlanningAgent
from calf_agent.planner import (
    SINGLE_MODEL,
    auto_horizon,
    predictable_ticks,
    tail_network,
    train_planner,
    with_feedback,
)
from calf_agent.regimes import plan_coverage, silence_lengths, tail_horizon
from calf_core.envs import make_networked_env
from calf_core.errors import ConfigError
from calf_core.network import resolve_network

ROOT = Path(__file__).resolve().parents[3]
CONSTANT_5 = str(ROOT / 'results/profiles/constant_5_ticks_20ms.yaml')  # plans answering tick t run from t + 6


@pytest.fixture(scope='module')
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLP fitted to ``balancing_law`` by supervised learning (seconds), saved as a planner's base."""
    with one_torch_thread():
        return balancing_base(tmp_path_factory.mktemp('base') / 'base', samples=5_000)


def test_a_constant_delay_ages_every_plan_alike() -> None:
    """Behind a constant 5.5-tick round trip every tick runs element 5 of the plan answering 6 ticks before."""
    coverage = plan_coverage(resolve_network(CONSTANT_5), 0.02, ticks=2_000)
    assert set(coverage.ages.tolist()) == {6} and set(coverage.needs.tolist()) == {6}
    assert tail_horizon(coverage) == 6 and silence_lengths(coverage, 16) == [6] * 8
    assert tail_horizon(plan_coverage(resolve_network('sim_clean'), 0.02, ticks=2_000)) == 1


def test_the_ages_are_the_elements_a_networked_env_runs() -> None:
    """plan_coverage's rule is the env's: behind the constant delay NetworkedEnv runs element age - 1 = 5 on
    every tick once the first plan is in, whatever the plan holds."""
    env = make_networked_env('cartpole', resolve_network(CONSTANT_5), seed=0, plan_horizon=8)
    applied = []
    env.tick_listener = lambda record: applied.append(record.applied)
    obs, info = env.reset(seed=0)
    for _ in range(40):
        obs, _, terminated, truncated, info = env.step(balancing_law(obs[None])[0].repeat(8))
        if terminated or truncated:
            break
    indices = [a.index for a in applied if a is not None and a.plan_seq >= 0]
    assert len(indices) > 20 and set(indices) == {5}


@pytest.mark.slow
def test_outages_lengthen_the_tail_and_the_plans_after_a_silence() -> None:
    """Outage-Burst's 400 ms bursts put its tail far beyond its delay, and a plan sent as the link comes back
    from a silence must last longer than one sent while it is good; Wi-Fi-N's tail is short."""
    outage = plan_coverage(resolve_network('outage_burst'), 0.02)
    horizon = tail_horizon(outage)
    assert np.quantile(outage.ages, 0.95) < 20 < horizon <= 80
    lengths = silence_lengths(outage, horizon)
    assert lengths == sorted(lengths) and lengths[0] < lengths[1] == horizon
    assert tail_horizon(plan_coverage(resolve_network('wifi_normal'), 0.02)) <= 10
    assert max(silence_lengths(outage, 12)) == 12  # never beyond the horizon


def test_the_horizon_is_the_tail_capped_by_the_model() -> None:
    assert predictable_ticks(np.array([0.01, 0.05, 0.2, 0.05])) == 2  # the first tick over 0.1 ends it
    assert predictable_ticks(np.array([0.01, 0.02])) == 2
    assert auto_horizon(50, 30) == 30 and auto_horizon(20, 64) == 20 and auto_horizon(1, 64) == 2
    assert tail_network('auto', 'full_net_aware') == 'full_net_aware'
    assert tail_network('auto:outage_burst', 'full_net_aware') == 'outage_burst' and tail_network(16, 'x') is None
    with pytest.raises(ConfigError, match='auto or auto:NETWORK'):
        tail_network('sixteen', 'full_net_aware')


@pytest.mark.slow
def test_plans_are_cut_to_the_length_their_silence_calls_for(base_dir: Path) -> None:
    """After a one-tick silence the plan runs 3 elements and then holds its last (hold last); after a longer one,
    or at an episode's first observation, 6; the lead's elements are the env's own either way."""
    with one_torch_thread():
        torch.manual_seed(1)
        base = load_checkpoint(base_dir)[0]
        model = {'obs_dim': 4, 'n_actions': 2, 'hidden': [16], 'members': 1}
        free = PlanningAgent(base, model, 8, 1, [0, 1])
        cut = PlanningAgent(base, model, 8, 1, [0, 1], lengths=[3, 6])
        cut.load_state_dict(free.state_dict())
        states = np.random.default_rng(0).uniform([-1, -1, -0.1, -1], [1, 1, 0.1, 1], (200, 1, 4)).astype(np.float32)
        # a state from which the untrained model's rollout makes the base change its action after element 2
        obs = next(o for o in states if len(set(free.act(o, None, deterministic=True, seq=[0])[0][0, 2:].tolist())) > 1)
        whole, state = free.act(obs, None, deterministic=True, seq=[0])
        first, cut_state = cut.act(obs, None, deterministic=True, seq=[0])
        assert first[0].tolist() == whole[0, :6].tolist() + [whole[0, 5]] * 2
        whole, _ = free.act(obs, state, deterministic=True, seq=[1])
        after_one, _ = cut.act(obs, cut_state, deterministic=True, seq=[1])
        assert after_one[0].tolist() == whole[0, :3].tolist() + [whole[0, 2]] * 5 != whole[0].tolist()
        after_four, _ = cut.act(obs, cut_state, deterministic=True, seq=[4])
        assert after_four[0, :6].tolist() == free.act(obs, state, deterministic=True, seq=[4])[0][0, :6].tolist()
        assert cut.spec()['lengths'] == [3, 6] and 'lengths' not in free.spec()
        assert make_agent(cut.spec()).lengths == [3, 6] and make_agent(free.spec()).lengths is None
    for bad in ([], [0, 3], [9], [2.5]):
        with pytest.raises(ValueError, match='lengths must be plan lengths in 1..8'):
            PlanningAgent(base, model, 8, 1, [0, 1], lengths=bad)


@pytest.mark.parametrize(('argv', 'message'), [
    (['--plan-horizon', 'auto'], "--plan-horizon auto and --silence-lengths are the model planner's"),
    (['--planner', 'model', '--plan-horizon', '16', '--silence-lengths'],
     '--silence-lengths cuts plans of an automatic horizon: add --plan-horizon auto'),
    (['--plan-horizon', 'sixteen'], 'argument --plan-horizon: must be an integer'),
    (['--plan-horizon', 'auto:'], 'argument --plan-horizon: must be an integer'),
    (['--planner', 'model', '--plan-horizon', 'auto:no_such_link'], "unknown network profile 'no_such_link'"),
])
def test_bad_plan_horizons_exit_2_with_one_line(argv: list[str], message: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert train_exit_code(argv, tmp_path / 'out') == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and 'Traceback' not in '\n'.join(err), err
    assert not (tmp_path / 'out').exists()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_adaptive_planner_trains_and_runs_through_calf_eval(tmp_path: Path, base_dir: Path) -> None:
    """``auto:outage_burst``: the horizon covers Outage-Burst's tail, the checkpoint records why (and the lengths
    the silences call for, which whole plans do not cut to), and ``calf eval`` keeps the pole up behind the
    outages."""
    out = tmp_path / 'adaptive'
    meta = train_planner(base_dir, out, 'full_net_aware', 'auto:outage_burst', 0, cfg=SINGLE_MODEL, progress=False)
    horizon = meta['planner']['horizon']
    tail = tail_horizon(plan_coverage(resolve_network('outage_burst'), 0.02))
    assert horizon['tail_ticks'] == tail and meta['plan_horizon'] == min(tail, horizon['predictable_ticks']) > 16
    agent, saved = load_checkpoint(out)
    assert agent.plan_horizon == saved['plan_horizon'] == meta['plan_horizon']
    assert agent.lengths is None and horizon['plans_cut_by_silence'] is False
    assert horizon['silence_lengths'][0] < horizon['silence_lengths'][-1] == agent.plan_horizon
    run = subprocess.run([sys.executable, '-m', 'calf_bringup.cli', 'eval', '--policy', str(out), '--backend', 'sim',
                          '--network', 'outage_burst', '--episodes', '10', '--json'],
                         check=True, cwd=ROOT, capture_output=True, text=True)
    assert json.loads(run.stdout)['mean_return'] >= 400


@pytest.mark.slow
def test_feedback_plans_hold_a_pendulum_through_outages_where_open_plans_fall(tmp_path: Path) -> None:
    """InvertedPendulum-v5 behind outage_burst: the same adaptive planner, its plans corrected at the edge by the
    state each element meets, keeps the pole up far longer than with its plans run open loop."""
    with one_torch_thread():
        base = pendulum_gaussian_base(tmp_path / 'base')
        cfg = replace(SINGLE_MODEL, transitions=10_000, epochs=10)
        train_planner(base, tmp_path / 'open', 'full_net_aware', 'auto:outage_burst', 0, cfg=cfg, progress=False)
        with_feedback(tmp_path / 'open', tmp_path / 'feedback')
        outages = resolve_network('outage_burst')
        open_loop, feedback = (evaluate_sim(tmp_path / name, outages, 8, 0)['mean_return'] for name in ('open', 'feedback'))
    assert feedback > max(750.0, open_loop + 150.0), (open_loop, feedback)
