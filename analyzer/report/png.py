"""PNG images of the report's charts (vl-convert, no browser), for tickets and docs.

One file per chart that has something to draw, named ``<stem>-<chart>.png`` next to ``target``
(or inside it when ``target`` is a directory).
"""

from __future__ import annotations

from pathlib import Path

import vl_convert

from .charts import Figure, figures
from .files import write_bytes

SCALE = 2.0
"""Pixel density: 2 keeps text sharp on high-DPI screens and in zoomed tickets."""


def render(run, target: Path) -> list[Path]:
    """Write every drawable chart of ``run``; returns the files written (in report order)."""
    return write(figures(run), target)


def write(found: list[Figure], target: Path) -> list[Path]:
    folder, stem = _place(target)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for figure in found:
        spec = figure.spec()
        if spec is None:
            continue
        path = folder / f"{stem}-{figure.key}.png"
        write_bytes(path, vl_convert.vegalite_to_png(spec, scale=SCALE))
        written.append(path)
    return written


def _place(target: Path) -> tuple[Path, str]:
    if target.suffix.lower() == ".png":
        return target.parent, target.stem
    return target, "rlperf"
