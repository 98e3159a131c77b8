"""``rlperf taxonomy``: the vocabulary and the rules every run is classified by."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..model.units import plural
from ..report.files import check_output, console, write_text
from .shared import Debug, Output

if TYPE_CHECKING:
    import polars as pl
    from rich.console import Console


class Part(str, Enum):
    all = "all"
    stages = "stages"
    roles = "roles"
    dimensions = "dimensions"
    placements = "placements"
    idle_causes = "idle_causes"
    profiles = "profiles"
    collectives = "collectives"
    communication = "communication"
    guidelines = "guidelines"


class Format(str, Enum):
    text = "text"
    json = "json"
    md = "md"


def parts(
    profile: str | None = None, rules: Path | None = None, collective_rules: Path | None = None
) -> dict[str, tuple[str, pl.DataFrame]]:
    """Every part of the taxonomy as (title, frame), in print order."""
    import polars as pl  # deferred: rlperf --help does without it

    from taxonomy import collectives, guidelines, profiles, vocab  # deferred: polars

    out: dict[str, tuple[str, pl.DataFrame]] = {
        "stages": (
            "Stages of an RL step (docs/taxonomy.md)",
            pl.DataFrame(
                [
                    {"id": s.id, "stage": s.name, "title": s.title, "what": s.description}
                    for s in vocab.STAGES
                ]
            ),
        ),
        "roles": ("Roles", pl.DataFrame({"role": list(vocab.ROLES)})),
        "dimensions": (
            "Parallelism dimensions of collectives",
            pl.DataFrame({"dim": list(vocab.DIMENSIONS)}),
        ),
        "placements": (
            "Placements, execution modes and pools",
            pl.DataFrame(
                [{"kind": "placement", "value": v} for v in vocab.PLACEMENTS]
                + [{"kind": "execution", "value": v} for v in vocab.EXECUTION_MODES]
                + [{"kind": "pool", "value": v} for v in vocab.POOLS]
            ),
        ),
        "idle_causes": (
            "Idle causes of a device, in rule precedence (docs/analyses.md §4)",
            pl.DataFrame(
                [
                    {"rule": c.rule, "cause": c.name, "when": c.description}
                    for c in sorted(vocab.IDLE_CAUSE_TABLE, key=lambda c: c.rule)
                ]
            ),
        ),
    }
    table = profiles.profiles_frame(profiles.load_profiles(rules))
    if profile:
        table = table.filter(pl.col("profile") == profile)
        if table.height == 0:
            raise typer.BadParameter(f"no profile {profile!r}", param_hint="--profile")
    out["profiles"] = (
        "Framework profiles: name rules → stage and role, first match wins",
        table.select(
            "profile", "rule", "source", "match", "stage", "role", "relation", "versions", "note"
        ),
    )
    out["collectives"] = (
        "Collective → dimension rules (description, then pools, layout, kernel name, pattern)",
        collectives.rules_frame(collectives.load_rules(collective_rules)),
    )
    out["communication"] = (
        "Communication families: kernels that are communication, first match wins "
        "(taxonomy/comm_families.toml)",
        collectives.families_frame(collectives.load_families(collective_rules)),
    )
    out["guidelines"] = ("Guideline catalogue (docs/guidelines.md)", guidelines.catalogue_frame())
    return out


EXAMPLES = (
    'rlperf taxonomy --part stages',
    'rlperf taxonomy --part profiles --profile verl --rules my_rules.toml',
)
"""Shown under ``rlperf taxonomy --help`` (analyzer/cli.py)."""

def taxonomy(
    part: Annotated[Part, typer.Option("--part", "-p", help="Print only this part.")] = Part.all,
    profile: Annotated[
        str | None, typer.Option("--profile", help="Only this framework profile's rules.")
    ] = None,
    rules: Annotated[
        Path | None,
        typer.Option("--rules", help="A user rules file, shown merged in front of the profiles."),
    ] = None,
    collective_rules: Annotated[
        Path | None,
        typer.Option(
            "--collective-rules",
            help="A user collective-rules file (same tables as taxonomy/collectives.toml).",
        ),
    ] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.text,
    output: Output = None,
    debug: Debug = False,
) -> None:
    """Print the taxonomy: stages, roles, dimensions, placements and execution modes, idle
    causes, the framework profiles with their rules, the collective rules, the communication
    families and the guideline catalogue."""
    check_output(output)
    chosen = parts(
        profile, rules, collective_rules
    )  # a bad rules file's error names it: main() prints it, exit 2
    if part != Part.all:
        chosen = {part.value: chosen[part.value]}
    text = render(chosen, fmt.value)
    if text is not None:
        if output:
            write_text(output, text)
        else:
            sys.stdout.write(text)
        return
    with console(output, FILE_WIDTH) as out:
        for title, frame in chosen.values():
            print_part(out, title, frame)


FILE_WIDTH = 160
"""The width of the text in a file (-o); on a terminal, the terminal's (else COLUMNS, else 80)."""

READABLE = 16
"""Columns a table cell needs to be read: a column given less folds words into fragments
(``profil/e``, ``^(time/perf/|``). A part whose columns cannot each have this much (or their
widest cell, when less) and their header is printed as a list, one entry per row."""

PADDING = 3
"""What one column of a rich table adds to its cell (padding and the rule)."""


def print_part(out: Console, title: str, frame: pl.DataFrame) -> None:
    """One part: a table when it fits the console readably, else a list of entries, each
    row's non-empty fields one per line. Cells are plain text, not rich markup: a pattern's
    ``\\[`` is shown as written."""
    from rich.table import Table  # deferred: rlperf --help does without rich
    from rich.text import Text  # deferred: rlperf --help does without rich

    rows = [[cell(v) for v in row] for row in frame.iter_rows()]
    need = table_width(frame.columns, rows)
    if need <= out.width:
        table = Table(title=title, title_justify="left", show_lines=False)
        for col in frame.columns:
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*map(Text, row))
        out.print(table)
        return
    count = plural(len(rows), "entry", "entries")
    out.print(f"{title} — {count}, as a list (their table needs {need} columns)",
              style="italic", highlight=False, markup=False)
    for row in rows:
        entry = Table.grid(padding=(0, 2))
        entry.add_column(style="bold", no_wrap=True)
        entry.add_column(overflow="fold")
        for name, value in zip(frame.columns, row, strict=True):
            if value:
                entry.add_row(name, Text(value))
        out.print()
        out.print(entry)
    out.print()


def cell(value: object) -> str:
    """A field as read text: a flag is ``yes``/``no`` (``heuristic  False`` read as code), a
    missing one is empty. JSON keeps the values as they are."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def table_width(columns: list[str], rows: list[list[str]]) -> int:
    """The narrowest table in which every header is whole and every column :data:`READABLE`
    wide (or as wide as its widest cell)."""
    from rich.cells import cell_len  # deferred: rlperf --help does without rich

    widest = [max((cell_len(r[i]) for r in rows), default=0) for i in range(len(columns))]
    return 1 + sum(
        max(cell_len(name), min(w, READABLE)) + PADDING
        for name, w in zip(columns, widest, strict=True)
    )


def render(chosen: dict[str, tuple[str, pl.DataFrame]], fmt: str) -> str | None:
    """JSON or Markdown text of the parts; None for the terminal (rich tables)."""
    if fmt == "json":
        return (
            json.dumps(
                {k: {"title": t, "rows": f.to_dicts()} for k, (t, f) in chosen.items()},
                indent=1,
                default=str,
            )
            + "\n"
        )
    if fmt == "md":
        lines = []
        for title, frame in chosen.values():
            lines += [
                f"## {title}",
                "",
                "| " + " | ".join(frame.columns) + " |",
                "|" + "---|" * len(frame.columns),
            ]
            for row in frame.iter_rows():
                cells = [cell(v).replace("|", "\\|").replace("\n", " ") for v in row]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        return "\n".join(lines)
    return None
