"""Message fuzz: hostile traffic of every CALF message type into a running env, policy and shim.

``run_fuzz`` starts an env node and a policy node (one namespace, wired directly) and a shim node
(another namespace) in one private context, lets the pair complete an episode, then publishes
``messages`` seeded, randomised messages: half well-typed messages with hostile field values
(sizes up to 4x the plan bound, NaN and infinity, extreme integers, forged run and episode ids),
half serialized valid messages with bytes flipped or cut (the middleware drops what does not
deserialize, with a line on stderr; the env counts those in ``dropped_middleware``, from the gap each
leaves in the publisher's sequence numbers). Afterwards it checks that episodes go on with the policy's actions. The report
holds what each node received, refused and did, and the process's resident memory over time.

    python tests/message_fuzz.py --messages 100000 --seed 0 --policy CKPT   # the long mode (bench/)
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.serialization import serialize_message

from calf_agent.nodes.policy_node import PolicyNode
from calf_core.limits import MAX_PLAN_HORIZON
from calf_env.env_node import EnvNode
from calf_msgs.msg import Action, EpisodeResult, LinkStats, Observation
from calf_ros.qos import RESULTS, STREAM
from calf_shim.shim_node import ShimNode

PACE = 4
"""Messages published between two pauses that let the nodes' executor run."""
INTS = [0, 1, -1, 2, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 63 - 1, -2 ** 63]
FLOATS = [0.0, -0.0, 1e38, -1e38, float('nan'), float('inf'), float('-inf'), 1e-45]


def _int(rng: np.random.Generator, low: int, high: int) -> int:
    """An extreme or random integer in [low, high]."""
    if rng.random() < 0.5:
        return min(max(INTS[int(rng.integers(len(INTS)))], low), high)
    return int(rng.integers(low, high, endpoint=True, dtype=np.int64)) if high < 2 ** 63 else \
        int(rng.integers(0, 2 ** 63 - 1, dtype=np.int64)) * (1 if rng.random() < 0.5 else 2)


def _floats(rng: np.random.Generator, n: int) -> list[float]:
    values = rng.normal(size=n) * 10.0 ** rng.integers(-3, 30)
    for i in rng.integers(0, max(n, 1), int(rng.integers(0, 3))) if n else []:
        values[i] = FLOATS[int(rng.integers(len(FLOATS)))]
    return [float(np.float32(v)) for v in values]


def _length(rng: np.random.Generator) -> int:
    """0, small, around the plan bound, or up to 4x it."""
    return int(rng.choice([0, int(rng.integers(1, 8)), MAX_PLAN_HORIZON + int(rng.integers(-2, 3)),
                           int(rng.integers(1, 4 * MAX_PLAN_HORIZON))]))


def hostile_observation(rng: np.random.Generator, run: int, episode: int) -> Observation:
    n = int(rng.choice([4, 4, _length(rng)]))
    msg = Observation(seq=_int(rng, 0, 2 ** 64 - 1), episode=episode if rng.random() < 0.5 else _int(rng, 0, 2 ** 32 - 1),
                      run=run if rng.random() < 0.5 else _int(rng, 0, 2 ** 32 - 1), reward=_floats(rng, 1)[0],
                      terminated=bool(rng.random() < 0.2), truncated=bool(rng.random() < 0.2))
    msg.data = _floats(rng, n)
    msg.shape = [_int(rng, 0, 2 ** 32 - 1) for _ in range(int(rng.integers(0, 4)))] if rng.random() < 0.5 else [n]
    return msg


def hostile_action(rng: np.random.Generator, episode: int, seq: int) -> Action:
    msg = Action(obs_seq=seq if rng.random() < 0.5 else _int(rng, 0, 2 ** 64 - 1),
                 episode=episode if rng.random() < 0.5 else _int(rng, 0, 2 ** 32 - 1),
                 discrete=_int(rng, -2 ** 63, 2 ** 63 - 1), source='x' * int(rng.integers(0, 2000)),
                 compute_ms=_floats(rng, 1)[0])
    msg.discrete_plan = [_int(rng, -2 ** 63, 2 ** 63 - 1) if rng.random() < 0.1 else int(rng.integers(0, 3))
                         for _ in range(_length(rng))]
    msg.continuous = _floats(rng, int(rng.integers(0, 4)))
    return msg


def damaged(msg: Any, rng: np.random.Generator) -> bytes:
    """``msg`` serialized, then with bytes flipped, cut or appended."""
    data = bytearray(serialize_message(msg))
    for i in rng.integers(4, len(data), int(rng.integers(1, 8))):
        data[i] = int(rng.integers(256))
    if rng.random() < 0.3:
        data = data[:int(rng.integers(4, len(data)))]
    elif rng.random() < 0.2:
        data += rng.bytes(int(rng.integers(1, 64)))
    return bytes(data)


def rss_kb() -> int:
    """Resident memory of this process (kB)."""
    for line in Path('/proc/self/status').read_text().splitlines():
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
    return 0


class Fuzzer(Node):
    """Publishes hostile messages on every topic the nodes read; records what the env reports."""

    def __init__(self, context: Context) -> None:
        super().__init__('fuzzer', context=context)
        self.results: list[EpisodeResult] = []
        self.stats: list[LinkStats] = []
        self.create_subscription(EpisodeResult, 'fz/episode_result', self.results.append, RESULTS)
        self.create_subscription(LinkStats, 'fz/link_stats', self.stats.append, RESULTS)
        qos = STREAM.profile()
        self.targets: dict[str, Any] = {
            'policy': self.create_publisher(Observation, 'fz/observation', qos),
            'env': self.create_publisher(Action, 'fz/action', qos),
            'shim_up': self.create_publisher(Observation, 'fzs/edge/observation', qos),
            'shim_down': self.create_publisher(Action, 'fzs/desktop/action', qos),
        }


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``condition`` while the executor thread spins the nodes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not condition():
        time.sleep(0.01)
    return condition()


def run_fuzz(context: Context, policy: Path, messages: int, seed: int, time_scale: float = 4.0) -> dict[str, Any]:
    """Fuzz a live env + policy + shim in ``context``; return the report (see the module doc)."""
    rng = np.random.default_rng(seed)
    executor = SingleThreadedExecutor(context=context)
    spinner = threading.Thread(target=executor.spin, name='fuzz-executor', daemon=True)
    nodes: list[Node] = []
    try:
        env = EnvNode(namespace='fz', context=context, parameter_overrides=[
            Parameter('time_scale', value=time_scale), Parameter('stats_period_s', value=0.5)])
        agent = PolicyNode(namespace='fz', context=context,
                           parameter_overrides=[Parameter('policy', value=str(policy))])
        shim = ShimNode(namespace='fzs', context=context)
        fuzzer = Fuzzer(context)
        nodes = [env, agent, shim, fuzzer]
        for node in nodes:
            executor.add_node(node)
        spinner.start()
        if not wait_until(lambda: len(fuzzer.results) >= 1, 60.0):
            raise RuntimeError('no episode completed before the fuzz')
        memory = [rss_kb()]
        before = (env.rejected, agent.rejected, agent.received, env.actions_received, env.losses.count)
        start = time.monotonic()
        for k in range(messages):
            episode, seq = env.stepper.episode, env.stepper.tick_index  # what a sniffer on the domain sees
            target = list(fuzzer.targets)[k % len(fuzzer.targets)]
            if target in ('policy', 'shim_up'):
                msg: Any = hostile_observation(rng, env.run_id, episode)
            else:
                msg = hostile_action(rng, episode, seq)
            fuzzer.targets[target].publish(damaged(msg, rng) if rng.random() < 0.5 else msg)
            if k % PACE == 0:
                time.sleep(0.001)  # let the executor thread take what arrived: most messages reach a callback
            if k % max(messages // 10, 1) == 0:
                memory.append(rss_kb())
        fuzz_s = time.monotonic() - start
        memory.append(rss_kb())
        first = env.stepper.episode + 1  # the first episode that starts after the fuzz

        def after() -> list[EpisodeResult]:
            return [r for r in fuzzer.results if r.episode >= first]

        recovered = wait_until(lambda: len(after()) >= 3, 120.0)
        return {
            'messages': messages, 'seed': seed, 'fuzz_s': round(fuzz_s, 1),
            'env': {'actions_received': env.actions_received - before[3], 'rejected': env.rejected - before[0],
                    'dropped_middleware': env.losses.count - before[4]},
            'policy': {'received': agent.received - before[2], 'rejected': agent.rejected - before[1],
                       'anomalies': dict(agent.runner.anomalies)},
            'shim': {'received': [shim.releaser.stats(i).counters.received for i in (0, 1)]},
            'rss_kb': memory,
            'episodes_after': len(after()), 'recovered': recovered,
            'actions_applied_after': [r.actions_applied for r in after()],
        }
    finally:
        executor.shutdown()
        if spinner.is_alive():
            spinner.join(timeout=10.0)
        for node in reversed(nodes):
            node.destroy_node()


def main(argv: list[str] | None = None) -> int:
    import rclpy
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--policy', type=Path, required=True, help='a CartPole checkpoint')
    parser.add_argument('--messages', type=int, default=100_000)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    context = Context()
    rclpy.init(context=context)
    try:
        print(json.dumps(run_fuzz(context, args.policy, args.messages, args.seed)))
    finally:
        context.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
