"""The Markdown report: GitHub-flavoured tables that read well in a pull request or an issue.

The same content as the HTML report, with each figure given as the table of the numbers it draws
(a chart cannot live in a PR comment; ``--format png`` writes the charts as images to attach).
Long tables fold into ``<details>`` so a comment stays short; the headline numbers never do.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from parsers.errors import printable

from ..model.units import cell
from .charts import NOT_DRAWN, Figure, figures, remarks
from .comparison import NOTE, Compared, display, display_columns
from .files import sized
from .sections import FIGURES, SOURCES, Column, Section, arranged, sections
from .sources import source_ranks

FOLD_ROWS = 15
"""Tables longer than this fold into ``<details>``."""


def render(run, *, title: str = "rlperf report", level: int = 1) -> str:
    lines = [f"{'#' * level} {escape(title)}", ""]
    lines += run_lines(run, level + 1)
    return "\n".join(lines).rstrip() + "\n"


def run_lines(run, level: int = 2) -> list[str]:
    h = "#" * level
    lines = [f"{sized(run)}.", ""]
    for part in arranged(sections(run)):
        if isinstance(part, Section):
            lines += section_lines(part, h)
        elif part == FIGURES:
            lines += figures_lines(figures(run), h)
        elif part == SOURCES:
            lines += sources_lines(run, h)
    return [*lines, ""]


def figures_lines(drawn: list[Figure], h: str) -> list[str]:
    """Each figure with something to draw; those without, one line naming what they need."""
    lines = [line for figure in drawn if not figure.needs for line in figure_lines(figure, h)]
    needs = [f for f in drawn if f.needs]
    if needs:
        lines += [f"_{escape(NOT_DRAWN)}_", ""]
        lines += [f"- {escape(f.title)}: {escape(f.needs)}" for f in needs] + [""]
    return lines


def sources_lines(run, h: str) -> list[str]:
    lines = [f"{h} Sources", ""]
    ranks = source_ranks(run)
    lines += table([[s.path.name, s.format, ranks[s.index]] for s in run.sources],
                   [Column("file", "file"), Column("format", "format"), Column("rank", "rank")])
    return lines + [f"- {escape(line)}" for line in remarks(run)]


def figure_lines(figure: Figure, h: str) -> list[str]:
    lines = [f"{h} {escape(figure.title)}", ""]
    if figure.needs:
        return [*lines, f"> {escape(figure.needs)}", ""]
    if figure.table is not None:
        columns = [
            Column(c, c.removesuffix("_ns"), figure.formats.get(c, "text"))
            for c in figure.table.columns
        ]
        lines += frame_lines(figure.table, columns)
    if figure.note:
        lines += [f"_{escape(figure.note)}_", ""]
    return lines


def section_lines(section: Section, h: str) -> list[str]:
    lines = [f"{h} {escape(section.title)}", ""]
    if section.frame is None or section.frame.height == 0:
        return [*lines, f"> {escape(section.note or 'nothing to show')}", ""]
    columns = section.shown_columns()
    lines += frame_lines(section.frame, columns, fold=section.fold)
    if section.note:
        lines += [f"_{escape(section.note)}_", ""]
    return lines


def frame_lines(frame: pl.DataFrame, columns: Sequence[Column], *, fold: bool = True
                ) -> list[str]:
    rows = [list(r) for r in frame.select([c.name for c in columns]).iter_rows()]
    return table(rows, columns, fold=fold)


def table(rows: list[list[object]], columns: Sequence[Column], *, fold: bool = True
          ) -> list[str]:
    """A GFM table; numbers right-aligned; folded when long (and ``fold``)."""
    head = "| " + " | ".join(escape(c.title) for c in columns) + " |"
    rule = "|" + "|".join("---:" if c.format != "text" else "---" for c in columns) + "|"
    body = [
        "| "
        + " | ".join(escape(cell(v, c.format)) for v, c in zip(row, columns, strict=True))
        + " |"
        for row in rows
    ]
    lines = [head, rule, *body, ""]
    if fold and len(rows) > FOLD_ROWS:
        return [f"<details><summary>{len(rows)} rows</summary>", "", *lines, "</details>", ""]
    return lines


_MARKDOWN = str.maketrans(
    {
        "\\": "\\\\",
        "|": "\\|",
        "`": "\\`",
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        "\r": "",
        "\n": "<br>",
    }
)


def escape(text: object) -> str:
    """Input-derived text (kernel, annotation and file names) safe in a cell or heading: no raw HTML
    (a ``<script>`` in a kernel name stays text), no cell split or code span, newlines folded,
    other control characters shown escaped."""
    return printable(str(text).translate(_MARKDOWN))


def render_comparison(comparison: Compared, *, title: str = "rlperf comparison") -> str:
    shown = display(comparison)
    lines = [
        f"# {escape(title)}",
        "",
        f"Deltas are against the first run, **{escape(comparison.labels[0])}**.",
        "",
    ]
    for label, won in comparison.wins().items():
        lines.append(f"- **{escape(label)}** wins {len(won)}: {escape(', '.join(won) or '–')}")
    lines.append("")
    columns = display_columns(shown)
    lines += table([list(r) for r in shown.iter_rows()], columns)
    lines += [f"_{escape(NOTE)}_", ""]
    return "\n".join(lines).rstrip() + "\n"
