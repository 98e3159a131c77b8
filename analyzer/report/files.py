"""Writing a report in the file formats (Markdown, HTML, PNG) to ``-o`` or stdout."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console


def title_of(run) -> str:
    """``rlperf: <the folder the sources share>``."""
    paths = [str(s.path.resolve().parent) for s in run.sources]
    if not paths:
        return "rlperf report"
    common = Path(os.path.commonpath(paths))
    return f"rlperf: {common.name or common}"


def write_report(run, fmt: str, output: Path | None, steps) -> list[Path]:
    """Render ``run`` as ``fmt`` (``md``, ``html`` or ``png``); returns the files written."""
    if fmt == "png":
        if output is None:
            raise typer.BadParameter("--format png writes image files: name them with -o FILE.png or -o FOLDER")
        from . import png

        with steps.step("Drawing charts"):
            written = png.render(run, output)
        steps.say(f"rlperf: wrote {len(written)} chart image(s): {', '.join(str(p) for p in written) or 'none (nothing to draw)'}")
        return written
    title = title_of(run)
    with steps.step("Writing the report"):
        if fmt == "html":
            from . import html

            text = html.render(run, title=title)
        else:
            from . import markdown

            text = markdown.render(run, title=title)
    return emit_text(text, output, steps, f"{fmt} report")


@contextmanager
def console(output: Path | None, width: int) -> Iterator[Console]:
    """Where a command's rich tables go: the terminal, or ``output`` at a fixed width without
    colour codes."""
    if output is None:
        yield Console()
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8") as fh:
        yield Console(file=fh, width=width, color_system=None)


def emit_text(text: str, output: Path | None, steps, what: str) -> list[Path]:
    if output is None:
        sys.stdout.write(text)
        return []
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    steps.say(f"rlperf: wrote the {what} to {output}")
    return [output]
