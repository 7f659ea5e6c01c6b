"""Edge sim across two network hosts: two Linux network namespaces joined by a veth pair.

The edge namespace runs ``calf run edge_sim --role edge`` (the env node, plus the shim when a
network is given), the desktop namespace ``calf run edge_sim --role desktop`` (the policy node).
The two find each other with the static-peers discovery profile (``--discovery peers:A,B``) over a
private /30 that exists only inside the namespaces; neither has a route anywhere else. Episode
results are read inside the edge namespace by this file run as a script (``python
test_two_hosts.py listen``), which prints one JSON line per EpisodeResult.

Needs root and iproute2 (``ip netns``, ``tc``); skips otherwise. The namespaces, and every process
left in them, are removed when the module ends, also after a failure. One small CartPole policy is
trained per module (PPO, 20,000 steps under sim_clean, ~15 s). Starting a link until its first
episode with the policy in the loop takes ~10 s, so the sim_clean tests share one (``link``): each
waits for episodes that began after its own start. Latencies are real milliseconds measured by the
env node; multiplied by the time scale they are in profile units.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np
import pytest
from host_load import skip_if_busy

from calf_bringup.graph import NAMESPACE, discovery_env

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SCALE = 4.0
LIVE_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
RESULT_TOPIC = f'{NAMESPACE}/edge/episode_result'
TBF = ('tbf', 'rate', '1mbit', 'burst', '16kb', 'latency', '100ms')
STARVED = ('tbf', 'rate', '64kbit', 'burst', '16kb', 'latency', '100ms')
T = TypeVar('T')
Results = list[dict[str, Any]]


class Hosts(NamedTuple):
    """Two namespaces joined by a veth pair: the namespace, device and address of each end."""

    edge_ns: str
    edge_dev: str
    edge_ip: str
    desktop_ns: str
    desktop_dev: str
    desktop_ip: str

    @property
    def discovery(self) -> str:
        """The ``--discovery`` value of both sides: static peers, no multicast."""
        return f'peers:{self.edge_ip},{self.desktop_ip}'


def ip(*args: str) -> str:
    """Run ``ip ARGS``; its output. A failure raises with ip's own message."""
    done = subprocess.run(['ip', *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f'ip {" ".join(args)}: {done.stderr.strip()}')
    return done.stdout


def tc(ns: str, *args: str) -> str:
    """Run ``tc ARGS`` inside namespace ``ns``; its output."""
    return subprocess.run(['tc', '-n', ns, *args], capture_output=True, text=True, check=True).stdout


def kill_namespace(ns: str) -> None:
    """SIGKILL every process inside ``ns`` (all of them were started by this module)."""
    pids = subprocess.run(['ip', 'netns', 'pids', ns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def create_hosts(hosts: Hosts) -> None:
    """Both namespaces with loopback up, and the veth pair, created inside them, with /30 addresses."""
    ip('link', 'add', hosts.edge_dev, 'netns', hosts.edge_ns, 'type', 'veth',
       'peer', 'name', hosts.desktop_dev, 'netns', hosts.desktop_ns)
    for ns, dev, address in ((hosts.edge_ns, hosts.edge_dev, hosts.edge_ip),
                             (hosts.desktop_ns, hosts.desktop_dev, hosts.desktop_ip)):
        ip('-n', ns, 'link', 'set', 'lo', 'up')
        ip('-n', ns, 'address', 'add', f'{address}/30', 'dev', dev)
        ip('-n', ns, 'link', 'set', dev, 'up')


@pytest.fixture(scope='module')
def hosts() -> Iterator[Hosts]:
    if os.geteuid() != 0:
        pytest.skip('needs root: the test creates network namespaces and a veth pair')
    if shutil.which('ip') is None or shutil.which('tc') is None:
        pytest.skip('needs iproute2 (ip netns, tc)')
    tag = os.getpid()
    hosts = Hosts(f'calf-edge-{tag}', f'ce{tag}', '10.77.0.1', f'calf-desktop-{tag}', f'cd{tag}', '10.77.0.2')
    created = []
    try:
        for ns in (hosts.edge_ns, hosts.desktop_ns):
            try:
                ip('netns', 'add', ns)
            except RuntimeError as err:
                pytest.skip(f'ip netns is unavailable here: {err}')
            created.append(ns)
        create_hosts(hosts)
        yield hosts
    finally:
        for ns in created:
            kill_namespace(ns)
            ip('netns', 'delete', ns)  # takes the veth pair with it


@pytest.fixture(scope='module')
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from calf_agent.regimes import train_policy  # here, not at the top: the listener needs no torch

    out = tmp_path_factory.mktemp('policy') / 'cartpole_baseline'
    train_policy('cartpole', 'sim_clean', seed=0, out_dir=out, steps=20_000, regime='baseline', progress=False)
    return out


class Side:
    """A command running inside a namespace, in its own process group, its output in ``log``."""

    def __init__(self, ns: str, argv: list[str], log: Path, env: dict[str, str] | None = None,
                 stdout: int | None = None) -> None:
        self.log = log
        with open(log, 'a') as out:  # a restarted side appends
            self.process = subprocess.Popen(['ip', 'netns', 'exec', ns, *argv], stdin=subprocess.DEVNULL,
                                            stdout=out if stdout is None else stdout, stderr=out, text=True,
                                            env={**os.environ, **(env or {})}, process_group=0)

    def running(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 8) -> str:
        return f'--- {self.log.name}\n' + '\n'.join(self.log.read_text(errors='replace').splitlines()[-lines:])

    def terminate(self) -> None:
        """SIGTERM: ``calf run`` then stops its nodes."""
        if self.running():
            self.process.terminate()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to the process group after STOP_TIMEOUT_S."""
        self.terminate()
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Listener(Side):
    """EpisodeResults received inside the edge namespace, as dicts, in arrival order."""

    def __init__(self, hosts: Hosts, log: Path, env: dict[str, str]) -> None:
        super().__init__(hosts.edge_ns, [sys.executable, __file__, 'listen'], log,
                         {**env, **discovery_env(hosts.discovery)}, stdout=subprocess.PIPE)
        self.results: Results = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, name='listener', daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.results.append(json.loads(line))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, find: Callable[[Results], T | None], timeout_s: float, sides: list[Side]) -> T | None:
        """Wait until ``find(results)`` finds something, or a side exits, or time runs out."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not find(self.results) and all(side.running() for side in (self, *sides)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(min(remaining, 1.0))  # also wakes up to notice a side that exited
            return find(self.results)

    def last_seq(self) -> int:
        """The seq of the newest result so far (-1 before the first)."""
        with self._changed:
            return max((r['seq'] for r in self.results), default=-1)


def live_after(seq: int) -> Callable[[Results], dict[str, Any] | None]:
    """Finds an episode after ``seq`` played wholly with the policy in the loop: actions reached the env in
    it and in the episode before it."""
    def find(results: Results) -> dict[str, Any] | None:
        driven = {r['seq'] for r in results if r['seq'] > seq and r['actions_applied'] > 0}
        return next((r for r in results if r['seq'] in driven and r['seq'] - 1 in driven), None)
    return find


def first_after(seq: int) -> Callable[[Results], dict[str, Any] | None]:
    """Finds the first episode that surely began after the newest result was ``seq``.

    Episode ``seq + 1`` was running then, and ``seq + 2`` may have begun while that result travelled.
    """
    return lambda results: next((r for r in results if r['seq'] > seq + 2), None)


def held_after(seq: int) -> Callable[[Results], dict[str, Any] | None]:
    """Finds an episode after ``first_after(seq)`` began in which no action reached the env."""
    return lambda results: next((r for r in results if r['seq'] > seq + 2 and r['actions_applied'] == 0), None)


def calf_run(role: str, hosts: Hosts, *options: str) -> list[str]:
    return [sys.executable, '-m', 'calf_bringup.cli', 'run', 'edge_sim', '--role', role,
            '--discovery', hosts.discovery, *options]


class Link:
    """Both sides of edge_sim and a listener, running in the two namespaces."""

    def __init__(self, hosts: Hosts, logs: Path, policy: Path, *options: str, domain_id: int | None = None) -> None:
        self.hosts, self.logs, self.policy = hosts, logs, policy
        self.env = {} if domain_id is None else {'ROS_DOMAIN_ID': str(domain_id)}
        self.options = options
        self.listener = Listener(hosts, logs / 'listener.log', self.env)
        self.edge = Side(hosts.edge_ns, calf_run('edge', hosts, *options), logs / 'edge.log', self.env)
        self.desktop = self.start_desktop()

    def start_desktop(self) -> Side:
        """Start the desktop side (again); it is required to run until ``kill_desktop``."""
        self.desktop = Side(self.hosts.desktop_ns, calf_run('desktop', self.hosts, '--policy', str(self.policy),
                                                            *self.options), self.logs / 'desktop.log', self.env)
        self.desktop_up = True
        return self.desktop

    def kill_desktop(self) -> None:
        """The desktop dies: SIGKILL to its runner and its policy node, no clean shutdown."""
        self.desktop_up = False
        kill_namespace(self.hosts.desktop_ns)
        self.desktop.process.wait()

    def wait_for(self, find: Callable[[Results], T | None], what: str) -> T:
        """What ``find`` finds in the results; fails after LIVE_TIMEOUT_S or once a side has exited."""
        required = [self.edge, self.desktop] if self.desktop_up else [self.edge]
        found = self.listener.wait_for(find, LIVE_TIMEOUT_S, required)
        exited = [f'{side.log.stem} exited with {side.process.returncode}' for side in (*required, self.listener)
                  if not side.running()]
        assert found, f'no {what}: {", ".join(exited) or f"timed out after {LIVE_TIMEOUT_S:g} s"}\n{self.tails()}'
        return found

    def tails(self) -> str:
        return '\n'.join(side.tail() for side in (self.edge, self.desktop, self.listener))

    def stop(self) -> None:
        sides = (self.desktop, self.edge, self.listener)
        for side in sides:
            side.terminate()
        for side in sides:
            side.stop()


@pytest.fixture(scope='module')
def link(hosts: Hosts, policy: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Link]:
    """sim_clean edge sim at time scale 4, shared by the tests that take it."""
    link = Link(hosts, tmp_path_factory.mktemp('link'), policy, '--time-scale', str(SCALE))
    try:
        yield link
    finally:
        link.stop()


def link_stats(ns: str, dev: str) -> dict[str, Any]:
    """The packet and byte counters of ``dev`` in ``ns``."""
    return json.loads(ip('-n', ns, '-j', '-s', 'link', 'show', 'dev', dev))[0]['stats64']


def qdisc_stats(ns: str, dev: str) -> dict[str, Any]:
    """The root qdisc of ``dev`` in ``ns`` with its counters (kind, packets, bytes, drops, ...)."""
    return json.loads(tc(ns, '-j', '-s', 'qdisc', 'show', 'dev', dev))[0]


def test_shim_on_the_edge_adds_its_profile_delay(hosts: Hosts, policy: Path, tmp_path: Path) -> None:
    """delay_only: 25 ms each way, so the E2E p50 is 50 ms plus the real link and the policy's compute, and short of
    the 100 ms the delay would cost if it were paid twice. Time scale 1: what the host's load adds to the real link
    is not multiplied (how little it adds on a quiet host: bench/bench_parity.py).

    Its own link, in a domain of its own in case the shared one runs already (it is first, so it does not).
    """
    skip_if_busy(0.02, realtime=True)
    link = Link(hosts, tmp_path, policy, '--network', 'delay_only', '--time-scale', '1',
                domain_id=int(os.environ.get('ROS_DOMAIN_ID', '0')) + 100)
    try:
        episode = link.wait_for(live_after(-1), 'episode with the policy in the loop')
    finally:
        link.stop()
    p50_ms = float(np.median(episode['e2e_samples_ms']))
    assert 50.0 <= p50_ms < 100.0, episode['e2e_samples_ms']


def test_cartpole_episodes_cross_the_veth(hosts: Hosts, link: Link) -> None:
    before = link_stats(hosts.desktop_ns, hosts.desktop_dev)['rx']['packets']
    episode = link.wait_for(live_after(link.listener.last_seq()), 'episode with the policy in the loop')
    assert episode['length'] >= 8 and episode['episode_return'] == episode['length']
    assert len(episode['e2e_samples_ms']) == episode['actions_applied'] > 0
    assert 0.0 < np.median(episode['e2e_samples_ms']) < 50.0  # a veth, in real ms, on a busy 2-core machine
    crossed = link_stats(hosts.desktop_ns, hosts.desktop_dev)['rx']['packets'] - before
    assert crossed >= episode['length']  # every observation of the episode came over the veth


def test_loop_fits_a_tbf_shaped_veth_and_survives_starving_it(hosts: Hosts, link: Link) -> None:
    """Both ends shaped to 1 Mbit/s: the loop's traffic (about 0.42 Mbit/s each way at time scale 4) passes
    without a drop. Starved to 64 kbit/s, the uplink queues observations for seconds: their actions come too
    late, the env holds every tick of an episode, and keeps ticking. At 1 Mbit/s again the loop closes by
    itself."""
    ends = ((hosts.edge_ns, hosts.edge_dev), (hosts.desktop_ns, hosts.desktop_dev))
    try:
        for ns, dev in ends:
            tc(ns, 'qdisc', 'add', 'dev', dev, 'root', *TBF)
        episode = link.wait_for(live_after(link.listener.last_seq()), 'episode through the shaped veth')
        shaped = [qdisc_stats(ns, dev) for ns, dev in ends]
        assert [(q['kind'], q['drops']) for q in shaped] == [('tbf', 0), ('tbf', 0)], shaped
        assert shaped[0]['packets'] >= episode['length']  # the observations went through the edge's tbf
        assert shaped[1]['packets'] >= episode['actions_applied']  # the actions through the desktop's

        tc(hosts.edge_ns, 'qdisc', 'change', 'dev', hosts.edge_dev, 'root', *STARVED)
        starved = link.wait_for(held_after(link.listener.last_seq()), 'episode held while the uplink starved')
        assert starved['ticks_held'] == starved['length'] and link.edge.running()
        assert qdisc_stats(hosts.edge_ns, hosts.edge_dev)['overlimits'] > shaped[0]['overlimits']

        tc(hosts.edge_ns, 'qdisc', 'change', 'dev', hosts.edge_dev, 'root', *TBF)
        link.wait_for(live_after(link.listener.last_seq()), 'episode once the rate was back')
    finally:
        for ns, dev in ends:
            subprocess.run(['tc', '-n', ns, 'qdisc', 'del', 'dev', dev, 'root'], capture_output=True)


def test_edge_keeps_ticking_while_the_desktop_restarts(link: Link) -> None:
    link.wait_for(live_after(link.listener.last_seq()), 'episode with the policy in the loop')
    link.kill_desktop()
    held = link.wait_for(first_after(link.listener.last_seq()), 'episode after the desktop died')
    assert held['actions_applied'] == 0 and held['ticks_held'] == held['length'] > 0, held
    link.start_desktop()
    resumed = link.wait_for(live_after(link.listener.last_seq()), 'episode with the restarted policy')
    assert resumed['actions_applied'] > 0 and link.edge.running()


def test_a_worker_in_one_namespace_trains_the_learner_in_the_other(hosts: Hosts, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Distributed training across the veth: the learner node in the desktop namespace, ``calf worker``
    joining it from the edge namespace by static peers."""
    from ament_index_python.packages import get_package_prefix

    monkeypatch.setenv('XDG_RUNTIME_DIR', str(tmp_path))  # both sides write their peers profile here

    from calf_agent.dist.key import create_key

    out = tmp_path / 'run'
    key = create_key(tmp_path / 'dist.key')  # the file calf train --workers would write, copied to the worker
    exe = Path(get_package_prefix('calf_agent')) / 'lib' / 'calf_agent' / 'learner_node'
    params = {'out': str(out), 'network': 'sim_clean', 'regime': 'baseline', 'steps': 4096, 'eval_every': 4096,
              'eval_episodes': 3, 'key_file': str(key)}
    argv = [str(exe), '--ros-args', '-r', f'__ns:={NAMESPACE}', *(a for k, v in params.items() for a in ('-p', f'{k}:={v}'))]
    learner = Side(hosts.desktop_ns, argv, tmp_path / 'learner.log', discovery_env(hosts.discovery))
    worker = Side(hosts.edge_ns, [sys.executable, '-m', 'calf_bringup.cli', 'worker', '--learner', hosts.desktop_ip,
                                  '--discovery', hosts.discovery, '--id', 'edge_1', '--envs', '4', '--key', str(key)],
                  tmp_path / 'worker.log')
    try:
        assert learner.process.wait(240) == 0, learner.tail() + worker.tail()
        assert worker.running(), worker.tail()
    finally:
        worker.stop()
        learner.stop()
    summary = json.loads((out / 'distributed.json').read_text())
    assert summary['workers'] == ['edge_1'] and summary['env_steps'] >= 4096
    assert summary['weights_sent']['bytes'] > 0 and not summary['refused']


def listen() -> None:
    """Print every EpisodeResult on RESULT_TOPIC as a JSON line, until SIGTERM or SIGINT."""
    import rclpy
    from rclpy.executors import ExternalShutdownException

    from calf_msgs.msg import EpisodeResult
    from calf_ros.qos import RESULTS

    def on_result(msg: EpisodeResult) -> None:
        print(json.dumps({'seq': msg.seq, 'length': msg.length, 'episode_return': msg.episode_return,
                          'actions_applied': msg.actions_applied, 'ticks_held': msg.ticks_held,
                          'e2e_samples_ms': [float(v) for v in msg.e2e_samples_ms]}), flush=True)

    signal.signal(signal.SIGTERM, lambda *_: rclpy.try_shutdown())
    rclpy.init()
    node = rclpy.create_node('two_hosts_listener')
    node.create_subscription(EpisodeResult, RESULT_TOPIC, on_result, RESULTS)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__' and sys.argv[1:] == ['listen']:
    listen()
