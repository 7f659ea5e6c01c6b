"""The CALF node graph, described once: which nodes run in each deployment mode, and how they are wired.

Pure: no rclpy and no launch. The launch files turn each ``NodeSpec`` into a
``launch_ros.actions.Node``; ``calf run`` (``calf_bringup.runner``) starts it as a process with the
command line from ``command_line``.

All nodes live in ``/calf``. The env node's topics are remapped onto ``/calf/edge/*``. The shim
(relative topics ``edge/*``, ``desktop/*`` and ``shim/link_stats``) sits between ``/calf/edge/*``
and ``/calf/desktop/*``. The policy reads whichever side the env's observations reach it on.

``graph`` places the policy (paper, Table 7): ``flat_desktop`` on the desktop, across the network;
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

from calf_agent.hierarchy import GRAPHS, load_hierarchy
from calf_bringup.discovery import PEERS_PREFIX, parse_peers, write_static_peers
from calf_core.envs import parse_start_plan
from calf_core.errors import ConfigError
from calf_shim.topic_relay_config import load_relay_config

NAMESPACE = '/calf'
MODES = ('local_sim', 'sim_net', 'edge_sim')
IMPAIR = 'impair'  # not a deployment mode: the generic shim alone, on an existing stack's topics
ROLES = ('all', 'edge', 'desktop')
CLEAN_NETWORK = 'sim_clean'
DISCOVERY_RANGES = ('localhost', 'subnet', 'off', 'system_default')
EDGE = {'observation': f'{NAMESPACE}/edge/observation', 'action': f'{NAMESPACE}/edge/action'}
DESKTOP = {'observation': f'{NAMESPACE}/desktop/observation', 'action': f'{NAMESPACE}/desktop/action'}
CANDIDATES = f'{NAMESPACE}/edge/candidates'  # hierarchical: every sub-policy's actions, to the arbiter
POLICY_ROLE = {'flat_desktop': 'desktop', 'flat_edge': 'edge'}  # hierarchical: sub-policies on both
LAUNCH_ARGUMENTS: tuple[tuple[str, str, str], ...] = (
    ('role', 'all', 'edge (env, plus the shim in edge_sim), desktop (policy) or all'),
    ('network', CLEAN_NETWORK, 'network profile name or YAML path for the shim'),
    ('policy', '', 'checkpoint directory from calf train (needed unless role:=edge)'),
    ('env', 'cartpole', 'cartpole or minigrid'),
    ('seed', '0', 'seed of the env resets and of the network models'),
    ('time_scale', '1.0', 'run this many times faster than real time (scales dt and every delay)'),
    ('episodes', '0', 'episodes before the env node exits; 0 runs forever'),
    ('domain_id', '', 'ROS_DOMAIN_ID of every node; empty: inherited'),
    ('discovery', '', 'localhost, subnet, off, system_default, a Fast DDS XML profile, or peers:IP,IP,... '
                      '(static peers, no multicast: for Wi-Fi); empty: inherited'),
    ('graph', 'flat_desktop', 'flat_desktop (policy across the network), flat_edge (policy beside the env) or '
                              'hierarchical (policy:= a calf train-hierarchy directory)'),
    ('start_plan', '', 'actions the env cycles until the first plan arrives, e.g. [0,1]; empty: the policy '
                       'checkpoint\'s start_plan when policy:= is given, else hold the initial action'),
)
"""The arguments of every launch file, (name, default, description), all strings as launch passes them."""


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


def build_graph(mode: str, role: str = 'all', network: str = CLEAN_NETWORK, policy: str | Path | None = None,
                env: str = 'cartpole', seed: int = 0, time_scale: float = 1.0, episodes: int = 0,
                discovery: str | None = None, graph: str = 'flat_desktop',
                start_plan: tuple[int, ...] | None = None) -> list[NodeSpec]:
    """The nodes of ``mode`` that run in ``role`` ('all' = every node, on one machine).

    - ``local_sim``: env and policy on the edge topics, no shim (``network`` must be sim_clean).
    - ``sim_net``: env, shim (``network``) and policy on the desktop topics.
    - ``edge_sim``: the edge runs env, plus the shim when ``network`` is not ``sim_clean``; the
      desktop runs the policy. Start each role on its own machine with the same arguments.

    ``discovery`` is a ROS_AUTOMATIC_DISCOVERY_RANGE value, a Fast DDS XML profile (``*.xml``) or
    ``peers:IP,IP,...`` (see ``discovery_env``). ``graph`` places the policy (see the module doc).
    ``start_plan`` (None: the flat policy checkpoint's, if it names one) is what the env runs until the
    first plan arrives.
    """
    _check_choice('mode', mode, MODES)
    _check_choice('role', role, ROLES)
    _check_choice('graph', graph, GRAPHS)
    if mode == 'local_sim' and network != CLEAN_NETWORK:
        raise ConfigError(f'local_sim has no network (got {network!r}): use sim_net or edge_sim to add one')
    if not time_scale > 0:
        raise ConfigError(f'time_scale must be > 0, got {time_scale!r}')
    if episodes < 0:
        raise ConfigError(f'episodes must be >= 0, got {episodes!r}')
    with_shim = graph != 'flat_edge' and (mode == 'sim_net' or (mode == 'edge_sim' and network != CLEAN_NETWORK))
    extra_env = discovery_env(discovery)
    if start_plan is None:
        start_plan = checkpoint_start_plan(policy) if policy and graph != 'hierarchical' else ()
    nodes = [_env_node(env, seed, float(time_scale), episodes, extra_env, start_plan)]
    if with_shim:
        to_arbiter = [('edge/action', CANDIDATES)] if graph == 'hierarchical' else []
        nodes.append(_shim_node(network, seed, float(time_scale), extra_env, to_arbiter))
    if role == 'all' or POLICY_ROLE.get(graph, role) == role:
        nodes += _policy_nodes(graph, policy, env, with_shim, float(time_scale), extra_env)
    return [node for node in nodes if role in ('all', node.role)]


def graph_from_launch(mode: str, values: dict[str, str]) -> list[NodeSpec]:
    """``build_graph`` for launch-argument strings (``LAUNCH_ARGUMENTS``), as the launch files pass them."""
    try:
        seed, time_scale, episodes = int(values['seed']), float(values['time_scale']), int(values['episodes'])
    except ValueError as err:
        raise ConfigError(f'bad launch argument: {err}') from None
    try:
        start_plan = parse_start_plan(values['start_plan']) if values['start_plan'] else None
    except ConfigError as err:
        raise ConfigError(f'bad launch argument: {err}') from None
    return build_graph(mode, values['role'], values['network'], values['policy'] or None, values['env'], seed,
                       time_scale, episodes, values['discovery'] or None, graph=values['graph'],
                       start_plan=start_plan)


def impair_from_launch(values: dict[str, str]) -> list[NodeSpec]:
    """``impair_graph`` for the strings of ``IMPAIR_LAUNCH_ARGUMENTS``."""
    try:
        seed, time_scale = int(values['seed']), float(values['time_scale'])
    except ValueError as err:
        raise ConfigError(f'bad launch argument: {err}') from None
    return impair_graph(values['config'], seed, time_scale, values['discovery'] or None, values['trace_bag'] or None)


IMPAIR_LAUNCH_ARGUMENTS: tuple[tuple[str, str, str], ...] = (
    ('config', '', 'relay config YAML: the topics to impair (see calf_bringup/config/impair_cmd_vel.yaml)'),
    ('seed', '0', 'seed of the network models'),
    ('time_scale', '1.0', 'divides every model delay'),
    ('trace_bag', '', 'record every relayed message (delay or loss) into this new rosbag2 directory; empty: off'),
    *((name, default, text) for name, default, text in LAUNCH_ARGUMENTS if name in ('domain_id', 'discovery')),
)
"""The arguments of impair.launch.py."""


def impair_graph(config: str | Path | None, seed: int = 0, time_scale: float = 1.0,
                 discovery: str | None = None, trace_bag: str | Path | None = None) -> list[NodeSpec]:
    """The generic shim alone, relaying the topics listed in ``config`` (validated here, so errors come first).

    ``trace_bag`` names a new bag that records every relayed message's delay or loss.
    """
    if not config:
        raise ConfigError('impair needs a relay config: pass --config FILE.yaml '
                          '(example: calf_bringup/config/impair_cmd_vel.yaml)')
    if not time_scale > 0:
        raise ConfigError(f'time_scale must be > 0, got {time_scale!r}')
    path = Path(config).expanduser().resolve()
    load_relay_config(path)
    params: dict[str, Any] = {'config': str(path), 'seed': seed, 'time_scale': float(time_scale)}
    if trace_bag:
        bag = Path(trace_bag).expanduser().resolve()
        if bag.exists():
            raise ConfigError(f'trace bag {bag} already exists: pass a new directory')
        params['trace_bag'] = str(bag)
    return [NodeSpec('calf_shim', 'generic_shim_node', 'generic_shim', NAMESPACE, params, [], 'edge',
                     discovery_env(discovery))]


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
        meta = json.loads((Path(policy) / 'meta.json').read_text())
    except (OSError, ValueError):
        return ()
    plan = meta.get('start_plan', []) if isinstance(meta, dict) else []
    return tuple(int(a) for a in plan)


def _env_node(env: str, seed: int, time_scale: float, episodes: int, extra_env: dict[str, str],
              start_plan: tuple[int, ...]) -> NodeSpec:
    topics = ('observation', 'action', 'episode_result', 'link_stats')
    params: dict[str, Any] = {'env': env, 'seed': seed, 'time_scale': time_scale, 'episodes': episodes}
    if start_plan:
        params['start_plan'] = list(start_plan)
    return NodeSpec('calf_env', 'env_node', 'env', NAMESPACE, params,
                    [(topic, f'{NAMESPACE}/edge/{topic}') for topic in topics], 'edge', dict(extra_env))


def _shim_node(network: str, seed: int, time_scale: float, extra_env: dict[str, str],
               remappings: list[tuple[str, str]]) -> NodeSpec:
    return NodeSpec('calf_shim', 'shim_node', 'shim', NAMESPACE,
                    {'network': network, 'seed': seed, 'time_scale': time_scale}, remappings, 'edge', dict(extra_env))


def _policy_nodes(graph: str, policy: str | Path | None, env: str, with_shim: bool, time_scale: float,
                  extra_env: dict[str, str]) -> list[NodeSpec]:
    if graph == 'hierarchical':
        return _hierarchy_nodes(policy, env, with_shim, time_scale, extra_env)
    if graph == 'flat_edge':
        return [_policy_node(policy, EDGE, extra_env, 'edge')]
    return [_policy_node(policy, DESKTOP if with_shim else EDGE, extra_env)]


def _policy_node(policy: str | Path | None, topics: dict[str, str], extra_env: dict[str, str],
                 role: str = 'desktop') -> NodeSpec:
    if not policy:
        raise ConfigError('the policy node needs a checkpoint: pass a policy directory from calf train')
    return NodeSpec('calf_agent', 'policy_node', 'policy', NAMESPACE,
                    {'policy': str(policy), 'deterministic': True}, list(topics.items()), role,
                    dict(extra_env))


def _hierarchy_nodes(policy: str | Path | None, env: str, with_shim: bool, time_scale: float,
                     extra_env: dict[str, str]) -> list[NodeSpec]:
    """The arbiter beside the env, then one policy node per sub-policy on its side (see the module doc)."""
    if not policy:
        raise ConfigError('the hierarchical graph needs a hierarchy: pass a directory from calf train-hierarchy')
    hierarchy = load_hierarchy(policy)
    if hierarchy.env != env:
        raise ConfigError(f'the hierarchy at {policy} is for {hierarchy.env}, not {env}: pass env {hierarchy.env}')
    nodes = [NodeSpec('calf_agent', 'arbiter_node', 'arbiter', NAMESPACE,
                      {'hierarchy': str(hierarchy.root), 'time_scale': time_scale},
                      [('observation', EDGE['observation']), ('candidates', CANDIDATES), ('action', EDGE['action'])],
                      'edge', dict(extra_env))]
    for sub in hierarchy.subpolicies:
        remote = with_shim and sub.placement == 'desktop'
        topics = [('observation', (DESKTOP if remote else EDGE)['observation']),
                  ('action', DESKTOP['action'] if remote else CANDIDATES)]
        nodes.append(NodeSpec('calf_agent', 'policy_node', sub.name, NAMESPACE,
                              {'policy': str(hierarchy.checkpoint(sub)), 'deterministic': True, 'source': sub.name},
                              topics, sub.placement, dict(extra_env)))
    return nodes


def _check_choice(kind: str, value: str, choices: tuple[str, ...], what: str = '') -> None:
    if value not in choices:
        raise ConfigError(f'unknown {kind} {value!r}: choose {what + " " if what else ""}one of {", ".join(choices)}')
