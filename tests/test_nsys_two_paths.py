"""One workload, two profilers at once: PyTorch's (record_function → Kineto JSON) and nsys (NVTX
ranges of the same names → .nsys-rep). Both parsers must report the same ranges."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

import parsers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "workloads"))
import nsys_capture  # noqa: E402

ENCLOSING_NS = 500_000
NAMES = ["step 0", "rollout", "generate", "update_actor", "step 1", "rollout", "generate", "update_actor"]


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, pl.DataFrame]:
    work = tmp_path_factory.mktemp("two_paths")
    trace = work / "kineto.json"
    mp = pytest.MonkeyPatch()
    mp.setenv("RLPERF_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    try:
        report = nsys_capture.profile([sys.executable, str(HERE / "workloads" / "two_paths.py"), str(trace)], work)
        kineto = parsers.parse_file(trace)
        nsys = parsers.parse_file(report)
    finally:
        mp.undo()
    assert (kineto.format, nsys.format) == ("kineto", "nsys-rep")

    def ranges(source: parsers.ParsedSource) -> pl.DataFrame:
        parsers.validate(source.events)
        return (
            source.events.filter((pl.col("kind") == "annotation") & pl.col("name").cast(pl.String).is_in(NAMES))
            .sort("start_ns")
            .select(name=pl.col("name").cast(pl.String), start="start_ns", dur=pl.col("end_ns") - pl.col("start_ns"), depth="depth", pid="pid", tid="tid")
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
        # measured 8-162 µs longer on the 8 ranges (one loaded 2-core run); 0.5 ms is 3x that
        # (2% of the range, up to 1.9 ms here, was allowed too)
        assert 0 <= n["dur"] - k["dur"] <= ENCLOSING_NS, (k, n)


def test_same_epoch_clock(both) -> None:
    kineto, nsys = both
    offsets = (kineto["start"] - nsys["start"]).to_list()
    # measured: the Kineto range starts 4-157 µs after the nsys one; 1 ms is 6x (2 ms was allowed)
    assert all(abs(o) <= 1_000_000 for o in offsets), offsets
