"""Distributed training as processes: a learner node, N local rollout workers, optionally the generic shim
impairing every learner<->worker topic (``calf train --workers N``), and one worker joining from another
host (``calf worker``).

With ``learner_network``, workers publish batches on ``/calf/dist/net/batches`` and the learner publishes
weights on ``/calf/dist/net/weights/<id>``; the shim relays them, as uplink and downlink of the profile,
to the topics the other side listens on. The relay config is written into the run's directory.

Every node is given the shared key's file (``key_file``), never the key itself: ROS parameters can be
read by any process on the domain. An empty ``key_file`` makes the nodes read ``CALF_DIST_KEY``.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any, TextIO

import yaml

from calf_agent.dist.chunk_msgs import BATCH_TOPIC, WEIGHTS_PREFIX
from calf_agent.dist.learner import WORKER_ID
from calf_bringup.graph import NAMESPACE, NodeSpec, discovery_env
from calf_bringup.runner import Graph
from calf_core.errors import ConfigError
from calf_core.network import resolve_network

NET_BATCH_TOPIC = '/calf/dist/net/batches'
NET_WEIGHTS_PREFIX = '/calf/dist/net/weights'
RELAY_CONFIG = 'learner_network.yaml'
CHUNK_TYPE = 'calf_msgs/msg/ByteChunk'
QOS = {'batches': {'reliability': 'reliable', 'durability': 'volatile', 'depth': 64},
       'weights': {'reliability': 'reliable', 'durability': 'transient_local', 'depth': 64}}
"""The QoS of ``calf_ros.qos.BATCHES`` and ``WEIGHTS``, for the shim's relay config."""


def worker_ids(workers: int) -> list[str]:
    return [f'w{i}' for i in range(workers)]


def relay_config(profile: str, ids: list[str]) -> list[dict[str, Any]]:
    """The generic shim's entries: batches up, each worker's weights down, through ``profile``."""
    entries = [{'in_topic': NET_BATCH_TOPIC, 'out_topic': BATCH_TOPIC, 'type': CHUNK_TYPE, 'direction': 'uplink',
                'profile': profile, 'qos': QOS['batches']}]
    entries += [{'in_topic': f'{NET_WEIGHTS_PREFIX}/{wid}', 'out_topic': f'{WEIGHTS_PREFIX}/{wid}',
                 'type': CHUNK_TYPE, 'direction': 'downlink', 'profile': profile, 'qos': QOS['weights']}
                for wid in ids]
    return entries


def training_graph(learner_params: dict[str, Any], workers: int, envs: int, seed: int,
                   learner_network: str | None, out_dir: Path, key_file: str = '') -> list[NodeSpec]:
    """The learner, ``workers`` workers (ids w0, w1, ...) and, with ``learner_network``, the shim.

    The workers run the learner's ``env`` and may follow its ``network``; all read the key in ``key_file``.
    """
    if workers < 1:
        raise ConfigError(f'--workers must be >= 1, got {workers}')
    if envs < 1:
        raise ConfigError(f'--envs must be >= 1, got {envs}')
    ids = worker_ids(workers)
    learner = {**learner_params, 'key_file': key_file}
    worker_topics: dict[str, Any] = {'key_file': key_file, 'env': learner_params.get('env', 'cartpole'),
                                     'network': learner_params.get('network', '')}
    nodes = []
    if learner_network:
        resolve_network(learner_network)  # a bad name fails here, on one line
        path = Path(out_dir).resolve() / RELAY_CONFIG
        path.parent.mkdir(parents=True, exist_ok=True)
        profile_ref = learner_network if not Path(learner_network).suffix else str(Path(learner_network).resolve())
        path.write_text(yaml.safe_dump(relay_config(profile_ref, ids), sort_keys=False))
        learner['weights_prefix'] = NET_WEIGHTS_PREFIX
        worker_topics['batch_topic'] = NET_BATCH_TOPIC
        nodes.append(NodeSpec('calf_shim', 'generic_shim_node', 'learner_shim', NAMESPACE,
                              {'config': str(path), 'seed': seed}, [], 'desktop', {}))
    nodes.append(NodeSpec('calf_agent', 'learner_node', 'learner', NAMESPACE, learner, [], 'desktop', {}))
    nodes += [NodeSpec('calf_agent', 'worker_node', f'worker_{wid}', NAMESPACE,
                       {'worker_id': wid, 'envs': envs, 'seed': seed * 100 + i + 1, **worker_topics}, [], 'edge', {})
              for i, wid in enumerate(ids)]
    return nodes


def run_training(specs: list[NodeSpec], domain_id: int | None = None, output: TextIO = sys.stdout) -> int:
    """Run until the learner exits (a worker that dies does not stop it); the learner's exit code.

    Ctrl-C and SIGTERM stop every process, then raise KeyboardInterrupt (as ``run_graph``).
    """
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with Graph(specs, domain_id, output) as graph:
            code = graph.wait_for_exit('learner')
            graph.say_why('learner')
    finally:
        signal.signal(signal.SIGTERM, previous)
    return int(code or 0)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def worker_graph(learner: str, discovery: str | None, worker_id: str, envs: int, seed: int, env: str = 'cartpole',
                 network: str = '', key_file: str = '') -> list[NodeSpec]:
    """One worker of ``env`` joining the learner at ``learner`` (an IPv4 address, or ``localhost``).

    Discovery is ``discovery`` if given (edge_sim's options), else static peers to the learner's address.
    The worker reads the key in ``key_file`` (empty: ``CALF_DIST_KEY``).
    """
    if not learner:
        raise ConfigError('--learner must name the learner\'s host: an IPv4 address or localhost')
    if worker_id and not WORKER_ID.match(worker_id):
        raise ConfigError(f'--id must be a name token (letters, digits, _; 64 at most), got {worker_id!r}')
    if discovery is None:
        discovery = 'localhost' if learner == 'localhost' else f'peers:{learner}'
    if envs < 1:
        raise ConfigError(f'--envs must be >= 1, got {envs}')
    params: dict[str, Any] = {'envs': envs, 'seed': seed, 'env': env, 'network': network, 'key_file': key_file}
    if worker_id:
        params['worker_id'] = worker_id
    return [NodeSpec('calf_agent', 'worker_node', f'worker_{worker_id or "remote"}', NAMESPACE, params, [], 'edge',
                     discovery_env(discovery))]
