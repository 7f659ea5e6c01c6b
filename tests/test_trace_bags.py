"""Trace bags end to end: synth -> bag -> info, independent MCAP reading, damaged bags, import,
deterministic replay, flush durability, and a live recording stopped by SIGINT or SIGKILL."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from ros_helpers import new_context, spin_until
from rosbags.rosbag2 import StoragePlugin, Writer

from calf_core.bags import (
    TRACE_TOPIC,
    TRACE_TYPE,
    TraceBagWriter,
    import_bag,
    read_trace_bag,
    recover_bag,
    typestore,
    write_trace_bag,
)
from calf_core.errors import TraceError
from calf_core.network import resolve_network
from calf_core.profiles import load_profile
from calf_core.traces import Sample, synth_trace
from calf_ros.conversions import time_msg

CALF = [sys.executable, '-m', 'calf_bringup.cli']


def calf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CALF, *args], capture_output=True, text=True, env=os.environ, timeout=60)


def within_sampling_error(samples: np.ndarray, reference: np.ndarray, q: float) -> None:
    """The reference's q-quantile sits at level q of the samples' CDF, within 4 standard errors."""
    level = float(np.mean(samples <= np.quantile(reference, q)))
    assert abs(level - q) < 4 * np.sqrt(q * (1 - q) / samples.size), (q, level)


@pytest.mark.slow
def test_synth_bag_info_reproduces_the_profile(tmp_path):
    bag = tmp_path / 'fna'
    synth = calf('trace', 'synth', '--profile', 'full_net_aware', '--duration', '120', '--seed', '1', '--out', str(bag))
    assert synth.returncode == 0, synth.stderr
    info = calf('trace', 'info', str(bag), '--json', '--plot', str(tmp_path / 'fna.png'))
    assert info.returncode == 0, info.stderr
    report = json.loads(info.stdout)
    assert (tmp_path / 'fna.png').stat().st_size > 0
    assert report['samples'] == json.loads(synth.stdout)['samples']
    reference = synth_trace(load_profile('full_net_aware'), duration_s=2000.0, seed=99)  # an independent sample
    trace = read_trace_bag(bag)
    for name, d in trace.directions().items():
        stats = report[name]
        n = stats['messages']
        assert abs(stats['loss_rate'] - 0.05) < 4 * np.sqrt(0.05 * 0.95 / n)
        delays, ref = d.delays_ms[~d.lost], reference.directions()[name].delays_ms
        ref = ref[~np.isnan(ref)]
        for q in (0.5, 0.95, 0.99):
            within_sampling_error(delays, ref, q)
        assert stats['latency_ms']['p50'] == pytest.approx(np.percentile(delays, 50))


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_bag_round_trip_is_exact(tmp_path, storage):
    trace = synth_trace(load_profile('wifi_normal'), duration_s=20.0, seed=2)
    assert write_trace_bag(tmp_path / 'b', trace, storage) == len(trace)
    assert sorted(read_trace_bag(tmp_path / 'b').samples()) == sorted(trace.samples())
    suffix = '.mcap' if storage == 'mcap' else '.db3'
    assert len(read_trace_bag(tmp_path / 'b' / f'b{suffix}')) == len(trace)  # the bare storage file reads too


def test_independent_mcap_reader_decodes_the_bag(tmp_path):
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    trace = synth_trace(load_profile('full_net_aware'), duration_s=5.0, seed=3)
    write_trace_bag(tmp_path / 'm', trace)
    with open(tmp_path / 'm' / 'm.mcap', 'rb') as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        decoded = [(schema.name, channel.topic, msg) for schema, channel, _, msg in reader.iter_decoded_messages()]
    assert {(name, topic) for name, topic, _ in decoded} == {(TRACE_TYPE, TRACE_TOPIC)}
    rows = sorted(Sample(m.direction, m.seq, m.sent_ns, m.received_ns, m.size_bytes, m.lost) for _, _, m in decoded)
    assert rows == sorted(trace.samples())


def write_messages_bag(path: Path, topics: dict[str, list[tuple[int, object]]]) -> None:
    """A bag of calf_msgs topics as ``ros2 bag record`` writes it: {topic: [(log_ns, rclpy message)]}."""
    from rclpy.serialization import serialize_message

    store = typestore()
    writer = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
    writer.open()
    for topic, messages in topics.items():
        msgtype = f'calf_msgs/msg/{type(messages[0][1]).__name__}'
        connection = writer.add_connection(topic, msgtype, typestore=store)
        for log_ns, msg in messages:
            writer.write(connection, log_ns, serialize_message(msg))
    writer.close()


def make_obs(seq: int, stamp_ns: int) -> object:
    from calf_msgs.msg import Observation

    return Observation(header=_header(stamp_ns), seq=seq, data=[0.0] * 4, shape=[4], reward=1.0)


def make_action(obs_seq: int, stamp_ns: int) -> object:
    from calf_msgs.msg import Action

    return Action(header=_header(stamp_ns), obs_seq=obs_seq, discrete=1, source='test', compute_ms=1.0)


def _header(stamp_ns: int) -> object:
    from std_msgs.msg import Header

    return Header(stamp=time_msg(stamp_ns))


@pytest.mark.slow
def test_import_derives_a_trace_from_observation_and_action_topics(tmp_path):
    ms = 1_000_000
    received_obs = [(k * 20 * ms + 7 * ms, make_obs(k, k * 20 * ms)) for k in range(10) if k != 4]
    sent = [(k * 20 * ms + 8 * ms, make_action(k, k * 20 * ms + 8 * ms)) for k in range(10) if k != 4]
    arrived = [(t + 5 * ms, a) for t, a in sent if a.obs_seq != 6]
    write_messages_bag(tmp_path / 'robot', {'/calf/desktop/observation': received_obs,
                                            '/calf/desktop/action': sent, '/calf/edge/action': arrived})
    with pytest.raises(TraceError, match='needs `calf trace import` first'):
        read_trace_bag(tmp_path / 'robot')
    trace = import_bag(tmp_path / 'robot')
    assert trace.uplink.lost.tolist() == [k == 4 for k in range(10)]
    assert np.allclose(trace.uplink.delays_ms[~trace.uplink.lost], 7.0)
    assert trace.downlink.lost.tolist() == [k == 6 for k in range(10) if k != 4]
    assert np.allclose(trace.downlink.delays_ms[~trace.downlink.lost], 5.0)
    result = calf('trace', 'import', str(tmp_path / 'robot'), '--out', str(tmp_path / 'trace'))
    assert result.returncode == 0, result.stderr
    assert sorted(read_trace_bag(tmp_path / 'trace').samples()) == sorted(trace.samples())


def damage(bag: Path, how: str) -> Path:
    data_file = bag / f'{bag.name}.mcap'
    if how == 'truncated':
        os.truncate(data_file, data_file.stat().st_size // 2)
    elif how == 'corrupt':
        data = bytearray(data_file.read_bytes())
        data[200:len(data) - 200] = bytes(len(data) - 400)
        data_file.write_bytes(data)
    elif how == 'unclosed':
        (bag / 'metadata.yaml').unlink()
    elif how == 'not_a_bag':
        data_file.write_bytes(b'not an mcap file at all')
    return bag


@pytest.mark.parametrize('how', ['truncated', 'corrupt', 'unclosed', 'not_a_bag', 'missing', 'no_trace_topic'])
def test_damaged_bags_raise_one_line_errors(tmp_path, how):
    bag = tmp_path / 'bag'
    if how == 'no_trace_topic':
        write_messages_bag(bag, {'/calf/edge/observation': [(1, make_obs(0, 0))]})
    elif how != 'missing':
        write_trace_bag(bag, synth_trace(load_profile('full_net_aware'), 10.0, seed=0))
        damage(bag, how)
    with pytest.raises(TraceError) as err:
        read_trace_bag(bag)
    assert '\n' not in str(err.value) and str(bag) in str(err.value)


@pytest.mark.slow
def test_cli_info_on_a_damaged_bag_exits_2_with_one_line(tmp_path):
    bag = tmp_path / 'bag'
    write_trace_bag(bag, synth_trace(load_profile('full_net_aware'), 10.0, seed=0))
    damage(bag, 'truncated')
    result = calf('trace', 'info', str(bag))
    assert result.returncode == 2
    assert result.stdout == '' and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith('calf trace: error: cannot read bag')


def returns_under(profile: object, seed: int, episodes: int = 3) -> list[float]:
    """A fixed controller (push towards the pole's lean) on networked CartPole."""
    from calf_core.envs import make_networked_env

    env = make_networked_env('cartpole', profile, seed=seed)
    returns = []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(obs[2] + 0.5 * obs[3] > 0))
            total, done = total + reward, terminated or truncated
        returns.append(total)
        obs, _ = env.reset()
    return returns


def test_replay_of_a_bag_is_deterministic_for_a_seed(tmp_path):
    write_trace_bag(tmp_path / 'wifi', synth_trace(load_profile('wifi_normal'), 30.0, seed=5))
    profile = resolve_network(str(tmp_path / 'wifi'))
    assert profile.name == 'wifi' and profile.uplink[0]['model'] == 'trace_replay'
    first = returns_under(profile, seed=11)
    assert returns_under(resolve_network(str(tmp_path / 'wifi')), seed=11) == first


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_flushed_samples_survive_an_unclosed_writer(tmp_path, storage):
    """What a SIGKILL leaves: the files as they are on disk while the writer is still open."""
    rows = synth_trace(load_profile('full_net_aware'), 10.0, seed=6).samples()
    writer = TraceBagWriter(tmp_path / 'live', storage)
    for k, row in enumerate(rows[:300]):
        writer.write_sample(row, k)
    writer.flush()
    for k, row in enumerate(rows[300:400]):
        writer.write_sample(row, 300 + k)  # written after the last flush: lost on a kill
    shutil.copytree(tmp_path / 'live', tmp_path / 'killed')
    writer.close()
    with pytest.raises(TraceError, match='calf trace recover'):
        read_trace_bag(tmp_path / 'killed')
    assert sorted(read_trace_bag(tmp_path / 'killed', recover=True).samples()) == sorted(rows[:300])
    recover_bag(tmp_path / 'killed', tmp_path / 'recovered')
    assert len(read_trace_bag(tmp_path / 'recovered')) == 300


# --- live recording ---------------------------------------------------------------------------

def _publish_round(pubs: dict, episode: int, seq: int, obs_lost: bool = False, action_lost: bool = False) -> None:
    """One observation on both sides (unless lost) and, if it arrived, its action on both sides (unless lost)."""
    from calf_msgs.msg import Action, Observation

    observation = Observation(seq=seq, episode=episode)
    pubs['edge/observation'].publish(observation)
    if obs_lost:
        return
    pubs['desktop/observation'].publish(observation)
    pubs['desktop/action'].publish(Action(obs_seq=seq, episode=episode))
    if not action_lost:
        pubs['edge/action'].publish(Action(obs_seq=seq, episode=episode))


@pytest.fixture
def live() -> tuple[list[subprocess.Popen], object]:
    """A private ROS context, and a list of processes that are killed at teardown if still running."""
    started: list[subprocess.Popen] = []
    context = new_context()
    yield started, context
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=15)
    context.try_shutdown()


def _record_and_publish(tmp_path: Path, extra: list[str], live: tuple) -> tuple[subprocess.Popen, list, int, Node]:
    """Start `calf trace record`, then stand in for both sides of the link.

    Warm-up rounds go out until a delivered sample comes back in each direction: DDS matching is
    per endpoint, and a best-effort subscription drops what is published before it matched. Then
    20 observations: those with seq % 5 == 3 never reach the desktop side, and the actions for
    seq % 4 == 1 never reach the edge. Returns once the recorder has published all their samples,
    with every sample published and the steady-clock time the 20 began (the recorder's clock)."""
    from calf_msgs.msg import Action, Observation, TraceSample
    from calf_ros.qos import RESULTS

    started, context = live
    namespace = f'/calf_trace_test_{os.getpid()}'
    recorder = subprocess.Popen([*CALF, 'trace', 'record', '--out', str(tmp_path / 'rec'), '--namespace', namespace,
                                 '--loss-timeout', '0.5', *extra], env=os.environ)
    started.append(recorder)
    node = Node('stand_in', namespace=namespace, context=context)
    pubs = {t: node.create_publisher(Observation if t.endswith('observation') else Action, t, 100)
            for t in ('edge/observation', 'desktop/observation', 'desktop/action', 'edge/action')}
    got: list = []
    node.create_subscription(TraceSample, 'trace', got.append, RESULTS)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)

    def delivered_both_ways() -> bool:
        return {m.direction for m in got if not m.lost} == {0, 1}

    for seq in range(600):
        _publish_round(pubs, episode=1000, seq=seq)
        if spin_until(executor, delivered_both_ways, timeout_s=0.05):
            break
    assert delivered_both_ways(), 'the recorder did not come up'
    # The last warm-up messages may still be in the recorder's queue: wait until their samples are out
    # (the loss timeout is 0.5 s), so that none of them is stamped after start_ns.
    assert spin_until(executor, _quiet_for(got, 1.0), timeout_s=15.0), 'warm-up samples kept coming'
    start_ns = time.monotonic_ns()  # CLOCK_MONOTONIC: the recorder's steady clock on this host
    for seq in range(20):
        _publish_round(pubs, episode=0, seq=seq, obs_lost=seq % 5 == 3, action_lost=seq % 4 == 1)
    assert spin_until(executor, lambda: sum(m.sent_ns >= start_ns for m in got) >= 36, timeout_s=20.0), \
        f'{len(got)} samples published'
    return recorder, got, start_ns, node


def _quiet_for(samples: list, quiet_s: float) -> Callable[[], bool]:
    """A condition that holds once ``samples`` has not grown for ``quiet_s`` seconds."""
    last = {'count': -1, 'since': time.monotonic()}

    def quiet() -> bool:
        if len(samples) != last['count']:
            last['count'], last['since'] = len(samples), time.monotonic()
        return time.monotonic() - last['since'] >= quiet_s

    return quiet


def _check_fates(trace, start_ns: int) -> None:
    """The 20 observations and 16 actions of episode 0 met the fates they were given."""
    uplink, downlink = trace.uplink, trace.downlink
    assert uplink.lost[uplink.sent_ns >= start_ns].tolist() == [k % 5 == 3 for k in range(20)]
    assert downlink.lost[downlink.sent_ns >= start_ns].tolist() == [k % 4 == 1 for k in range(20) if k % 5 != 3]


@pytest.mark.slow
@pytest.mark.ros
def test_recording_interrupted_by_sigint_keeps_every_sample(tmp_path, live):
    """SIGINT closes the bag with every sample and, with ``--raw``, every raw message of the 20 rounds.

    The raw messages of episode 0 are counted, not all of them: the warm-up goes on until each of the
    recorder's four subscriptions has received a message, and each matches its publisher on its own, so
    how many warm-up messages each topic holds differs from run to run (4 edge actions against 5 of each
    other message, in one of ten runs on a loaded host)."""
    recorder, got, start_ns, node = _record_and_publish(tmp_path, ['--raw', '--flush-period', '60'], live)
    recorder.send_signal(signal.SIGINT)
    assert recorder.wait(timeout=15) == 0
    trace = read_trace_bag(tmp_path / 'rec')
    published = sorted(Sample(m.direction, m.seq, m.sent_ns, m.received_ns, m.size_bytes, m.lost) for m in got)
    assert sorted(trace.samples()) == published  # nothing was flushed before the SIGINT: close wrote it all
    _check_fates(trace, start_ns)
    ns = node.get_namespace()
    raw = _raw_messages(tmp_path / 'rec' / 'rec.mcap')
    assert raw.pop(TRACE_TOPIC) == [None] * len(got)
    assert {topic: episodes.count(0) for topic, episodes in raw.items()} == {
        f'{ns}/edge/observation': 20, f'{ns}/desktop/observation': 16, f'{ns}/desktop/action': 16,
        f'{ns}/edge/action': 12}
    assert {episode for episodes in raw.values() for episode in episodes} == {0, 1000}  # the rest is warm-up


def _raw_messages(mcap_file: Path) -> dict[str, list[int | None]]:
    """Per topic of an MCAP bag, the episode of each raw Observation or Action in order (None: a TraceSample)."""
    from mcap.reader import make_reader
    from rclpy.serialization import deserialize_message

    from calf_msgs.msg import Action, Observation

    raw: dict[str, list[int | None]] = {}
    with open(mcap_file, 'rb') as f:
        for _, channel, message in make_reader(f).iter_messages():
            topic, episode = channel.topic, None
            if topic != TRACE_TOPIC:
                kind = Observation if topic.endswith('observation') else Action
                episode = deserialize_message(message.data, kind).episode
            raw.setdefault(topic, []).append(episode)
    return raw


@pytest.mark.slow
@pytest.mark.ros
def test_recording_killed_keeps_every_flushed_sample(tmp_path, live):
    recorder, got, start_ns, node = _record_and_publish(tmp_path, ['--flush-period', '0.2'], live)
    assert spin_until(SingleThreadedExecutor(context=node.context), lambda: _readable(tmp_path / 'rec') >= len(got),
                      timeout_s=10.0)
    recorder.send_signal(signal.SIGKILL)
    recorder.wait(timeout=15)
    with pytest.raises(TraceError, match='never closed'):
        read_trace_bag(tmp_path / 'rec')
    _check_fates(read_trace_bag(tmp_path / 'rec', recover=True), start_ns)


def _readable(bag: Path) -> int:
    try:
        return len(read_trace_bag(bag, recover=True))
    except TraceError:
        return 0


@pytest.mark.slow
@pytest.mark.ros
def test_recorder_measures_the_shim(tmp_path, live):
    """The real shim (in process) under delay_only: the recorder sees about 25 ms each way, no loss."""
    from rclpy.parameter import Parameter

    from calf_msgs.msg import Action, Observation, TraceSample
    from calf_ros.qos import RESULTS, STREAM
    from calf_shim.shim_node import ShimNode

    started, context = live
    namespace = f'/calf_trace_shim_{os.getpid()}'
    recorder = subprocess.Popen([*CALF, 'trace', 'record', '--out', str(tmp_path / 'rec'), '--namespace', namespace],
                                env=os.environ)
    started.append(recorder)
    shim = ShimNode(context=context, namespace=namespace,
                    parameter_overrides=[Parameter('network', value='delay_only')])
    node = Node('stand_in', namespace=namespace, context=context)
    observations = node.create_publisher(Observation, 'edge/observation', STREAM.profile())
    actions = node.create_publisher(Action, 'desktop/action', STREAM.profile())
    node.create_subscription(Observation, 'desktop/observation',
                             lambda m: actions.publish(Action(obs_seq=m.seq, episode=m.episode)), STREAM.profile())
    got: list = []
    node.create_subscription(TraceSample, 'trace', got.append, RESULTS)
    ticks = iter(range(10**6))
    node.create_timer(0.02, lambda: observations.publish(Observation(seq=next(ticks), episode=0)))
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(shim)
    try:
        assert spin_until(executor, lambda: all(sum(m.direction == d and not m.lost for m in got) >= 50
                                                for d in (0, 1)), timeout_s=40.0), f'{len(got)} samples'
        recorder.send_signal(signal.SIGINT)
        assert recorder.wait(timeout=15) == 0
    finally:
        shim.destroy_node()
    trace = read_trace_bag(tmp_path / 'rec')
    for name, d in trace.directions().items():
        assert 24.0 <= float(np.median(d.delays_ms[~d.lost])) <= 35.0, name
        assert d.lost.mean() <= 0.05, name
