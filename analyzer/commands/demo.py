"""``rlperf demo``: the bundled sample runs compared, as one HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..cli import Quiet, app

DEFAULT_OUTPUT = Path("rlperf-demo.html")


@app.command()
def demo(
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the HTML report.")] = DEFAULT_OUTPUT,
    quiet: Quiet = False,
) -> None:
    """Analyze the bundled sample runs (verl colocated, disaggregated and one-step-off; OpenRLHF
    disaggregated; GPU-shaped synthetic runs of the three placements) and write one
    self-contained HTML report comparing them, each run's full report below its comparison."""
    from ..compare import compare
    from ..progress import Steps, load
    from ..report.html import Page, add_comparison, esc, write
    from ..samples import demo_groups

    steps = Steps(quiet)
    title = "rlperf demo: the sample runs side by side"
    page = Page(title)
    page.add(f"<h1>{esc(title)}</h1>")
    for heading, found in demo_groups():
        runs = [load([path], steps, label=label) for label, path in found]
        with steps.step(f"Analyzing: {heading}"):
            comparison = compare(runs, [label for label, _ in found])
            page.add(f"<h2>{esc(heading)}</h2>")
            add_comparison(page, comparison, runs, level=3)
        for label, won in comparison.wins().items():
            steps.say(f"  {label}: best on {len(won)} metric(s)")
    with steps.step("Writing the report"):
        written = write(page.render(), output)
    steps.say(f"rlperf demo: wrote the report to {written.resolve()} — open it in a browser (it works offline)")
