"""``rlperf taxonomy``: the vocabulary and the rules every run is classified by."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..report.files import check_output, console, write_text
from .shared import Debug, Output

if TYPE_CHECKING:
    import polars as pl


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
    from rich.table import Table  # deferred: rlperf --help does without rich

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
    with console(output, 160) as out:
        for title, frame in chosen.values():
            table = Table(title=title, title_justify="left", show_lines=False)
            for col in frame.columns:
                table.add_column(col, overflow="fold")
            for row in frame.iter_rows():
                table.add_row(*["" if v is None else str(v) for v in row])
            out.print(table)


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
                cells = [
                    "" if v is None else str(v).replace("|", "\\|").replace("\n", " ") for v in row
                ]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        return "\n".join(lines)
    return None
