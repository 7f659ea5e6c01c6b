"""The env node and the policy node over DDS: episodes, malformed messages, restarts, exit codes.

The policy is a freshly initialised agent saved with save_checkpoint: these tests are about the
plumbing, not about learning. Every run uses time_scale 4 (a CartPole tick every 5 ms).
"""
from __future__ import annotations

import json
import math
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from ament_index_python import get_package_prefix
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher
from ros_helpers import new_context, spin_until

from calf_agent.checkpoint import save_checkpoint
from calf_agent.nodes.policy_node import PolicyNode
from calf_agent.policies import MlpAgent
from calf_core.envs import make_env
from calf_core.errors import ConfigError
from calf_core.timing import Verdict
from calf_env.env_config import StartGate, next_tick
from calf_env.env_node import ArrivedAction, EnvNode
from calf_msgs.msg import Action, EpisodeResult, LinkStats, Observation
from calf_ros.qos import RESULTS, STREAM

pytestmark = pytest.mark.ros
SCALE = 4.0


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return save_checkpoint(tmp_path_factory.mktemp('ckpt') / 'cartpole', MlpAgent(4, 2),
                           {'env': 'cartpole', 'representation': {'frames': 1, 'actions': 0}})


class Probe(Node):
    """Records what the nodes of one namespace publish, and can publish raw actions/observations.

    Without ``observe`` it does not subscribe to observation, so that the env node starts ticking
    only once the policy is there.
    """

    def __init__(self, context: Context, namespace: str, observe: bool = False) -> None:
        super().__init__('probe', namespace=namespace, context=context)
        self.results: list[EpisodeResult] = []
        self.stats: list[LinkStats] = []
        self.observations: list[Observation] = []
        self.actions: list[Action] = []
        self.create_subscription(EpisodeResult, 'episode_result', self.results.append, RESULTS)
        self.create_subscription(LinkStats, 'link_stats', self.stats.append, RESULTS)
        if observe:
            self.create_subscription(Observation, 'observation', self.observations.append, STREAM.profile())
        self.create_subscription(Action, 'action', self.actions.append, STREAM.profile())
        self.action_pub = self.create_publisher(Action, 'action', STREAM.profile())
        self.obs_pub = self.create_publisher(Observation, 'observation', STREAM.profile())


def linked(publisher: Publisher, node: Node) -> bool:
    """Both ends of ``publisher``'s topic have matched the other (discovery is not symmetric)."""
    ends = [sub for sub in node.subscriptions if sub.topic_name == publisher.topic_name]
    return publisher.get_subscription_count() > 0 and bool(ends) and all(s.get_publisher_count() for s in ends)


class Graph:
    """A private context and executor holding in-process nodes; destroys them on close."""

    def __init__(self) -> None:
        self.context = new_context()
        self.executor = SingleThreadedExecutor(context=self.context)
        self.nodes: list[Node] = []

    def add(self, node: Node) -> Any:
        self.nodes.append(node)
        self.executor.add_node(node)
        return node

    def remove(self, node: Node) -> None:
        self.executor.remove_node(node)
        self.nodes.remove(node)
        node.destroy_node()

    def until(self, condition: Any, timeout_s: float = 15.0) -> bool:
        return spin_until(self.executor, condition, timeout_s)

    def close(self) -> None:
        for node in reversed(self.nodes):
            node.destroy_node()
        self.context.try_shutdown()


def env_node(graph: Graph, namespace: str, **params: Any) -> EnvNode:
    overrides = [Parameter(k, value=v) for k, v in {'time_scale': SCALE, **params}.items()]
    return graph.add(EnvNode(namespace=namespace, context=graph.context, parameter_overrides=overrides))


def policy_node(graph: Graph, namespace: str, checkpoint: Path) -> PolicyNode:
    return graph.add(PolicyNode(namespace=namespace, context=graph.context,
                                parameter_overrides=[Parameter('policy', value=str(checkpoint))]))


@pytest.fixture
def graph() -> Graph:
    graph = Graph()
    yield graph
    graph.close()


@pytest.mark.parametrize('k, elapsed_s, expected', [
    (0, 0.001, 1),  # on time
    (0, 0.0075, 1),  # tick 1 is due: run it now
    (0, 0.0125, 2),  # tick 1 was missed by a whole tick: skip it
    (3, 0.016, 4),
])
def test_next_tick_skips_whole_missed_deadlines(k: int, elapsed_s: float, expected: int) -> None:
    assert next_tick(k, elapsed_s, 0.005) == expected


def test_env_config_defaults_and_errors(graph: Graph) -> None:
    env = env_node(graph, 'cfg', env='minigrid', time_scale=4)  # an integer is taken for a float
    assert (env.config.dt, env.config.time_scale, env.config.tick_s) == (0.1, 4.0, 0.025)
    assert env.config.qos.depth == STREAM.depth and env.config.episodes == 0 and env.config.start_plan is None
    assert env_node(graph, 'cfg', start_plan=[0, 1]).stepper.executor.start_plan == (0, 1)
    for bad, match in [({'env': 'pong'}, 'unknown env'), ({'time_scale': 0.0}, 'time_scale'),
                       ({'episodes': -1}, 'episodes'), ({'qos_reliability': 'sometimes'}, 'reliability'),
                       ({'policy_timeout_s': -1.0}, 'policy_timeout_s must be a number >= 0'),
                       ({'start_plan': 'left'}, 'start_plan must be a list of integer actions'),
                       ({'start_plan': [0, 5]}, r'task cartpole: start_plan 5 is not an action in 0..1'),
                       ({'results_file': '/nonexistent/r.jsonl'}, r"results_file '/nonexistent/r.jsonl' cannot be "
                                                                  r'written: No such file or directory')]:
        with pytest.raises(ConfigError, match=match):
            env_node(graph, 'cfg', **bad)


def test_env_and_policy_complete_episodes_and_survive_an_env_restart(graph: Graph, checkpoint: Path) -> None:
    probe = graph.add(Probe(graph.context, 'a'))
    policy = policy_node(graph, 'a', checkpoint)
    env = env_node(graph, 'a', episodes=3)
    assert graph.until(lambda: env.finished.is_set() and len(probe.results) == 3)
    assert [r.seq for r in probe.results] == [0, 1, 2]
    assert [r.episode - probe.results[0].episode for r in probe.results] == [0, 1, 2]
    assert all(r.length > 0 and r.actions_applied > 0 and r.e2e_samples_ms for r in probe.results)
    assert graph.until(lambda: any(s.delivered > 0 for s in probe.stats))
    stats = probe.stats[-1]
    assert stats.direction == LinkStats.DIRECTION_END_TO_END and stats.rejected == 0
    assert stats.received >= stats.delivered > 0 and math.isfinite(stats.latency_p50_ms)
    graph.remove(env)
    probe.results.clear()
    env = env_node(graph, 'a', episodes=2)  # a restarted env counts episodes from 0 again
    assert graph.until(lambda: env.finished.is_set() and len(probe.results) == 2)
    assert [r.seq for r in probe.results] == [0, 1]
    assert all(r.actions_applied > 0 for r in probe.results) and policy.rejected == 0


def test_start_gate_opens_on_the_first_action_and_times_out() -> None:
    gate = StartGate(enabled=True, timeout_s=2.0)
    gate.start(10.0)
    assert not gate.open and not gate.expired(11.9) and gate.expired(12.0)
    gate.heard(11.5)
    assert gate.open and gate.waited_s == 1.5 and not gate.expired(20.0)
    assert StartGate(enabled=False).open and not StartGate(enabled=True).expired(1e9)  # 0: no timeout


@pytest.mark.slow
def test_no_episode_counts_before_a_policy_answers_and_acts(graph: Graph, checkpoint: Path, tmp_path: Path) -> None:
    """Warm-up episodes (CartPole holding its initial action falls within a few dozen ticks) publish no
    EpisodeResult; the first action opens the count, which starts with a fresh episode seeded by ``seed``.
    A policy heard once but silent through that episode: it ends without an action applied and is not
    counted; episode 0 starts again with the same seed until a policy acts in it. The count's results
    are also appended to ``results_file`` (what ``calf eval --backend ros`` reads)."""
    probe = graph.add(Probe(graph.context, 'g', observe=True))
    results_file = tmp_path / 'results.jsonl'
    env = env_node(graph, 'g', episodes=1, seed=5, time_scale=1.0, results_file=str(results_file))
    assert graph.until(lambda: len({o.episode for o in probe.observations}) >= 3)
    assert not probe.results and not env.gate.open and env.episodes_done == 0
    assert graph.until(lambda: linked(probe.action_pub, env))
    warmup = probe.observations[-1]
    probe.action_pub.publish(Action(episode=warmup.episode, obs_seq=warmup.seq, discrete=1))
    seeded = pytest.approx(make_env('cartpole').reset(seed=5)[0].tolist())
    starts = lambda: [o.episode for o in probe.observations if o.seq == 0 and list(o.data) == seeded]  # noqa: E731
    assert graph.until(lambda: len(starts()) >= 2), 'episode 0 of the count was not started again'
    assert not probe.results and env.episodes_done == 0 and starts()[0] > warmup.episode
    policy_node(graph, 'g', checkpoint)
    assert graph.until(lambda: env.finished.is_set() and probe.results, timeout_s=60.0)
    (result,) = probe.results
    assert (result.seq, env.error) == (0, None) and result.actions_applied > 0 and result.episode in starts()[1:]
    lines = [json.loads(line) for line in results_file.read_text().splitlines()]
    assert lines[0] == {'counting': True} and lines[-1]['seq'] == 0
    assert (lines[-1]['episode'], lines[-1]['episode_return'], lines[-1]['actions_applied']) == \
        (result.episode, result.episode_return, result.actions_applied)


def test_a_late_tick_happens_at_its_deadline(graph: Graph, tmp_path: Path) -> None:
    """On a busy host the tick thread wakes after its deadline. An action that arrived after tick k's deadline but
    before the thread ran tick k waits for tick k + 1, as in virtual time, where it arrived after tick k; the tick's
    time (its observation's stamp, the E2E latencies) is the deadline. An action arriving while others are held
    waits behind them, so that the stepper takes them in order of arrival (none stale). Each counted result says
    how many of its actions came from each Action.source, and the compute times the policy sent with them (a value
    that cannot be a measurement, NaN or over an hour, is not kept)."""
    results_file = tmp_path / 'results.jsonl'
    env = env_node(graph, 'late', wait_for_policy=False, results_file=str(results_file))  # no subscriber: the
    tick = env.config.tick_s  # node's own thread waits, and the test runs its ticks
    env._tick(0.0)  # reset: observation 0
    episode = env.stepper.episode
    env._apply_action(ArrivedAction(0, episode, [1], 0.5 * tick, 'a', None, 2.5))  # before tick 1's deadline: offered at once
    assert env.stepper.executor.newest_seq == 0
    env._tick(tick)
    env._apply_action(ArrivedAction(1, episode, [0], 2.5 * tick, 'b', None, math.nan))  # after tick 2's deadline, tick 2 not run yet
    env._tick(2 * tick)
    assert env.stepper.executor.newest_seq == 0  # tick 2 did not take it
    env._apply_action(ArrivedAction(2, episode, [1], 2.8 * tick, 'c', None, 4e6))  # before tick 3's deadline, after 'b': taken after it
    env._tick(3 * tick)
    assert env.stepper.executor.newest_seq == 2 and env.verdicts[Verdict.STALE] == 0
    assert env.stepper.e2e_ms[-2:] == pytest.approx([1.5 * tick * 1e3, 0.8 * tick * 1e3])
    env._apply_action(ArrivedAction(2, episode, [1], 3.5 * tick, 'c', None, 0.75))  # a duplicate, counted as sent
    k = 4
    while env.episodes_done == 0 and k < 1000:
        env._tick(k * tick)
        k += 1
    [line] = [json.loads(line) for line in results_file.read_text().splitlines()]
    assert (line['episode'], line['sources'], line['actions_applied']) == (episode, {'a': 1, 'b': 1, 'c': 2}, 3)
    assert line['compute_samples_ms'] == [2.5, 0.75]


def test_env_without_a_policy_exits_after_policy_timeout_s(graph: Graph) -> None:
    graph.add(Probe(graph.context, 't', observe=True))
    env = env_node(graph, 't', policy_timeout_s=0.3)
    assert graph.until(lambda: env.finished.is_set())
    assert env.error is not None and env.error.startswith('no action arrived on /t/action within 0.3 s')
    assert not env.gate.open and env.episodes_done == 0


def test_malformed_actions_are_rejected_while_the_env_keeps_ticking(graph: Graph) -> None:
    probe = graph.add(Probe(graph.context, 'b', observe=True))
    env = env_node(graph, 'b', stats_period_s=0.2)
    assert graph.until(lambda: probe.observations and linked(probe.action_pub, env))
    bad = [Action(discrete=2), Action(discrete=-1), Action(discrete=0, discrete_plan=[0, 1, 5])]
    for n, msg in enumerate(bad, 1):
        last = probe.observations[-1]
        msg.episode, msg.obs_seq = last.episode, last.seq
        probe.action_pub.publish(msg)
        assert graph.until(lambda n=n: env.rejected == n)
    ticks = len(probe.observations)
    assert graph.until(lambda: len(probe.observations) > ticks + 10 and any(s.rejected == 3 for s in probe.stats))
    last = probe.observations[-1]
    probe.action_pub.publish(Action(episode=last.episode, obs_seq=last.seq, discrete=1))
    assert graph.until(lambda: env.verdicts[Verdict.ACCEPTED] + env.verdicts[Verdict.OTHER_EPISODE] == 1)


def test_malformed_observations_are_rejected_and_the_policy_keeps_running(graph: Graph, checkpoint: Path) -> None:
    probe = graph.add(Probe(graph.context, 'c'))
    policy = policy_node(graph, 'c', checkpoint)
    assert graph.until(lambda: linked(probe.obs_pub, policy))
    bad = [Observation(seq=1, data=[0.0] * 3), Observation(seq=2, data=[0.0, math.nan, 0.0, 0.0]),
           Observation(seq=3, data=[0.0] * 4, shape=[2, 3])]
    for n, msg in enumerate(bad, 1):
        probe.obs_pub.publish(msg)
        assert graph.until(lambda n=n: policy.rejected == n)
    probe.obs_pub.publish(Observation(seq=4, data=[0.01, 0.0, -0.01, 0.0], shape=[4]))
    assert graph.until(lambda: probe.actions)
    action = probe.actions[0]
    assert (action.obs_seq, action.source, policy.acted) == (4, 'policy', 1)
    assert action.discrete in (0, 1) and action.compute_ms >= 0


def executable(package: str, name: str) -> str:
    return str(Path(get_package_prefix(package)) / 'lib' / package / name)


def start(tmp_path: Path, log: str, *args: str) -> subprocess.Popen:
    """Start a node process writing its output to ``tmp_path / log``."""
    with open(tmp_path / log, 'w') as out:
        return subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_env_survives_the_policy_process_being_killed(graph: Graph, checkpoint: Path, tmp_path: Path) -> None:
    policy_cmd = [executable('calf_agent', 'policy_node'), '--ros-args', '-p', f'policy:={checkpoint}',
                  '-r', 'observation:=/d/observation', '-r', 'action:=/d/action']
    probe = graph.add(Probe(graph.context, 'd'))
    env_node(graph, 'd')
    first = start(tmp_path, 'policy1.log', *policy_cmd)
    second = None
    try:
        assert graph.until(lambda: any(r.actions_applied > 0 for r in probe.results), 30), \
            (tmp_path / 'policy1.log').read_text()
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        killed_at = len(probe.results)
        # a whole episode without a policy: every tick held the last action
        assert graph.until(lambda: any(r.actions_applied == 0 and r.ticks_held == r.length > 0
                                       for r in probe.results[killed_at:]))
        second = start(tmp_path, 'policy2.log', *policy_cmd)
        restarted_at = len(probe.results)
        assert graph.until(lambda: any(r.actions_applied > 0 for r in probe.results[restarted_at:]), 30), \
            (tmp_path / 'policy2.log').read_text()
        second.send_signal(signal.SIGINT)
        assert second.wait(timeout=10) == 0, (tmp_path / 'policy2.log').read_text()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.slow
def test_exit_codes(tmp_path: Path) -> None:
    """The env exits 0 after its episodes (counted from power-on with wait_for_policy off); a missing or
    corrupt checkpoint is one line and exit code 2."""
    corrupt = tmp_path / 'corrupt'
    corrupt.mkdir()
    (corrupt / 'meta.json').write_text('{not json')
    env = start(tmp_path, 'env.log', executable('calf_env', 'env_node'), '--ros-args', '-p', 'episodes:=2',
                '-p', 'time_scale:=4', '-p', 'wait_for_subscriber:=false', '-p', 'wait_for_policy:=false',
                '-r', '__ns:=/e')
    bad = [subprocess.Popen([executable('calf_agent', 'policy_node'), '--ros-args', '-p', f'policy:={path}'],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for path in (tmp_path / 'absent', corrupt)]
    assert env.wait(timeout=60) == 0, (tmp_path / 'env.log').read_text()
    assert '2 episodes done' in (tmp_path / 'env.log').read_text()
    for proc, reason in zip(bad, ('no checkpoint at', 'is not valid JSON')):
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 2 and reason in stderr, stderr
        assert stderr.count('\n') == 1 and 'Traceback' not in stderr + stdout
