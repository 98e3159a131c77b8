"""rlperf beside Holistic Trace Analysis (HTA, PyPI ``traceinsight``) on the same traces.

HTA's temporal breakdown (idle, compute, non-compute time over each rank's GPU window) and its
communication/computation overlap are computed on every PyTorch profiler trace of the run and
printed beside rlperf's (``gpu_time``, docs/analyses.md §6), with the difference. Three known,
documented definitional differences (:data:`REASONS`) are then applied one at a time to
rlperf's numbers — each kept only where it brings them closer to HTA's — so the report says how
much of the gap each explains and what remains unexplained.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from parsers.errors import InputError
from parsers.events import GPU_ACTIVITY_KINDS

from ..analyses.gpu_time import compute as gpu_time
from ..dataset import is_dataset, read_manifest
from ..dataset.store import changed
from ..model.scalars import number
from ..model.units import plural
from ..report.sources import held_ranks

REASONS: dict[str, str] = {
    "stream_sync": "HTA counts CUDA stream-synchronisation rows as busy GPU time; rlperf does not "
    "(a sync is the host waiting for the GPU, not GPU work).",
    "launchless": "HTA may leave out GPU work whose launch record is missing from the trace; "
    "rlperf counts it (it ran on the GPU inside the window).",
    "ns_rounding": "HTA rounds sub-µs timestamps inward (start "
                   "up, end down to whole µs), shrinking "
    "every kernel by up to 2 µs; HTA_DISABLE_NS_ROUNDING=1 turns that off.",
}
"""The documented reasons rlperf and HTA differ (tests/test_hta_differential.py)."""

METRICS: tuple[tuple[str, str], ...] = (
    ("window_us", "GPU window"),
    ("idle_us", "idle"),
    ("compute_us", "compute"),
    ("non_compute_us", "non-compute"),
    ("overlap_pct", "comm/compute overlap"),
)
HTA_COLUMNS = {
    "window_us": "kernel_time(us)",
    "idle_us": "idle_time(us)",
    "compute_us": "compute_time(us)",
    "non_compute_us": "non_compute_time(us)",
}
HTA_ROUNDED_KINDS = (*GPU_ACTIVITY_KINDS, "gpu_sync")
"""The GPU rows whose timestamps HTA rounds (its busy time counts stream syncs too)."""
AGREE_FRACTION = 0.01
"""Numbers within 1% of the GPU window (1 percentage point for overlap) agree."""
VERDICTS = {
    "agree": "the numbers themselves are within the tolerance",
    "explained": "they differ, but the known reasons account for the difference",
    "DIFFERS": "a difference beyond the tolerance that no known reason explains",
}
"""A row's verdict: ``agree`` (the JSON's boolean) holds for the first two."""


@dataclass
class CrossCheck:
    table: pl.DataFrame
    """rank, metric, rlperf, hta, difference, explained, unexplained, agree, verdict."""
    reasons: pl.DataFrame
    """rank, reason, effect (µs of idle time it accounts for)."""
    problems: list[str] = field(default_factory=list)
    """Traces not cross-checked and why: HTA could not analyse them (its error), or they are no
    longer what the dataset's tables were read from (:func:`not_comparable`)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "rlperf-crosscheck/1",
            "metrics": self.table.to_dicts(),
            "reasons": self.reasons.to_dicts(),
            "reason_text": REASONS,
            "problems": self.problems,
        }


def load_hta():
    """HTA's TraceAnalysis class, or a one-line error saying how to install it."""
    try:  # imported here: an optional dependency (rlperf[hta]), and a heavy one
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        raise InputError(
            "hta",
            "the cross-check needs Holistic Trace Analysis: "
            "pip install 'rlperf[hta]' (PyPI traceinsight)",
        ) from None
    return TraceAnalysis


def not_comparable(paths: list[Path]) -> dict[str, str]:
    """Resolved path → why that source of a dataset is not cross-checked. rlperf reads the tables
    ingested then, HTA the file now: a file changed since (its size, time and hash no longer
    those of the manifest) or gone would compare different contents, every metric DIFFERS."""
    if len(paths) != 1 or not is_dataset(paths[0]):
        return {}
    root = paths[0]
    out: dict[str, str] = {}
    for record in read_manifest(root)["sources"]:
        if record["format"] != "kineto":
            continue
        name, where = Path(record["path"]).name, Path(record["resolved"])
        if not where.is_file():
            out[str(where)] = (
                f"{name} (a source of {root}) is no longer at {where}: not cross-checked"
            )
        elif changed(record):
            out[str(where)] = (
                f"{name} changed since it was ingested into {root}: not cross-checked "
                "(HTA would read the file as it is now, rlperf the tables of then); "
                "run rlperf ingest again"
            )
    return out


def crosscheck(
    run, progress=lambda **_: None, skip: dict[str, str] | None = None
) -> CrossCheck:
    """HTA and rlperf on every Kineto trace of ``run``, rank by rank; ``skip``: the sources
    :func:`not_comparable` found, each left out with its line among the problems."""
    traces = [s for s in run.sources if s.format == "kineto"]
    if not traces:
        where = run.sources[0].path if run.sources else "."
        raise InputError(where, "no PyTorch profiler trace in the run: HTA reads only those")
    skip = {**(skip or {}), **several_ranks(run, traces)}
    if all(str(s.path.resolve()) in skip for s in traces):
        first = skip[str(traces[0].path.resolve())]
        more = f" (and {plural(len(traces) - 1, 'other trace')} alike)" if len(traces) > 1 else ""
        raise InputError(
            "crosscheck", f"{first.removesuffix(': not cross-checked')}{more}: nothing is left "
            "to cross-check (HTA reads the trace files themselves)"
        )
    analysis = load_hta()
    rows: list[dict[str, Any]] = []
    reasons: list[dict[str, Any]] = []
    problems: list[str] = []
    for source in traces:
        why = skip.get(str(source.path.resolve()))
        if why is not None:
            problems.append(why)
            progress(what=source.path.name)
            continue
        events = run.events.filter(pl.col("source") == source.index)
        try:
            theirs = hta_numbers(analysis, source.path)
        except HtaFailed as failed:
            problems.append(f"{source.path.name}: HTA could not analyse it ({failed})")
            progress(what=source.path.name)
            continue
        rank_rows, rank_reasons = _compare(source.rank, events, theirs, source.meta)
        rows += rank_rows
        reasons += rank_reasons
        progress(what=source.path.name)
    table = pl.DataFrame(
        rows,
        schema={
            "rank": pl.Int64,
            "metric": pl.String,
            "rlperf": pl.Float64,
            "hta": pl.Float64,
            "difference": pl.Float64,
            "explained": pl.Float64,
            "unexplained": pl.Float64,
            "agree": pl.Boolean,
            "verdict": pl.String,
        },
    )
    return CrossCheck(
        table,
        pl.DataFrame(
            reasons, schema={"rank": pl.Int64, "reason": pl.String, "effect_us": pl.Float64}
        ),
        problems,
    )


def several_ranks(run, traces: list) -> dict[str, str]:
    """Resolved path → why a trace holding the events of several ranks is not cross-checked:
    HTA reads a file as one rank and would merge them (rlperf's own export of the HTA sampled
    pair: every metric but the window DIFFERS, under one rank's name)."""
    held = held_ranks(run.events)
    out: dict[str, str] = {}
    for source in traces:
        ranks = held.get(source.index, [])
        if len(ranks) > 1:
            out[str(source.path.resolve())] = (
                f"{source.path.name} holds the events of {len(ranks)} ranks "
                f"({', '.join(map(str, ranks))}) in one file, and HTA reads a file as one rank: "
                "not cross-checked (cross-check the per-rank traces it was made from)"
            )
    return out


class HtaFailed(Exception):
    """HTA's error on one trace, its text naming the trace rather than HTA's scratch folder."""


def hta_numbers(analysis, path: Path) -> dict[str, float]:
    """HTA's temporal breakdown and overlap for one trace (run in a folder of its own)."""
    with tempfile.TemporaryDirectory(prefix="rlperf-hta-") as folder, _quiet():
        link = Path(folder) / path.name
        try:
            link.symlink_to(path.resolve())
        except OSError:
            shutil.copy(path, link)
        try:
            ta = analysis(trace_dir=folder, include_last_profiler_step=True)
            breakdown = ta.get_temporal_breakdown(visualize=False).iloc[0]
            overlap = ta.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0]
        except Exception as exc:  # HTA fails in its own ways (IndexError on CPU-only traces)
            text = str(exc).replace(str(link), str(path)).replace(folder, str(path.parent))
            raise HtaFailed(f"{type(exc).__name__}: {text}") from exc
    out = {k: float(breakdown[v]) for k, v in HTA_COLUMNS.items()}
    out["overlap_pct"] = float(overlap)
    return out


@contextlib.contextmanager
def _quiet():
    """HTA logs a warning per trace quirk; the cross-check prints its own summary instead."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def ours(events: pl.DataFrame, *, hta_compatible: bool = False) -> dict[str, float | None]:
    """rlperf's numbers in HTA's units (µs, overlap in %)."""
    row = gpu_time(events, hta_compatible=hta_compatible).row(0, named=True)
    if row["busy_ns"] is None:
        return dict.fromkeys([m for m, _ in METRICS])
    return {
        "window_us": row["gpu_window_ns"] / 1e3,
        "idle_us": row["idle_ns"] / 1e3,
        "compute_us": row["compute_ns"] / 1e3,
        "non_compute_us": (row["busy_ns"] - row["compute_ns"]) / 1e3,
        "overlap_pct": None if row["overlap_fraction"] is None else 100 * row["overlap_fraction"],
    }


def without_launchless(events: pl.DataFrame) -> pl.DataFrame:
    """The events less GPU work whose correlation id no runtime launch carries."""
    launched = events.filter(pl.col("kind") == "runtime").select("corr").unique()
    activity = pl.col("kind").is_in(GPU_ACTIVITY_KINDS)
    return pl.concat(
        [events.filter(~activity), events.filter(activity).join(launched, on="corr", how="semi")]
    )


def rounded_like_hta(events: pl.DataFrame, base_ns: int) -> pl.DataFrame:
    """GPU rows with HTA's inward rounding to whole µs of the trace's own time base."""
    activity = pl.col("kind").is_in(HTA_ROUNDED_KINDS)
    start = pl.col("start_ns") - base_ns
    end = pl.col("end_ns") - base_ns
    up = (start + 999) // 1000 * 1000 + base_ns
    down = end // 1000 * 1000 + base_ns
    return events.with_columns(
        pl.when(activity).then(up).otherwise(pl.col("start_ns")).alias("start_ns"),
        pl.when(activity)
        .then(pl.max_horizontal(down, up))
        .otherwise(pl.col("end_ns"))
        .alias("end_ns"),
    )


def _hta_rounds(events: pl.DataFrame, base_ns: int) -> bool:
    if os.environ.get("HTA_DISABLE_NS_ROUNDING", "0") not in ("", "0"):
        return False
    gpu = events.filter(pl.col("kind").is_in(HTA_ROUNDED_KINDS))
    return bool(gpu.height) and bool(((gpu["start_ns"] - base_ns) % 1000 != 0).any())


def _compare(rank: int, events: pl.DataFrame, theirs: dict[str, float], meta: dict[str, Any]):
    """Rows of the table for one rank, and the effect of each known reason on idle time."""
    mine = ours(events)
    base = int(meta.get("base_time_ns") or 0)
    steps = [
        ("stream_sync", lambda e: e, True, True),
        ("launchless", without_launchless, None, True),
        ("ns_rounding", lambda e: rounded_like_hta(e, base), None, _hta_rounds(events, base)),
    ]
    current, compatible, adjusted = events, False, mine
    reasons = []
    for reason, change, makes_compatible, applies in steps:
        if not applies or adjusted["idle_us"] is None:
            continue
        trial_events = change(current)
        trial_compatible = compatible if makes_compatible is None else makes_compatible
        trial = ours(trial_events, hta_compatible=trial_compatible)
        trial_idle, adjusted_idle = number(trial["idle_us"]), adjusted["idle_us"]
        if abs(trial_idle - theirs["idle_us"]) < abs(adjusted_idle - theirs["idle_us"]) - 1e-6:
            reasons.append(
                {"rank": rank, "reason": reason, "effect_us": trial_idle - adjusted_idle}
            )
            current, compatible, adjusted = trial_events, trial_compatible, trial
    rows = []
    window = theirs["window_us"] or 1.0
    for metric, _title in METRICS:
        value, fitted = mine[metric], adjusted[metric]
        hta: float | None = theirs[metric]
        if isinstance(hta, float) and math.isnan(hta):
            hta = None
        difference = None if value is None or hta is None else value - hta
        unexplained = None if fitted is None or hta is None else fitted - hta
        explained = None if difference is None or unexplained is None else difference - unexplained
        tolerance = 1.0 if metric == "overlap_pct" else AGREE_FRACTION * window
        agree = (value is None and hta is None) or (
            unexplained is not None and abs(unexplained) <= tolerance
        )
        close = difference is None or abs(difference) <= tolerance
        rows.append(
            {
                "rank": rank,
                "metric": metric,
                "rlperf": value,
                "hta": hta,
                "difference": difference,
                "explained": explained,
                "unexplained": unexplained,
                "agree": agree,
                "verdict": "DIFFERS" if not agree else "agree" if close else "explained",
            }
        )
    return rows, reasons
