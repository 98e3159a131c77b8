"""``rlperf export`` then ``rlperf analyze`` of the export: the same run.

Every bundled sample (the GPU-shaped synthetic runs and the CPU harness runs) is exported and
read back; its ranks, pools, placement and execution mode (with their evidence), step windows
and per-rank stage time must equal the original analysis's. Step *numbers* are not compared:
where a run numbers its steps as its framework log does, the export (which leaves the log out)
numbers them as the trace does. Bubbles: tiny idle runs are aggregated, and the bubble slices
still add up to the idle time to the nanosecond.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from report_truth import REPO, RUNS, cli

import analyzer
import parsers
from analyzer.ops.perfetto import DRIVER_PID, MERGE_BELOW_NS, export, merge_bubbles
from parsers.kineto_export import BUBBLE_CATEGORY

SAMPLES = sorted(
    [p for p in (REPO / "sample_traces" / "synthetic").iterdir() if (p / "truth.json").exists()]
    + [p for p in RUNS.iterdir() if (p / "truth.json").exists()]
)


def facts(run: analyzer.Run) -> dict:
    stage_time = run.stage_timeline.group_by("rank", pl.col("stage").cast(pl.String)).agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns"), pl.len()
    )
    return {
        "ranks": run.ranks,
        "placement": run.placement,
        "pools": run.pools.select("rank", pl.col("pool").cast(pl.String), "host")
        .sort("rank")
        .to_dicts(),
        "step_windows": run.steps.select("start_ns", "end_ns").sort("start_ns").rows(),
        "stage_time": stage_time.sort("rank", "stage").rows(),
    }


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_export_reads_back_as_the_same_run(sample: Path, tmp_path: Path):
    run = analyzer.load([sample])
    out = tmp_path / "export.json"
    export(run, out)
    back = analyzer.load([out])
    original, again = facts(run), facts(back)
    assert len(original["ranks"]) >= 2 and original["stage_time"]
    assert again == original
    assert back.warnings == []


def test_an_8_rank_disaggregated_sample_is_8_ranks_disaggregated_through_the_cli(tmp_path: Path):
    """The issue's case: it came back as 1 rank, colocated."""
    out = tmp_path / "d.json"
    done = cli("export", str(REPO / "sample_traces/synthetic/disaggregated"), "-o", str(out), "-q")
    assert done.returncode == 0, done.stderr
    done = cli("analyze", str(out), "--format", "json", "--quiet")
    assert done.returncode == 0, done.stderr
    facts = {row["fact"]: row["value"] for row in json.loads(done.stdout)["placement"]}
    assert facts["ranks"] == "8" and facts["placement"] == "disaggregated"


def test_the_driver_comes_back_as_the_single_controller(tmp_path: Path):
    """OpenRLHF's controller is known by its file name only; the process table keeps its role."""
    run = analyzer.load([RUNS / "openrlhf_ppo_disaggregated"])
    out = tmp_path / "o.json"
    export(run, out)
    document = json.loads(out.read_text())
    table = {e["pid"]: (e["rank"], e["role"]) for e in document["rlperf"]["processes"]}
    assert table == {0: (0, "worker"), 1: (1, "worker"), 2: (2, "worker"),
                     DRIVER_PID: (-1, "driver")}
    back = analyzer.load([out])
    assert back.ranks == [0, 1, 2]
    assert any("the single controller (the process table of rlperf's export)" in n
               for n in back.notes)
    driver = back.events.filter(pl.col("rank") == -1)
    assert driver.height == run.events.filter(
        (pl.col("rank") == -1) & (pl.col("kind").cast(pl.String) != "log_stage")
    ).height > 0


def bubble_slices(out: Path) -> list[dict]:
    document = json.loads(out.read_text())
    return [e for e in document["traceEvents"] if e.get("cat") == BUBBLE_CATEGORY]


def test_tiny_bubbles_are_aggregated_with_no_idle_time_lost(tmp_path: Path):
    """verl PPO disaggregated (3 ranks, CPU): 13,632 idle runs, 95% under 10 µs."""
    run = analyzer.load([RUNS / "verl_ppo_disaggregated"])
    out = tmp_path / "b.json"
    written = export(run, out)
    states = run.device_states.filter(pl.col("cause").is_not_null())
    idle_total = int((states["end_ns"] - states["start_ns"]).sum())
    assert idle_total == int(run.bubbles["idle_ns"].sum())
    slices = bubble_slices(out)
    assert written["idle_runs"] == states.height == 13_632
    assert len(slices) == written["bubble_slices"] < states.height // 10
    durations = [round(e["dur"] * 1000) for e in slices]
    assert sum(durations) == idle_total
    merged = [e for e in slices if "merged" in e["args"]]
    assert sum(e["args"]["merged"] for e in merged) + len(slices) - len(merged) == states.height
    assert all(e["args"]["merged"] > 1 and e["args"]["span_us"] >= e["dur"] for e in merged)
    assert all(e["name"].endswith(f"under {MERGE_BELOW_NS // 1000} µs)") for e in merged)
    big = states.filter((pl.col("end_ns") - pl.col("start_ns")) >= MERGE_BELOW_NS).height
    assert len(slices) - len(merged) >= big


def test_merging_by_hand():
    """Runs of one rank: two small host_bound runs merge (total 3+4 ns, span 0..12); a large
    one stays; a small run of another cause, or in another step, starts its own slice."""
    idle = pl.DataFrame(
        {
            "rank": [0, 0, 0, 0, 0, 1],
            "step": [1, 1, 1, 1, 2, 1],
            "cause": ["host_bound", "host_bound", "host_bound", "pool_wait", "pool_wait",
                      "host_bound"],
            "start_ns": [0, 8, 20, 200, 210, 0],
            "end_ns": [3, 12, 120, 205, 215, 5],
            "largest": [False, False, True, False, False, False],
        }
    )
    got = merge_bubbles(idle, below_ns=10).select(
        "rank", "cause", "start_ns", "end_ns", "span_end_ns", "merged", "largest"
    )
    assert got.rows() == [
        (0, "host_bound", 0, 7, 12, 2, False),
        (0, "host_bound", 20, 120, 120, 1, True),
        (0, "pool_wait", 200, 205, 205, 1, False),
        (0, "pool_wait", 210, 215, 215, 1, False),
        (1, "host_bound", 0, 5, 5, 1, False),
    ]


def test_a_process_table_entry_without_a_pid_is_left_out_with_a_warning(tmp_path: Path):
    trace = {
        "schemaVersion": 1,
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "rlperf": {"processes": [{"pid": 0, "rank": 5, "host": "h", "device": 2},
                                 {"pid": "x", "rank": 1}, {"pid": 1, "rank": 2**40}]},
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
             "args": {}},
            {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 3, "ts": 1.0,
             "dur": 2.0, "args": {}},
        ],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    parsed = parsers.parse_file(path)
    rows = parsed.events.select("rank", pl.col("host").cast(pl.String), "device", "stream").rows()
    assert rows == [(5, "h", 2, 7), (-1, None, -1, -1)]
    assert parsed.warnings == ["t.json: 1 entries of the rlperf process table have no integer pid; "
                               "left out"]
    assert parsed.meta["quality"]["out_of_range_rank"] == 1
