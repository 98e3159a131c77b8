"""A report section without declared columns shows every column of its frame, in every renderer."""

from __future__ import annotations

import polars as pl
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
