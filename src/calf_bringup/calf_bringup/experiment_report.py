"""Writing experiment results: CSV, Markdown beside the paper, PNG plots, and results/README.md."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from calf_bringup.experiment_specs import ENV_TABLE_PREFIX
from calf_core.yaml_files import read_json


def write_csv(result: dict[str, Any], path: Path) -> Path:
    with path.open('w', newline='') as handle:
        writer = csv.writer(handle)
        writer.writerow(['row', 'column', 'mean', 'std', 'seeds', 'per_seed'])
        for row, cols in result['cells'].items():
            for col, cell in cols.items():
                writer.writerow([row, col, f'{cell["mean"]:.2f}', f'{cell["std"]:.2f}', len(cell['per_seed']),
                                 ' '.join(f'{v:.2f}' for v in cell['per_seed'])])
    return path


def markdown_table(result: dict[str, Any]) -> str:
    """Our cells, one row each, with the paper's beneath a row where the paper has it."""
    cols = result['columns']
    lines = ['| training | ' + ' | '.join(cols) + ' |', '|---' * (len(cols) + 1) + '|']
    decimals = _decimals(result)
    for row, cells in result['cells'].items():
        ours = [_cell(cells[c], result.get('missing_as', 'failed'), decimals) for c in cols]
        mark = ' (ours)' if row in result['paper'] else ''
        lines.append(f'| **{row}**{mark} | ' + ' | '.join(ours) + ' |')
        if row in result['paper']:
            lines.append(f'| {row} (paper) | ' + ' | '.join(result['paper'][row]) + ' |')
    lines += _percentages(result, decimals)
    failed = {k: c['error'] for k, c in result.get('cells_run', {}).items() if c['status'] == 'failed'}
    if failed:
        lines += ['', f'{len(failed)} cells failed (their seeds are left out above):']
        lines += [f'- `{key}`: {error}' for key, error in failed.items()]
    return '\n'.join(lines)


def _percentages(result: dict[str, Any], decimals: int) -> list[str]:
    """The cells' means as percentages of the reference cell's (none without a reference). When the reference
    is negative (a cost, as in Reacher-v5), as the change from it in % of its size instead, so that a smaller
    figure is still the worse one."""
    if not result.get('reference'):
        return []
    row, col = result['reference']
    base = result['cells'][row][col]['mean']
    cols = result['columns']
    heading = (f'As % of {row} on {col} ({base:.{decimals}f})' if base >= 0 else
               f'Change from {row} on {col} ({base:.{decimals}f}), in % of its size '
               '(the returns are negative: -10 % is 10 % worse)')
    lines = ['', heading + ':', '', '| training | ' + ' | '.join(cols) + ' |', '|---' * (len(cols) + 1) + '|']
    for name, cells in result['cells'].items():
        lines.append(f'| {name} | ' + ' | '.join(
            _percent(cells[c]['mean'], base) if base and cells[c]['per_seed'] else '–' for c in cols) + ' |')
    return lines


def _percent(mean: float, base: float) -> str:
    """``mean`` as % of ``base`` when it is positive, else its change from ``base`` in % of ``|base|``."""
    return f'{100 * mean / base:.0f} %' if base > 0 else f'{100 * (mean - base) / -base:+.0f} %'


def _decimals(result: dict[str, Any]) -> int:
    """Decimals that show a table's means to about three figures: none from 100 up, one from 10, else two; by
    the reference cell where the table has one, else by its largest mean."""
    reference = result['cells'][result['reference'][0]][result['reference'][1]] if result.get('reference') else None
    size = abs(reference['mean']) if reference and reference['per_seed'] else max(
        (abs(cell['mean']) for row in result['cells'].values() for cell in row.values() if cell['per_seed']),
        default=0.0)
    return 0 if size >= 100 else 1 if size >= 10 else 2


def _cell(cell: dict[str, Any], missing_as: str, decimals: int) -> str:
    """``mean ± std`` (the value alone for one seed) to ``decimals``, with the number of seeds missing
    (``missing_as``: failed, or not run for a table written from a cache part-way) if any."""
    if not cell['per_seed']:
        text = missing_as
    elif len(cell['per_seed']) == 1:
        text = f'{cell["mean"]:.{decimals}f}'
    else:
        text = f'{cell["mean"]:.{decimals}f} ± {cell["std"]:.{decimals}f}'
    missing = len(cell.get('failed_seeds', ()))
    return f'{text} ({missing} {missing_as})' if missing and cell['per_seed'] else text


def write_markdown(result: dict[str, Any], path: Path) -> Path:
    seeds = result['seeds']
    spread = 'mean ± sample std across seeds' if seeds > 1 else 'one seed, so no spread is given'
    path.write_text(
        f'# {result["table"]}: {result["title"]}\n\n{markdown_table(result)}\n\n'
        f'{_count(seeds, "seed")} × {_count(result["episodes"], "episode")} per cell, {result["steps"]} training '
        f'steps per seed; {spread}.\n\nCommand: `{result["command"]}` ({result["run_time_s"]:.0f} s)\n\n'
        f'{_kept_rows(result)}![{result["table"]}]({path.stem}.png)\n')
    return path


def _kept_rows(result: dict[str, Any]) -> str:
    """Sentences naming the rows taken from earlier runs of the table, if any (``keep_earlier_rows``)."""
    runs: dict[tuple[str, str], list[str]] = {}
    for kept in result.get('kept_rows', []):
        runs.setdefault((kept['command'], kept['git'][:7] or 'unknown'), []).append(f'**{kept["row"]}**')
    return ''.join(f'Not rerun by this command: {", ".join(rows)}, kept from an earlier run (`{command}`, git {git}).'
                   f'\n\n' for (command, git), rows in runs.items())


def _count(n: int, noun: str) -> str:
    return f'{n} {noun}' if n == 1 else f'{n} {noun}s'


def write_bar_chart(result: dict[str, Any], path: Path) -> Path:
    """Grouped bars, one group per column and one bar per row, with ±1 std error bars."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    rows, cols = list(result['cells']), result['columns']
    width = 0.8 / len(rows)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(cols) + 2), 4))
    for i, row in enumerate(rows):
        means = [result['cells'][row][c]['mean'] for c in cols]
        stds = [result['cells'][row][c]['std'] for c in cols]
        ax.bar(np.arange(len(cols)) + i * width - 0.4 + width / 2, means, width, yerr=stds, capsize=3, label=row)
    ax.set_xticks(np.arange(len(cols)), cols)
    ax.set_ylabel(result['metric'].replace('_', ' '))
    ax.set_title(result['title'], fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_latency_cdf(samples: dict[str, list[float]], path: Path) -> Path:
    """Empirical CDFs of end-to-end latency, one curve per condition."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, values in samples.items():
        xs = np.sort(np.asarray(values))
        if xs.size:
            ax.plot(xs, np.arange(1, xs.size + 1) / xs.size, label=name)
    ax.set_xlabel('end-to-end latency (ms)')
    ax.set_ylabel('CDF')
    ax.set_xlim(left=0)
    ax.legend(fontsize=8)
    ax.set_title('Table 9 analog: E2E latency, measured on the env side', fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_results_readme(out: Path) -> Path:
    """results/README.md: every table's Markdown (ours beside the paper, with its command), the versions
    it ran with, and the notes."""
    parts = ['# Results\n', 'Generated by `calf experiment`; each section gives the exact command that produced it. '
             'Our rows are marked (ours) where the paper\'s numbers are shown beneath them.\n']
    order = ('table4', 'delay_study', 'table4_randomised', 'table4_mujoco', 'table4_inverted_pendulum',
             'robots_double_pendulum', 'robots_reacher', 'robots_half_cheetah', 'delay_state_sac', 'table5',
             'table5_dynamic', 'table6', 'table7', 'table8', 'table8_dynamic', 'table9', 'plans')
    env_tables = sorted(p.stem for p in out.glob(f'{ENV_TABLE_PREFIX}*.md'))
    for name in [*sorted((p.stem for p in out.glob('*.md') if p.stem in order), key=order.index), *env_tables]:
        parts.append((out / f'{name}.md').read_text().replace('\n# ', '\n## ').replace('# ', '## ', 1))
        meta = out / f'{name}.json'
        versions = read_json(meta, 'experiment meta').get('versions', {}) if meta.is_file() else {}
        if versions:
            parts.append('Versions: ' + ', '.join(f'{k} {v}' for k, v in versions.items()) + '\n')
    notes = out / 'NOTES.md'
    if notes.is_file():
        parts.append(notes.read_text())
    readme = out / 'README.md'
    readme.write_text('\n'.join(parts))
    return readme
