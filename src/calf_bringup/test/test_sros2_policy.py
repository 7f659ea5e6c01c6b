"""The shipped SROS2 policy grants each node of the flat edge_sim graph exactly the topics it uses."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from calf_bringup.graph import build_graph
from calf_bringup.run_options import RunOptions

POLICY = Path(__file__).resolve().parents[1] / 'config' / 'sros2_policy.xml'


def granted(node: str) -> dict[str, set[str]]:
    """The /calf/... topics a node's profile may publish and subscribe (ROS graph topics left out)."""
    root = ET.parse(POLICY).getroot()
    [profile] = [p for p in root.iter('profile') if p.get('node') == node]
    out: dict[str, set[str]] = {'publish': set(), 'subscribe': set()}
    for topics in profile.iter('topics'):
        for mode in out:
            if topics.get(mode) == 'ALLOW':
                out[mode] |= {f'/calf/{t.text}' for t in topics.iter('topic') if not t.text.startswith('/')}
    return out


def test_the_policy_matches_the_graph_wiring() -> None:
    nodes = {spec.name: spec for spec in build_graph(RunOptions.of('edge_sim', network='wifi_normal', policy='/ckpt'))}
    env_topics = {target for _, target in nodes['env'].remappings}
    assert granted('env') == {'publish': env_topics - {'/calf/edge/action'}, 'subscribe': {'/calf/edge/action'}}
    policy = dict(nodes['policy'].remappings)
    assert granted('policy') == {'publish': {policy['action']}, 'subscribe': {policy['observation']}}
    shim = granted('shim')
    assert shim['subscribe'] == {'/calf/edge/observation', '/calf/desktop/action'}
    assert shim['publish'] == {'/calf/desktop/observation', '/calf/edge/action', '/calf/shim/link_stats'}
