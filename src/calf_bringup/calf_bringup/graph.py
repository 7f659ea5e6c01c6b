"""The CALF node graph, described once: which nodes run in each deployment mode, and how they are wired.

Pure: no rclpy and no launch. The launch files turn each ``NodeSpec`` into a
``launch_ros.actions.Node``; ``calf run`` (``calf_bringup.runner``) starts it as a process with the
command line from ``command_line``.

All nodes live in ``/calf``. The env node's topics are remapped onto ``/calf/edge/*``. The shim
(relative topics ``edge/*``, ``desktop/*`` and ``shim/link_stats``) sits between ``/calf/edge/*``
and ``/calf/desktop/*``. The policy reads whichever side the env's observations reach it on.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from calf_shim.errors import ConfigError

from calf_bringup.discovery import PEERS_PREFIX, parse_peers, write_static_peers

NAMESPACE = '/calf'
MODES = ('local_sim', 'sim_net', 'edge_sim')
ROLES = ('all', 'edge', 'desktop')
CLEAN_NETWORK = 'sim_clean'
DISCOVERY_RANGES = ('localhost', 'subnet', 'off', 'system_default')
EDGE = {'observation': f'{NAMESPACE}/edge/observation', 'action': f'{NAMESPACE}/edge/action'}
DESKTOP = {'observation': f'{NAMESPACE}/desktop/observation', 'action': f'{NAMESPACE}/desktop/action'}
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
                discovery: str | None = None) -> list[NodeSpec]:
    """The nodes of ``mode`` that run in ``role`` ('all' = every node, on one machine).

    - ``local_sim``: env and policy on the edge topics, no shim (``network`` must be sim_clean).
    - ``sim_net``: env, shim (``network``) and policy on the desktop topics.
    - ``edge_sim``: the edge runs env, plus the shim when ``network`` is not ``sim_clean``; the
      desktop runs the policy. Start each role on its own machine with the same arguments.

    ``discovery`` is a ROS_AUTOMATIC_DISCOVERY_RANGE value, a Fast DDS XML profile (``*.xml``) or
    ``peers:IP,IP,...`` (see ``discovery_env``).
    """
    _check_choice('mode', mode, MODES)
    _check_choice('role', role, ROLES)
    if mode == 'local_sim' and network != CLEAN_NETWORK:
        raise ConfigError(f'local_sim has no network (got {network!r}): use sim_net or edge_sim to add one')
    if not time_scale > 0:
        raise ConfigError(f'time_scale must be > 0, got {time_scale!r}')
    if episodes < 0:
        raise ConfigError(f'episodes must be >= 0, got {episodes!r}')
    with_shim = mode == 'sim_net' or (mode == 'edge_sim' and network != CLEAN_NETWORK)
    extra_env = discovery_env(discovery)
    nodes = [_env_node(env, seed, float(time_scale), episodes, extra_env)]
    if with_shim:
        nodes.append(_shim_node(network, seed, float(time_scale), extra_env))
    if role != 'edge':
        nodes.append(_policy_node(policy, DESKTOP if with_shim else EDGE, extra_env))
    return [node for node in nodes if role in ('all', node.role)]


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
    text = str(value)
    return text if yaml.safe_load(text) == text else json.dumps(text)


def _env_node(env: str, seed: int, time_scale: float, episodes: int, extra_env: dict[str, str]) -> NodeSpec:
    topics = ('observation', 'action', 'episode_result', 'link_stats')
    return NodeSpec('calf_env', 'env_node', 'env', NAMESPACE,
                    {'env': env, 'seed': seed, 'time_scale': time_scale, 'episodes': episodes},
                    [(topic, f'{NAMESPACE}/edge/{topic}') for topic in topics], 'edge', dict(extra_env))


def _shim_node(network: str, seed: int, time_scale: float, extra_env: dict[str, str]) -> NodeSpec:
    return NodeSpec('calf_shim', 'shim_node', 'shim', NAMESPACE,
                    {'network': network, 'seed': seed, 'time_scale': time_scale}, [], 'edge', dict(extra_env))


def _policy_node(policy: str | Path | None, topics: dict[str, str], extra_env: dict[str, str]) -> NodeSpec:
    if not policy:
        raise ConfigError('the policy node needs a checkpoint: pass a policy directory from calf train')
    return NodeSpec('calf_agent', 'policy_node', 'policy', NAMESPACE,
                    {'policy': str(policy), 'deterministic': True}, list(topics.items()), 'desktop',
                    dict(extra_env))


def _check_choice(kind: str, value: str, choices: tuple[str, ...], what: str = '') -> None:
    if value not in choices:
        raise ConfigError(f'unknown {kind} {value!r}: choose {what + " " if what else ""}one of {", ".join(choices)}')
