"""A report section without declared columns shows every column of its frame, in every renderer."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from rich.console import Console

from analyzer.report.html import section_html
from analyzer.report.markdown import section_lines
from analyzer.report.sections import Column, Section
from analyzer.report.text import _section


def test_columnless_section_renders_its_frame_everywhere():
    section = Section("Plain", pl.DataFrame({"rank": [3], "what": ["tail"]}))
    assert section.shown_columns() == [Column("rank", "rank"), Column("what", "what")]
    console = Console(width=80, record=True, color_system=None)
    _section(section, console)
    text = console.export_text()
    assert "rank" in text and "tail" in text and "3" in text
    assert "| 3 | tail |" in "\n".join(section_lines(section, "##")).replace("  ", " ")
    html = section_html(section)
    assert "<td" in html and "tail" in html


def test_declared_columns_choose_and_order_the_cells():
    section = Section("T", pl.DataFrame({"a": [1], "b": [2]}), columns=[Column("b", "B", "number")])
    assert section.rows() == [[2]]


ALPA_REPORT2 = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "alpa" / \
    "report2.nsys-rep"


@pytest.mark.skipif(shutil.which("nsys") is None or not ALPA_REPORT2.exists(),
                    reason="needs the nsys CLI and the corpus")
def test_no_counted_problem_beside_a_warning_is_not_no_problems() -> None:
    """alpa's report2 (a p2p test, 2023): no data-quality check counts anything, but its Nsight
    Systems did not support the CUDA driver, so kernels may be missing (a warning). The note
    said "No problems found"; it says what was checked and that the warning qualifies it. The
    same run without the warning is the clean run it then is."""
    import analyzer
    from analyzer.report.sections import sections

    run = analyzer.load([ALPA_REPORT2])
    assert run.data_quality.height == 0
    assert run.warnings == [
        "report2.nsys-rep: the report records that its Nsight Systems (2022.1.3.3) did not "
        "support the CUDA driver (12.0): CUDA kernels may be missing from it"
    ]

    def note() -> str:
        return next(s for s in sections(run) if s.key == "data_quality").note or ""

    assert note() == (
        "No problem counted in 1 file (nothing dropped, clamped or repaired, no overlaps, "
        "disorder, zero-length GPU work, clock corrections or cut files), but 1 warning says "
        "what may still be missing or wrong (listed at the end of the report)."
    )
    run.warnings = []
    assert note() == (
        "No problems found in 1 file: nothing dropped, clamped or repaired, no overlaps, "
        "disorder, zero-length GPU work, clock corrections or cut files."
    )


def test_the_sections_are_built_once_until_the_run_says_more(monkeypatch) -> None:
    """Every format written and the progress step lay out one build; a warning added since
    builds them anew (the data-quality note and the warnings list say it)."""
    import analyzer
    import analyzer.report.sections as sections_module
    from analyzer.report.sections import sections

    trace = Path(__file__).resolve().parents[1] / "sample_traces" / "synthetic" / (
        "disaggregated/rank-0.synthetic.pt.trace.json.gz")
    run = analyzer.load([trace])
    builds = []
    built = sections_module._built
    monkeypatch.setattr(sections_module, "_built", lambda r: builds.append(r) or built(r))
    first = sections(run)
    assert sections(run) is first and len(builds) == 1
    run.warnings.append("one more")
    assert sections(run) is not first and len(builds) == 2
