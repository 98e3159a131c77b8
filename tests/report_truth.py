"""Run products built from a sample run's ground truth (truth.json), for report tests.

The report, compare and audit tests inject frames built from the truth that the sample generator
recorded, by the definitions of docs/analyses.md, in place of the analyses' products, so every
number a report shows can be checked against a number known independently of the analyzer.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import polars as pl

from analyzer.model import frames
from taxonomy.vocab import DIM, IDLE_CAUSE, POOL, ROLE, STAGE

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "sample_traces" / "runs"


def load_truth(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "truth.json").read_text())


def union_ns(intervals: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for a, b in sorted(intervals):
        if reach is None or a > reach:
            total, reach = total + b - a, b
        elif b > reach:
            total, reach = total + b - reach, b
    return total


def truth_stage_share(truth: dict[str, Any], stages: set[str]) -> float:
    """Σ over steps of the union over ranks of the stages' intervals ÷ Σ step windows."""
    spent = sum(
        union_ns(
            [
                (s["start_ns"], s["end_ns"])
                for s in truth["stages"]
                if s["step"] == w["step"] and s["stage"] in stages
            ]
        )
        for w in truth["step_windows"]
    )
    return spent / sum(w["end_ns"] - w["start_ns"] for w in truth["step_windows"])


def products(truth: dict[str, Any]) -> dict[str, pl.DataFrame]:
    """stage_timeline, steps, pools, breakdown, bubbles, largest_bubbles, collectives_by_dim,
    workdepth — each in its frames.py schema, every number taken from the truth."""
    stages = pl.DataFrame(truth["stages"]).filter(pl.col("rank") >= 0)
    windows = pl.DataFrame(truth["step_windows"]) if "step_windows" in truth else _windows(truth)
    timeline = stages.select(
        pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32), pl.col("stage").cast(STAGE),
        pl.col("role").cast(ROLE), "name", "start_ns", "end_ns", pl.lit(False).alias("inferred"),
    ).sort("rank", "start_ns")
    steps = windows.select(
        pl.col("step").cast(pl.Int32), "start_ns", "end_ns", pl.lit("truth").alias("source")
    )
    pools = (
        pl.DataFrame(truth["ranks"])
        .filter(pl.col("rank") >= 0)
        .select(
            pl.col("rank").cast(pl.Int32),
            pl.col("pool").cast(POOL),
            pl.col("host").cast(pl.String)
            if "host" in pl.DataFrame(truth["ranks"]).columns
            else pl.lit(None, pl.String).alias("host"),
            (pl.col("device") if "device" in pl.DataFrame(truth["ranks"]).columns else pl.lit(-1))
            .cast(pl.Int16)
            .alias("device"),
        )
    )
    out = {"stage_timeline": timeline, "steps": steps, "pools": pools}
    if "devices" in truth:
        out |= _device_products(truth, windows, timeline, pools)
    out = {
        k: frames.check(v.select(list(getattr(frames, k.upper()))), getattr(frames, k.upper()), k)
        for k, v in out.items()
    }
    return out


def _windows(truth: dict[str, Any]) -> pl.DataFrame:
    spans = pl.DataFrame(truth["stages"])
    return spans.group_by("step").agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort("step")


def _device_products(truth, windows, timeline, pools) -> dict[str, pl.DataFrame]:
    devices = pl.DataFrame(truth["devices"]).unnest("idle_ns")
    causes = [c for c in IDLE_CAUSE.categories.to_list() if c in devices.columns]
    bubbles = (
        devices.unpivot(
            index=["step", "rank", "window_ns", "busy_ns", "productive_busy_ns"],
            on=causes,
            variable_name="cause",
            value_name="idle_ns",
        )
        .select(
            pl.col("step").cast(pl.Int32),
            pl.col("rank").cast(pl.Int32),
            "window_ns",
            "busy_ns",
            pl.col("productive_busy_ns").alias("productive_ns"),
            pl.col("cause").cast(IDLE_CAUSE),
            "idle_ns",
        )
        .sort("step", "rank", "cause")
    )
    durations = pl.DataFrame(truth["stage_durations"])
    breakdown = durations.join(
        windows.select("step", (pl.col("end_ns") - pl.col("start_ns")).alias("w")), on="step"
    ).select(
        pl.col("step").cast(pl.Int32),
        pl.col("rank").cast(pl.Int32),
        pl.col("stage").cast(STAGE),
        pl.col("duration_ns").alias("time_ns"),
        (pl.col("duration_ns") / pl.col("w")).alias("share"),
    )
    coll = pl.DataFrame(truth["collectives_by_dim"]).select(
        pl.col("dim").cast(DIM),
        pl.lit("all").alias("coll"),
        pl.col("count").cast(pl.Int64),
        "bytes",
        "time_ns",
        pl.lit(None, pl.Int64).alias("exposed_ns"),
        "wait_ns",
        (pl.col("time_ns") - pl.col("wait_ns")).alias("transfer_ns"),
        pl.lit(None, pl.Float64).alias("busbw_gbps"),
    )
    # pool_wait at the start of each step on train ranks: the window start to the rank's first range
    train = pools.filter(pl.col("pool") == "train")["rank"].to_list()
    first = (
        timeline.filter(pl.col("rank").is_in(train))
        .group_by("rank", "step")
        .agg(pl.col("start_ns").min().alias("end_ns"))
    )
    largest = (
        first.join(windows.select(pl.col("step").cast(pl.Int32), "start_ns"), on="step")
        .select(
            "rank",
            "step",
            pl.lit("pool_wait").cast(IDLE_CAUSE).alias("cause"),
            "start_ns",
            "end_ns",
        )
        .filter(pl.col("end_ns") > pl.col("start_ns"))
    )
    work = devices.group_by("step").agg(pl.col("productive_busy_ns").sum().alias("work_ns"))
    depth = pl.DataFrame(truth["critical_path"]).select(
        pl.col("step"), pl.col("length_ns").alias("depth_ns")
    )
    wd = (
        work.join(depth, on="step")
        .join(
            windows.select("step", (pl.col("end_ns") - pl.col("start_ns")).alias("step_ns")),
            on="step",
        )
        .select(
            pl.col("step").cast(pl.Int32),
            "work_ns",
            "depth_ns",
            (pl.col("work_ns") / pl.col("depth_ns")).alias("parallelism"),
            "step_ns",
            pl.lit(None, pl.Float64).alias("async_overlap_bound"),
            pl.lit(None, pl.Int64).alias("no_tail_step_ns"),
            pl.lit(None, pl.Int64).alias("balanced_dp_step_ns"),
        )
        .sort("step")
    )
    return {
        "bubbles": bubbles,
        "breakdown": breakdown,
        "collectives_by_dim": coll,
        "largest_bubbles": largest,
        "workdepth": wd,
    }


def inject(run, made: dict[str, pl.DataFrame]):
    """Put ``made`` into ``run`` as its products (before first access)."""
    run.inject(**made)
    return run


def one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    """The error contract's bad-input outcome: exit 2 and exactly one ``rlperf: error:`` line on
    stderr holding every one of ``words``; returns that line."""
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlperf: error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def rlperf(capsys, *args: str) -> tuple[int, str, str]:
    """``rlperf ARGS`` in this process: exit status, stdout, stderr (``capsys``: pytest's
    capture fixture)."""
    import sys

    from analyzer.cli import main

    argv, sys.argv = sys.argv, ["rlperf", *args]
    try:
        main()
        status = 0
    except SystemExit as exc:
        status = int(exc.code or 0)
    finally:
        sys.argv = argv
    out, err = capsys.readouterr()
    return status, out, err


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    """``rlperf ARGS`` in a fresh interpreter (exit status, stdout and stderr as a user sees
    them)."""
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd, env={**os.environ, **(env or {})},
    )


def synthetic(root: Path, scenario: str, ranks: int = 8, steps: int = 2) -> Path:
    """A synthetic GPU-shaped run of ``scenario`` with its committed sample's seed: the committed
    sample itself when the shape is its own (test_synth holds it to the generator's output),
    else generated under ``root`` once."""
    from sample_traces.synth import generate, preset
    from sample_traces.synth.samples import ROOT, SAMPLES

    spec = SAMPLES[scenario]
    if (spec["ranks"], spec["steps"]) == (ranks, steps):
        return ROOT / scenario
    folder = root / f"{scenario}-{ranks}x{steps}"
    if not (folder / "truth.json").is_file():
        generate(preset(scenario, ranks, steps=steps, seed=spec["seed"]), folder, jobs=1)
    return folder


def synthetic_run(folder: Path):
    """A synthetic run, loaded, with its truth products injected."""
    import analyzer

    return inject(analyzer.load([folder]), products(load_truth(folder)))
