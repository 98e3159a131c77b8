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
    disaggregated) and write one self-contained HTML report comparing them, each run's full
    report below the comparison."""
    from ..compare import compare
    from ..progress import Steps, load
    from ..report.html import render_comparison, write
    from ..samples import demo_runs

    steps = Steps(quiet)
    found = demo_runs()
    runs = [load([path], steps, label=label) for label, path in found]
    labels = [label for label, _ in found]
    with steps.step("Analyzing and writing the report"):
        comparison = compare(runs, labels)
        text = render_comparison(comparison, runs=runs, title="rlperf demo: the sample runs side by side")
        written = write(text, output)
    for label, won in comparison.wins().items():
        steps.say(f"  {label}: best on {len(won)} metric(s)")
    steps.say(f"rlperf demo: wrote the report to {written.resolve()} — open it in a browser (it works offline)")
