"""One workload, two profilers at once: PyTorch's (record_function → Kineto JSON) and nsys (NVTX
ranges of the same names → .nsys-rep). Both parsers must report the same ranges."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import polars as pl
import pytest

import parsers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "workloads"))
import nsys_capture  # noqa: E402

ENCLOSING_NS = 2_000_000
NAMES = [
    "step 0",
    "rollout",
    "generate",
    "update_actor",
    "step 1",
    "rollout",
    "generate",
    "update_actor",
]


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, pl.DataFrame]:
    work = tmp_path_factory.mktemp("two_paths")
    trace = work / "kineto.json"
    mp = pytest.MonkeyPatch()
    mp.setenv("RLPERF_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    try:
        report = nsys_capture.profile(
            [sys.executable, str(HERE / "workloads" / "two_paths.py"), str(trace)], work
        )
        kineto = parsers.parse_file(trace)
        nsys = parsers.parse_file(report)
    finally:
        mp.undo()
    assert (kineto.format, nsys.format) == ("kineto", "nsys-rep")

    def ranges(source: parsers.ParsedSource) -> pl.DataFrame:
        parsers.validate(source.events)
        return (
            source.events.filter(
                (pl.col("kind") == "annotation") & pl.col("name").cast(pl.String).is_in(NAMES)
            )
            .sort("start_ns")
            .select(
                name=pl.col("name").cast(pl.String),
                start="start_ns",
                dur=pl.col("end_ns") - pl.col("start_ns"),
                depth="depth",
                pid="pid",
                tid="tid",
            )
        )

    return ranges(kineto), ranges(nsys)


def test_same_ranges_in_the_same_order(both) -> None:
    kineto, nsys = both
    assert kineto["name"].to_list() == NAMES
    assert nsys["name"].to_list() == NAMES
    assert kineto["depth"].to_list() == nsys["depth"].to_list() == [0, 1, 2, 1, 0, 1, 2, 1]
    assert kineto.select("pid", "tid").unique().rows() == nsys.select("pid", "tid").unique().rows()


def test_same_durations_within_tolerance(both) -> None:
    kineto, nsys = both
    for k, n in zip(kineto.iter_rows(named=True), nsys.iter_rows(named=True), strict=True):
        # nsys' range encloses the record_function on both sides, by the profiler's overhead:
        # never shorter. How much longer is a live capture's scheduling: measured 8-162 µs on the
        # 8 ranges of one run, 815 µs on step 0 of the next and 1.77 ms on a 67 ms range under a
        # full test suite on a loaded 2-core machine, so 2% or 2 ms (the start-offset bound below)
        assert 0 <= n["dur"] - k["dur"] <= max(ENCLOSING_NS, k["dur"] // 50), (k, n)


def test_same_epoch_clock(both) -> None:
    """Both parsers put the ranges on one epoch clock: a wrong base (a time zone, the session's
    start missed) moves every range by the same seconds, so the median offset is held tight and
    each range only to the live capture's delays."""
    kineto, nsys = both
    offsets = (kineto["start"] - nsys["start"]).to_list()
    # measured: the Kineto range starts 4-157 µs after the nsys one in one run; 810 µs on step 0
    # in the next, and 2.55 ms on step 0 (the first record_function) under a full clean-CI suite,
    # where the five next ranges the failure printed lay 6-104 µs apart (9.0 ms in another). The
    # workload now opens one range before those compared: on 2 cores kept busy by 4 spinning
    # processes, step 0 lay 199 and 221 µs apart without it, 15 and 13 µs with it
    assert abs(statistics.median(offsets)) < 500_000, offsets
    assert all(abs(o) < 5_000_000 for o in offsets), offsets
