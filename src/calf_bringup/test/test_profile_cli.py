"""calf profile show|schema, and the parts of calf eval that name the ROS domain, the E2E figures and a
policy slower than its profile."""
from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pytest

from calf_bringup import cli
from calf_bringup.cmd_eval import choose_domain, slow_compute_warning, with_e2e_definitions
from calf_core.errors import ConfigError
from calf_core.profile_schema import PROFILE_KEYS, STAGES, json_schema

MANUAL = Path(__file__).resolve().parents[3] / 'docs' / 'networks.md'


def test_schema_lists_every_stage_and_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(['profile', 'schema']) == 0
    text = capsys.readouterr().out
    for schema in STAGES.values():
        assert f'  {schema.model}: ' in text
        for key in schema.keys:
            assert f'    {key.name}: ' in text, (schema.model, key.name)
    assert cli.main(['profile', 'schema', '--json']) == 0
    document = json.loads(capsys.readouterr().out)
    assert document == json.loads(json.dumps(json_schema()))
    stages = {s['title']: s for s in document['$defs']['stage']['oneOf']}
    assert set(stages) == set(STAGES)
    assert stages['bandwidth']['properties']['rate_kbps'] == {
        'description': 'link rate (kbit/s)', 'type': 'number', 'minimum': 1.0, 'maximum': 1e8}
    assert document['properties']['reorder']['default'] is False


def test_the_manual_documents_every_stage_and_key() -> None:
    section = MANUAL.read_text().split('## Network profiles', 1)[1].split('\n## ', 1)[0]
    for key in PROFILE_KEYS:
        assert f'`{key.name}`' in section, key.name
    for schema in STAGES.values():
        assert f'`{schema.model}`' in section, schema.model
        for key in schema.keys:
            assert re.search(rf'`{key.name}`', section), (schema.model, key.name)


def test_show_names_defaults_and_both_e2e_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / 'lab.yaml'
    path.write_text('uplink:\n  - {model: gaussian_delay, mean_ms: 25, std_ms: 40}\n'
                    '  - {model: stall, duration_ms: {dist: uniform, low: 150, high: 300}, period_ms: 2000}\n'
                    'downlink: []\n')
    assert cli.main(['profile', 'show', str(path), '--samples', '3000']) == 0
    text = capsys.readouterr().out
    assert 'reorder uplink false, downlink false (default) (false = FIFO)' in text
    assert 'compute_ms 1 (default)' in text and 'mode: periodic (default)' in text
    assert 'E2E all messages' in text and 'E2E acted-on obs' in text
    assert cli.main(['profile', 'show', str(path), '--samples', '3000', '--json']) == 0
    report = json.loads(capsys.readouterr().out)
    assert report['defaults_used'] == ['name', 'description', 'compute_ms', 'reorder']
    assert report['uplink'][1]['defaults_used'] == ['mode']
    assert set(report['e2e_latency_ms']) == {'all_messages', 'acted_on'}
    assert all(fig['definition'] for fig in report['e2e_latency_ms'].values())


def test_a_bad_profile_is_one_line_and_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / 'slow.yaml'
    path.write_text('uplink:\n  - {model: bandwidth, rate_kbps: 1.0e-300, queue_packets: 5}\ndownlink: same\n')
    assert cli.main(['profile', 'show', str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count('\n') == 0
    assert "uplink[0]: bandwidth: rate_kbps must be in [1, 1e+08] kbit/s, got 1e-300" in err


@pytest.mark.parametrize('given, environ, expected, source', [
    (7, {'ROS_DOMAIN_ID': '12'}, 7, '--domain-id'),
    (None, {'ROS_DOMAIN_ID': '12'}, 12, 'ROS_DOMAIN_ID'),
    (None, {}, None, 'random private domain'),
])
def test_eval_domain_comes_from_the_flag_then_the_environment(given, environ, expected, source) -> None:
    log = io.StringIO()
    domain = choose_domain(given, environ, log)
    assert domain == expected if expected is not None else 1 <= domain <= 101
    assert log.getvalue() == f'[calf] ROS domain {domain} ({source})\n'


@pytest.mark.parametrize('given, environ, message', [
    (300, {}, '--domain-id: the ROS domain id must be in 0..232, got 300'),
    (None, {'ROS_DOMAIN_ID': 'lab'}, "ROS_DOMAIN_ID must be an integer in 0..232, got 'lab'"),
])
def test_bad_domain_is_a_config_error(given, environ, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        choose_domain(given, environ, io.StringIO())


def test_eval_report_names_its_e2e_figure_and_adds_the_all_messages_one() -> None:
    report = with_e2e_definitions({'e2e_latency_ms': {'p50': 40.0, 'p95': 60.0, 'samples': 10}},
                                  'ablation_jitter', 'flat_desktop', 0)
    assert 'acted on' in report['e2e_latency_ms']['definition']
    every = report['e2e_all_messages_ms']
    assert every['p95'] > 150 and 'every delivered round trip' in every['definition']
    edge = with_e2e_definitions({'e2e_latency_ms': {}}, 'ablation_jitter', 'flat_edge', 0)
    assert edge['e2e_all_messages_ms']['p95'] == 0.0  # the policy sits beside the env: no network


@pytest.mark.parametrize('p50, assumed, warned', [(4.2, 1.0, True), (1.4, 1.0, False), (1.9, 1.0, False),
                                                   (0.8, 0.0, False), (2.1, 0.0, True), (30.0, 20.0, False),
                                                   (31.0, 20.0, True), (None, 1.0, False)])  # None: virtual time
def test_eval_warns_when_the_live_policy_answers_slower_than_its_profile_assumes(p50: float | None, assumed: float,
                                                                                 warned: bool) -> None:
    """More than 1.5 times and 1 ms beyond the profile's compute_ms: the warning names both and the fix."""
    warning = slow_compute_warning({'policy_compute_ms': {'p50': p50, 'p95': p50, 'samples': 5,
                                                          'profile_assumes': assumed}})
    assert (warning is not None) == warned
    if warned:
        assert f'{p50:.1f} ms' in warning and f'compute_ms: {math.ceil(p50)}' in warning
