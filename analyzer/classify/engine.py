"""Inference-engine steps (vLLM, SGLang): one step is one engine forward, and its window reaches
the end of the GPU work launched inside it.

An engine's host loop launches a step's kernels (often one CUDA/HIP-graph replay) and returns
long before the device has run them, so the host range alone would leave most of the step's
device time outside its own step (and the step ~100% idle). docs/profiles.md, "Inference
engines".
"""

from __future__ import annotations

from typing import Any

import polars as pl

from parsers.events import GPU_ACTIVITY_KINDS


def is_engine(profile: dict[str, Any]) -> bool:
    """Whether the run's profile is an inference engine's."""
    return bool(getattr(profile.get("profile"), "engine", False))


def launched_until(windows: pl.DataFrame, aligned: pl.DataFrame) -> pl.DataFrame:
    """``windows`` (``step, start_ns, end_ns``) with each end moved to the end of the last GPU
    row whose launch (the runtime call of its correlation id) starts inside the window, but not
    past the next step's start (an overlapping scheduler runs the next step's host part while
    the device finishes this one; windows must still tile time once)."""
    if windows.height == 0:
        return windows
    launches = aligned.filter((pl.col("kind") == "runtime") & pl.col("corr").is_not_null())
    gpu = aligned.filter(
        pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & pl.col("corr").is_not_null()
    )
    if launches.height == 0 or gpu.height == 0:
        return windows
    launched = (
        gpu.select("source", "corr", "end_ns")
        .join(
            launches.select("source", "corr", pl.col("start_ns").alias("t"))
            .unique(["source", "corr"], keep="first"),
            on=["source", "corr"],
        )
        .select("t", "end_ns")
        .sort("t")
    )
    spans = windows.sort("start_ns").select("step", pl.col("start_ns").alias("t"), "end_ns")
    owned = (
        launched.join_asof(spans.rename({"end_ns": "_window_end"}), on="t", strategy="backward")
        .filter(pl.col("t") < pl.col("_window_end"))
        .group_by("step")
        .agg(pl.col("end_ns").max().alias("_gpu_end"))
    )
    following = pl.col("start_ns").shift(-1)
    reach = pl.min_horizontal(pl.col("_gpu_end"), following.fill_null(pl.col("_gpu_end")))
    return (
        windows.sort("start_ns")
        .join(owned, on="step", how="left", maintain_order="left")
        .with_columns(pl.max_horizontal("end_ns", reach.fill_null(0)).alias("end_ns"))
        .drop("_gpu_end")
        .sort("step")
    )
