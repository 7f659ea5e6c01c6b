"""The ``calf`` command in-process: train and eval options, renamed flags, and one-line errors (exit 2)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calf_agent.checkpoint import load_checkpoint
from calf_agent.errors import CheckpointError
from calf_agent.evaluate import evaluate_sim
from calf_agent.policy_runner import PolicyRunner
from calf_agent.representation import Representation
from calf_bringup import cli
from calf_core.profiles import load_profile


@pytest.fixture(scope='module')
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp('policy')
    assert cli.main(['train', '--steps', '512', '--quiet', '--out', str(out)]) == 0
    return out


@pytest.mark.slow
def test_obs_age_policy_trains_and_evaluates_in_sim_but_is_refused_by_the_policy_node(tmp_path: Path) -> None:
    assert cli.main(['train', '--obs-age', '--steps', '512', '--quiet', '--out', str(tmp_path)]) == 0
    agent, meta = load_checkpoint(tmp_path)
    rep = Representation(**meta['representation'])
    assert rep.obs_age and agent.obs_dim == 4 * rep.frames + 2 * rep.actions + rep.extra_size + 1
    report = evaluate_sim(tmp_path, load_profile('full_net_aware'), episodes=2, seed=0)
    assert report['episodes'] == 2 and report['e2e_latency_ms']['samples'] > 0
    with pytest.raises(CheckpointError, match='cannot measure without a clock shared with the env'):
        PolicyRunner.from_checkpoint(tmp_path)


@pytest.mark.parametrize('flag, regime, expected', [([], 'full', True), (['--no-delay-state'], 'full', False),
                                                   (['--delay-state'], 'baseline', True), ([], 'baseline', False)])
@pytest.mark.slow
def test_the_delay_state_follows_the_regime_unless_asked(flag: list[str], regime: str, expected: bool,
                                                         tmp_path: Path) -> None:
    assert cli.main(['train', '--regime', regime, *flag, '--steps', '512', '--quiet', '--out', str(tmp_path)]) == 0
    agent, meta = load_checkpoint(tmp_path)
    rep = Representation(**meta['representation'])
    assert rep.delay_state is expected and agent.obs_dim == rep.feature_size(4, 2)
    PolicyRunner.from_checkpoint(tmp_path)  # a policy node loads it


@pytest.mark.slow
def test_calf_train_envs_sets_the_rollout_width(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(['train', '--envs', '32', '--steps', '1024', '--quiet', '--out', str(tmp_path)]) == 0
    assert load_checkpoint(tmp_path)[1]['train_config']['num_envs'] == 32
    capsys.readouterr()
    assert cli.main(['train', '--envs', '128', '--steps', '512', '--quiet', '--out', str(tmp_path / 'x')]) == 0
    trained = json.loads(capsys.readouterr().out.strip().splitlines()[-1])['steps']
    assert trained == 128 * load_checkpoint(tmp_path / 'x')[1]['train_config']['num_steps']  # one whole rollout


@pytest.mark.slow
def test_minigrid_dynamic_trains_an_lstm_and_evaluates_behind_a_network(tmp_path: Path) -> None:
    assert cli.main(['train', '--env', 'minigrid_dynamic', '--regime', 'baseline', '--steps', '1024', '--quiet',
                     '--out', str(tmp_path)]) == 0
    agent, meta = load_checkpoint(tmp_path)
    assert (meta['env'], agent.kind, agent.obs_dim, agent.n_actions) == ('minigrid_dynamic', 'lstm', 147, 3)
    assert meta['train_config']['ppo']['ent_coef'] == 0.1  # the task spec's ppo setting
    report = evaluate_sim(tmp_path, load_profile('wifi_degraded'), episodes=2, seed=0)
    assert report['episodes'] == 2 and report['e2e_latency_ms']['samples'] > 0


@pytest.mark.parametrize('argv, message', [
    (['train', '--planner', 'model'], 'calf train: error: --planner model needs --plan-horizon >= 2'),
    (['train', '--env', 'minigrid', '--planner', 'model', '--plan-horizon', '4'],
     'calf train: error: --planner model rolls a fully observed state forward, and minigrid trains a memory '
     '(LSTM) policy on partial observations: use --planner ppo'),
    (['train', '--planner', 'model', '--plan-horizon', '4', '--plan-lead', '4'],
     r'calf train: error: --plan-lead must be in [0, 4), got 4'),
])
def test_bad_planner_options_exit_2_with_one_line(argv: list[str], message: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*argv, '--out', str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(message), err
    assert not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_eval_backend_and_placement_replace_mode_and_graph(policy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ['eval', '--policy', str(policy), '--network', 'delay_only', '--episodes', '2', '--json']
    assert cli.main(common) == 0
    default = capsys.readouterr()
    assert cli.main([*common, '--backend', 'sim', '--placement', 'flat_desktop']) == 0
    named = capsys.readouterr()
    assert cli.main([*common, '--mode', 'sim', '--graph', 'flat_desktop']) == 0
    aliased = capsys.readouterr()
    assert default.out == named.out == aliased.out
    report = json.loads(named.out)
    assert (report['backend'], report['mode'], report['placement'], report['graph']) == (
        'sim', 'sim', 'flat_desktop', 'flat_desktop')
    assert default.err == named.err == ''
    assert aliased.err.splitlines() == [
        'calf eval: warning: --mode is deprecated: use --backend (the old name goes in the next release)',
        'calf eval: warning: --graph is deprecated: use --placement (the old name goes in the next release)']


def test_eval_new_names_win_over_the_deprecated_ones(policy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ['eval', '--policy', str(policy), '--episodes', '1', '--json', '--backend', 'sim', '--mode', 'ros',
            '--placement', 'flat_edge', '--graph', 'flat_desktop']
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report['backend'], report['placement']) == ('sim', 'flat_edge')
    assert err.count('is deprecated') == 2
