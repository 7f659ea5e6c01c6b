"""JsonLinesWriter: what the env node and the eval monitor append for ``calf eval --backend ros`` to follow."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from calf_core.errors import ConfigError
from calf_ros.json_lines import JsonLinesWriter


def test_each_record_is_one_line_on_disk_as_soon_as_it_is_written(tmp_path: Path) -> None:
    path = tmp_path / 'out.jsonl'
    path.write_text('{"earlier": 1}\n')
    writer = JsonLinesWriter(str(path), 'out_file')
    writer.write({'stats': 0, 'seq': 3, 'lost': 2})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{'earlier': 1},
                                                                           {'stats': 0, 'seq': 3, 'lost': 2}]
    writer.close()


def test_a_path_that_cannot_be_written_is_one_line_naming_the_parameter(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^out_file '.*/missing/out.jsonl' cannot be written: No such file") as caught:
        JsonLinesWriter(str(tmp_path / 'missing' / 'out.jsonl'), 'out_file')
    assert '\n' not in str(caught.value)
