"""The model planner's adaptive lead: the round trips the observations report (``applied_obs_seq``) set where
each plan's model part starts, the same in virtual time and on the policy side of the live graph."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from planner_bases import balancing_base

from calf_agent.checkpoint import RESERVED, load_checkpoint, save_checkpoint
from calf_agent.errors import CheckpointError
from calf_agent.evaluate import evaluate_sim, one_torch_thread
from calf_agent.plan_agent import PlanningAgent, PlanState
from calf_agent.planner import PlannerConfig, train_planner
from calf_agent.policies import new_episode_state
from calf_agent.policy_runner import PolicyRunner
from calf_core.envs import make_networked_env
from calf_core.profiles import load_profile
from calf_core.timing import ReceivedObservation

H, FIXED, WINDOW = 8, 3, 3
MODEL = {'obs_dim': 4, 'n_actions': 2, 'hidden': [16], 'members': 2}
OBS = np.array([0.01, 0.1, 0.04, -0.1], dtype=np.float32)
FIXED_40MS = """name: fixed_40ms
description: 40 ms each way, no loss (a round trip of four CartPole ticks).
compute_ms: 0.0
reorder: false
uplink:
  - {model: fixed_delay, latency_ms: 40.0}
downlink: same
"""


@pytest.fixture(scope='module')
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return balancing_base(tmp_path_factory.mktemp('base') / 'base', samples=5_000)


@pytest.fixture(scope='module')
def adaptive(base_dir: Path) -> PlanningAgent:
    torch.manual_seed(0)
    return PlanningAgent(load_checkpoint(base_dir)[0], MODEL, H, FIXED, [0, 1], lead_window=WINDOW).eval()


def fixed_twin(agent: PlanningAgent, lead: int) -> PlanningAgent:
    """``agent`` with the same weights and a fixed ``lead``."""
    twin = PlanningAgent(agent.base, agent.model.spec(), agent.plan_horizon, lead, agent.start_plan, agent.hold_action)
    twin.model.load_state_dict(agent.model.state_dict())
    return twin.eval()


def without_window(state: PlanState) -> PlanState:
    """An adaptive planner's state as a fixed-lead planner keeps it: without the round trips."""
    memory = state[0]
    return (torch.cat([memory[..., :2], memory[..., 2 + WINDOW:]], -1),)


@pytest.mark.parametrize('reports, lead', [
    ([(1, -1)], FIXED),  # no plan has run yet: the fixed lead
    ([(1, -1), (4, 1)], 2),  # plan 1 ran at tick 4: a round trip of 3
    ([(1, -1), (4, 1), (5, 4)], 0),  # the shortest of 3 and 1
    ([(4, 1), (5, 4), (9, 5), (13, 9), (17, 13)], 3),  # the 1 has left the window of 3: 4, 4, 4
    ([(4, 1), (9, 5), (10, 5)], 3),  # the same plan ran again: 4, 4, 5
])
@pytest.mark.slow
def test_the_lead_is_the_shortest_remembered_round_trip_less_one(adaptive: PlanningAgent,
                                                                  reports: list[tuple[int, int]], lead: int) -> None:
    """Each plan equals a fixed-lead planner's at the lead the reports call for, from the same previous plan."""
    _, state = adaptive.act(OBS, None, deterministic=True, seq=[0], applied_seq=[-1])
    for seq, applied in reports:
        before = state
        plan, state = adaptive.act(OBS * (1 + seq / 10), before, deterministic=True, seq=[seq],
                                   applied_seq=[applied])
    twin_plan, _ = fixed_twin(adaptive, lead).act(OBS * (1 + seq / 10), without_window(before),
                                                  deterministic=True, seq=[seq])
    assert plan.tolist() == twin_plan.tolist()
    if lead:  # the elements before the lead are what the env runs: the previous plan's
        previous = before[0][0, 0, 2 + WINDOW:]
        prev_seq = int(before[0][0, 0, 1])
        assert plan[0, :lead].tolist() == previous[seq - prev_seq:seq - prev_seq + lead].long().tolist()


@pytest.mark.parametrize('quantile, trips, lead', [
    (0.0, [3, 1, 5], 0),  # the shortest
    (0.5, [3, 1, 5], 2),  # rank ceil(0.5 * 2) = 1 of the sorted 1, 3, 5
    (1.0, [3, 1, 5], 4),  # the longest
    (0.9, list(range(1, 12)), 9),  # rank ceil(0.9 * 10) = 9 exactly (floating point says 9.000000000000002)
    (0.9, [2] * 19 + [7], 1),  # rank ceil(0.9 * 19) = 18 of 20: one late plan in 20 does not count
])
def test_the_lead_quantile_picks_its_rank_of_the_remembered_round_trips(quantile: float, trips: list[int],
                                                                       lead: int, adaptive: PlanningAgent) -> None:
    planner = PlanningAgent(adaptive.base, MODEL, 16, 15, [0, 1], lead_window=len(trips), lead_quantile=quantile)
    remembered = torch.tensor([[float(t) for t in trips]])
    assert planner._lead(remembered).tolist() == [lead]


def test_the_fixed_lead_caps_the_adaptive_one_and_stands_until_a_report(adaptive: PlanningAgent) -> None:
    planner = PlanningAgent(adaptive.base, MODEL, 16, 2, [0, 1], lead_window=4, lead_quantile=0.5)
    remembered = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 6.0, 8.0], [0.0, 2.0, 1.0, 9.0]])
    assert planner._lead(remembered).tolist() == [2, 2, 1]  # nothing yet; 7 capped at 2; rank 1 of 1, 2, 9


def test_rows_keep_their_own_round_trips(adaptive: PlanningAgent) -> None:
    obs = np.stack([OBS, OBS])
    _, state = adaptive.act(obs, None, deterministic=True, seq=[0, 0], applied_seq=[-1, -1])
    _, state = adaptive.act(obs, state, deterministic=True, seq=[2, 6], applied_seq=[0, 0])
    trips = state[0][0, :, 2:2 + WINDOW]
    assert trips.tolist() == [[0, 0, 2], [0, 0, 6]]


def test_a_fixed_lead_ignores_the_reports_and_no_report_keeps_an_adaptive_one(adaptive: PlanningAgent) -> None:
    fixed = fixed_twin(adaptive, FIXED)
    _, state = fixed.act(OBS, None, deterministic=True, seq=[0])
    with_reports, _ = fixed.act(OBS, state, deterministic=True, seq=[4], applied_seq=[3])
    assert with_reports.tolist() == fixed.act(OBS, state, deterministic=True, seq=[4])[0].tolist()
    _, state = adaptive.act(OBS, None, deterministic=True, seq=[0], applied_seq=[-1])
    _, state = adaptive.act(OBS, state, deterministic=True, seq=[3], applied_seq=[0])
    _, unreported = adaptive.act(OBS, state, deterministic=True, seq=[5])
    assert unreported[0][0, 0, 2:2 + WINDOW].tolist() == [0, 0, 3]


def test_a_new_episode_keeps_the_round_trips_and_forgets_the_plan(adaptive: PlanningAgent) -> None:
    """The link does not restart with an episode: a first plan after a round trip of 3 leads by 2, not by the
    fixed 3, and is otherwise what a fresh planner sends."""
    obs = np.stack([OBS, OBS])
    _, state = adaptive.act(obs, None, deterministic=True, seq=[0, 0], applied_seq=[-1, -1])
    _, state = adaptive.act(obs, state, deterministic=True, seq=[3, 3], applied_seq=[0, 0])
    fresh = new_episode_state(adaptive, state, np.array([False, True]))
    assert torch.equal(fresh[0][:, 0], state[0][:, 0])  # the row that goes on is untouched
    assert fresh[0][0, 1, 2:2 + WINDOW].tolist() == [0, 0, 3] and not fresh[0][0, 1, :2].any()
    assert not fresh[0][0, 1, 2 + WINDOW:].any()
    plan, _ = adaptive.act(OBS, (fresh[0][:, 1:],), deterministic=True, seq=[0], applied_seq=[-1])
    assert plan.tolist() == fixed_twin(adaptive, 2).act(OBS, None, deterministic=True, seq=[0])[0].tolist()


def test_the_window_round_trips_through_a_checkpoint_and_the_schema_bounds_it(tmp_path: Path,
                                                                            adaptive: PlanningAgent) -> None:
    save_checkpoint(tmp_path / 'plan', adaptive, {'env': 'cartpole', 'plan_horizon': H})
    loaded, _ = load_checkpoint(tmp_path / 'plan')
    assert isinstance(loaded, PlanningAgent) and loaded.lead_window == WINDOW
    meta = json.loads((tmp_path / 'plan' / 'meta.json').read_text())
    for bad in (65, -1, True, 2.5):
        meta['agent']['lead_window'] = bad
        (tmp_path / 'plan' / 'meta.json').write_text(json.dumps(meta))
        with pytest.raises(CheckpointError, match='lead_window') as caught:
            load_checkpoint(tmp_path / 'plan')
        assert '\n' not in str(caught.value)


@pytest.mark.slow
def test_sim_and_policy_side_plan_alike_behind_a_constant_delay(tmp_path: Path, base_dir: Path) -> None:
    """Behind a constant round trip of 4 ticks, every report says 4: the adaptive planner (trained behind the
    link, fallback lead 3) plans as the fixed-lead-3 one does, in NetworkedEnv and through PolicyRunner."""
    (tmp_path / 'link.yaml').write_text(FIXED_40MS)
    link = load_profile(tmp_path / 'link.yaml')
    cfg = PlannerConfig(transitions=2_000, epochs=2, members=1, hidden=(32,), rollout=1, refits=1, cut_quantile=None)
    with one_torch_thread():
        meta = train_planner(base_dir, tmp_path / 'adaptive', str(tmp_path / 'link.yaml'), H, 0, cfg=cfg,
                             progress=False)
    assert meta['planner']['lead'] == 3 and meta['planner']['lead_window'] == cfg.lead_window
    adaptive_agent, _ = load_checkpoint(tmp_path / 'adaptive')
    saved = json.loads((tmp_path / 'adaptive' / 'meta.json').read_text())
    save_checkpoint(tmp_path / 'fixed', fixed_twin(adaptive_agent, 3),
                    {k: v for k, v in saved.items() if k not in RESERVED})
    adaptive_report = evaluate_sim(tmp_path / 'adaptive', link, episodes=3, seed=0)
    assert adaptive_report['returns'] == evaluate_sim(tmp_path / 'fixed', link, episodes=3, seed=0)['returns']

    env = make_networked_env('cartpole', link, seed=0, plan_horizon=H)  # the policy side, fed what the env emits
    runners = PolicyRunner.from_checkpoint(tmp_path / 'adaptive'), PolicyRunner.from_checkpoint(tmp_path / 'fixed')
    obs, info = env.reset(seed=0)
    reported = []
    for _ in range(40):
        received = ReceivedObservation(0, info['obs_seq'], obs, applied_obs_seq=info['applied_obs_seq'])
        plans = [runner.on_observation(received) for runner in runners]
        assert plans[0] == plans[1], info['obs_seq']
        obs, _, terminated, truncated, info = env.step(np.asarray(plans[0]))
        reported.append(info['obs_seq'] - info['applied_obs_seq'] if info['applied_obs_seq'] >= 0 else None)
        assert not (terminated or truncated)
    assert set(reported[10:]) == {4}, reported
