"""``calf eval --mode ros``: evaluate a checkpoint through the live Mode 2 graph over DDS.

The env node, the shim and the policy node run as separate processes (``runner.Graph``). This
process listens on a private rclpy Context to ``/calf/edge/episode_result`` and
``/calf/shim/link_stats`` and turns them into the same report as ``--mode sim``.

DDS discovery gives no order: the env node starts ticking once the shim subscribes, which can be
seconds before the shim and the policy node have matched each other. So the env node runs until
stopped, and the evaluation counts the ``episodes`` episodes that follow the first episode in which
an action reached the env: from then on the loop is complete. Which episodes those are depends on
discovery, so unlike sim mode a ros evaluation does not replay the same episodes for a seed.

Losses are the shim's counters over the counted episodes, read from LinkStats published every
``STATS_PERIOD_S`` (exact to within one period at each end). Latencies are measured in real time
and multiplied by ``time_scale``, so the report is in the profile's units whatever the speed-up.
"""
from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, TextIO

import rclpy
from calf_msgs.msg import EpisodeResult, LinkStats
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from calf_agent.checkpoint import load_checkpoint
from calf_agent.evaluate import EpisodeLog
from calf_env.envs import env_spec, make_env
from calf_shim.errors import CalfError, ConfigError
from calf_shim.profiles import load_profile
from calf_shim.qos import RESULTS

from calf_bringup.graph import NAMESPACE, build_graph
from calf_bringup.runner import Graph

RESULT_TOPIC = f'{NAMESPACE}/edge/episode_result'
SHIM_STATS_TOPIC = f'{NAMESPACE}/shim/link_stats'
STARTUP_TIMEOUT_S = 60.0  # until an action reaches the env: processes start, torch loads, DDS discovers
STATS_PERIOD_S = 0.05  # the shim's LinkStats period during an evaluation
DIRECTIONS = (LinkStats.DIRECTION_UPLINK, LinkStats.DIRECTION_DOWNLINK)


class _Listener:
    """Episode results and the shim's latest counters, received on a private context."""

    def __init__(self, node: Node) -> None:
        self.results: dict[int, EpisodeResult] = {}
        self.shim_stats: dict[int, LinkStats] = {}
        node.create_subscription(EpisodeResult, RESULT_TOPIC, self._on_result, RESULTS)
        node.create_subscription(LinkStats, SHIM_STATS_TOPIC, self._on_stats, RESULTS)

    def _on_result(self, msg: EpisodeResult) -> None:
        self.results[msg.seq] = msg

    def _on_stats(self, msg: LinkStats) -> None:
        self.shim_stats[msg.direction] = msg

    def first_live(self) -> int | None:
        """The seq of the first episode in which an action reached the env (None before)."""
        return min((seq for seq, result in self.results.items() if result.actions_applied > 0), default=None)

    def has(self, seqs: range) -> bool:
        return all(seq in self.results for seq in seqs)

    def stats_seq(self) -> int:
        """The newest seq of the shim's LinkStats (-1 before the first)."""
        return max((stats.seq for stats in self.shim_stats.values()), default=-1)

    def stats_newer_than(self, seq: int) -> bool:
        """Both directions' counters were published after LinkStats ``seq``."""
        return all(d in self.shim_stats and self.shim_stats[d].seq > seq for d in DIRECTIONS)

    def lost(self) -> dict[int, int]:
        """Messages the shim dropped so far (injected by the model, or queue overflow), per direction."""
        return {d: int(self.shim_stats[d].dropped_injected + self.shim_stats[d].dropped_queue) for d in DIRECTIONS}


def evaluation_timeout_s(env: str, episodes: int, time_scale: float) -> float:
    """Twice the longest possible run of ``episodes`` episodes, plus a minute of headroom."""
    spec = env_spec(env)
    gym_env = make_env(env)
    max_ticks = gym_env.spec.max_episode_steps or gym_env.unwrapped.max_steps
    return 2.0 * episodes * max_ticks * spec.dt / time_scale + 60.0


def evaluate_ros(policy_dir: Path | str, network: str, episodes: int, seed: int, time_scale: float = 1.0,
                 output: TextIO | None = None) -> dict[str, Any]:
    """Run ``episodes`` episodes of the checkpoint through env node -> shim(``network``) -> policy node."""
    if episodes < 1:
        raise ConfigError(f'--episodes must be >= 1, got {episodes}')
    profile = load_profile(network)
    _, meta = load_checkpoint(policy_dir)
    env_node, shim_node, policy_node = build_graph('sim_net', network=network, policy=Path(policy_dir).resolve(),
                                                   env=meta['env'], seed=seed, time_scale=time_scale)
    shim_node = shim_node._replace(parameters={**shim_node.parameters, 'stats_period_s': STATS_PERIOD_S})
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(f'calf_eval_{os.getpid()}', namespace=NAMESPACE, context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        listener = _Listener(node)
        with Graph([env_node, shim_node, policy_node], output=output) as graph:
            spin = partial(_spin, executor, graph)
            spin(lambda: listener.first_live() is not None, STARTUP_TIMEOUT_S, 'a first action to reach the env')
            counted = range(listener.first_live() + 1, listener.first_live() + 1 + episodes)
            before = _fresh_counters(spin, listener)
            spin(lambda: listener.has(counted), evaluation_timeout_s(meta['env'], episodes, time_scale),
                 f'{episodes} episodes')
            after = _fresh_counters(spin, listener)
        log = EpisodeLog()
        for seq in counted:
            result = listener.results[seq]
            log.add(result.episode_return, result.length, result.success,
                    [sample * time_scale for sample in result.e2e_samples_ms])
        log.obs_lost, log.actions_lost = (after[d] - before[d] for d in DIRECTIONS)
        return log.report('ros', profile.name, time_scale=time_scale, policy=str(policy_dir), seed=seed)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def _fresh_counters(spin: Callable[..., None], listener: _Listener) -> dict[int, int]:
    """The shim's loss counters from LinkStats published after this call."""
    seq = listener.stats_seq()
    spin(lambda: listener.stats_newer_than(seq), 20 * STATS_PERIOD_S + 5.0, 'the shim\'s LinkStats')
    return listener.lost()


def _spin(executor: SingleThreadedExecutor, graph: Graph, done: Callable[[], bool], timeout_s: float,
          waiting_for: str) -> None:
    """Spin until ``done()``; raise CalfError if a node exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not done():
        for spec in graph.specs:
            code = graph.returncode(spec.name)
            if code is not None:
                last = next((line for line in reversed(graph.tail(spec.name)) if line.strip()), 'no output')
                raise CalfError(f'{spec.name} node exited with code {code}: {last}')
        if time.monotonic() > deadline:
            raise CalfError(f'timed out after {timeout_s:.0f} s waiting for {waiting_for}')
        executor.spin_once(timeout_sec=0.1)
