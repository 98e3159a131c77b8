"""``rlperf demo``: the report of the bundled sample traces."""

from __future__ import annotations

from rich.console import Console

from ..cli import Output, app


@app.command()
def demo(output: Output = None) -> None:
    """Analyze the bundled sample traces and print the report."""
    from ..ingest import ingest
    from ..run import Run
    from ..samples import demo_inputs
    from .analyze import emit

    inputs = demo_inputs()
    Console(stderr=True).print(f"[dim]rlperf demo: analyzing {', '.join(str(p) for p in inputs)}[/dim]")
    found = ingest(inputs)
    run = Run.from_sources(found.sources, unknown=found.unknown, notes=found.notes)
    emit(run, "text", output)
