"""The terminal report: every section in the layout's order, fitted to the console's width.

A table that fits is printed whole; one that does not is split into parts that repeat its key
columns, or stacked one record per block (:mod:`analyzer.report.fit`). Long lists are cut to
:data:`ROWS` rows, the sources beyond :data:`SOURCES_SHOWN` files and the skipped files beyond
:data:`SKIPPED_SHOWN` become one line each with a count; ``verbose`` prints everything (the
JSON report always holds everything).
"""

from __future__ import annotations

from collections import Counter

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from parsers.errors import printable

from ..model.run import Run
from ..model.units import cell, plural, spans
from .files import sized
from .fit import Plan, plan, wrap
from .sections import SOURCES, Column, Section, arranged, sections
from .sources import source_ranks

ROWS = 30
"""Rows of a table the terminal shows unless ``verbose``."""
RECORDS = 15
"""Records of a stacked table (several lines each) the terminal shows unless ``verbose``."""
FINDINGS_SHOWN = 10
"""Findings of a ranked list the terminal shows unless ``verbose`` (the largest savings)."""
SOURCES_SHOWN = 6
SKIPPED_SHOWN = 3
REMARKS_SHOWN = 12
"""Notes, and warnings, shown one per line before the rest are counted."""
NUMBERED = {"findings"}
"""Sections whose records are a ranked list (its place first, then its title): stacked as
``1. title`` with the other fields under it."""
EVERYTHING = "--verbose lists all of them; --format json holds them"


def render(run: Run, console: Console, *, verbose: bool = False) -> None:
    console.print(Text.assemble(
        ("rlperf", "bold"),
        f" — {sized(run)}",
    ))
    for part in arranged(sections(run)):
        if isinstance(part, Section):
            _section(part, console, verbose=verbose)
        elif part == SOURCES:
            _sources(run, console, verbose)


def _section(section: Section, console: Console, *, verbose: bool = False) -> None:
    console.print()
    if section.frame is None or section.frame.height == 0:
        note = printable(section.note or "nothing to show")
        console.print(Text.assemble((section.title, "bold"), ": ", note))
        return
    console.print(plain(section.title, "bold"))
    columns = section.shown_columns()
    rows = section.rows()
    numbered = section.name in NUMBERED
    cells = [[printable(cell(v, c.format)) for v, c in zip(r, columns, strict=True)] for r in rows]
    if not verbose:
        cells = cells[: shown_rows(fitted(columns, cells[:ROWS], console.width, numbered=numbered))]
    table(columns, cells, console, numbered=numbered)
    if len(rows) > len(cells):
        console.print(plain(f"… {_more(len(rows) - len(cells), 'row')} ({EVERYTHING})", "dim"))
    if section.note:
        console.print(plain(section.note, "dim"))


def table(
    columns: list[Column], rows: list[list[str]], console: Console, *, numbered: bool = False
) -> None:
    """``rows`` (cell strings) under ``columns``, laid out to fit ``console.width``."""
    titles = [c.title for c in columns]
    layout = fitted(columns, rows, console.width, numbered=numbered)
    if layout.kind == "stacked":
        _stacked(titles, rows, console, layout, numbered=numbered)
        return
    for n, part in enumerate(layout.parts):
        if n:
            console.print()
        grid = Table(show_edge=False)
        for i, width in part:
            grid.add_column(
                titles[i],
                width=width,
                overflow="fold",
                justify="left" if columns[i].format == "text" else "right",
            )
        for row in rows:
            grid.add_row(*(Text(_cell_lines(row[i], width)) for i, width in part))
        console.print(grid)


def _cell_lines(value: str, width: int) -> str:
    """A cell wider than its column, broken where :func:`wrap` breaks (rich would cut a long
    list of steps inside a number)."""
    return value if cell_len(value) <= width else "\n".join(wrap(value, width))


def shown_rows(layout: Plan) -> int:
    """How many rows the terminal shows in ``layout`` unless ``verbose``."""
    if layout.kind != "stacked":
        return ROWS
    return FINDINGS_SHOWN if layout.numbered else RECORDS


def fitted(
    columns: list[Column], rows: list[list[str]], width: int, *, numbered: bool = False
) -> Plan:
    """How ``rows`` print at ``width`` (:func:`analyzer.report.fit.plan`); a ranked list is
    always stacked, keyed by its place and title (the first two columns)."""
    if numbered:
        return Plan("stacked", keys=min(2, len(columns)), numbered=True)
    by_column = [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in columns]
    return plan([c.title for c in columns], by_column, [c.format == "text" for c in columns], width)


def _stacked(
    titles: list[str], rows: list[list[str]], console: Console, layout: Plan, *, numbered: bool
) -> None:
    """One block per record: its key (numbered in a ranked list) on a line, then each other field
    that holds something as ``title  value``, the value wrapped under itself."""
    width = console.width
    keys = layout.keys
    label = min(max((len(t) for t in titles[keys:]), default=0), width // 3)
    for row in rows:
        key = f"{row[0]}. {' '.join(row[1:keys])}" if numbered else " · ".join(row[:keys])
        lines: list[str] = []
        for title, value in zip(titles[keys:], row[keys:], strict=True):
            if value in ("", "–"):
                continue
            lines += _field(title, value, label, width)
        hang = " " * (len(f"{row[0]}. ") if numbered else 2)
        console.print(Text("\n".join(wrap(key, width, indent=hang)), style="bold"))
        console.print(Text("\n".join(lines)))


def _field(title: str, value: str, label: int, width: int) -> list[str]:
    indent = " " * (label + 4)
    wrapped = wrap(value, max(8, width - len(indent))) or [""]
    head = f"  {title.ljust(label)}  "
    if len(head) > len(indent):
        return [f"  {title}", *(indent + w for w in wrapped)]
    return [head + wrapped[0], *(indent + w for w in wrapped[1:])]


def _sources(run: Run, console: Console, verbose: bool) -> None:
    """The sources (a table up to :data:`SOURCES_SHOWN` files, else one line per format), then
    the notes, skipped files and warnings, long lists counted."""
    console.print()
    ranks = source_ranks(run)
    if verbose or len(run.sources) <= SOURCES_SHOWN:
        console.print(plain("Sources", "bold"))
        rows = [[printable(s.path.name), s.format, ranks[s.index]] for s in run.sources]
        table([Column("file", "file"), Column("format", "format"), Column("rank", "rank")],
              rows, console)
    else:
        console.print(Text.assemble(("Sources", "bold"), ": ", printable(_source_summary(run))))
    _remarks(run, console, verbose)


def _source_summary(run: Run) -> str:
    """``130 files: 128 kineto (ranks 0-127), 1 verl-log, …`` for a run of many files."""
    formats = Counter(s.format for s in run.sources)
    held: dict[str, list[int]] = {}
    for s in run.sources:
        if s.rank is not None and s.rank >= 0:
            held.setdefault(s.format, []).append(s.rank)
    parts = [
        f"{n} {fmt}" + (f" (ranks {spans(held[fmt])})" if held.get(fmt) else "")
        for fmt, n in formats.most_common()
    ]
    return f"{len(run.sources)} files: {', '.join(parts)} ({EVERYTHING})"


def _remarks(run: Run, console: Console, verbose: bool) -> None:
    """The notes, skipped files and warnings, in that order (as every format lists them)."""
    _listed("note", run.notes, "dim", console, verbose)
    skipped = [str(p) for p in run.unknown]
    if verbose or len(skipped) <= SKIPPED_SHOWN:
        for path in skipped:
            console.print(plain(f"skipped (not a format rlperf reads): {path}", "dim"))
    else:
        examples = ", ".join(p.name for p in run.unknown[:SKIPPED_SHOWN])
        console.print(
            plain(f"skipped {len(skipped):,} files not in a format rlperf reads, e.g. {examples}, "
                  f"… ({EVERYTHING})", "dim")
        )
    _listed("warning", run.warnings, "yellow", console, verbose)


def _listed(prefix: str, items: list[str], style: str, console: Console, verbose: bool) -> None:
    shown = items if verbose else items[:REMARKS_SHOWN]
    for item in shown:
        console.print(plain(f"{prefix}: {item}", style))
    if len(items) > len(shown):
        console.print(plain(f"… {_more(len(items) - len(shown), prefix)} ({EVERYTHING})", style))


def _more(n: int, noun: str) -> str:
    return plural(n, f"more {noun}")


def plain(text: str, style: str = "") -> Text:
    """Input-derived text as rich shows it: never markup (``[/dim]`` in a kernel name would
    abort the report), control characters escaped (an ANSI sequence in a file name stays text)."""
    return Text(printable(text), style=style)
