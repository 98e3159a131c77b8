"""The HTML report: one self-contained file that works offline.

The Vega, Vega-Lite and Vega-Embed JavaScript is inlined (the bundle vl-convert ships, cached in
rlperf's cache directory after the first build); no script, style sheet or font is fetched from
the network. Charts are Vega-Lite specs (``analyzer/report/charts.py``) embedded as JSON and
drawn as SVG. If a chart fails to draw, the page says so at the top (and records it on the
chart's element as ``data-rendered``), instead of leaving a blank space.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import vl_convert

from parsers.cachedir import cache_dir

from ..model.units import cell
from .charts import NOT_DRAWN, Figure, comparison_figures, figures, remarks
from .comparison import NOTE, Compared, display, display_columns
from .files import sized
from .sections import FIGURES, SOURCES, Column, Section, arranged, sections
from .sources import source_ranks

LARGE_TABLE_ROWS = 40
"""Tables longer than this are folded (``<details>``)."""

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;\
margin:24px auto;max-width:1180px;color:#222;padding:0 16px}
h1{font-size:1.6em;margin-bottom:4px} h2{font-size:1.25em;margin-top:32px;\
border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:1.05em;margin-top:22px}
table{border-collapse:collapse;font-size:13px;margin:8px 0;max-width:100%} th,td{padding:3px 9px;\
border-bottom:1px solid #eee;text-align:left;vertical-align:top;overflow-wrap:break-word}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap} \
th{background:#f6f6f6;overflow-wrap:normal}
.note{color:#555;font-size:13px;margin:4px 0} .needs{color:#8a6d3b;background:#fcf8e3;\
padding:6px 10px;border-radius:4px;font-size:13px}
.errors{color:#a94442;background:#f2dede;padding:8px 12px;border-radius:4px;white-space:pre-wrap}
.sev-error td{background:#fbe3e3} .sev-warn td{background:#fdf3dc} \
.sev-info td{background:#eef4fb} .status-passed td{color:#3c763d}
.chart,.scroll{margin:8px 0;overflow-x:auto} .meta{color:#666;font-size:13px} \
.better{font-weight:600;color:#2b6e2b}
details summary{cursor:pointer;color:#335;margin:6px 0}
"""

_RECORD_ERRORS = """
window.rlperfErrors=[];
function rlperfError(message){window.rlperfErrors.push(String(message));\
var box=document.getElementById('rlperf-errors');
if(box){box.hidden=false;box.textContent+=String(message)+'\\n';}}
window.addEventListener('error',function(e){rlperfError(e.message||e);});
window.addEventListener('unhandledrejection',function(e){rlperfError(e.reason);});
"""

_EMBED = """
document.querySelectorAll('[data-chart]').forEach(function(el){
  var spec=JSON.parse(document.getElementById('spec-'+el.dataset.chart).textContent);
  vegaEmbed(el,spec,{renderer:'svg',actions:false}).then(function(){el.dataset.rendered='ok';})
  .catch(function(e){el.dataset.rendered='error';rlperfError(el.dataset.chart+': '+e);});
});
"""


@dataclass
class Page:
    """An HTML page being built: body parts and the chart specs they reference."""

    title: str
    body: list[str] = field(default_factory=list)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, *parts: str) -> None:
        self.body.extend(parts)

    def chart(self, key: str, spec: dict[str, Any]) -> str:
        chart_id = f"c{len(self.specs)}-{key}"
        self.specs[chart_id] = spec
        return f'<div class="chart" data-chart="{chart_id}"></div>'

    def render(self) -> str:
        specs = "\n".join(
            f'<script type="application/json" id="spec-{k}">{_json_in_html(v)}</script>'
            for k, v in self.specs.items()
        )
        return (
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" '
            f'content="width=device-width,initial-scale=1"><title>{esc(self.title)}</title>'
            f"<style>{CSS}</style><script>{_RECORD_ERRORS}</script>"
            f"<script>{_inline_script(javascript_bundle())}</script></head><body>\n"
            '<div id="rlperf-errors" class="errors" hidden></div>\n'
            + "\n".join(self.body)
            + f"\n{specs}\n<script>{_EMBED}</script>\n</body></html>\n"
        )


def render(run, *, title: str = "rlperf report") -> str:
    """The one-run report as a complete HTML document."""
    page = Page(title)
    page.add(f"<h1>{esc(title)}</h1>")
    add_run(page, run)
    return page.render()


def add_run(page: Page, run, *, level: int = 2) -> None:
    """One run's report into ``page``: the run summary, then every section, the figures and the
    sources in the layout's order."""
    h = f"h{level}"
    names = ", ".join(s.path.name for s in run.sources[:6]) + (" …" if len(run.sources) > 6 else "")
    page.add(
        f'<p class="meta">{esc(sized(run))}: {esc(names)}</p>'
    )
    for part in arranged(sections(run)):
        if isinstance(part, Section):
            page.add(section_html(part, h))
        elif part == FIGURES:
            page.add(*figures_html(page, figures(run), h))
        elif part == SOURCES:
            page.add(sources_html(run, h))


def figures_html(page: Page, drawn: list[Figure], h: str) -> list[str]:
    """Each figure with something to draw; those without, in one list of what they need (not a
    box each before the first real number)."""
    parts = [figure_html(page, figure, h) for figure in drawn if not figure.needs]
    needs = [f for f in drawn if f.needs]
    if needs:
        items = "".join(f"<li>{esc(f.title)}: {esc(f.needs)}</li>" for f in needs)
        parts.append(f'<div class="needs">{esc(NOT_DRAWN)}<ul>{items}</ul></div>')
    return parts


def figure_html(page: Page, figure: Figure, h: str = "h2") -> str:
    parts = [f"<{h}>{esc(figure.title)}</{h}>"]
    if figure.needs:
        parts.append(f'<p class="needs">{esc(figure.needs)}</p>')
        return "\n".join(parts)
    spec = figure.spec()
    if spec is not None:
        parts.append(page.chart(figure.key, spec))
    elif figure.table is not None:
        parts.append(
            frame_html(
                figure.table,
                [Column(c, c, figure.formats.get(c, "text")) for c in figure.table.columns],
            )
        )
    if figure.note:
        parts.append(f'<p class="note">{esc(figure.note)}</p>')
    return "\n".join(parts)


def section_html(section: Section, h: str = "h2") -> str:
    parts = [f"<{h}>{esc(section.title)}</{h}>"]
    if section.frame is None or section.frame.height == 0:
        parts.append(f'<p class="needs">{esc(section.note or "nothing to show")}</p>')
        return "\n".join(parts)
    columns = section.shown_columns()
    parts.append(frame_html(section.frame, columns))
    if section.note:
        parts.append(f'<p class="note">{esc(section.note)}</p>')
    return "\n".join(parts)


def frame_html(frame: pl.DataFrame, columns: Sequence[Column]) -> str:
    """A table of ``frame``'s ``columns``, cells formatted as every renderer formats them."""
    head = "".join(f"<th>{esc(c.title)}</th>" for c in columns)
    classes = _row_classes(frame)
    rows = []
    for css, row in zip(classes, frame.select([c.name for c in columns]).iter_rows(), strict=True):
        cells = "".join(
            f'<td class="num">{esc(cell(v, c.format))}</td>'
            if c.format != "text"
            else f"<td>{breakable(cell(v, c.format))}</td>"
            for v, c in zip(row, columns, strict=True)
        )
        rows.append(f'<tr class="{css}">{cells}</tr>' if css else f"<tr>{cells}</tr>")
    table = (
        '<div '
        f'class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )
    if frame.height > LARGE_TABLE_ROWS:
        return f"<details><summary>{frame.height} rows</summary>{table}</details>"
    return table


def _row_classes(frame: pl.DataFrame) -> list[str]:
    """Guideline rows are tinted by severity (violations) or status, findings by severity."""
    if "severity" in frame.columns and "status" not in frame.columns:
        return [f"sev-{sev}" if sev else "" for sev in frame["severity"].to_list()]
    if not {"status", "severity"} <= set(frame.columns):
        return [""] * frame.height
    return [
        f"sev-{sev}" if status == "violated" else f"status-{status}"
        for status, sev in frame.select("status", "severity").iter_rows()
    ]


def sources_html(run, h: str = "h2") -> str:
    parts = [f"<{h}>Sources</{h}>"]
    ranks = source_ranks(run)
    rows = pl.DataFrame(
        {
            "file": [str(s.path) for s in run.sources],
            "format": [s.format for s in run.sources],
            "rank": [ranks[s.index] for s in run.sources],
        },
        schema={"file": pl.String, "format": pl.String, "rank": pl.String},
    )
    parts.append(
        frame_html(
            rows, [Column("file", "file"), Column("format", "format"), Column("rank", "rank")]
        )
    )
    items = [f"<li>{esc(line)}</li>" for line in remarks(run)]
    if items:
        parts.append(f'<ul class="note">{"".join(items)}</ul>')
    return "\n".join(parts)


def write(text: str, output: Path) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    return output


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


LONG_TOKEN = 24
"""A word longer than this (a kernel name, a list of steps) may break inside; shorter ones never
do. ``overflow-wrap: anywhere`` broke every word ("Communicatio n", "actor_up date") because it
lets a table column shrink below its words."""
_AFTER_SEPARATOR = re.compile(r"(?<=[_/.,:;=(])")


def breakable(text: str) -> str:
    """``text`` escaped, with break opportunities (``<wbr>``) inside its long words only: after
    their separators, or every :data:`LONG_TOKEN` characters where they have none."""
    return " ".join(_breakable_word(word) for word in text.split(" "))


def _breakable_word(word: str) -> str:
    if len(word) <= LONG_TOKEN:
        return esc(word)
    pieces = [
        chunk[i : i + LONG_TOKEN]
        for chunk in _AFTER_SEPARATOR.split(word)
        for i in range(0, len(chunk), LONG_TOKEN)
    ]
    return "<wbr>".join(esc(piece) for piece in pieces if piece)


def _json_in_html(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), default=str).replace("</", "<\\/")


def _inline_script(code: str) -> str:
    return code.replace("</script", "<\\/script")


def javascript_bundle() -> str:
    """Vega-Embed, Vega-Lite and Vega as one script (vl-convert's bundle), cached on disk: building
    it takes seconds, reading it back milliseconds."""
    version = vl_convert.__version__  # type: ignore[attr-defined]  # the stub omits __version__
    path = cache_dir("js") / f"vega-bundle-vlc{version}.js"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    bundle = vl_convert.javascript_bundle()  # type: ignore[call-arg]  # snippet has a default
    tmp = path.with_suffix(f".{id(bundle)}.tmp")
    try:
        tmp.write_text(bundle, encoding="utf-8")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
    return bundle


def render_comparison(
    comparison: Compared, *, runs: Sequence | None = None, title: str = "rlperf comparison"
) -> str:
    """Runs side by side (``analyzer.compare``); with ``runs``, each run's full report follows."""
    page = Page(title)
    page.add(f"<h1>{esc(title)}</h1>")
    add_comparison(page, comparison, runs)
    return page.render()


def add_comparison(
    page: Page, comparison: Compared, runs: Sequence | None = None, *, level: int = 2
) -> None:
    """Who wins where, the metrics table, the comparison charts, then each run's report."""
    h = f"h{level}"
    labels = comparison.labels
    shown = display(comparison)
    page.add(f'<p class="meta">Deltas are against the first run, <b>{esc(labels[0])}</b>.</p>')
    items = "".join(
        f"<li><b>{esc(label)}</b> wins {len(won)}: {esc(', '.join(won) or '–')}</li>"
        for label, won in comparison.wins().items()
    )
    page.add(f"<{h}>Who wins where</{h}><ul>{items}</ul>", f"<{h}>Metrics</{h}>")
    page.add(frame_html(shown, display_columns(shown)), f'<p class="note">{esc(NOTE)}</p>')
    page.add(*(figure_html(page, figure, h) for figure in comparison_figures(comparison)))
    for label, run in zip(labels, runs or [], strict=False):
        page.add(f'<{h} id="run-{esc(label)}">Run: {esc(label)}</{h}>')
        add_run(page, run, level=level + 1)
