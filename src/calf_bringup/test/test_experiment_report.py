"""Tables say what they hold: no spread from one seed, and (ours) only beside the paper's rows."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from calf_bringup.experiment_report import write_markdown


def result(per_seed: list[float], paper: dict[str, list[str]]) -> dict[str, Any]:
    cell = {'mean': sum(per_seed) / len(per_seed), 'std': 0.0 if len(per_seed) == 1 else 1.5,
            'per_seed': per_seed}
    return {'table': 'mine', 'title': 'my robot', 'columns': ['Sim-Clean'], 'cells': {'Baseline': {'Sim-Clean': cell}},
            'paper': paper, 'seeds': len(per_seed), 'episodes': 1, 'steps': 2048, 'command': 'calf experiment mine',
            'run_time_s': 3.0}


def test_one_seed_table_has_no_spread_and_singular_counts(tmp_path: Path) -> None:
    text = write_markdown(result([412.0], {}), tmp_path / 'mine.md').read_text()
    assert '| **Baseline** | 412 |' in text
    assert '±' not in text.split('\n\n')[1]
    assert '1 seed × 1 episode per cell' in text and 'no spread' in text
    assert '(ours)' not in text


def test_rows_beside_the_papers_are_marked_ours(tmp_path: Path) -> None:
    text = write_markdown(result([400.0, 420.0, 410.0], {'Baseline': ['98']}), tmp_path / 'mine.md').read_text()
    assert '| **Baseline** (ours) | 410 ± 2 |' in text and '| Baseline (paper) | 98 |' in text
    assert '3 seeds × 1 episode per cell' in text and 'mean ± sample std across seeds' in text


def test_cells_as_percentages_of_the_reference(tmp_path: Path) -> None:
    table = {**result([400.0, 420.0, 410.0], {}), 'reference': ['Baseline', 'Sim-Clean']}
    table['cells']['Student'] = {'Sim-Clean': {'mean': 205.0, 'std': 3.0, 'per_seed': [200.0, 210.0]}}
    text = write_markdown(table, tmp_path / 'mine.md').read_text()
    assert 'As % of Baseline on Sim-Clean (410):' in text
    assert '| Baseline | 100 % |' in text and '| Student | 50 % |' in text


def test_a_negative_reference_gives_changes_and_small_returns_keep_their_decimals(tmp_path: Path) -> None:
    """Reacher-v5's returns are costs near -4: a worse cell is a negative change, not a percentage above 100."""
    table = {**result([-3.8, -3.9, -4.0], {}), 'reference': ['Baseline', 'Sim-Clean']}
    table['cells']['Student'] = {'Sim-Clean': {'mean': -7.22, 'std': 3.1, 'per_seed': [-7.0, -7.44]}}
    text = write_markdown(table, tmp_path / 'mine.md').read_text()
    assert '| **Baseline** | -3.90 ± 1.50 |' in text and '| **Student** | -7.22 ± 3.10 |' in text
    assert 'Change from Baseline on Sim-Clean (-3.90), in % of its size' in text
    assert '| Baseline | +0 % |' in text and '| Student | -85 % |' in text


def test_a_row_whose_seeds_all_failed_is_written_as_strict_json(tmp_path: Path) -> None:
    from calf_bringup.experiment import write_outputs
    from calf_bringup.experiment_report import write_results_readme
    from calf_core.yaml_files import read_json
    table = result([400.0], {})
    table.update(table='table4', metric='mean_return')
    table['cells']['Broken'] = {'Sim-Clean': {'mean': float('nan'), 'std': 0.0, 'per_seed': [], 'failed_seeds': [0]}}
    write_outputs(table, tmp_path, 'calf experiment table4', 0.0)
    assert read_json(tmp_path / 'table4.json', 'experiment meta')['cells']['Broken']['Sim-Clean']['mean'] is None
    assert '| **Broken** | failed |' in write_results_readme(tmp_path).read_text()


def test_a_table_written_part_way_says_which_seeds_have_not_run(tmp_path: Path) -> None:
    """``bench/table_from_cache.py`` writes a table from the cells already cached: a missing seed is not run there,
    where ``calf experiment`` only leaves out seeds whose cell failed."""
    table = {**result([400.0, 420.0], {}), 'missing_as': 'not run'}
    table['cells']['Baseline']['Sim-Clean']['failed_seeds'] = [2]
    table['cells']['Student'] = {'Sim-Clean': {'mean': float('nan'), 'std': 0.0, 'per_seed': [], 'failed_seeds': [0]}}
    text = write_markdown(table, tmp_path / 'mine.md').read_text()
    assert '| **Baseline** | 410 ± 2 (1 not run) |' in text and '| **Student** | not run |' in text
    assert 'failed' not in text


def test_rows_lost_from_the_cache_keep_an_earlier_tables_cells_and_say_so(tmp_path: Path) -> None:
    """``table_from_cache.py --earlier``: a row with no seed cached keeps the earlier table's cells, named with the
    run that measured them, carried over a second rebuild; a row with a seed cached is not replaced."""
    from calf_bringup.experiment import keep_earlier_rows
    earlier = {**result([400.0, 420.0], {}), 'versions': {'git': '6ac448fa62b2'}}
    earlier['cells']['Student'] = {'Sim-Clean': {'mean': 205.0, 'std': 3.0, 'per_seed': [200.0, 210.0]}}
    rebuilt = {**result([1.0], {}), 'missing_as': 'not run'}
    rebuilt['cells']['Baseline']['Sim-Clean'].update(per_seed=[], failed_seeds=[0])
    rebuilt['cells']['Student'] = {'Sim-Clean': {'mean': 9.0, 'std': 0.0, 'per_seed': [9.0]}}
    kept = keep_earlier_rows(rebuilt, earlier)
    assert kept['cells']['Baseline'] == earlier['cells']['Baseline']
    assert kept['cells']['Student'] == rebuilt['cells']['Student']
    again = keep_earlier_rows({**rebuilt, 'cells': {**rebuilt['cells']}}, {**kept, 'command': 'rebuild'})
    assert again['kept_rows'] == [{'row': 'Baseline', 'command': 'calf experiment mine', 'git': '6ac448fa62b2'}]
    text = write_markdown({**again, 'command': 'rebuild'}, tmp_path / 'mine.md').read_text()
    assert 'Not rerun by this command: **Baseline**, kept from an earlier run (`calf experiment mine`, git 6ac448f)' \
        in text and '| **Baseline** | 410 ± 2 |' in text


def test_an_earlier_tables_unrun_row_is_not_kept_and_its_tables_are_written(tmp_path: Path) -> None:
    """A row that neither the cache nor the earlier table holds stays not run (its JSON null is no number)."""
    from calf_bringup.experiment import keep_earlier_rows, write_outputs
    from calf_core.yaml_files import read_json
    unrun = {'Sim-Clean': {'mean': float('nan'), 'std': 0.0, 'per_seed': [], 'failed_seeds': [0]}}
    first = {**result([400.0], {}), 'metric': 'mean_return', 'missing_as': 'not run'}
    first['cells'] = {**first['cells'], 'Student': unrun}
    write_outputs(first, tmp_path, 'calf experiment mine', 0.0)
    earlier = read_json(tmp_path / 'mine.json', 'experiment meta')
    rebuilt = {**first, 'cells': {'Baseline': {'Sim-Clean': {**unrun['Sim-Clean']}}, 'Student': unrun}}
    kept = keep_earlier_rows(rebuilt, earlier)
    assert [k['row'] for k in kept['kept_rows']] == ['Baseline']
    write_outputs(kept, tmp_path, 'rebuild', 0.0)
    assert 'Student,Sim-Clean,nan,0.00,0,' in (tmp_path / 'mine.csv').read_text()
    assert '| **Student** | not run |' in (tmp_path / 'mine.md').read_text()


def test_an_earlier_table_of_another_table_is_refused() -> None:
    import pytest

    from calf_bringup.experiment import keep_earlier_rows
    from calf_core.errors import ConfigError
    with pytest.raises(ConfigError, match='pass the JSON of the same table'):
        keep_earlier_rows(result([1.0], {}), {**result([1.0], {}), 'table': 'other'})
