"""``rlperf analyze``: the report of one run."""

from __future__ import annotations

import math
import os
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from parsers.errors import InputError

from ..progress import Steps
from .ingest import Reuse
from .shared import (
    Debug,
    EngineChoice,
    EngineName,
    Framework,
    GuidelinesFile,
    Jobs,
    LayoutSpec,
    NoCache,
    Paths,
    Quiet,
    RankSelection,
    RayAddress,
    RulesFile,
    RunChoice,
    StepSelection,
    Strict,
    conclude,
    hold_strict,
)


class Format(str, Enum):
    text = "text"
    json = "json"
    md = "md"
    html = "html"
    png = "png"


SUFFIX_FORMATS = {".txt": "text", ".json": "json", ".md": "md", ".html": "html", ".htm": "html",
                  ".png": "png"}
"""The report format a file's suffix names, used where ``--format`` is not given."""

EXAMPLES = (
    'rlperf analyze runs/job-42/',
    'rlperf analyze runs/job-42/ --format html -o report.html',
    'rlperf analyze runs/job-42/ -o report.json -o report.html',
    'rlperf analyze runs/job-42/ --steps 3-5 --ranks 0-7 --format json',
    'rlperf analyze trace.json --framework verl --rules my_rules.toml',
    'COLUMNS=80 rlperf analyze runs/job-42/ --quiet     # a CI log',
)
"""Shown under ``rlperf analyze --help`` (analyzer/cli.py)."""

FILE_WIDTH = 120
"""The terminal report's width in a file (-o) when neither --width nor COLUMNS says."""

Width = Annotated[
    int | None,
    typer.Option(
        "--width",
        min=40,
        max=1000,
        help="Terminal report width in columns (default: the terminal's, else COLUMNS, else 80; "
        f"{FILE_WIDTH} in a file).",
    ),
]
Outputs = Annotated[
    list[Path] | None,
    typer.Option(
        "--output",
        "-o",
        help="Write to this file instead of stdout; repeat it for several reports of one "
        "analysis, each in the format its suffix names (.txt .json .md .html .png).",
    ),
]
Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose",
        help="Terminal report: every row of every table, every source and skipped file.",
    ),
]


def analyze(
    paths: Paths,
    fmt: Annotated[
        Format | None,
        typer.Option(
            "--format", "-f", help="Report format (default: the suffix of -o FILE, else text)."
        ),
    ] = None,
    output: Outputs = None,
    jobs: Jobs = None,
    no_cache: NoCache = False,
    engine: EngineChoice = EngineName.local,
    ray_address: RayAddress = None,
    quiet: Quiet = False,
    guidelines: GuidelinesFile = None,
    framework: Framework = None,
    steps_selected: StepSelection = None,
    ranks: RankSelection = None,
    rules: RulesFile = None,
    layout: LayoutSpec = None,
    run_choice: RunChoice = None,
    width: Width = None,
    verbose: Verbose = False,
    strict: Strict = False,
    debug: Debug = False,
) -> None:
    """Analyze one run: RL stages per step and rank, idle time by cause, sync overhead, guidelines.

    Placement and execution mode, per-stage time and the critical path, bubbles (rollout tail,
    pool wait, stage gaps, sync wait, host-bound, weight sync), collectives by parallelism
    dimension, work–depth what-ifs, and the guideline catalogue with evidence.

    PATHS may mix PyTorch profiler traces (.json/.json.gz), Nsight Systems exports (.sqlite,
    .nsys-rep with nsys on PATH, nsys stats CSV) and framework logs; formats are told by
    content. Files rlperf cannot read are listed and skipped. PATH may instead be a dataset
    (rlperf ingest): with -o, the report is kept in it and read back when asked again. --format
    html writes one
    self-contained file (works offline), md a Markdown report for a pull request, png the
    charts as images (-o names the file or folder), json a document usable as an audit baseline.
    """
    reports = wanted(fmt.value if fmt else None, output or [])
    asked = dict(locals())  # every option as given: the key of a report kept in a dataset
    del asked["reports"]
    asked["fmt"] = reports[0][0] if len(reports) == 1 else None  # -o r.json is -f json
    steps = Steps(quiet)
    reuse = Reuse.of(paths, reports[0][1] if len(reports) == 1 else None, no_cache, asked)
    if reuse.replay(steps):
        return  # kept with these very options, so they were checked then: imports nothing more
    from ..analyses.guidelines import load_catalogue  # deferred: the pipeline imports polars
    from ..model.options import Options  # deferred: polars
    from ..progress import load  # deferred: the pipeline
    from ..report.formats import check as check_format  # deferred: the renderers
    from ..report.sections import sections  # deferred: the pipeline

    if guidelines is not None:
        load_catalogue(guidelines)  # a bad file stops the command before any parsing
    options = Options.checked(
        framework=framework,
        steps=steps_selected,
        ranks=ranks,
        rules=rules,
        layout=layout,
        guidelines=guidelines,
    )
    for kind, target in reports:
        check_format(kind, target)  # -f png without -o: said before any parsing
    run = load(
        paths,
        steps,
        jobs=jobs,
        no_cache=no_cache,
        run=run_choice,
        writes=[target for _, target in reports],
        folder=any(kind == "png" for kind, _ in reports),
        options=options,
    )
    check_layout(run)
    run.warnings.extend(selection_warnings(run) + framework_warnings(run))
    with steps.step("Analyzing"):
        sections(run)  # computes every product once, behind a progress display
    hold_strict([run])
    for kind, target in reports:
        emit(run, kind, target, steps, width=width, verbose=verbose)
    reuse.keep(run)
    conclude([run])


def wanted(fmt: str | None, outputs: list[Path]) -> list[tuple[str, Path | None]]:
    """The reports to write, each ``(format, file or None for stdout)``: ``--format``, else the
    suffix of the one ``-o`` (:data:`SUFFIX_FORMATS`), else text; several ``-o`` each in the
    format its suffix names. Checked before anything is read."""
    named = [SUFFIX_FORMATS.get(target.suffix.lower()) for target in outputs]
    if len(outputs) <= 1:
        return [(fmt or (named[0] if named else None) or "text", outputs[0] if outputs else None)]
    if fmt is not None:
        raise InputError("--format", "with several -o, each report takes the format its file's "
                         f"suffix names ({' '.join(SUFFIX_FORMATS)}): leave --format out")
    seen: set[str] = set()
    out: list[tuple[str, Path | None]] = []
    for target, kind in zip(outputs, named, strict=True):
        if kind is None:
            raise InputError(target, "names no report format: with several -o, each file's "
                             f"suffix says its format ({' '.join(SUFFIX_FORMATS)})")
        if os.path.realpath(target) in seen:
            raise InputError(target, "is named by -o twice: each report needs a file of its own")
        seen.add(os.path.realpath(target))
        out.append((kind, target))
    return out


def selection_warnings(run) -> list[str]:
    """``--steps`` and ``--ranks`` against what the run has: none of it inside is an InputError
    naming the option (an empty report would look like a result), part of it a warning."""
    out = []
    for flag, noun, have, asked in (
        (
            "--steps",
            "steps",
            lambda: run.step_table["step"].unique().to_list(),
            run.options.step_selection,
        ),
        ("--ranks", "ranks", lambda: run.ranks, run.options.rank_selection),
    ):
        if asked is None:
            continue
        present = sorted(set(have()))
        inside = asked.within(present)
        has = f"the run has {noun} {spans(present)}" if present else f"the run has no {noun}"
        if not inside:
            raise InputError(flag, f"asked for {noun} {asked}, but {has}")
        if len(inside) < asked.count():
            outside = asked.without(inside)
            out.append(
                f"{flag}: {noun} {outside} are not in the run "
                f"({has}); analysing {noun} {spans(inside)}"
            )
    return out


def check_layout(run) -> None:
    """``--layout`` degrees that describe neither the run's ranks nor any pool's would be left
    unused without a sign (the collectives read by rank pattern alone, a report identical to
    one without the option): an InputError naming the option and the run's rank count."""
    from taxonomy.collectives import has_degrees, parse_layout  # deferred: polars

    text = run.options.layout
    layout = parse_layout(text) if text else None
    if layout is None or all(v == 1 for v in layout.degrees.values()):
        return
    pools = run.pools if run.ranks else None
    sizes = dict(pools.group_by("pool").len().iter_rows()) if pools is not None else {}
    if any(has_degrees(layout, n) for n in {len(run.ranks), *sizes.values()}):
        return
    given = ",".join(f"{d}={v}" for d, v in layout.degrees.items())
    product = math.prod(layout.degrees.values())
    need = f"exactly {product}" if "dp" in layout.degrees else f"a multiple of {product}"
    pooled = ", ".join(f"{p} {n}" for p, n in sorted(sizes.items()))
    has = f"{len(run.ranks)} ranks" + (f" (pools: {pooled})" if len(sizes) > 1 else "")
    raise InputError(
        "--layout",
        f"{given} needs {need} ranks in the pool it describes, but the run has {has}; "
        "give degrees that fit, or leave --layout out",
    )


def framework_warnings(run) -> list[str]:
    """``--framework`` against the framework a source states (a log header names it)."""
    from taxonomy.profiles import load_profiles  # deferred: the taxonomy imports polars

    asked = run.options.framework
    if not asked:
        return []
    profiles = load_profiles(run.options.rules).values()

    def profile(name: str) -> str:
        return next((p.name for p in profiles if name == p.name or name in p.frameworks), name)

    stated = [
        (s.path.name, str(s.meta["framework"])) for s in run.sources if s.meta.get("framework")
    ]
    return [
        f"--framework {asked}: {name} states framework {told}; classifying with the "
        f"{profile(asked)} profile as asked"
        for name, told in stated
        if profile(told) != profile(asked)
    ]


def spans(values: list[int]) -> str:
    """[1, 2, 3, 7] → ``1-3,7``."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def emit(
    run, fmt: str, output: Path | None, steps, *, width: int | None = None, verbose: bool = False
) -> None:
    """Write ``run``'s report in ``fmt`` to ``output`` (or stdout); the terminal report at
    ``width`` columns (:func:`report_width`), cut long lists unless ``verbose``."""
    from rich.console import Console  # deferred: only a terminal report needs it

    from ..report import json as json_report  # deferred: the renderers import polars
    from ..report import text as text_report  # deferred: polars
    from ..report.files import console, emit_text, say_written  # deferred: the renderers
    from ..report.formats import write_report  # deferred: the renderers (altair)

    if fmt in ("md", "html", "png"):
        write_report(run, fmt, output, steps)
        return
    if fmt == "json":
        emit_text(json_report.render(run) + "\n", output, steps, "json report")
        return
    if output is None and width is not None:
        text_report.render(run, Console(width=width), verbose=verbose)
        return
    with console(output, report_width(width)) as out:
        text_report.render(run, out, verbose=verbose)
    if output is not None:
        say_written(steps, "text report", output)


def report_width(asked: int | None) -> int:
    """The width of a terminal report written to a file: ``--width``, else ``COLUMNS`` (what a
    CI log is set to), else :data:`FILE_WIDTH`."""
    columns = os.environ.get("COLUMNS", "")
    return asked or (int(columns) if columns.isdigit() and int(columns) > 0 else FILE_WIDTH)
