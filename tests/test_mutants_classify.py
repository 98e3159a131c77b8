"""Tests that kill surviving mutants of analyzer/classify/ (docs/mutation.md)."""

from __future__ import annotations

from pathlib import Path

from test_quality import clean_events, write

import analyzer


def test_the_closed_step_markers_are_each_ranks_profiler_steps(tmp_path: Path) -> None:
    """One rank marks ProfilerStep#1…#3 and closes each: (0, 1), (0, 2), (0, 3), numbered as
    the markers say (no log to shift them by)."""
    run = analyzer.load(
        [write(tmp_path / "rank0.json", clean_events(), window=(0, 3000))], use_cache=False
    )
    assert sorted(run.step_markers_closed.iter_rows()) == [(0, 1), (0, 2), (0, 3)]
