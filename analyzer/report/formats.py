"""A run's report in the file formats (Markdown, HTML, PNG), written to ``-o`` or stdout.

Kept apart from :mod:`analyzer.report.files` (the safe writing every command uses): these
renderers draw charts (altair), which ``rlperf --help`` and the text and JSON reports need not
load.
"""

from __future__ import annotations

from pathlib import Path

from parsers.errors import InputError

from . import html, markdown, png
from .files import check_output, emit_text, title_of


def write_report(run, fmt: str, output: Path | None, steps) -> list[Path]:
    """Render ``run`` as ``fmt`` (``md``, ``html`` or ``png``); returns the files written."""
    if fmt == "png":
        if output is None:
            raise InputError(
                "--format png", "writes image files: name them with -o FILE.png or -o FOLDER"
            )
        check_output(output, folder=True)
        with steps.step("Drawing charts"):
            try:
                written = png.render(run, output)
            except OSError as exc:
                raise InputError(output, f"cannot write: {exc.strerror or exc}") from None
        shown = ", ".join(str(p) for p in written) or "none (nothing to draw)"
        steps.say(f"rlperf: wrote {len(written)} chart image(s): {shown}")
        return written
    title = title_of(run)
    with steps.step("Writing the report"):
        render = html.render if fmt == "html" else markdown.render
        text = render(run, title=title)
    return emit_text(text, output, steps, f"{fmt} report")
