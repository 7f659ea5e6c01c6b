"""Tables 7 and 8 analogs: which rows a task has, and a task without sub-tasks end to end."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calf_bringup.cli import main
from calf_bringup.placement_tables import PLACEMENT_ROWS, PLACEMENT_TABLES, placement_rows


def test_a_task_without_sub_tasks_has_the_flat_rows_only() -> None:
    assert placement_rows(PLACEMENT_TABLES['table8']) == PLACEMENT_ROWS
    assert placement_rows(PLACEMENT_TABLES['table8_dynamic']) == {'Flat (Desktop)': 'flat_desktop',
                                                                  'Flat (Edge)': 'flat_edge'}


@pytest.mark.slow
def test_table8_dynamic_runs_both_flat_placements_in_virtual_time_and_live(tmp_path: Path) -> None:
    """One rollout of training, two episodes per placement in virtual time and through the live node graph."""
    out = tmp_path / 'results'
    assert main(['experiment', 'table8_dynamic', '--seeds', '1', '--episodes', '2', '--steps', '1024',
                 '--workers', '1', '--out', str(out)]) == 0
    result = json.loads((out / 'table8_dynamic.json').read_text())
    assert (result['env'], list(result['rows']), result['goal']) == (
        'minigrid_dynamic', ['Flat (Desktop)', 'Flat (Edge)'], {})
    desktop, edge = result['rows']['Flat (Desktop)'], result['rows']['Flat (Edge)']
    assert desktop['live']['episodes'] == edge['live']['episodes'] == 2
    assert desktop['e2e_p50_ms'] > 10 and edge['e2e_p50_ms'] == 0  # wifi_normal's link, and none at the edge
    assert 'no hierarchical placement' in (out / 'table8_dynamic.md').read_text()
