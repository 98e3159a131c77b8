"""A run's report in the file formats (Markdown, HTML, PNG), written to ``-o`` or stdout.

Kept apart from :mod:`analyzer.report.files` (the safe writing every command uses). The
renderers load altair only when a chart is drawn (:mod:`analyzer.report.charts`), so a Markdown
report never does, and :func:`check` refuses a PNG report with nowhere to go before any input is
read.
"""

from __future__ import annotations

from pathlib import Path

from parsers.errors import InputError

from ..model.units import plural
from . import html, markdown, png
from .files import check_output, emit_text, title_of


def check(fmt: str, output: Path | None) -> None:
    """A PNG report needs ``-o`` (a file or folder that can take it): said before any parsing."""
    if fmt != "png":
        return
    if output is None:
        raise InputError(
            "--format png", "writes image files: name them with -o FILE.png or -o FOLDER"
        )
    check_output(output, folder=True)


def write_report(run, fmt: str, output: Path | None, steps) -> list[Path]:
    """Render ``run`` as ``fmt`` (``md``, ``html`` or ``png``); returns the files written."""
    if fmt == "png":
        check(fmt, output)
        assert output is not None  # checked: a PNG report always names its file or folder
        with steps.step("Drawing charts"):
            try:
                written = png.render(run, output)
            except OSError as exc:
                raise InputError(output, f"cannot write: {exc.strerror or exc}") from None
        shown = ", ".join(str(p) for p in written) or "none (nothing to draw)"
        steps.say(f"rlperf: wrote {plural(len(written), 'chart image')}: {shown}")
        return written
    title = title_of(run)
    with steps.step("Writing the report"):
        text = (html.render if fmt == "html" else markdown.render)(run, title=title)
    return emit_text(text, output, steps, f"{fmt} report")
