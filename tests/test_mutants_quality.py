"""Tests that kill surviving mutants of analyzer/analyses/quality.py (docs/mutation.md): the
parser's tallies as rows, the profiler-window boundary, and the title of a clean run's section.
Each expected count is the number planted in the input."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from test_quality import clean_events, counts, write, x

import analyzer
from analyzer.assemble import build
from analyzer.report.sections import sections
from parsers import ParsedSource
from parsers.events import conform


def tallied(tmp_path: Path, tallies: dict[str, object]) -> dict[str, int]:
    events = conform({"kind": ["cpu_op"], "name": ["op"], "start_ns": [0], "end_ns": [10]}, rank=0)
    parsed = ParsedSource(tmp_path / "rank0.json", "kineto", events=events)
    parsed.meta["quality"] = dict(tallies)
    got = build([parsed]).data_quality.filter(pl.col("check").str.starts_with("parser:"))
    return dict(got.select("check", "count").iter_rows())


def test_five_tallies_are_five_rows_not_five_columns(tmp_path: Path) -> None:
    """Five (source, check, title, count, detail) rows for five columns: a frame built without
    saying the data are rows reads them as columns when the two sizes are equal."""
    tallies = {"a_kind": 1, "b_kind": 2, "c_kind": 3, "d_kind": 4, "e_kind": 5}
    assert tallied(tmp_path, tallies) == {f"parser:{k}": v for k, v in tallies.items()}


def test_a_tally_that_is_no_number_or_zero_is_no_row(tmp_path: Path) -> None:
    got = tallied(tmp_path, {"clamped_ts": 3, "odd": "many", "none": None, "zero": 0})
    assert got == {"parser:clamped_ts": 3}


def test_an_event_ending_at_the_window_end_is_inside_it(tmp_path: Path) -> None:
    """Window [0, 3000] µs; one operator ends exactly at 3000 (inside), one at 3001 (outside)."""
    events = [
        *clean_events(),
        x("cpu_op", "aten::add", 2990, 10),
        x("cpu_op", "aten::sub", 2991, 10),
    ]
    run = analyzer.load([write(tmp_path / "rank0.json", events, window=(0, 3000))], use_cache=False)
    assert counts(run)["outside_window"] == 1


def test_a_clean_run_titles_its_data_quality_section(tmp_path: Path) -> None:
    run = analyzer.load(
        [write(tmp_path / "rank0.json", clean_events(), window=(0, 3000))], use_cache=False
    )
    section = next(s for s in sections(run) if s.key == "data_quality")
    assert section.frame is None and section.title == "Data quality"
