"""The hierarchical policy graph: its nodes and wiring, and the live graph over DDS.

The sub-policies are freshly initialised agents (these tests are about the plumbing, not about
learning), with a gate loose enough that both of them drive in most episodes. Live runs use
time scale 1 (a CartPole tick every 20 ms: at 5 ms, a busy CI host missed 4 % of the deadlines and the
episodes of about 9 ticks ended before their actions came) and the delay_only profile through the shim.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from ros_helpers import Lines, PrivateNode

from calf_agent.checkpoint import save_checkpoint
from calf_agent.hierarchy import Hierarchy, SubPolicy, load_hierarchy, save_hierarchy
from calf_agent.policies import MlpAgent
from calf_bringup import cli
from calf_bringup.graph import NodeSpec, build_graph
from calf_bringup.run_options import RunOptions
from calf_bringup.runner import Graph
from calf_core.errors import ConfigError
from calf_msgs.msg import Action, EpisodeResult
from calf_ros.qos import RESULTS, STREAM

SCALE = 1.0
GATING = {'angle_rad': 0.1, 'angular_velocity_rad_s': 1.0}
TIMEOUT_S = 0.4  # profile time; TIMEOUT_S / SCALE of real time
ENV_REMAPS = [('observation', '/calf/edge/observation'), ('action', '/calf/edge/action'),
              ('episode_result', '/calf/edge/episode_result'), ('link_stats', '/calf/edge/link_stats')]


@pytest.fixture(scope='module')
def hierarchy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp('hierarchy')
    torch.manual_seed(0)
    for name in ('stabilise', 'recenter'):
        save_checkpoint(root / name, MlpAgent(4, 2), {'env': 'cartpole', 'representation': {'frames': 1, 'actions': 0}})
    subs = (SubPolicy('stabilise', 'edge', 'sim_clean', 'stabilise'),
            SubPolicy('recenter', 'desktop', 'delay_only', 'recenter'))
    save_hierarchy(Hierarchy('cartpole', 'delay_only', 0, subs, GATING, TIMEOUT_S, root))
    return root


def sub_policy(root: Path, name: str, topics: list[tuple[str, str]], role: str) -> NodeSpec:
    return NodeSpec('calf_agent', 'policy_node', name, '/calf',
                    {'policy': str(root / name), 'deterministic': True, 'source': name}, topics, role, {},
                    True)


def test_hierarchical_nodes_and_topics(hierarchy: Path) -> None:
    root = hierarchy.resolve()
    assert build_graph(RunOptions.of('sim_net', network='wifi_normal', policy=hierarchy, time_scale=2.0,
                                       placement='hierarchical')) == [
        NodeSpec('calf_env', 'env_node', 'env', '/calf',
                 {'env': 'cartpole', 'seed': 0, 'time_scale': 2.0, 'episodes': 0}, ENV_REMAPS, 'edge', {}, True),
        NodeSpec('calf_shim', 'shim_node', 'shim', '/calf', {'network': 'wifi_normal', 'seed': 0, 'time_scale': 2.0,
                                                             'desktop_stamped': True},
                 [('edge/action', '/calf/edge/candidates')], 'edge', {}, True),
        NodeSpec('calf_agent', 'arbiter_node', 'arbiter', '/calf', {'hierarchy': str(root), 'time_scale': 2.0},
                 [('observation', '/calf/edge/observation'), ('candidates', '/calf/edge/candidates'),
                  ('action', '/calf/edge/action')], 'edge', {}),
        sub_policy(root, 'stabilise', [('observation', '/calf/edge/observation'),
                                       ('action', '/calf/edge/candidates')], 'edge'),
        sub_policy(root, 'recenter', [('observation', '/calf/desktop/observation'),
                                      ('action', '/calf/desktop/action')], 'desktop'),
    ]


def test_roles_split_the_hierarchy_between_edge_and_desktop(hierarchy: Path) -> None:
    def names(mode: str, role: str, network: str = 'wifi_normal') -> list[str]:
        return [n.name for n in build_graph(RunOptions.of(mode, role=role, network=network, policy=hierarchy,
                                                                  placement='hierarchical'))]

    assert names('edge_sim', 'edge') == ['env', 'shim', 'arbiter', 'stabilise']
    assert names('edge_sim', 'desktop') == ['recenter']
    local = build_graph(RunOptions.of('local_sim', policy=hierarchy, placement='hierarchical'))
    assert [n.name for n in local] == ['env', 'arbiter', 'stabilise', 'recenter']
    assert local[-1].remappings == [('observation', '/calf/edge/observation'), ('action', '/calf/edge/candidates')]


def test_flat_edge_runs_the_policy_beside_the_env_without_a_shim() -> None:
    nodes = build_graph(RunOptions.of('sim_net', network='wifi_normal', policy='/ckpt', placement='flat_edge'))
    assert [(n.name, n.role) for n in nodes] == [('env', 'edge'), ('policy', 'edge')]
    assert nodes[1].remappings == [('observation', '/calf/edge/observation'), ('action', '/calf/edge/action')]
    assert [n.name for n in build_graph(RunOptions.of('edge_sim', role='edge', network='wifi_normal', policy='/ckpt',
                                                         placement='flat_edge'))] == \
        ['env', 'policy']
    assert build_graph(RunOptions.of('edge_sim', role='desktop', network='wifi_normal', policy='/ckpt',
                                  placement='flat_edge')) == []


@pytest.mark.parametrize('kwargs, message', [
    ({'placement': 'tree'}, r"unknown placement 'tree' \(--placement\): choose one of flat_desktop, flat_edge, hier"),
    ({'placement': 'hierarchical', 'policy': None}, 'the hierarchical placement needs a hierarchy: pass --policy'),
    ({'placement': 'hierarchical', 'policy': '/nowhere'}, 'no hierarchy.json at /nowhere'),
    ({'placement': 'hierarchical', 'env': 'minigrid'}, 'is for cartpole, not minigrid: pass --env cartpole'),
])
def test_invalid_hierarchical_graphs_are_config_errors(hierarchy: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_graph(RunOptions.of('sim_net', **{'policy': hierarchy, **kwargs}))


def test_hierarchy_json_round_trips(hierarchy: Path) -> None:
    loaded = load_hierarchy(hierarchy / 'hierarchy.json')
    assert loaded.sources == ('stabilise', 'recenter') and loaded.gating == GATING
    assert loaded.checkpoint(loaded.subpolicies[1]) == hierarchy.resolve() / 'recenter'
    assert json.loads((hierarchy / 'hierarchy.json').read_text())['format'] == 1


class Probe(PrivateNode):
    """Episode results and the sources of the actions the arbiter sends to the env, on a private context."""

    def __init__(self) -> None:
        super().__init__('hierarchy_probe')
        self.results: dict[int, EpisodeResult] = {}
        self.sources: dict[int, set[str]] = defaultdict(set)
        self.node.create_subscription(EpisodeResult, '/calf/edge/episode_result',
                                      lambda msg: self.results.__setitem__(msg.episode, msg), RESULTS)
        self.node.create_subscription(Action, '/calf/edge/action',
                                      lambda msg: self.sources[msg.episode].add(msg.source), STREAM.profile())

    def played(self, sources: set[str], after: int = -1) -> EpisodeResult | None:
        """A finished episode later than ``after`` whose actions came from exactly ``sources``."""
        return next((r for e, r in sorted(self.results.items())
                     if e > after and r.actions_applied > 0 and self.sources[e] == sources), None)


@pytest.mark.slow
@pytest.mark.ros
def test_live_hierarchy_plays_episodes_and_falls_back_when_the_remote_sub_policy_dies(hierarchy: Path) -> None:
    specs = build_graph(RunOptions.of('sim_net', network='delay_only', policy=hierarchy, time_scale=SCALE,
                                       placement='hierarchical'))
    edge = [spec for spec in specs if spec.name != 'recenter']
    desktop = [spec for spec in specs if spec.name == 'recenter']
    probe, out = Probe(), Lines()
    try:
        with Graph(edge, output=out):
            recenter = Graph(desktop, output=out)
            try:
                recenter.start()
                both = probe.until(lambda: probe.played({'stabilise', 'recenter'}) is not None, 60.0)
            finally:
                recenter.stop()
            assert both, f'no episode driven by both sub-policies; output: {out.lines[-10:]}'
            silent = f'recenter silent for more than {TIMEOUT_S / SCALE * 1e3:g} ms'
            assert probe.until(lambda: out.has(silent), 10.0), out.lines[-10:]
            killed = max(probe.sources)
            assert probe.until(lambda: probe.played({'stabilise'}, after=killed) is not None, 20.0)
        result = probe.played({'stabilise'}, after=killed)
        assert len(result.e2e_samples_ms) == result.actions_applied > 0
    finally:
        probe.close()


@pytest.mark.slow
@pytest.mark.ros
def test_calf_eval_ros_hierarchical_reports_the_share_of_each_sub_policy(
        hierarchy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ['eval', '--policy', str(hierarchy), '--placement', 'hierarchical', '--backend', 'ros',
            '--network', 'delay_only', '--episodes', '3', '--time-scale', str(SCALE), '--json']
    assert cli.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report['backend'], report['placement'], report['episodes']) == ('ros', 'hierarchical', 3)
    assert set(report['forwarded_share']) <= {'stabilise', 'recenter'}
    assert sum(report['forwarded_share'].values()) == pytest.approx(1.0, abs=1e-3)
    assert report['e2e_latency_ms']['samples'] > 0


@pytest.mark.slow
@pytest.mark.ros
def test_calf_eval_ros_flat_edge_runs_without_a_shim(hierarchy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ['eval', '--policy', str(hierarchy / 'stabilise'), '--placement', 'flat_edge', '--backend', 'ros',
            '--network', 'wifi_normal', '--episodes', '2', '--time-scale', str(SCALE), '--json']
    assert cli.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report['placement'], report['network'], report['obs_lost'], report['actions_lost']) == \
        ('flat_edge', 'wifi_normal', 0, 0)
    assert 'forwarded_share' not in report
    assert report['e2e_latency_ms']['p50'] < 34.5  # wifi_normal's median is never paid: no network on the path
