"""``calf eval --backend ros`` reads the env node's results file and the eval monitor's file as they grow: no
DDS discovery to miss, and no DDS in the evaluating process."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calf_bringup.ros_eval import DIRECTIONS, Listener, MonitorFile, ResultsFile
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


def test_the_monitor_file_gives_the_shims_counters_and_when_every_sub_policy_was_heard(tmp_path: Path) -> None:
    results, monitor = ResultsFile(tmp_path / 'results.jsonl'), MonitorFile(tmp_path / 'monitor.jsonl')
    listener = Listener(results, monitor, sources=('reflex', 'planner'))
    lines = [{'stats': d, 'seq': 3, 'lost': 5 + d} for d in DIRECTIONS] + [{'heard': 'planner', 'episode': 1}]
    monitor.path.write_text(''.join(json.dumps(line) + '\n' for line in lines))
    results.path.write_text('{"counting": true}\n')
    assert listener.stats_seq() == 3 and not listener.stats_newer_than(3) and listener.stats_newer_than(2)
    assert listener.lost() == {d: 5 + d for d in DIRECTIONS}
    assert listener.ready_episode() is None and listener.first_counted() is None  # reflex not heard yet
    with monitor.path.open('a') as file:
        file.write(json.dumps({'heard': 'reflex', 'episode': 4}) + '\n')
    with results.path.open('a') as file:
        for seq, episode, applied in ((0, 3, 9), (1, 4, 0), (2, 5, 7)):
            file.write(json.dumps({'seq': seq, 'episode': episode, 'actions_applied': applied}) + '\n')
    assert listener.ready_episode() == 4
    assert listener.first_counted() == 3  # after episode 5, the first one from 4 on in which actions were applied
