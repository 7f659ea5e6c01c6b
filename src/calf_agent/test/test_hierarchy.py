"""Hierarchies: training writes hierarchy.json and one checkpoint per sub-policy; the virtual-time
evaluation of the deployment graphs follows the timing rules on exact latency sequences."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from calf_agent.checkpoint import load_checkpoint, save_checkpoint
from calf_agent.evaluate import evaluate_sim
from calf_agent.hierarchy import Hierarchy, SubPolicy, load_hierarchy, save_hierarchy
from calf_agent.hierarchy_train import train_hierarchy
from calf_agent.placement_sim import evaluate_hierarchy_sim, evaluate_placement_sim
from calf_agent.policies import LstmAgent, MlpAgent
from calf_core.errors import ConfigError
from calf_core.profiles import load_profile, profile_from_dict

ALWAYS_RECENTER = {'angle_rad': 10.0, 'angular_velocity_rad_s': 100.0}
ALWAYS_STABILISE = {'angle_rad': 1e-9, 'angular_velocity_rad_s': 1e-9}


def random_hierarchy(root: Path, gating: dict[str, float]) -> Path:
    torch.manual_seed(0)
    for name in ('stabilise', 'recenter'):
        save_checkpoint(root / name, MlpAgent(4, 2), {'env': 'cartpole'})
    subs = (SubPolicy('stabilise', 'edge', 'sim_clean', 'stabilise'),
            SubPolicy('recenter', 'desktop', 'delay_only', 'recenter'))
    save_hierarchy(Hierarchy('cartpole', 'delay_only', 0, subs, gating, 0.2, root))
    return root


@pytest.mark.slow
def test_train_hierarchy_writes_every_sub_policy_and_the_description(tmp_path: Path) -> None:
    hierarchy, results = train_hierarchy('cartpole', 'delay_only', seed=3, out=tmp_path, steps=512, progress=False)
    assert list(results) == ['stabilise', 'recenter'] and all(r.global_steps == 512 for r in results.values())
    doc = json.loads((tmp_path / 'hierarchy.json').read_text())
    assert doc['subpolicies'] == [
        {'name': 'stabilise', 'placement': 'edge', 'network': 'sim_clean', 'checkpoint': 'stabilise'},
        {'name': 'recenter', 'placement': 'desktop', 'network': 'delay_only', 'checkpoint': 'recenter'}]
    assert (doc['env'], doc['regime'], doc['seed'], doc['silence_timeout_s']) == ('cartpole', 'delay_only', 3, 0.2)
    assert doc['gating'] == {'angle_rad': 0.05, 'angular_velocity_rad_s': 0.5}
    assert load_hierarchy(tmp_path) == hierarchy
    _, stabilise = load_checkpoint(tmp_path / 'stabilise')
    _, recenter = load_checkpoint(tmp_path / 'recenter')
    assert (stabilise['subtask'], stabilise['representation']) == ('stabilise', {'frames': 1, 'actions': 0})
    # delay_only: d = ceil(51 ms / 20 ms) = 3 ticks; a frame stack of d + 1, no action history
    assert (recenter['subtask'], recenter['representation']) == ('recenter', {'frames': 4, 'actions': 0})


def test_remote_sub_policy_drives_after_its_first_fresh_answer(tmp_path: Path) -> None:
    """delay_only: 25 ms up, 1 ms compute, 25 ms down. Recenter is silent until its answer to observation 0
    arrives at 51 ms, so stabilise (fallback) drives ticks 1-3 with answers to observations 0-2; recenter's
    answers to observations 0-2 are then stale, and from observation 3 on its answers drive, 51 ms late."""
    report = evaluate_hierarchy_sim(random_hierarchy(tmp_path, ALWAYS_RECENTER), load_profile('delay_only'),
                                    episodes=1, seed=0, keep_samples=True)
    samples = report['e2e_samples_ms']
    assert samples[:3] == [0.0, 0.0, 0.0]
    assert samples[3:] == pytest.approx([51.0] * (len(samples) - 3))
    assert report['forwarded_share'] == {'stabilise': round(3 / len(samples), 4),
                                         'recenter': round(1 - 3 / len(samples), 4)}


def test_remote_sub_policy_acts_on_the_newest_observation_a_stall_releases(tmp_path: Path) -> None:
    """An uplink stall holds the observations of 100 ms and releases them at one instant: the desktop sub-policy
    acts on the newest (keep-newest, as NetworkedEnv does), whose action is at most a tick (20 ms) plus 1 ms up,
    1 ms compute and 1 ms down old; acting on the oldest first, as it did, answered one held 98 ms."""
    profile = profile_from_dict({'compute_ms': 1.0, 'downlink': [{'model': 'fixed_delay', 'latency_ms': 1.0}],
                                 'uplink': [{'model': 'fixed_delay', 'latency_ms': 1.0},
                                            {'model': 'stall', 'mode': 'periodic', 'period_ms': 310.0,
                                             'duration_ms': 100.0}]}, 'uplink_stall')
    report = evaluate_hierarchy_sim(random_hierarchy(tmp_path, ALWAYS_RECENTER), profile, episodes=3, seed=0,
                                    keep_samples=True)
    assert report['forwarded_share']['recenter'] > 0.9 and len(report['e2e_samples_ms']) > 100
    assert max(report['e2e_samples_ms']) <= 23.0 + 1e-6, sorted(report['e2e_samples_ms'])[-5:]


def test_edge_sub_policy_alone_is_never_late(tmp_path: Path) -> None:
    report = evaluate_hierarchy_sim(random_hierarchy(tmp_path, ALWAYS_STABILISE), load_profile('wifi_normal'),
                                    episodes=2, seed=1, keep_samples=True)
    assert set(report['e2e_samples_ms']) == {0.0}
    assert report['forwarded_share'] == {'stabilise': 1.0, 'recenter': 0.0}


def test_evaluation_is_reproducible_and_flat_edge_has_no_network(tmp_path: Path) -> None:
    root = random_hierarchy(tmp_path, {'angle_rad': 0.02, 'angular_velocity_rad_s': 0.2})
    first, second = (evaluate_hierarchy_sim(root, load_profile('wifi_normal'), 3, seed=5) for _ in range(2))
    assert first == second and first['graph'] == 'hierarchical' and first['episodes'] == 3
    flat = evaluate_placement_sim('flat_edge', root / 'stabilise', load_profile('wifi_normal'), 2, seed=0)
    assert (flat['graph'], flat['network'], flat['e2e_latency_ms']['p95']) == ('flat_edge', 'wifi_normal', 0.0)
    with pytest.raises(ConfigError, match="unknown placement 'tree'"):
        evaluate_placement_sim('tree', root, load_profile('wifi_normal'), 1, seed=0)


@pytest.mark.slow
def test_recurrent_policies_start_later_episodes_in_a_batch_slot(tmp_path: Path) -> None:
    """evaluate_sim zeroes a slot's LSTM state between episodes (the state comes from inference mode)."""
    torch.manual_seed(0)
    save_checkpoint(tmp_path, LstmAgent(147, 7, (16,), lstm_size=8), {'env': 'minigrid'})
    report = evaluate_sim(tmp_path, load_profile('sim_clean'), episodes=2, seed=0, batch=1)
    assert report['episodes'] == 2


def test_desktop_link_runs_on_across_episodes(tmp_path: Path) -> None:
    """The hierarchy's shared link is one process across episodes, as NetworkedEnv's: a trace replayed on
    the uplink carries on where the last episode left it (it restarted at its first record before)."""
    profile = profile_from_dict({'uplink': [{'model': 'trace_replay', 'delays_ms': [10.0, 20.0, 30.0, 40.0, 50.0]}],
                                 'downlink': []}, 'trace')
    report = evaluate_hierarchy_sim(random_hierarchy(tmp_path, ALWAYS_RECENTER), profile, episodes=6, seed=0,
                                    keep_samples=True)
    first_remote = [round(next(ms for ms in episode if ms > 0.0), 3) for episode in report['episode_e2e_samples_ms']]
    assert len(set(first_remote[1:])) > 1, first_remote  # a restarting trace gives the same one every episode
