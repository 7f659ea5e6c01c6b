"""A robots-style table end to end on a tiny budget: SAC Baseline, augmented SAC and a DAgger student of the
Baseline, evaluated behind a constant delay, with the cells also as percentages of the Baseline's; and the
planner recipes that the robots and outages tables name."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from calf_agent.planner import LONG_FIT_EPOCHS, RECIPES, SINGLE_MODEL
from calf_agent.regimes import is_continuous
from calf_bringup.experiment import TrainJob, run_table, write_outputs
from calf_bringup.experiment_specs import TABLE_GROUPS, TABLES, Column, Row, TableSpec

ROOT = Path(__file__).resolve().parents[3]


def test_the_robots_tables_name_existing_profiles_and_plan_over_their_sac_baseline() -> None:
    for name in TABLE_GROUPS['robots']:
        spec = TABLES[name]
        assert spec.reference == (spec.rows[0].name, 'Sim-Clean')
        for column in spec.columns:
            assert '/' not in column.network or (ROOT / column.network).is_file(), column.network
        baseline = TrainJob(spec.env, spec.rows[0], 0, spec.steps)
        based = [row for row in spec.rows if row.planner in ('model', 'imitation')]
        assert based and all(TrainJob(spec.env, row, 0, spec.steps).base.key == baseline.key for row in based)
        for row in spec.rows:  # a row trained behind a profile file still has one flat cache entry
            assert '/' not in TrainJob(spec.env, row, 0, spec.steps).key, row.name
            assert row.model is None or row.model in RECIPES, row.model


def test_the_outages_tables_name_existing_recipes_and_plan_with_feedback_only_for_continuous_actions() -> None:
    for name in TABLE_GROUPS['outages']:
        spec = TABLES[name]
        assert all(row.model is None or row.model in RECIPES for row in spec.rows), name
        feedback = [row.name for row in spec.rows if row.model and RECIPES[row.model].feedback]
        assert len(feedback) == int(is_continuous(spec.env)), (name, feedback)


def test_the_long_fit_is_the_feedback_recipe_fitted_longer() -> None:
    long, default = RECIPES['ensemble-feedback-long'], RECIPES['ensemble-feedback']
    assert long.feedback and long.epochs == LONG_FIT_EPOCHS > default.epochs
    assert replace(long, epochs=default.epochs) == default


def test_the_single_feedback_recipe_is_the_single_model_with_feedback() -> None:
    assert RECIPES['single-feedback'] == replace(SINGLE_MODEL, feedback=True)


@pytest.mark.slow
def test_a_tiny_robots_table_with_an_imitation_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the constant-delay profiles are named from the workspace root
    spec = TableSpec('tiny_robots', 'Pendulum-v1', 'Pendulum-v1', 'mean_return', 1.0, 400,
                     (Row('Baseline (SAC)', 'sim_clean', algo='sac'), Row('Augmented SAC', 'delay_only', algo='sac'),
                      Row('Imitation (DAgger)', 'delay_only', planner='imitation', algo='sac')),
                     (Column('Sim-Clean', 'sim_clean'),
                      Column('5 ticks', 'results/profiles/constant_5_ticks_50ms.yaml')), {},
                     ('Baseline (SAC)', 'Sim-Clean'))
    result = run_table(spec, seeds=1, episodes=2, out=tmp_path, workers=1)
    assert all(c['status'] == 'done' for c in result['cells_run'].values()), result['cells_run']
    write_outputs(result, tmp_path, 'calf experiment tiny_robots', 0.0)
    student = next((tmp_path / 'cache' / 'train').glob('*-imitation-*'))
    assert json.loads((student / 'meta.json').read_text())['method'] == 'dagger'
    assert 'Change from Baseline (SAC) on Sim-Clean' in (tmp_path / 'tiny_robots.md').read_text()  # negative returns
