"""``bench/compare_rows.py``: two rows of a table compared column by column, with Welch's t-test over the seeds."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / 'bench' / 'compare_rows.py'


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location('compare_rows', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cell(per_seed: list[float]) -> dict:
    return {'per_seed': per_seed, 'mean': sum(per_seed) / len(per_seed)}


TABLE = {'columns': ['Sim-Clean', 'Wi-Fi-D'],
         'cells': {'BPQL': {'Sim-Clean': cell([1.0, 2.0, 3.0]), 'Wi-Fi-D': cell([5.0])},
                   'Augmented': {'Sim-Clean': cell([4.0, 5.0, 7.0]), 'Wi-Fi-D': cell([5.0, 6.0])}}}


def test_each_column_gets_both_means_and_welchs_p_unless_a_row_has_one_seed() -> None:
    rows = load_script().compare(TABLE, 'BPQL', 'Augmented')
    (clean, mean_a, mean_b, p), wifi = rows
    assert (clean, mean_a, mean_b) == ('Sim-Clean', 2.0, pytest.approx(16 / 3))
    assert p == pytest.approx(0.0419, abs=1e-4)  # t = -3.162 on 3.45 degrees of freedom
    assert wifi == ('Wi-Fi-D', 5.0, 5.5, None)


def test_an_unknown_row_is_named_with_the_tables_rows() -> None:
    with pytest.raises(ValueError, match=r"no row 'SAC' in the table; its rows: BPQL, Augmented"):
        load_script().compare(TABLE, 'SAC', 'Augmented')
