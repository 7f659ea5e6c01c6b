"""``calf eval --backend ros`` reads the env node's results file as it grows: no DDS discovery to miss."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calf_bringup.ros_eval import ResultsFile
from calf_core.errors import CalfError


def test_results_file_is_read_line_by_line_as_it_grows(tmp_path: Path) -> None:
    path = tmp_path / 'results.jsonl'
    results = ResultsFile(path)
    results.poll()  # not written yet: nothing
    assert not results.counting and results.results == {}
    episode = {'seq': 0, 'episode': 7, 'episode_return': 12.0, 'length': 12, 'success': False,
               'actions_applied': 11, 'ticks_held': 1, 'e2e_samples_ms': [51.5, 52.0]}
    line = json.dumps(episode) + '\n'
    with path.open('w') as file:
        file.write('{"counting": true}\n' + line[:20])  # the env is half-way through a line
        file.flush()
        results.poll()
        assert results.counting and results.results == {}
        file.write(line[20:])
        file.flush()
        results.poll()
    assert results.results == {0: episode}


def test_an_unreadable_line_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / 'results.jsonl'
    path.write_text('{"counting": true}\nnot json\n')
    with pytest.raises(CalfError, match="results file .* has an unreadable line: b'not json'"):
        ResultsFile(path).poll()
