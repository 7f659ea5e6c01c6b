"""Compare two rows of a `calf experiment` table, column by column: their means and Welch's t-test over the seeds.

    python bench/compare_rows.py results/robots_reacher.json 'BPQL (SAC)' 'Augmented SAC'

Each cell's ``per_seed`` values (one mean return per seed) are the samples; a column where either row has fewer
than 2 seeds gets no p-value.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from scipy import stats

from calf_core.yaml_files import read_json


def compare(table: dict, row_a: str, row_b: str) -> list[tuple[str, float, float, float | None]]:
    """``(column, mean of row_a, mean of row_b, Welch's p or None)`` for each column of ``table``; ValueError
    naming the table's rows if either row is not one of them."""
    cells = table['cells']
    for row in (row_a, row_b):
        if row not in cells:
            raise ValueError(f'no row {row!r} in the table; its rows: {", ".join(cells)}')
    out = []
    for column in table['columns']:
        a, b = cells[row_a][column]['per_seed'], cells[row_b][column]['per_seed']
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue) if min(len(a), len(b)) >= 2 else None
        out.append((column, sum(a) / len(a), sum(b) / len(b), p))
    return out


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('table', type=Path, help="a table's JSON in results/")
    parser.add_argument('row_a')
    parser.add_argument('row_b')
    args = parser.parse_args()
    try:
        rows = compare(read_json(args.table, 'table'), args.row_a, args.row_b)
    except ValueError as err:
        parser.error(str(err))
    print(f'| column | {args.row_a} | {args.row_b} | Welch p |\n|---|---|---|---|')
    for column, mean_a, mean_b, p in rows:
        print(f'| {column} | {mean_a:.4g} | {mean_b:.4g} | {"—" if p is None else f"{p:.2g}"} |')
