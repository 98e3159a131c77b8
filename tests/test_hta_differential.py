"""rlperf against Holistic Trace Analysis on the same real traces (differential test).

HTA's ``get_temporal_breakdown`` and ``get_comm_comp_overlap`` are run on every Kineto trace of
the corpus (HolisticTraceAnalysis, TraceLens with its ``inference/`` folder, rl-insight) and must
agree with rlperf's per-rank GPU time: window, idle and compute within 1e-4 of the GPU window,
overlap within 0.01 points. Measured (after rlperf kept epoch-µs timestamps exact): the largest
gap is 1.5e-5 of the window (0.16 ns of the 11 µs window of the sglang bs-32 capture; HTA holds
times relative to the trace start as float µs), every other below 1e-7; overlap at most 0.004
points. Traces without GPU work (rank-34, the rl-insight stubs) make HTA fail, and the test says
so. Four documented differences from HTA are taken into account, not hidden:

- HTA rounds sub-µs timestamps inward (ceil start, floor end), shrinking every kernel by up to
  2 µs; the test turns that off (``HTA_DISABLE_NS_ROUNDING``) to compare the computations.
- HTA counts CUDA stream-synchronisation rows as busy GPU time; rlperf does not (a sync is the
  host waiting). ``hta_compatible=True`` counts them, as HTA does.
- HTA leaves out GPU work whose launch record is missing from the trace in ``test.json.gz``
  (614 kernels and copies, inside the first profiler step); rlperf counts it because it ran on
  the GPU inside the window. For that file the test also checks that rlperf without that work
  equals HTA. (HTA keeps the 509 launch-less kernels of the Qwen trace, which ran before the
  host side of the profiler started; so does rlperf.)
- HTA takes every row with a ``stream`` argument for GPU work, so the 48 host ``cpu_op`` rows of
  Triton launches in the vLLM graph-capture trace (451.417 µs, launch records carrying the
  stream they launch on) count as compute; rlperf counts them as host time. For that file the
  test checks that HTA's compute less those rows equals rlperf's.
"""

from __future__ import annotations

import gzip
import json
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
TRACES = sorted(
    [
        *(CORPUS / "HolisticTraceAnalysis").glob("*.json.gz"),
        *(CORPUS / "TraceLens").rglob("*.json.gz"),
        *(CORPUS / "rl-insight").glob("*.json.gz"),
    ],
    key=lambda p: p.name,
)
NO_GPU_WORK = {
    "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    *(p.name for p in (CORPUS / "rl-insight").glob("*.json.gz")),
}
LAUNCHLESS = {"test.json.gz": 614, "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": 509}
HTA_DROPS_LAUNCHLESS = {"test.json.gz"}
HOST_ROWS_WITH_A_STREAM = {
    "vllm_decode_full__capture_traces__graph_capture_rank_0.1773709742341309550"
    ".pt.trace.json.gz": 48
}
WINDOW_TOL = 1e-4
"""Of the GPU window, for window, idle and compute: measured at most 1.5e-5 (see above)."""
OVERLAP_TOL_POINTS = 0.01
"""Percentage points: measured at most 0.004 (sampled_rank-1)."""


@pytest.fixture(scope="module")
def hta():
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from hta.configs.env_options import HTAEnvOptions
    from hta.trace_analysis import TraceAnalysis

    # HTA reads its environment once, into a singleton: a crosscheck run earlier in the same
    # process would otherwise have fixed the rounding on.
    options = HTAEnvOptions.instance()
    was = options.disable_ns_rounding()
    options.set_disable_ns_rounding(True)
    yield TraceAnalysis
    options.set_disable_ns_rounding(was)
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
    kept = events.filter(~activity).vstack(
        events.filter(activity).join(launched, on="corr", how="semi")
    )
    return kept, orphans.height


def assert_agree(mine: dict, theirs: dict, name: str) -> None:
    tol = WINDOW_TOL * theirs["window_us"]
    for key in ("window_us", "idle_us", "compute_us"):
        assert abs(mine[key] - theirs[key]) <= tol, (name, key, mine[key], theirs[key])
    if (
        theirs["overlap_pct"] == theirs["overlap_pct"]
    ):  # HTA gives NaN when there is no communication
        assert mine["overlap_pct"] is not None, name
        assert abs(mine["overlap_pct"] - theirs["overlap_pct"]) <= OVERLAP_TOL_POINTS, (
            name,
            mine,
            theirs,
        )
    else:
        assert mine["overlap_pct"] is None, name


def host_rows_with_a_stream(path: Path) -> tuple[int, float]:
    """Count and total µs of host rows (not GPU categories) that carry a ``stream`` argument, read
    from the file itself."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    rows = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"
            and "stream" in (e.get("args") or {})]
    return len(rows), sum(e["dur"] for e in rows)


@pytest.mark.parametrize(
    "path", [p for p in TRACES if p.name not in NO_GPU_WORK], ids=lambda p: p.name
)
def test_gpu_time_equals_hta(hta, path: Path, tmp_path: Path):
    events = parsers.parse_file(path).events
    theirs = hta_numbers(hta, path, tmp_path)
    kept, launchless = without_missing_launches(events)
    assert launchless == LAUNCHLESS.get(path.name, 0)
    if path.name in HTA_DROPS_LAUNCHLESS:
        assert_agree(ours(kept), theirs, path.name)
        # with that work counted, rlperf sees the GPU busier than HTA says, by more than 1%
        assert ours(events)["idle_us"] < theirs["idle_us"] - 0.01 * theirs["window_us"]
        return
    mine = ours(events)
    if path.name in HOST_ROWS_WITH_A_STREAM:
        count, host_us = host_rows_with_a_stream(path)
        assert count == HOST_ROWS_WITH_A_STREAM[path.name] and host_us == pytest.approx(451.417)
        assert (
            abs(mine["compute_us"] - theirs["compute_us"]) > 10 * WINDOW_TOL * theirs["window_us"]
        )
        theirs = theirs | {
            "compute_us": theirs["compute_us"] - host_us,
            "idle_us": theirs["idle_us"] + host_us,
        }
    assert_agree(mine, theirs, path.name)


def test_every_trace_with_gpu_work_is_compared():
    compared = {p.name for p in TRACES if p.name not in NO_GPU_WORK}
    assert len(compared) == 16 and len(NO_GPU_WORK) == 7
    assert {p.parent.name for p in TRACES if p.name in compared} == {
        "HolisticTraceAnalysis",
        "TraceLens",
        "inference",
    }


@pytest.mark.parametrize("path", [p for p in TRACES if p.name in NO_GPU_WORK], ids=lambda p: p.name)
def test_traces_without_gpu_work(hta, path: Path, tmp_path: Path):
    """HTA cannot break down a trace without GPU work; rlperf reports the rank with no GPU time."""
    with pytest.raises(IndexError):
        hta_numbers(hta, path, tmp_path)
    events = parsers.parse_file(path).events
    assert events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"])).height == 0
    row = gpu_time.compute(events).row(0, named=True)
    assert row["busy_ns"] is None and row["trace_end_ns"] > row["trace_start_ns"]


def test_epoch_microseconds_become_exact_nanoseconds():
    """event_sync_trace's kernels start at whole epoch µs (1.7e15): ×1000 as one float lands on a
    256 ns grid (it was 72 ns off HTA); each start must be the file's µs × 1000 exactly."""
    path = CORPUS / "HolisticTraceAnalysis" / "event_sync_trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    want = sorted(int(e["ts"]) * 1000 for e in doc["traceEvents"] if e.get("cat") == "kernel")
    got = (
        parsers.parse_file(path)
        .events.filter(pl.col("kind") == "kernel")["start_ns"]
        .sort()
        .to_list()
    )
    assert got == want and want[0] % 256 != 0
