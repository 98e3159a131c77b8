"""The terminal report (rich tables), one table per report section."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from parsers.errors import printable

from ..model.run import Run
from ..model.units import cell
from .sections import Section, sections
from .sources import source_ranks


def render(run: Run, console: Console) -> None:
    console.print(f"[bold]rlperf[/bold] — {len(run.sources)} source(s), {len(run.ranks)} rank(s)")
    files = Table(title="Sources", title_justify="left", show_edge=False)
    for column in ("file", "format", "rank"):
        files.add_column(column)
    ranks = source_ranks(run)
    for s in run.sources:
        files.add_row(plain(s.path.name), s.format, ranks[s.index])
    console.print(files)
    for section in sections(run):
        _section(section, console)
    for note in run.notes:
        console.print(plain(f"note: {note}", "dim"))
    for path in run.unknown:
        console.print(plain(f"skipped (not a format rlperf reads): {path}", "dim"))
    for warning in run.warnings:
        console.print(plain(f"warning: {warning}", "yellow"))


def _section(section: Section, console: Console) -> None:
    if section.frame is None or section.frame.height == 0:
        console.print(f"[bold]{section.title}[/bold]: {section.note or 'nothing to show'}")
        return
    table = Table(
        title=section.title,
        title_justify="left",
        show_edge=False,
        caption=section.note or None,
        caption_justify="left",
    )
    columns = section.shown_columns()
    for column in columns:
        table.add_column(column.title, justify="left" if column.format == "text" else "right")
    for row in section.rows():
        table.add_row(
            *(plain(cell(value, column.format)) for value, column in zip(row, columns, strict=True))
        )
    console.print(table)


def plain(text: str, style: str = "") -> Text:
    """Input-derived text as rich shows it: never markup (``[/dim]`` in a kernel name would
    abort the report), control characters escaped (an ANSI sequence in a file name stays text)."""
    return Text(printable(text), style=style)
