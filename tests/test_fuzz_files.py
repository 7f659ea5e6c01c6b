"""File fuzz, fast seeded tier: randomised profiles, relay configs, meta.json files and trace bags are each
loaded (ok) or refused with one CalfError line, in bounded time and memory; a few also through `calf`,
in a memory-limited process, where each exits 0 or 2 with one line. The long mode is in bench/."""
from __future__ import annotations

import resource
from pathlib import Path

import pytest
from file_fuzz import KINDS, SECRET, cli_fuzz, fuzz, hostile_profiles, loaders, run_case


@pytest.mark.slow
def test_loaders_survive_randomised_files(tmp_path: Path) -> None:
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcomes = fuzz(seed=0, cases=40, workdir=tmp_path)
    crashes = [o for o in outcomes if o.result == 'crash']
    assert not crashes, crashes[:5]
    assert len(outcomes) == 40 * len(KINDS)
    for kind in KINDS:  # the fuzz reaches both outcomes, not only the parser's first line
        results = {o.result for o in outcomes if o.kind == kind}
        assert 'refused' in results, kind
    assert max(o.seconds for o in outcomes) < 10.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 300_000  # kB


@pytest.mark.slow  # one calf process per file, each importing torch: seconds apiece
def test_calf_exits_0_or_2_with_one_line_on_randomised_files(tmp_path: Path) -> None:
    outcomes = cli_fuzz(seed=0, cases=2, workdir=tmp_path)
    assert outcomes and not [o for o in outcomes if o.result == 'crash'], outcomes


def test_hostile_profiles_are_refused_at_once_without_quoting_a_file(tmp_path: Path) -> None:
    load = loaders()['profile']
    for case, path in hostile_profiles(tmp_path).items():
        outcome = run_case('profile', path, load)
        assert outcome.result == 'refused' and outcome.seconds < 5.0, (case, outcome)
        assert SECRET not in outcome.message, case
