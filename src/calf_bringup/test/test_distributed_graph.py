"""The processes of distributed training: learner, workers, the shim on the learner link, a remote worker."""
from __future__ import annotations

import pytest
import yaml

from calf_agent.dist.key import KEY_ENV, create_key, load_key, read_key_file
from calf_bringup import cli
from calf_bringup.distributed import (
    NET_BATCH_TOPIC,
    NET_WEIGHTS_PREFIX,
    RELAY_CONFIG,
    training_graph,
    worker_graph,
)
from calf_core.errors import ConfigError
from calf_shim.topic_relay_config import load_relay_config


def test_learner_and_workers_with_distinct_ids_and_seeds(tmp_path):
    specs = training_graph({'out': str(tmp_path), 'env': 'cartpole', 'network': 'sim_clean'}, workers=3, envs=4,
                           seed=2, learner_network=None, out_dir=tmp_path, key_file='/keys/k')
    assert [s.executable for s in specs] == ['learner_node'] + ['worker_node'] * 3
    workers = [s.parameters for s in specs[1:]]
    assert [w['worker_id'] for w in workers] == ['w0', 'w1', 'w2']
    assert len({w['seed'] for w in workers}) == 3 and {w['envs'] for w in workers} == {4}
    assert {(w['env'], w['network'], w['key_file']) for w in workers} == {('cartpole', 'sim_clean', '/keys/k')}
    assert specs[0].parameters['key_file'] == '/keys/k'
    assert not any('key' in name and name != 'key_file' for s in specs for name in s.parameters)


def test_learner_network_routes_every_topic_through_the_shim(tmp_path):
    specs = training_graph({'out': str(tmp_path)}, workers=2, envs=4, seed=0, learner_network='wifi_degraded',
                           out_dir=tmp_path)
    shim, learner, *workers = specs
    assert shim.executable == 'generic_shim_node' and learner.parameters['weights_prefix'] == NET_WEIGHTS_PREFIX
    assert all(w.parameters['batch_topic'] == NET_BATCH_TOPIC for w in workers)
    entries = load_relay_config(tmp_path / RELAY_CONFIG)  # the shim's own validation
    assert [(e.in_topic, e.out_topic, e.direction.name) for e in entries] == [
        (NET_BATCH_TOPIC, '/calf/dist/batches', 'UPLINK'),
        (f'{NET_WEIGHTS_PREFIX}/w0', '/calf/dist/weights/w0', 'DOWNLINK'),
        (f'{NET_WEIGHTS_PREFIX}/w1', '/calf/dist/weights/w1', 'DOWNLINK')]
    assert {e.profile.name for e in entries} == {'wifi_degraded'}
    assert entries[1].qos.durability == 'transient_local' and entries[0].qos.reliability == 'reliable'
    assert yaml.safe_load((tmp_path / RELAY_CONFIG).read_text())[0]['type'] == 'calf_msgs/msg/ByteChunk'


def test_no_workers_is_refused(tmp_path):
    with pytest.raises(ConfigError, match='--workers must be >= 1'):
        training_graph({}, workers=0, envs=4, seed=0, learner_network=None, out_dir=tmp_path)


def test_a_remote_worker_finds_the_learner_by_static_peers(tmp_path, monkeypatch):
    monkeypatch.setenv('XDG_RUNTIME_DIR', str(tmp_path))  # where the static-peers profile is written
    (spec,) = worker_graph('192.168.1.10', None, 'pi_1', 8, 3, key_file='/k')
    assert spec.parameters == {'envs': 8, 'seed': 3, 'worker_id': 'pi_1', 'env': 'cartpole', 'network': '',
                               'key_file': '/k'}
    assert spec.additional_env['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'SYSTEM_DEFAULT'
    assert worker_graph('localhost', None, '', 8, 3)[0].additional_env == {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST'}


@pytest.mark.parametrize('argv, message', [
    (['train', '--workers', '2', '--sync', 'aps:0', '--out', 'x'], '--sync must be'),
    (['train', '--sync', 'period:4', '--out', 'x'], 'need --workers'),
    (['train', '--workers', '2', '--planner', 'model', '--plan-horizon', '4', '--out', 'x'],
     '--planner model trains in one process'),
    (['train', '--env', 'minigrid', '--workers', '2', '--envs', '2', '--out', 'x'], 'give each worker --envs 4'),
    (['train', '--workers', '2', '--learner-network', 'no_such_profile', '--out', 'x'], 'no_such_profile'),
    (['worker', '--learner', 'localhost', '--id', 'bad id'], '--id must be a name token'),
    (['worker', '--learner', 'not-an-ip', '--key', 'k.key'], 'not an IPv4 address'),
    (['worker', '--learner', 'localhost', '--envs', '0'], '--envs: must be in [1,'),
    (['worker', '--learner', 'localhost', '--key', 'missing.key'], 'missing.key does not exist'),
    (['worker', '--learner', 'localhost', '--key', 'loose.key'], 'chmod 600'),
    (['worker', '--learner', 'localhost', '--key', 'short.key'], 'not a key of at least 64 hex digits'),
    (['worker', '--learner', 'localhost', '--env', 'no_such_env'], 'unknown env'),
    (['train', '--workers', '1', '--resume', '--out', 'x'], 'holds no checkpoint'),
    (['train', '--workers', '4', '--max-workers', '2', '--out', 'x'], 'admits fewer'),
    (['train', '--key', 'k.key', '--out', 'x'], 'need --workers'),
    (['train', '--cluster', 'ray:local', '--out', 'x'], 'need --workers'),
    (['train', '--workers', '2', '--cluster', 'slurm', '--out', 'x'], 'expected ray'),
    (['train', '--workers', '2', '--cluster', 'ray:local', '--learner-network', 'wifi_degraded', '--out', 'x'],
     'drop them'),
])
def test_bad_distributed_arguments_exit_2_with_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(KEY_ENV, raising=False)
    create_key(tmp_path / 'k.key')
    for name, text, mode in (('loose.key', 'ab' * 32, 0o644), ('short.key', 'abcd', 0o600)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(mode)
    try:
        code = cli.main(argv)
    except SystemExit as done:  # argparse's own errors (a bounded argument) exit from the parser
        code = done.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count('\n') == 1


def test_the_key_file_is_created_once_owner_only_and_read_back(tmp_path, monkeypatch):
    path = create_key(tmp_path / 'dist.key')
    assert path.stat().st_mode & 0o777 == 0o600
    key = read_key_file(path)
    assert len(key) == 32 and create_key(path) == path and read_key_file(path) == key  # kept, not replaced
    monkeypatch.setenv(KEY_ENV, key.hex())
    assert load_key('') == key
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConfigError, match='no distributed-training key'):
        load_key('')
