"""The graph builder: exact nodes, parameters and remappings per mode and role; command lines."""
from __future__ import annotations

import dataclasses
import os
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from calf_agent.checkpoint import save_checkpoint
from calf_agent.gaussian import GaussianAgent
from calf_bringup import cli, cmd_run
from calf_bringup.discovery import (
    FASTDDS_NS,
    parse_peers,
    render_static_peers,
    template_path,
    write_static_peers,
)
from calf_bringup.graph import (
    NodeSpec,
    build_graph,
    command_line,
    discovery_env,
    impair_graph,
    param_text,
)
from calf_bringup.run_options import OPTIONS, TABLE, RunOptions, launch_arguments
from calf_bringup.runner import Respawn
from calf_core.errors import ConfigError
from calf_ros.run_params import SHARED

ENV_REMAPS = [('observation', '/calf/edge/observation'), ('action', '/calf/edge/action'),
              ('episode_result', '/calf/edge/episode_result'), ('link_stats', '/calf/edge/link_stats')]
EDGE_POLICY = [('observation', '/calf/edge/observation'), ('action', '/calf/edge/action')]
DESKTOP_POLICY = [('observation', '/calf/desktop/observation'), ('action', '/calf/desktop/action')]


def env_node(seed: int = 0, time_scale: float = 1.0, episodes: int = 0) -> NodeSpec:
    return NodeSpec('calf_env', 'env_node', 'env', '/calf',
                    {'env': 'cartpole', 'seed': seed, 'time_scale': time_scale, 'episodes': episodes},
                    ENV_REMAPS, 'edge', {}, True)


def shim_node(network: str, seed: int = 0, time_scale: float = 1.0, one_machine: bool = True) -> NodeSpec:
    one = {'desktop_stamped': True} if one_machine else {}
    return NodeSpec('calf_shim', 'shim_node', 'shim', '/calf',
                    {'network': network, 'seed': seed, 'time_scale': time_scale, **one}, [], 'edge', {}, True)


def policy_node(remaps: list[tuple[str, str]]) -> NodeSpec:
    return NodeSpec('calf_agent', 'policy_node', 'policy', '/calf', {'policy': '/ckpt', 'deterministic': True},
                    remaps, 'desktop', {}, True)


@pytest.mark.parametrize('mode, role, network, expected', [
    ('local_sim', 'all', 'sim_clean', [env_node(), policy_node(EDGE_POLICY)]),
    ('local_sim', 'edge', 'sim_clean', [env_node()]),
    ('local_sim', 'desktop', 'sim_clean', [policy_node(EDGE_POLICY)]),
    ('sim_net', 'all', 'wifi_normal', [env_node(), shim_node('wifi_normal'), policy_node(DESKTOP_POLICY)]),
    ('sim_net', 'all', 'sim_clean', [env_node(), shim_node('sim_clean'), policy_node(DESKTOP_POLICY)]),
    ('sim_net', 'edge', 'wifi_normal', [env_node(), shim_node('wifi_normal', one_machine=False)]),
    ('sim_net', 'desktop', 'wifi_normal', [policy_node(DESKTOP_POLICY)]),
    ('edge_sim', 'all', 'sim_clean', [env_node(), policy_node(EDGE_POLICY)]),
    ('edge_sim', 'edge', 'sim_clean', [env_node()]),
    ('edge_sim', 'desktop', 'sim_clean', [policy_node(EDGE_POLICY)]),
    ('edge_sim', 'all', 'wifi_degraded', [env_node(), shim_node('wifi_degraded'), policy_node(DESKTOP_POLICY)]),
    ('edge_sim', 'edge', 'wifi_degraded', [env_node(), shim_node('wifi_degraded', one_machine=False)]),
    ('edge_sim', 'desktop', 'wifi_degraded', [policy_node(DESKTOP_POLICY)]),
])
def test_nodes_per_mode_and_role(mode: str, role: str, network: str, expected: list[NodeSpec]) -> None:
    assert build_graph(RunOptions.of(mode, role=role, network=network, policy='/ckpt')) == expected


def test_seed_time_scale_and_episodes_reach_env_and_shim() -> None:
    nodes = build_graph(RunOptions.of('sim_net', network='delay_only', policy='/ckpt', seed=7, time_scale=4.0,
                                           episodes=3))
    assert nodes == [env_node(7, 4.0, 3), shim_node('delay_only', 7, 4.0), policy_node(DESKTOP_POLICY)]
    assert isinstance(nodes[0].parameters['time_scale'], float)


def test_every_node_gets_the_discovery_environment() -> None:
    nodes = build_graph(RunOptions.of('sim_net', policy='/ckpt', discovery='subnet'))
    assert [node.additional_env for node in nodes] == [{'ROS_AUTOMATIC_DISCOVERY_RANGE': 'SUBNET'}] * 3


def test_discovery_xml_profile_is_an_absolute_path() -> None:
    env = discovery_env('peers.xml')
    assert env['FASTDDS_DEFAULT_PROFILES_FILE'].endswith('/peers.xml')
    assert env['FASTDDS_DEFAULT_PROFILES_FILE'].startswith('/')
    assert env['FASTRTPS_DEFAULT_PROFILES_FILE'] == env['FASTDDS_DEFAULT_PROFILES_FILE']
    assert env['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'SYSTEM_DEFAULT'  # else an inherited LOCALHOST overrides it
    assert discovery_env(None) == discovery_env('') == {}


def initial_peers(xml: str) -> list[str]:
    """The addresses of a Fast DDS profile's initialPeersList."""
    peers = ET.fromstring(xml).find(f'.//{{{FASTDDS_NS}}}initialPeersList')
    assert peers is not None
    return [address.text or '' for address in peers.iterfind(f'.//{{{FASTDDS_NS}}}address')]


def test_discovery_peers_writes_a_static_peers_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    monkeypatch.delenv('XDG_RUNTIME_DIR', raising=False)
    nodes = build_graph(RunOptions.of('edge_sim', network='wifi_normal', policy='/ckpt',
                                       discovery='peers:10.0.0.1, 10.0.0.2'))
    env = nodes[0].additional_env
    assert [node.additional_env for node in nodes] == [env] * 3
    assert env['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'SYSTEM_DEFAULT'
    profile = Path(env['FASTDDS_DEFAULT_PROFILES_FILE'])
    assert profile.parent == tmp_path / f'calf-{os.getuid()}' and env['FASTRTPS_DEFAULT_PROFILES_FILE'] == str(profile)
    assert initial_peers(profile.read_text()) == ['127.0.0.1', '10.0.0.1', '10.0.0.2']
    assert discovery_env('peers:10.0.0.1,10.0.0.2') == env  # same addresses, same file


def test_static_peers_profile_is_the_template_with_other_peers() -> None:
    template = template_path().read_text()
    rendered = render_static_peers(['192.168.1.20', '127.0.0.1'], template)
    assert initial_peers(rendered) == ['127.0.0.1', '192.168.1.20']
    trees = [ET.fromstring(rendered), ET.fromstring(template)]
    for tree in trees:
        tree.find(f'.//{{{FASTDDS_NS}}}initialPeersList').clear()
    assert ET.tostring(trees[0]) == ET.tostring(trees[1])


def test_shipped_profile_is_udp_only_static_peers_with_example_addresses() -> None:
    template = template_path().read_text()
    participant = ET.fromstring(template).find(f'.//{{{FASTDDS_NS}}}participant')
    assert participant is not None and participant.get('is_default_profile') == 'true'
    assert participant.findtext(f'.//{{{FASTDDS_NS}}}useBuiltinTransports') == 'false'
    assert participant.findtext(f'.//{{{FASTDDS_NS}}}userTransports/{{{FASTDDS_NS}}}transport_id') == 'calf_udpv4'
    assert participant.find(f'.//{{{FASTDDS_NS}}}metatrafficMulticastLocatorList') is None
    assert participant.find(f'.//{{{FASTDDS_NS}}}metatrafficUnicastLocatorList') is not None  # so no multicast
    assert initial_peers(template) == ['127.0.0.1', '192.168.1.10', '192.168.1.20']


def test_static_peers_file_is_named_after_its_content(tmp_path: Path) -> None:
    first = write_static_peers(('10.0.0.1',), tmp_path)
    assert write_static_peers(('10.0.0.1',), tmp_path) == first
    second = write_static_peers(('10.0.0.2',), tmp_path)
    assert second != first and sorted(tmp_path.iterdir()) == sorted([first, second])


@pytest.mark.parametrize('text, peers', [('10.0.0.1', ('10.0.0.1',)),
                                         (' 10.0.0.2 ,10.0.0.1,10.0.0.2,', ('10.0.0.2', '10.0.0.1'))])
def test_parse_peers_keeps_order_without_repeats(text: str, peers: tuple[str, ...]) -> None:
    assert parse_peers(text) == peers


@pytest.mark.parametrize('text, message', [
    ('', "no peer addresses in ''"),
    (' , ', "no peer addresses in ' , '"),
    ('10.0.0.1,pi.local', "peer 'pi.local' is not an IPv4 address"),
    ('10.0.0.256', "peer '10.0.0.256' is not an IPv4 address"),
])
def test_bad_peers_raise_config_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        discovery_env(f'peers:{text}')
    assert message in str(err.value)


@pytest.mark.parametrize('kwargs, message', [
    ({'mode': 'mode4'}, "unknown mode 'mode4': choose one of local_sim, sim_net, edge_sim, impair"),
    ({'mode': 'sim_net', 'role': 'robot'}, "unknown role 'robot' (--role): choose one of all, edge, desktop"),
    ({'mode': 'sim_net', 'policy': None}, 'the policy node needs a checkpoint: pass --policy DIR'),
    ({'mode': 'local_sim', 'network': 'wifi_normal'}, 'local_sim has no network (got --network wifi_normal)'),
    ({'mode': 'sim_net', 'time_scale': 0}, 'bad --time-scale 0: must be > 0'),
    ({'mode': 'sim_net', 'time_scale': 'fast'}, 'bad --time-scale fast: not a number'),
    ({'mode': 'sim_net', 'episodes': -1}, 'bad --episodes -1: must be >= 0'),
    ({'mode': 'sim_net', 'domain_id': '300'}, 'bad --domain-id 300: must be a ROS domain id, 0 to 232'),
    ({'mode': 'sim_net', 'wait_for_policy': 'maybe'}, 'bad --wait-for-policy maybe: must be true or false'),
    ({'mode': 'sim_net', 'discovery': 'lan'},
     "unknown discovery 'lan': choose peers:IP,IP,..., a Fast DDS *.xml profile or one of"),
])
def test_invalid_arguments_raise_config_error(kwargs: dict, message: str) -> None:
    kwargs = {'policy': '/ckpt', **kwargs}
    with pytest.raises(ConfigError) as err:
        build_graph(RunOptions.of(kwargs.pop('mode'), **kwargs))
    assert message in str(err.value)


def test_errors_name_the_option_as_the_interface_in_use_spells_it() -> None:
    with pytest.raises(ConfigError, match='impair needs a relay config: pass --config FILE.yaml'):
        RunOptions.of('impair')
    with pytest.raises(ConfigError, match='impair needs a relay config: pass config:=FILE.yaml'):
        RunOptions.from_text('impair', {'config': ''})
    with pytest.raises(ConfigError, match='bad time_scale:=0: must be > 0'):
        RunOptions.from_text('sim_net', {'time_scale': '0'})
    with pytest.raises(ConfigError, match='the policy node needs a checkpoint: pass policy:=DIR'):
        build_graph(RunOptions.from_text('sim_net', {}))


def test_graph_is_a_deprecated_alias_of_placement(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    old = RunOptions.from_text('sim_net', {'graph': 'flat_edge', 'policy': '/ckpt'})
    assert old == RunOptions.of('sim_net', placement='flat_edge', policy='/ckpt', interface='launch')
    assert old.warnings == ('graph:= is deprecated: use placement:= (the old name goes in the next release)',)
    both = RunOptions.of('sim_net', placement='hierarchical', graph='flat_edge', policy='/ckpt')
    assert both.placement == 'hierarchical' and both.warnings  # the new name wins
    monkeypatch.setattr(cmd_run, 'run_graph',
                        lambda specs, domain_id, respawn=None, after_start=None: 0)
    assert cli.main(['run', 'sim_net', '--policy', '/ckpt', '--graph', 'flat_edge']) == 0
    assert 'calf run: warning: --graph is deprecated: use --placement' in capsys.readouterr().err


def test_one_table_feeds_calf_run_the_launch_files_and_the_options() -> None:
    held = {f.name for f in dataclasses.fields(RunOptions)} - {'mode', 'interface', 'warnings'}
    assert held == {o.name for o in OPTIONS if not o.replaced_by}
    assert [name for name, _, _ in launch_arguments('shim')] == ['seed', 'time_scale', 'respawn', 'respawn_delay',
                                                                 'respawn_retries', 'config', 'trace_bag',
                                                                 'domain_id', 'discovery']
    defaults = RunOptions.from_text('sim_net', {name: default for name, default, _ in launch_arguments('nodes')})
    assert defaults == RunOptions.of('sim_net', interface='launch')
    assert (defaults.time_scale, defaults.episodes, defaults.wait_for_policy, defaults.policy) == (1.0, 0, True, None)
    args = cli.build_parser().parse_args(['run', 'sim_net', *(f'--{o.name.replace("_", "-")}={o.default}'
                                                                for o in OPTIONS if o.runs != ('shim',))])
    assert RunOptions.from_args(args) == RunOptions.of('sim_net')


def test_edge_role_needs_no_policy() -> None:
    assert [node.name for node in build_graph(RunOptions.of('edge_sim', role='edge', network='wifi_normal'))] == ['env', 'shim']


def test_command_line_of_each_node() -> None:
    env, shim, policy = build_graph(RunOptions.of('sim_net', network='wifi_normal', policy='/ckpt/run 1',
                                                    time_scale=2.0))
    assert command_line(env, '/ws/install') == [
        '/ws/install/calf_env/lib/calf_env/env_node', '--ros-args', '-r', '__node:=env', '-r', '__ns:=/calf',
        '-p', 'env:=cartpole', '-p', 'seed:=0', '-p', 'time_scale:=2.0', '-p', 'episodes:=0',
        '-r', 'observation:=/calf/edge/observation', '-r', 'action:=/calf/edge/action',
        '-r', 'episode_result:=/calf/edge/episode_result', '-r', 'link_stats:=/calf/edge/link_stats']
    assert command_line(shim, '/ws/install') == [
        '/ws/install/calf_shim/lib/calf_shim/shim_node', '--ros-args', '-r', '__node:=shim', '-r', '__ns:=/calf',
        '-p', 'network:=wifi_normal', '-p', 'seed:=0', '-p', 'time_scale:=2.0', '-p', 'desktop_stamped:=true']
    assert command_line(policy, '/ws/install') == [
        '/ws/install/calf_agent/lib/calf_agent/policy_node', '--ros-args', '-r', '__node:=policy',
        '-r', '__ns:=/calf', '-p', 'policy:=/ckpt/run 1', '-p', 'deterministic:=true',
        '-r', 'observation:=/calf/desktop/observation', '-r', 'action:=/calf/desktop/action']


@pytest.mark.parametrize('value', ['sim_clean', '/tmp/ckpt', '', '123', '1.5', 'true', 'null', 'a: b', 7, 2.5,
                                   True, False, [0, 1]])
def test_param_text_parses_back_to_the_same_value(value: object) -> None:
    parsed = yaml.safe_load(param_text(value))
    assert parsed == value and type(parsed) is type(value)


def test_env_node_gets_the_start_plan_of_the_policy_checkpoint_or_the_argument(tmp_path: Path) -> None:
    (tmp_path / 'meta.json').write_text('{"start_plan": [0, 1]}')
    env = build_graph(RunOptions.of('sim_net', network='wifi_degraded', policy=tmp_path))[0]
    assert env.parameters['start_plan'] == [0, 1]
    assert 'start_plan:=[0, 1]' in command_line(env, '/ws')
    assert build_graph(RunOptions.of('edge_sim', role='edge', network='wifi_degraded',
                                       start_plan=(1, 0)))[0].parameters['start_plan'] == [1, 0]
    assert 'start_plan' not in build_graph(RunOptions.of('sim_net', policy='/ckpt'))[0].parameters  # no meta.json: none


def test_calf_run_starts_the_graph_of_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    started = []
    monkeypatch.setattr(cmd_run, 'run_graph',
                        lambda specs, domain_id, respawn=None, after_start=None: started.append((specs, domain_id)) or 0)
    argv = ['run', 'edge_sim', '--role', 'edge', '--network', 'wifi_degraded', '--domain-id', '9', '--seed', '7',
            '--time-scale', '4', '--episodes', '3']
    assert cli.main(argv) == 0
    assert started == [([env_node(7, 4.0, 3), shim_node('wifi_degraded', 7, 4.0, one_machine=False)], 9)]


def test_calf_run_respawn_flags_become_the_runners_respawn(monkeypatch: pytest.MonkeyPatch) -> None:
    started = []
    monkeypatch.setattr(cmd_run, 'run_graph',
                        lambda specs, domain_id, respawn=None, after_start=None: started.append(respawn) or 0)
    assert cli.main(['run', 'edge_sim', '--role', 'edge']) == 0
    assert cli.main(['run', 'edge_sim', '--role', 'edge', '--respawn', 'true', '--respawn-delay', '2.5',
                     '--respawn-retries', '3']) == 0
    assert started == [None, Respawn(retries=3, delay_s=2.5)]


@pytest.mark.parametrize('argv, message', [
    (['--respawn', 'yes'], 'bad --respawn yes: must be true or false'),
    (['--respawn-delay', '0'], 'bad --respawn-delay 0: must be > 0 and at most 3600 (seconds)'),
    (['--respawn-retries', '0'], 'bad --respawn-retries 0: must be 1 to 1000'),
])
def test_bad_respawn_flags_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(['run', 'edge_sim', '--role', 'edge', *argv]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and message in err


def test_calf_run_passes_a_start_plan_to_the_env_node(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    started = []
    monkeypatch.setattr(cmd_run, 'run_graph',
                        lambda specs, domain_id, respawn=None, after_start=None: started.append(specs) or 0)
    assert cli.main(['run', 'edge_sim', '--role', 'edge', '--start-plan', '[0,1]']) == 0
    assert started[0][0].parameters['start_plan'] == [0, 1]
    assert cli.main(['run', 'edge_sim', '--role', 'edge', '--start-plan', '[0,']) == 2
    assert capsys.readouterr().err == ("calf run: error: bad --start-plan [0,: start_plan must be a list of integer "
                                       "actions such as [0, 1], got '[0,'\n")


def test_calf_run_without_a_policy_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(['run', 'local_sim']) == 2
    assert capsys.readouterr().err.startswith('calf run: error: the policy node needs a checkpoint')


IMPAIR_CONFIG = Path(__file__).resolve().parents[1] / 'config' / 'impair_cmd_vel.yaml'


def test_impair_is_the_generic_shim_alone_with_an_absolute_config() -> None:
    [shim] = impair_graph(RunOptions.of('impair', config=IMPAIR_CONFIG, seed=7, time_scale=2.0, discovery='subnet'))
    assert shim == NodeSpec('calf_shim', 'generic_shim_node', 'generic_shim', '/calf',
                            {'config': str(IMPAIR_CONFIG), 'seed': 7, 'time_scale': 2.0}, [], 'edge',
                            {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'SUBNET'})
    assert command_line(shim, '/ws/install') == [
        '/ws/install/calf_shim/lib/calf_shim/generic_shim_node', '--ros-args', '-r', '__node:=generic_shim',
        '-r', '__ns:=/calf', '-p', 'seed:=7', '-p', 'time_scale:=2.0', '-p', f'config:={IMPAIR_CONFIG}']  # table order


@pytest.mark.parametrize('config, message', [
    ('', 'impair needs a relay config: pass --config FILE.yaml'),
    ('/no/such/relay.yaml', "cannot read relay config '/no/such/relay.yaml'"),
])
def test_impair_without_a_valid_config_is_a_config_error(config: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RunOptions.of('impair', config=config)


def test_calf_run_impair_starts_the_generic_shim(monkeypatch: pytest.MonkeyPatch) -> None:
    started = []
    monkeypatch.setattr(cmd_run, 'run_graph',
                        lambda specs, domain_id, respawn=None, after_start=None: started.append((specs, domain_id)) or 0)
    assert cli.main(['run', 'impair', '--config', str(IMPAIR_CONFIG), '--seed', '3', '--domain-id', '9']) == 0
    assert started == [(impair_graph(RunOptions.of('impair', config=IMPAIR_CONFIG, seed=3)), 9)]


def test_calf_run_impair_passes_a_new_trace_bag_to_the_shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    started = []
    monkeypatch.setattr(cmd_run, 'run_graph',
                        lambda specs, domain_id, respawn=None, after_start=None: started.append(specs) or 0)
    argv = ['run', 'impair', '--config', str(IMPAIR_CONFIG), '--trace-bag', str(tmp_path / 'trace')]
    assert cli.main(argv) == 0
    assert started[0][0].parameters['trace_bag'] == str(tmp_path / 'trace')
    (tmp_path / 'trace').mkdir()
    assert cli.main(argv) == 2
    assert 'already exists: pass a new directory' in capsys.readouterr().err


def test_calf_run_impair_with_a_bad_config_is_a_one_line_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / 'relay.yaml'
    bad.write_text('- {in_topic: /a, out_topic: /b, type: geometry_msgs/msg/Twst, direction: uplink, '
                   'profile: sim_clean}\n')
    assert cli.main(['run', 'impair', '--config', str(bad)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"calf run: error: {bad} entry 0 (/a): unknown message type 'geometry_msgs/msg/Twst': package "
        f"'geometry_msgs' has no message 'Twst'"]


def test_the_start_gate_options_reach_the_env_node() -> None:
    env = build_graph(RunOptions.of('sim_net', policy='/ckpt', wait_for_policy='false', policy_timeout='30'))[0]
    assert (env.parameters['wait_for_policy'], env.parameters['policy_timeout_s']) == (False, 30.0)
    assert 'wait_for_policy:=false' in command_line(env, '/ws')
    default = build_graph(RunOptions.of('sim_net', policy='/ckpt'))[0].parameters
    assert 'wait_for_policy' not in default and 'policy_timeout_s' not in default  # the env node's defaults


@pytest.mark.slow
def test_calf_run_refuses_a_continuous_policy_for_a_discrete_env(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = save_checkpoint(tmp_path / 'ckpt', GaussianAgent(4, 1, [-3.0], [3.0]), {'env': 'InvertedPendulum-v5'})
    assert cli.main(['run', 'local_sim', '--env', 'cartpole', '--policy', str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert err.startswith('calf run: error: a continuous policy (1 values) cannot act in cartpole, whose actions '
                          'are Discrete(2)') and err.count('\n') == 1


def test_every_forwarded_option_is_a_parameter_its_node_declares() -> None:
    """OPTIONS' ``to`` names each node by its name in the graph and a parameter of that node's table; the
    parameters shared by several nodes (seed, time_scale) are one row, calf_ros.run_params.SHARED."""
    from calf_agent.nodes import arbiter_node
    from calf_env import env_config
    from calf_shim import generic_shim_node, shim_node

    tables = {'env': {'env', *env_config.PARAMETERS},  # env is declared first: dt's default follows it
              'shim': set(shim_node.PARAMETERS), 'generic_shim': set(generic_shim_node.PARAMETERS),
              'arbiter': set(arbiter_node.PARAMETERS)}
    targets = [target.partition('.') for option in OPTIONS for target in option.to]
    assert {node for node, _, _ in targets} == set(tables)
    assert [f'{node}.{param}' for node, _, param in targets if param not in tables[node]] == []
    node_tables = (env_config.PARAMETERS, shim_node.PARAMETERS, generic_shim_node.PARAMETERS, arbiter_node.PARAMETERS)
    for name, row in SHARED.items():  # declared once: every node's row, the run option's default and help
        assert all(table[name] is row for table in node_tables if name in table)
        assert (TABLE[name].parse(TABLE[name].default), TABLE[name].help) == row
    options = RunOptions.of('sim_net', network='delay_only', policy='/ckpt', seed=7, time_scale=4.0)
    assert [spec.parameters for spec in build_graph(options)[:2]] == [
        {'env': 'cartpole', 'seed': 7, 'time_scale': 4.0, 'episodes': 0},
        {'network': 'delay_only', 'seed': 7, 'time_scale': 4.0, 'desktop_stamped': True}]  # one machine
