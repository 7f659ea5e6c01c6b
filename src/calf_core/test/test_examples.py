"""The examples of "Use CALF from your own training code" run, on a tiny budget."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / 'examples' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_trace_bag_replays_as_the_network() -> None:
    result = example('trace_bag_network').main([str(ROOT / 'results' / 'traces' / 'wifi_degraded_live'),
                                                '--episodes', '1'])
    assert result['e2e_samples'] > 50 and result['e2e_p95_ms'] > result['e2e_p50_ms'] > 0


@pytest.mark.slow
def test_sb3_ppo_trains_through_the_wrapper() -> None:
    result = example('sb3_ppo').main(['--steps', '256', '--n-steps', '32', '--envs', '2', '--episodes', '1'])
    assert result['steps'] >= 256 and result['mean_return'] < 0  # Pendulum's rewards are costs


@pytest.mark.slow
def test_cleanrl_style_ppo_trains_on_make_vec() -> None:
    result = example('cleanrl_ppo').main(['--total-timesteps', '800', '--num-steps', '200', '--num-envs', '4'])
    assert result['steps'] == 800 and result['episodes'] >= 4  # every env ended a 200-tick episode
