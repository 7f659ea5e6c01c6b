"""The CALF node graph, described once: which nodes run in each deployment mode, and how they are wired.

Pure: no rclpy and no launch. Its input is one ``RunOptions`` (``calf_bringup.run_options``). The
launch files turn each ``NodeSpec`` into a ``launch_ros.actions.Node``; ``calf run``
(``calf_bringup.runner``) starts it as a process with the command line from ``command_line``.

All nodes live in ``/calf``. The env node's topics are remapped onto ``/calf/edge/*``. The shim
(relative topics ``edge/*``, ``desktop/*`` and ``shim/link_stats``) sits between ``/calf/edge/*``
and ``/calf/desktop/*``. The policy reads whichever side the env's observations reach it on.

``placement`` places the policy (paper, Table 7): ``flat_desktop`` on the desktop, across the network;
``flat_edge`` on the edge beside the env, with no shim since nothing crosses the network;
``hierarchical`` runs a ``calf train-hierarchy`` directory. Its arbiter runs on the edge beside
the env, with the edge sub-policies: each sub-policy publishes on ``/calf/edge/candidates``, the
desktop ones through the shim (its ``edge/action`` output is remapped there), and the arbiter
forwards the chosen actions to ``/calf/edge/action``. An arbiter on the desktop would put every
action of the edge sub-policies across the network twice (observation up, action down), making
the fast loop slower than Flat (Desktop); beside the env, only the desktop sub-policies' traffic
crosses the network, as in Flat (Desktop), and the edge loop stays local, as in Flat (Edge).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from calf_agent.hierarchy import load_hierarchy
from calf_bringup.discovery import PEERS_PREFIX, parse_peers, write_static_peers
from calf_bringup.run_options import CLEAN_NETWORK, IMPAIR, RunOptions, node_parameters
from calf_core.errors import ConfigError
from calf_core.yaml_files import read_json

NAMESPACE = '/calf'
DISCOVERY_RANGES = ('localhost', 'subnet', 'off', 'system_default')
EDGE = {'observation': f'{NAMESPACE}/edge/observation', 'action': f'{NAMESPACE}/edge/action'}
DESKTOP = {'observation': f'{NAMESPACE}/desktop/observation', 'action': f'{NAMESPACE}/desktop/action'}
CANDIDATES = f'{NAMESPACE}/edge/candidates'  # hierarchical: every sub-policy's actions, to the arbiter
SHIM_STATS = f'{NAMESPACE}/shim/link_stats'  # the shim's LinkStats (its relative shim/link_stats)
POLICY_ROLE = {'flat_desktop': 'desktop', 'flat_edge': 'edge'}  # hierarchical: sub-policies on both


class NodeSpec(NamedTuple):
    """One node of the graph: what to start, under which name, with which parameters and remaps."""

    package: str
    executable: str
    name: str
    namespace: str
    parameters: dict[str, Any]
    remappings: list[tuple[str, str]]
    role: str  # 'edge' or 'desktop': the machine it runs on in edge_sim
    additional_env: dict[str, str]  # extra environment variables of its process (DDS discovery)
    realtime: bool = False  # a node of the live loop: calf run starts its process ahead of normal ones


def build_graph(options: RunOptions) -> list[NodeSpec]:
    """The nodes of ``options.mode`` that run in ``options.role`` ('all' = every node, on one machine).

    - ``local_sim``: env and policy on the edge topics, no shim (``network`` must be sim_clean).
    - ``sim_net``: env, shim (``network``) and policy on the desktop topics.
    - ``edge_sim``: the edge runs env, plus the shim when ``network`` is not ``sim_clean``; the
      desktop runs the policy. Start each role on its own machine with the same arguments.
    - ``impair``: the generic shim alone (``impair_graph``).

    ``discovery`` is a ROS_AUTOMATIC_DISCOVERY_RANGE value, a Fast DDS XML profile (``*.xml``) or
    ``peers:IP,IP,...`` (see ``discovery_env``). ``placement`` places the policy (see the module doc).
    ``start_plan`` (None: the flat policy checkpoint's, if it names one) is what the env runs until the
    first plan arrives.
    """
    if options.mode == IMPAIR:
        return impair_graph(options)
    placement = options.placement
    with_shim = placement != 'flat_edge' and (options.mode == 'sim_net' or
                                              (options.mode == 'edge_sim' and options.network != CLEAN_NETWORK))
    extra_env = discovery_env(options.discovery)
    start_plan = options.start_plan
    if start_plan is None:
        start_plan = checkpoint_start_plan(options.policy) if options.policy and placement != 'hierarchical' else ()
    nodes = [_env_node(options, extra_env, start_plan)]
    if with_shim:
        to_arbiter = [('edge/action', CANDIDATES)] if placement == 'hierarchical' else []
        nodes.append(_shim_node(options, extra_env, to_arbiter))
    if options.role == 'all' or POLICY_ROLE.get(placement, options.role) == options.role:
        nodes += _policy_nodes(options, with_shim, extra_env)
    return [node for node in nodes if options.role in ('all', node.role)]


def impair_graph(options: RunOptions) -> list[NodeSpec]:
    """The generic shim alone, relaying the topics listed in ``options.config`` (validated by RunOptions).

    ``trace_bag`` names a new bag that records every relayed message's delay or loss.
    """
    assert options.config is not None  # RunOptions.validate
    return [NodeSpec('calf_shim', 'generic_shim_node', 'generic_shim', NAMESPACE,
                     node_parameters(options, 'generic_shim'), [], 'edge', discovery_env(options.discovery))]


def discovery_env(discovery: str | None) -> dict[str, str]:
    """Environment variables that select DDS discovery: a range, or a Fast DDS XML profile file.

    ``peers:IP,IP,...`` writes the static-peers profile for those addresses (``calf_bringup.discovery``).
    A profile comes with the range SYSTEM_DEFAULT, under which ROS 2 leaves discovery to the profile:
    an inherited LOCALHOST would override its discovery locators.
    """
    if not discovery:
        return {}
    if discovery.startswith(PEERS_PREFIX):
        discovery = str(write_static_peers(parse_peers(discovery[len(PEERS_PREFIX):])))
    if discovery.endswith('.xml'):
        path = str(Path(discovery).expanduser().resolve())
        return {'FASTDDS_DEFAULT_PROFILES_FILE': path, 'FASTRTPS_DEFAULT_PROFILES_FILE': path,
                'ROS_AUTOMATIC_DISCOVERY_RANGE': 'SYSTEM_DEFAULT'}
    _check_choice('discovery', discovery.lower(), DISCOVERY_RANGES,
                  what=f'{PEERS_PREFIX}IP,IP,..., a Fast DDS *.xml profile or')
    return {'ROS_AUTOMATIC_DISCOVERY_RANGE': discovery.upper()}


def command_line(spec: NodeSpec, install_root: Path | str) -> list[str]:
    """The argv that starts ``spec`` from a colcon install tree (``<install_root>/<pkg>/lib/<pkg>/<exe>``)."""
    exe = Path(install_root) / spec.package / 'lib' / spec.package / spec.executable
    argv = [str(exe), '--ros-args', '-r', f'__node:={spec.name}', '-r', f'__ns:={spec.namespace}']
    for key, value in spec.parameters.items():
        argv += ['-p', f'{key}:={param_text(value)}']
    for source, target in spec.remappings:
        argv += ['-r', f'{source}:={target}']
    return argv


def param_text(value: Any) -> str:
    """``value`` as ``-p name:=TEXT`` expects it: YAML that parses back to the same value and type."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    text = str(value)
    return text if yaml.safe_load(text) == text else json.dumps(text)


def checkpoint_start_plan(policy: str | Path) -> tuple[int, ...]:
    """The ``start_plan`` a checkpoint's meta.json names, or () (also when there is no readable meta)."""
    try:
        meta = read_json(Path(policy) / 'meta.json', 'checkpoint meta')
    except ConfigError:
        return ()
    plan = meta.get('start_plan', []) if isinstance(meta, dict) else []
    return tuple(int(a) for a in plan)


def _env_node(options: RunOptions, extra_env: dict[str, str], start_plan: tuple[int, ...]) -> NodeSpec:
    topics = ('observation', 'action', 'episode_result', 'link_stats')
    params = node_parameters(options, 'env')
    if start_plan:  # the option's, else the checkpoint's (build_graph)
        params['start_plan'] = list(start_plan)
    return NodeSpec('calf_env', 'env_node', 'env', NAMESPACE, params,
                    [(topic, f'{NAMESPACE}/edge/{topic}') for topic in topics], 'edge', dict(extra_env), True)


def _shim_node(options: RunOptions, extra_env: dict[str, str], remappings: list[tuple[str, str]]) -> NodeSpec:
    """The shim, beside the env; with every node on one machine, the policy's stamps share its clock too."""
    params = node_parameters(options, 'shim')
    if options.role == 'all':
        params['desktop_stamped'] = True
    return NodeSpec('calf_shim', 'shim_node', 'shim', NAMESPACE, params, remappings, 'edge', dict(extra_env), True)


def _policy_nodes(options: RunOptions, with_shim: bool, extra_env: dict[str, str]) -> list[NodeSpec]:
    if options.placement == 'hierarchical':
        return _hierarchy_nodes(options, with_shim, extra_env)
    if options.placement == 'flat_edge':
        return [_policy_node(options, EDGE, extra_env, 'edge')]
    return [_policy_node(options, DESKTOP if with_shim else EDGE, extra_env)]


def _policy_node(options: RunOptions, topics: dict[str, str], extra_env: dict[str, str],
                 role: str = 'desktop') -> NodeSpec:
    if not options.policy:
        raise ConfigError(f'the policy node needs a checkpoint: pass {options.spell("policy", "DIR")}, a directory '
                          f'from calf train')
    return NodeSpec('calf_agent', 'policy_node', 'policy', NAMESPACE,
                    {'policy': str(options.policy), 'deterministic': True}, list(topics.items()), role,
                    dict(extra_env), True)


def _hierarchy_nodes(options: RunOptions, with_shim: bool, extra_env: dict[str, str]) -> list[NodeSpec]:
    """The arbiter beside the env, then one policy node per sub-policy on its side (see the module doc)."""
    if not options.policy:
        raise ConfigError(f'the hierarchical placement needs a hierarchy: pass {options.spell("policy", "DIR")}, a '
                          f'directory from calf train-hierarchy')
    hierarchy = load_hierarchy(options.policy)
    if hierarchy.env != options.env:
        raise ConfigError(f'the hierarchy at {options.policy} is for {hierarchy.env}, not {options.env}: pass '
                          f'{options.spell("env", hierarchy.env)}')
    nodes = [NodeSpec('calf_agent', 'arbiter_node', 'arbiter', NAMESPACE,
                      {'hierarchy': str(hierarchy.root), **node_parameters(options, 'arbiter')},
                      [('observation', EDGE['observation']), ('candidates', CANDIDATES), ('action', EDGE['action'])],
                      'edge', dict(extra_env))]
    for sub in hierarchy.subpolicies:
        remote = with_shim and sub.placement == 'desktop'
        topics = [('observation', (DESKTOP if remote else EDGE)['observation']),
                  ('action', DESKTOP['action'] if remote else CANDIDATES)]
        nodes.append(NodeSpec('calf_agent', 'policy_node', sub.name, NAMESPACE,
                              {'policy': str(hierarchy.checkpoint(sub)), 'deterministic': True, 'source': sub.name},
                              topics, sub.placement, dict(extra_env), True))
    return nodes


def _check_choice(kind: str, value: str, choices: tuple[str, ...], what: str = '') -> None:
    if value not in choices:
        raise ConfigError(f'unknown {kind} {value!r}: choose {what + " " if what else ""}one of {", ".join(choices)}')
