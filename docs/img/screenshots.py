"""Screenshots of the HTML report of a sample run, for docs/reports.md (``make docs-images``).

The report is rendered by rlperf itself (``rlperf analyze … --format html``) and photographed by
headless Chromium with the network cut off (``analyzer/report/browser.py``). Two images: the top
of the report (run facts, headline numbers, timeline) and a page of the figures alone.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "sample_traces" / "runs" / "verl_ppo_disaggregated"
OUT = Path(__file__).resolve().parent
WIDTH = 1280


def main(argv: list[str] | None = None) -> int:
    """``screenshots.py [OUT_DIR]`` (default: this folder)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else OUT
    sys.path.insert(0, str(REPO))
    import analyzer
    from analyzer.report import browser, html
    from analyzer.report.charts import figures

    run = analyzer.load([RUN])
    drawn = [f for f in figures(run) if f.chart is not None]
    if len(drawn) < 4:
        print(
            f"screenshots: only {len(drawn)} figure(s) draw for {RUN.name}; the analyses it needs "
            f"are missing",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        full = html.write(html.render(run, title=f"rlperf: {RUN.name}"), Path(tmp) / "report.html")
        page = html.Page(f"rlperf: {RUN.name} — figures")
        page.add(*(html.figure_html(page, f) for f in drawn if f.key != "timeline"))
        only = html.write(page.render(), Path(tmp) / "figures.html")
        for source, name, height in (
            (full, "report-top.png", 1500),
            (only, "report-figures.png", 1350),
        ):
            checked = browser.render(source, width=WIDTH, height=height)
            if checked.console or any(s["rendered"] != "ok" for s in checked.charts.values()):
                print(
                    f"screenshots: {source.name} did not draw cleanly: {checked.console}",
                    file=sys.stderr,
                )
                return 1
            browser.screenshot(source, out / name, width=WIDTH, height=height)
            print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
