"""rlperf against Holistic Trace Analysis on the same real traces (differential test).

HTA's ``get_temporal_breakdown`` and ``get_comm_comp_overlap`` are run on every corpus trace
and must agree with rlperf's per-rank GPU time within 1% of the GPU window. Three documented
differences from HTA are taken into account, not hidden:

- HTA rounds sub-µs timestamps inward (ceil start, floor end), shrinking every kernel by up to
  2 µs; the test turns that off (``HTA_DISABLE_NS_ROUNDING``) to compare the computations.
- HTA counts CUDA stream-synchronisation rows as busy GPU time; rlperf does not (a sync is the
  host waiting). ``hta_compatible=True`` counts them, as HTA does.
- HTA leaves out GPU work whose launch record is missing from the trace in ``test.json.gz``
  (614 kernels and copies, inside the first profiler step); rlperf counts it because it ran on
  the GPU inside the window. For that file the test also checks that rlperf without that work
  equals HTA. (HTA keeps the 509 launch-less kernels of the Qwen trace, which ran before the
  host side of the profiler started; so does rlperf.)
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from pathlib import Path

import polars as pl
import pytest

import parsers
from analyzer.analyses import gpu_time

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
TRACES = sorted([*(CORPUS / "HolisticTraceAnalysis").glob("*.json.gz"), *(CORPUS / "TraceLens").glob("*.json.gz")])
CPU_ONLY = {"rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"}
LAUNCHLESS = {"test.json.gz": 614, "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": 509}
HTA_DROPS_LAUNCHLESS = {"test.json.gz"}


@pytest.fixture(scope="module")
def hta():
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    yield TraceAnalysis
    logging.disable(logging.NOTSET)


def hta_numbers(TraceAnalysis, path: Path, tmp_path: Path) -> dict[str, float]:
    folder = tmp_path / "trace"
    folder.mkdir()
    shutil.copy(path, folder)
    analysis = TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=True)
    breakdown = analysis.get_temporal_breakdown(visualize=False).iloc[0]
    overlap = analysis.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0]
    return {
        "idle_us": float(breakdown["idle_time(us)"]),
        "compute_us": float(breakdown["compute_time(us)"]),
        "window_us": float(breakdown["kernel_time(us)"]),
        "overlap_pct": float(overlap),
    }


def ours(events: pl.DataFrame) -> dict[str, float | None]:
    row = gpu_time.compute(events, hta_compatible=True).row(0, named=True)
    return {
        "idle_us": row["idle_ns"] / 1e3,
        "compute_us": row["compute_ns"] / 1e3,
        "window_us": row["gpu_window_ns"] / 1e3,
        "overlap_pct": None if row["overlap_fraction"] is None else 100 * row["overlap_fraction"],
    }


def without_missing_launches(events: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    launched = events.filter(pl.col("kind") == "runtime").select("corr").unique()
    activity = pl.col("kind").is_in(["kernel", "memcpy", "memset"])
    orphans = events.filter(activity).join(launched, on="corr", how="anti")
    kept = events.filter(~activity).vstack(events.filter(activity).join(launched, on="corr", how="semi"))
    return kept, orphans.height


def assert_agree(mine: dict, theirs: dict, name: str) -> None:
    window = theirs["window_us"]
    assert abs(mine["window_us"] - window) <= 0.01 * window, name
    assert abs(mine["idle_us"] - theirs["idle_us"]) <= 0.01 * window, name
    assert abs(mine["compute_us"] - theirs["compute_us"]) <= 0.01 * window, name
    if theirs["overlap_pct"] == theirs["overlap_pct"]:  # HTA gives NaN when there is no communication
        assert mine["overlap_pct"] is not None and abs(mine["overlap_pct"] - theirs["overlap_pct"]) <= 1.0, name
    else:
        assert mine["overlap_pct"] is None, name


@pytest.mark.parametrize("path", [p for p in TRACES if p.name not in CPU_ONLY], ids=lambda p: p.name)
def test_gpu_time_equals_hta(hta, path: Path, tmp_path: Path):
    events = parsers.parse_file(path).events
    theirs = hta_numbers(hta, path, tmp_path)
    kept, launchless = without_missing_launches(events)
    assert launchless == LAUNCHLESS.get(path.name, 0)
    if path.name in HTA_DROPS_LAUNCHLESS:
        assert_agree(ours(kept), theirs, path.name)
        # with that work counted, rlperf sees the GPU busier than HTA says, by more than 1%
        assert ours(events)["idle_us"] < theirs["idle_us"] - 0.01 * theirs["window_us"]
    else:
        assert_agree(ours(events), theirs, path.name)


def test_cpu_only_trace(hta, tmp_path: Path):
    """HTA cannot break down a trace without GPU work; rlperf reports the rank with no GPU time."""
    path = CORPUS / "HolisticTraceAnalysis" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    with pytest.raises(IndexError):
        hta_numbers(hta, path, tmp_path)
    row = gpu_time.compute(parsers.parse_file(path).events).row(0, named=True)
    assert row["rank"] == 34 and row["busy_ns"] is None and row["trace_end_ns"] > row["trace_start_ns"]
