"""The HTML report: one self-contained file that headless Chromium, with the network cut off,
draws completely — every chart present as SVG, no console message, no error recorded."""

from __future__ import annotations

import os
import re
import statistics
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from report_truth import RUNS, cli, load_truth, products, synthetic, synthetic_run

import analyzer
from analyzer.report import browser, charts, html
from analyzer.report.charts import aggregate_timeline

FIGURES_WITH_CHARTS = {"timeline", "stage_share", "bubbles", "collectives", "workdepth"}
SIZE_LIMIT_64_RANKS = 3 * 1024 * 1024
"""docs/reports.md: a 64-rank run's report stays under 3 MiB (the inlined Vega bundle is ~0.9
MiB)."""

pytestmark = pytest.mark.skipif(
    browser.chromium() is None, reason="needs Chromium (installed by tests/install-tools.sh)"
)


def assert_draws_offline(page: Path, expected: set[str]) -> browser.Rendered:
    drawn = browser.render(page)
    assert drawn.console == [], drawn.console
    assert 'id="rlperf-errors" class="errors" hidden' in drawn.dom
    keys = {key.split("-", 1)[1] for key in drawn.charts}
    assert keys == expected
    for key, state in drawn.charts.items():
        assert state["rendered"] == "ok", key
        assert int(state["svg"]) + int(state["canvas"]) >= 1, key
    return drawn


def assert_self_contained(text: str) -> None:
    """No markup that loads anything (scripts are inline; the Chromium run shows they fetch
    nothing)."""
    text = re.sub(r"(<script[^>]*>).*?</script>", r"\1</script>", text, flags=re.S | re.I)
    assert text.count("<script") >= 3
    assert not re.search(r"<(script|img|iframe)[^>]+src=", text, re.I)
    assert not re.search(r"<link[^>]+href=", text, re.I)
    assert "@import" not in text and "url(http" not in text
    assert "@font-face" not in text


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("synthetic")


def test_every_chart_draws_offline(tmp_path: Path, made: Path):
    folder = synthetic(made, "disaggregated")
    run = synthetic_run(folder)
    page = html.write(html.render(run, title="disaggregated"), tmp_path / "report.html")
    text = page.read_text()
    assert_self_contained(text)
    drawn = assert_draws_offline(page, FIGURES_WITH_CHARTS)
    assert "Headline numbers" in drawn.dom and "Guidelines" in drawn.dom
    truth = load_truth(folder)
    median = statistics.median(w["end_ns"] - w["start_ns"] for w in truth["step_windows"])
    shown = run.overview.filter(pl.col("metric") == "step_time_ns")["value"].item()
    assert shown == pytest.approx(median)


class OnlySome:
    """A run that provides only the given products (the others are not written yet)."""

    def __init__(self, made: dict[str, pl.DataFrame]) -> None:
        self.made = made

    def provides(self, *names: str) -> bool:
        return all(n in self.made for n in names)

    def product(self, name: str) -> pl.DataFrame:
        return self.made[name]


def test_missing_products_say_what_they_need(tmp_path: Path, made: Path):
    truth = products(load_truth(synthetic(made, "colocated")))
    found = {
        f.key: f for f in charts.figures(OnlySome({"stage_timeline": truth["stage_timeline"]}))
    }
    assert found["timeline"].chart is not None
    for key, provide in (
        ("stage_share", charts.STAGE_RANGES),
        ("bubbles", charts.STAGE_RANGES),
        ("collectives", "collectives (NCCL, gloo, …) in a trace"),
        ("workdepth", "step ranges and device activity in a trace"),
    ):
        assert found[key].chart is None
        assert found[key].needs == f"needs {provide}; none of the sources holds them"
        assert "product" not in found[key].needs
    empty = charts.figures(OnlySome({"bubbles": truth["bubbles"].clear()}))[2]
    assert empty.needs.endswith("; found none in these sources")
    page = html.Page("partial")
    page.add(*(html.figure_html(page, f) for f in found.values()))
    drawn = assert_draws_offline(html.write(page.render(), tmp_path / "partial.html"), {"timeline"})
    assert drawn.dom.count('class="needs"') == 4


def test_sample_run_report_through_the_cli(tmp_path: Path):
    out = tmp_path / "report.html"
    done = cli(
        "analyze",
        str(RUNS / "verl_ppo_disaggregated"),
        "--format",
        "html",
        "-o",
        str(out),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    assert f"wrote the html report to {out}" in done.stderr
    run = analyzer.load([RUNS / "verl_ppo_disaggregated"])
    expected = {f.key for f in charts.figures(run) if f.chart is not None}
    assert_self_contained(out.read_text())
    assert_draws_offline(out, expected)


def test_aggregated_timeline_keeps_the_majority_stage():
    stages = pl.DataFrame(
        {
            "rank": [0, 0, 0, 1],
            "step": [1, 1, 1, 1],
            "stage": ["rollout", "reward", "actor_update", "rollout"],
            "name": ["gen", "rm", "update", "gen"],
            "start_ns": [0, 600, 700, 0],
            "end_ns": [600, 700, 1000, 1000],
        }
    )
    out = aggregate_timeline(stages, slices=10)
    rank0 = out.filter(pl.col("rank") == 0).sort("start_ns")
    # slice 6 (600–700) is all reward; slices 0–5 rollout; 7–9 actor_update
    assert rank0.select("stage", "start_ns", "end_ns").rows() == [
        ("rollout", 0, 600), ("reward", 600, 700), ("actor_update", 700, 1000)]
    assert out.filter(pl.col("rank") == 1).rows() == [(1, 1, "rollout", "(aggregated)", 0, 1000)]


def test_64_rank_report_is_aggregated_small_and_draws(tmp_path: Path, made: Path):
    run = synthetic_run(synthetic(made, "colocated", ranks=64, steps=12))
    assert run.stage_timeline.height > charts.MAX_TIMELINE_MARKS
    timeline = charts.timeline(run)
    assert "Aggregated" in timeline.note
    spec = timeline.spec()
    data = spec["layer"][0].get("data") or spec["data"]
    marks = len(spec["datasets"][data["name"]] if "name" in data else data["values"])
    assert marks <= charts.MAX_TIMELINE_MARKS
    page = html.write(html.render(run), tmp_path / "run64.html")
    assert page.stat().st_size < SIZE_LIMIT_64_RANKS
    assert_draws_offline(page, FIGURES_WITH_CHARTS)


def test_demo_writes_the_report_and_says_where(tmp_path: Path):
    from analyzer.ops.compare import compare
    from analyzer.samples import DEMO_GROUPS, demo_groups

    done = cli("demo", "-o", str(tmp_path / "demo.html"), "--quiet")
    assert done.returncode == 0, done.stderr
    assert f"wrote the report to {tmp_path / 'demo.html'}" in done.stderr
    text = (tmp_path / "demo.html").read_text()
    groups = demo_groups()
    assert [title for title, _ in groups] == [title for title, _, _ in DEMO_GROUPS]
    drawable = 0
    for title, found in groups:
        assert f"<h2>{title}</h2>" in text
        runs = [analyzer.load([path]) for _, path in found]
        for label, _ in found:
            assert f"Run: {label}" in text
        drawable += sum(f.chart is not None for run in runs for f in charts.figures(run))
        drawable += sum(
            f.chart is not None
            for f in charts.comparison_figures(compare(runs, [label for label, _ in found]))
        )
    assert drawable >= 5 * 7 + 2 * 2
    drawn = browser.render(tmp_path / "demo.html")
    assert drawn.console == []
    assert len(drawn.charts) == drawable
    assert all(s["rendered"] == "ok" and int(s["svg"]) >= 1 for s in drawn.charts.values())


def running_with(marker: bytes) -> list[int]:
    """Live processes whose command line holds ``marker``, read from /proc (no procps needed, so
    the check never skips)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_no_chromium_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """After a render that finishes, no process of that Chromium's session is left and none
    names its profile folder. Only this render's processes are looked for: another test worker
    may be rendering at the same time."""
    import subprocess
    import sys

    started: list[tuple[int, str]] = []
    popen = subprocess.Popen

    def recording(command, *args, **kwargs):
        proc = popen(command, *args, **kwargs)
        profile = next(a for a in command if a.startswith("--user-data-dir="))
        started.append((proc.pid, profile.split("=", 1)[1]))
        return proc

    probe = popen([sys.executable, "-c", "import time; time.sleep(60)", "rlperf-probe-marker"])
    try:
        until = time.monotonic() + 10  # its command line shows once its exec is through
        while running_with(b"rlperf-probe-marker") != [probe.pid] and time.monotonic() < until:
            time.sleep(0.05)
        assert running_with(b"rlperf-probe-marker") == [probe.pid]  # the scan sees a live process
        assert probe.pid in live_in_group(os.getpgid(probe.pid))
    finally:
        probe.kill()
        probe.wait()
    monkeypatch.setattr(browser.subprocess, "Popen", recording)
    page = tmp_path / "page.html"
    page.write_text('<!doctype html><div data-chart="a" data-rendered="ok"><svg></svg></div>')
    assert browser.render(page).charts == {"a": {"rendered": "ok", "svg": 1, "canvas": 0}}
    assert len(started) == 1
    group, profile = started[0]
    assert live_in_group(group) == []
    assert running_with(profile.encode()) == []
    assert not Path(profile).exists()


def live_in_group(group: int) -> list[int]:
    """Processes of process group ``group`` that still run (zombies wait only for their reaper)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_a_page_that_never_finishes_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A page whose script never returns hangs Chromium: the render stops at the time limit with
    one error, and no process of Chromium's session is left running."""
    import subprocess

    started: list[int] = []
    popen = subprocess.Popen

    def recording(*args, **kwargs):
        proc = popen(*args, **kwargs)
        started.append(proc.pid)
        return proc

    monkeypatch.setattr(browser.subprocess, "Popen", recording)
    monkeypatch.setattr(browser, "TIMEOUT_S", 2)
    page = tmp_path / "page.html"
    page.write_text("<!doctype html><script>for(;;){}</script>")
    with pytest.raises(browser.BrowserError, match="did not finish within"):
        browser.render(page)
    assert len(started) == 1
    assert live_in_group(started[0]) == []


def png_pixels(path: Path) -> np.ndarray:
    """The RGB(A) pixels of an 8-bit PNG, decoded here (zlib and the five PNG row filters), so the
    comparison needs no imaging library."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat = 8, []
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + size]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (path, depth, colour)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + size
    bpp = 3 if colour == 2 else 4
    stride = width * bpp
    rows = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(height, stride + 1)
    out = np.zeros((height + 1, stride), np.uint8)
    for y in range(height):
        out[y + 1] = _unfilter(int(rows[y, 0]), rows[y, 1:], out[y], bpp)
    return out[1:].reshape(height, width, bpp)


def _unfilter(kind: int, line: np.ndarray, up: np.ndarray, bpp: int) -> np.ndarray:
    if kind == 0:
        return line
    if kind == 1:
        return np.cumsum(line.reshape(-1, bpp), axis=0, dtype=np.uint8).reshape(-1)
    if kind == 2:
        return line + up
    cur, prev = bytearray(line.tobytes()), up.tobytes()
    for i in range(len(cur)):
        a = cur[i - bpp] if i >= bpp else 0
        b = prev[i]
        if kind == 3:
            cur[i] = (cur[i] + ((a + b) >> 1)) & 255
            continue
        c = prev[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return np.frombuffer(bytes(cur), np.uint8)


SCREENSHOT_COLOUR_TOL = 8
"""Largest channel difference a pixel may show between the committed screenshot and a fresh one.
Two renders by the same Chromium and fonts are identical (measured: 0 of 3.6 M pixels differ);
8 of 255 leaves room for anti-aliasing jitter only — one changed character ("2, 3" shown as
"2–3") moves ~60 pixels by far more than that."""


def test_png_decoder_reads_what_it_is_given(tmp_path: Path):
    """The decoder on a PNG written here with every row filter Chromium uses (None, Sub, Up,
    Average, Paeth): it must give back the pixels encoded."""
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, size=(5, 9, 3), dtype=np.uint8)
    raw = bytearray()
    for y, kind in enumerate((0, 1, 2, 3, 4)):
        line, up = (
            pixels[y].reshape(-1).astype(int),
            (pixels[y - 1].reshape(-1).astype(int) if y else np.zeros(27, int)),
        )
        left = np.concatenate([[0, 0, 0], line[:-3]])
        upleft = np.concatenate([[0, 0, 0], up[:-3]])
        if kind == 3:
            pred = (left + up) // 2
        elif kind == 4:
            p = left + up - upleft
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - upleft)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
        else:
            pred = [np.zeros(27, int), left, up][kind]
        raw += bytes([kind]) + bytes(((line - pred) % 256).astype(np.uint8))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    png = tmp_path / "t.png"
    png.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 9, 5, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(bytes(raw)))
        + chunk(b"IEND", b"")
    )
    assert (png_pixels(png) == pixels).all()


def test_docs_screenshots_are_the_reports_own(tmp_path: Path):
    """docs/reports.md shows screenshots that docs/img/screenshots.py makes from a sample run: a
    fresh render must show the same pixels (``make docs-images`` after a report change)."""
    import subprocess
    import sys

    docs = RUNS.parents[1] / "docs"
    text = (docs / "reports.md").read_text()
    done = subprocess.run([sys.executable, str(docs / "img" / "screenshots.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    for name in ("report-top.png", "report-figures.png"):
        assert f"(img/{name})" in text
        committed, fresh = png_pixels(docs / "img" / name), png_pixels(tmp_path / name)
        assert committed.shape == fresh.shape, name
        off = (
            np.abs(committed.astype(np.int16) - fresh.astype(np.int16)).max(axis=2)
            > SCREENSHOT_COLOUR_TOL
        )
        assert off.sum() == 0, (name, int(off.sum()), np.argwhere(off)[:5].tolist())
        # a drawn page, not a blank
        assert (
            len(np.unique(fresh.reshape(-1, fresh.shape[2]), axis=0)) > 50
        )
