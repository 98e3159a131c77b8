"""``nsys stats -f csv`` reports → the event table (traces) or ``meta`` (summaries).

Understood, under their current and their 2022-era names: the NVTX push/pop trace
(``nvtx_pushpop_trace`` / ``nvtxpptrace``) → ``annotation`` rows, ``depth`` from their times
(nsys' own ``Lvl`` is checked against it: nsys matches parents on float32-rounded times and
gets it wrong for long captures);
the GPU trace (``cuda_gpu_trace`` / ``gputrace``) → ``kernel``/``memcpy``/``memset`` rows; the
CUDA API trace (``cuda_api_trace`` / ``cudaapitrace``) → ``runtime`` rows. Summary reports
(``cuda_gpu_kern_sum``, ``nvtx_sum``, …) have no times and land in ``meta["summary_tables"]``.

A file may be one report written with ``-o`` or several reports as ``nsys stats`` prints them
to stdout (each after a ``Processing [...] with [.../<report>.py]...`` line). The CSV carries
session-relative times and no epoch, so times stay relative and a warning says so.

Values are range-checked, never wrapped: a time that is no number in 0…2⁶² ns, an end before
its start, an id past its column's range, and the last row of a file cut without its final
newline are left out (or, for ids, left empty) with a warning and a count in ``meta["quality"]``.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from .errors import InputError
from .events import GPU_ACTIVITY_KINDS, conform, nesting_depth
from .nccl import kernel_coll_expr, with_range_kinds
from .reading import open_bytes
from .source import CORRELATION_PER_PROCESS, SESSION_CLOCK, ParsedSource

FORMAT = "nsys-stats-csv"
TRAITS = frozenset({CORRELATION_PER_PROCESS, SESSION_CLOCK})
EXTENSIONS: tuple[str, ...] = (".csv",)

KNOWN_COLUMNS = frozenset(
    {
        "Start (ns)", "End (ns)", "Duration (ns)", "Time (%)", "Total Time (ns)", "Instances",
        "Num Calls", "Count", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)",
        "Name", "Lvl", "CorrId", "CorrID", "Strm", "Range", "Operation", "Style", "NumChild",
        "RangeId", "ParentId", "Device", "Ctx", "Pid", "Tid", "PID", "TID", "Result",
    }
)
PROCESSING = re.compile(r"^Processing \[.*\] with \[(?:.*/)?([^/\]]+?)(?:\.py)?\]")
TIME_COLUMN = re.compile(r"^(Start|End|Duration)\s*\((ns|nsec|us|usec|ms|msec|s|sec)\)$")
UNIT_NS = {
    "ns": 1,
    "nsec": 1,
    "us": 1_000,
    "usec": 1_000,
    "ms": 1_000_000,
    "msec": 1_000_000,
    "s": 10**9,
    "sec": 10**9,
}
BYTES_COLUMN = re.compile(r"^Bytes(?:\s*\((B|kB|KB|KiB|MB|MiB|GB|GiB)\))?$")
UNIT_BYTES = {
    None: 1,
    "B": 1,
    "kB": 10**3,
    "KB": 10**3,
    "KiB": 2**10,
    "MB": 10**6,
    "MiB": 2**20,
    "GB": 10**9,
    "GiB": 2**30,
}
REPORTS: tuple[str, ...] = (
    "nvtx_pushpop_trace", "nvtxpptrace", "cuda_gpu_trace", "gputrace", "cuda_api_trace",
    "cudaapitrace", "cuda_gpu_kern_sum", "gpukernsum", "cuda_api_sum", "cudaapisum",
    "cuda_gpu_mem_time_sum", "gpumemtimesum", "cuda_gpu_mem_size_sum", "gpumemsizesum",
    "cuda_api_gpu_sum", "apigpusum", "cuda_gpu_sum", "gpusum", "nvtx_sum", "nvtxsum",
    "nvtx_pushpop_sum", "nvtxppsum", "nvtx_startend_sum", "nvtxsesum", "nvtx_kern_sum",
    "nvtxkernsum", "osrt_sum", "osrtsum", "cuda_kern_exec_sum", "kernexecsum", "mpi_event_sum",
)
"""Report names, new and 2022-era; a file written with ``-o P`` is named ``P_<report>.csv``."""
COPY_LABELS = {
    "Host-to-Device": "HtoD",
    "Device-to-Host": "DtoH",
    "Device-to-Device": "DtoD",
    "Host-to-Host": "HtoH",
    "Peer-to-Peer": "PtoP",
    "Host-to-Array": "HtoA",
    "Array-to-Host": "AtoH",
    "Array-to-Array": "AtoA",
    "Array-to-Device": "AtoD",
    "Device-to-Array": "DtoA",
}
"""Newer nsys spells the copy kind out (``[CUDA memcpy Host-to-Device]``); 2022 wrote ``HtoD``."""
HEADER_FIELD = re.compile(r"^[A-Za-z][\w %()/.:#-]{0,48}$")
"""What a column name of an nsys stats header looks like (no Markdown pipes, no sentences)."""
MAX_NS = 2**62
"""Largest session time or duration taken (146 years): start + duration then fits in int64."""
INT_RANGES = {"pid": 2**63 - 1, "tid": 2**63 - 1, "lvl": 2**15 - 1, "stream": 2**31 - 1,
              "corr": 2**63 - 1, "device": 2**15 - 1}
"""Upper bound of each id column (the event table's dtype); below 0 is out of range too."""


@dataclass
class Block:
    report: str | None
    header: list[str]
    text: str


def sniff(head: bytes, path: Path) -> int:
    for line in head.decode("utf-8", "ignore").splitlines()[:20]:
        columns = header_columns(line, 4)
        if columns and any(c.endswith(("(ns)", "(%)")) for c in columns):
            return 90
    return 0


def header_columns(line: str, known: int) -> list[str] | None:
    """The column names when ``line`` is an nsys stats CSV header: at least ``known`` of them
    known, and every one shaped like a column name (so a Markdown table or a sentence that
    merely mentions them is no header)."""
    columns = [c.strip().strip('"') for c in line.split(",")]
    if len(set(columns) & KNOWN_COLUMNS) < known or not all(HEADER_FIELD.match(c) for c in columns):
        return None
    return columns


def parse(path: Path, source: int = 0) -> ParsedSource:
    path = Path(path)
    text = open_bytes(path).decode("utf-8", "replace")
    out = ParsedSource(path=path, format=FORMAT)
    text = _without_cut_row(text, out)
    blocks = split_blocks(text, default_report=report_from_name(path))
    if not blocks:
        raise InputError(
            path, "no nsys stats CSV table found (write reports with `nsys stats -f csv`)"
        )
    frames: list[pl.DataFrame] = []
    summaries: list[dict] = []
    for block in blocks:
        kind = classify(block.header)
        try:
            table = pl.read_csv(
                io.StringIO(block.text), infer_schema=False, null_values=["None", ""]
            )
            if kind == "nvtx_pushpop_trace":
                ranges = _pushpop(table, out)
                differ = ranges.filter(pl.col("depth") != pl.col("lvl")).height
                if differ:
                    out.warn(
                        f"{differ} of {ranges.height} ranges: nsys' Lvl differs from the nesting "
                        "their times show (nsys stats matches parents on float32-rounded times); "
                        "depth is taken from the times"
                    )
                frames.append(ranges.drop("lvl"))
            elif kind == "cuda_gpu_trace":
                frames.append(_kept_rows(_gpu_trace(table, out), out))
                coarse = [c for c in table.columns if re.match(r"^Bytes \((MB|GB|MiB|GiB)\)$", c)]
                if coarse:
                    out.warn(
                        f"byte counts come from {coarse[0]!r} with 3 decimals, so they are rounded"
                    )
            elif kind == "cuda_api_trace":
                frames.append(_kept_rows(_api_trace(table, out), out))
            else:
                summaries.append(
                    {
                        "report": block.report or "unnamed summary",
                        "columns": block.header,
                        "rows": table.to_dicts(),
                    }
                )
        except (pl.exceptions.PolarsError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InputError(
                path, f"{block.report or kind} table has values rlperf cannot read ({first})"
            ) from None
    if frames:
        events = with_range_kinds(pl.concat(frames, how="diagonal_relaxed").sort("start_ns"))
        out.events = conform(events, source=source)
        out.warn(
            "nsys stats CSV has no time base: times are ns "
            "since the capture's session start, not epoch"
        )
        out.meta["time_base"] = "session-relative (nsys stats CSV carries no epoch)"
    if summaries:
        out.meta["summary_tables"] = summaries
        if not frames:
            out.warn(
                "only summary reports ("
                + ", ".join(s["report"] for s in summaries)
                + "): no per-event times, so no timeline analyses"
            )
    return out


def _without_cut_row(text: str, out: ParsedSource) -> str:
    """``text`` less its last line when the file ends without a newline: nsys ends every report
    with one, so that line is a row cut short (its end time may be a prefix of the real one)."""
    if not text or text.endswith("\n"):
        return text
    kept, _, cut = text.rpartition("\n")
    if cut.strip():
        out.warn(
            f"the file ends inside a row (line {kept.count(chr(10)) + 2}); that row was left out"
        )
        out.tally("dropped_cut_row")
    return kept + "\n" if kept else ""


def _kept_rows(frame: pl.DataFrame, out: ParsedSource) -> pl.DataFrame:
    """The rows with a usable time span (and GPU work with a device); the rest counted."""
    gpu = pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS))
    device = pl.col("device") if "device" in frame.columns else pl.lit(0)
    rules = (
        (
            "dropped_no_time",
            pl.col("start_ns").is_null() | pl.col("end_ns").is_null(),
            "without a start and end time in 0…2⁶² ns",
        ),
        ("negative_dur", pl.col("end_ns") < pl.col("start_ns"), "ending before they start"),
        (
            "dropped_out_of_range",
            gpu & device.is_null(),
            "of GPU work without a device id in 0…32767",
        ),
    )
    return out.drop_counted(frame, rules)


def _ids(table: pl.DataFrame, columns: dict[str, pl.Expr], out: ParsedSource) -> dict[str, pl.Expr]:
    """Integer id columns (``name → text expression``), null outside their range, counted."""
    exprs: dict[str, pl.Expr] = {}
    for name, raw in columns.items():
        value = raw.str.strip_chars().cast(pl.Int64, strict=False)
        exprs[name] = pl.when(value.is_between(0, INT_RANGES[name])).then(value)
        bad = int(table.select((raw.is_not_null() & exprs[name].is_null()).sum()).item())
        if bad:
            out.warn(f"{bad} {name} values are no number in 0…{INT_RANGES[name]}; left empty")
            out.tally("dropped_out_of_range", bad)
    return exprs


def report_from_name(path: Path) -> str | None:
    stem = path.name.split(".")[0]
    return next((r for r in sorted(REPORTS, key=len, reverse=True) if stem.endswith(r)), None)


def split_blocks(text: str, default_report: str | None = None) -> list[Block]:
    """The CSV tables in ``text``: one per header line, named by a preceding ``Processing`` line.

    A table runs from its header to the next blank or ``Processing`` line. Those boundary lines
    are found with one column expression, so a million-row trace is sliced, not walked in Python.
    """
    lines = text.splitlines()
    texts = pl.Series(lines, dtype=pl.String)
    boundary = (texts.str.strip_chars() == "") | texts.str.contains(PROCESSING.pattern)
    bounds = boundary.arg_true().to_list()
    blocks: list[Block] = []
    report = default_report
    start = 0
    for end in [*bounds, len(lines)]:
        for i in range(start, end):
            columns = header_columns(lines[i], 3)
            if columns:
                body = "\n".join(lines[i:end]) if end - i > 1 else ",".join(columns)
                blocks.append(Block(report, columns, body + "\n"))
                break
        if end < len(lines) and (m := PROCESSING.match(lines[end])):
            report = m.group(1)
        start = end + 1
    return blocks


def classify(header: list[str]) -> str:
    cols = set(header)
    if "Lvl" in cols and any(c.startswith("End") for c in cols):
        return "nvtx_pushpop_trace"
    if any(c.startswith("Start") for c in cols) and "Strm" in cols:
        return "cuda_gpu_trace"
    if (
        any(c.startswith("Start") for c in cols)
        and ("CorrID" in cols or "CorrId" in cols)
        and "Tid" in cols
    ):
        return "cuda_api_trace"
    return "summary"


def _times(table: pl.DataFrame) -> dict[str, pl.Expr]:
    """``start_ns`` and ``end_ns`` from whichever of Start/End/Duration columns exist, in ns;
    null where a cell is no number in 0…:data:`MAX_NS` (checked before any arithmetic)."""
    found: dict[str, pl.Expr] = {}
    for col in table.columns:
        m = TIME_COLUMN.match(col)
        if not m:
            continue
        factor = UNIT_NS[m.group(2)]
        text = pl.col(col).str.strip_chars()
        if factor == 1:
            value = text.cast(pl.Int64, strict=False)
        else:
            scaled = text.cast(pl.Float64, strict=False) * factor
            value = pl.when(scaled.is_between(0, MAX_NS)).then(scaled.round()).cast(pl.Int64)
        found[m.group(1)] = pl.when(value.is_between(0, MAX_NS)).then(value)
    if "Start" not in found or ("End" not in found and "Duration" not in found):
        raise ValueError("no Start and End/Duration columns")
    end = found.get("End", found["Start"] + found.get("Duration", pl.lit(0)))
    return {"start_ns": found["Start"], "end_ns": end}


def _pushpop(table: pl.DataFrame, out: ParsedSource) -> pl.DataFrame:
    """Ranges with ``depth`` recomputed from their times (as for SQLite) and nsys' ``lvl``."""
    ranges = table.select(
        **_times(table),
        kind=pl.lit("annotation"),
        name=pl.col("Name").fill_null(""),
        **_ids(table, {"pid": pl.col("PID"), "tid": pl.col("TID"), "lvl": pl.col("Lvl")}, out),
    )
    ranges = _kept_rows(ranges, out)
    return ranges.with_columns(depth=nesting_depth(ranges, ["pid", "tid"]))


def _gpu_trace(table: pl.DataFrame, out: ParsedSource) -> pl.DataFrame:
    raw = pl.col("Name").fill_null("")
    copy = raw.str.extract(r"^\[CUDA memcpy ([^\]]+)\]$", 1)
    memset = raw.str.starts_with("[CUDA memset")
    src = (
        pl.col("SrcMemKd").fill_null("Unknown")
        if "SrcMemKd" in table.columns
        else pl.lit("Unknown")
    )
    dst = (
        pl.col("DstMemKd").fill_null("Unknown")
        if "DstMemKd" in table.columns
        else pl.lit("Unknown")
    )
    copy_label = copy.replace(COPY_LABELS)
    kind = (
        pl.when(copy.is_not_null())
        .then(pl.lit("memcpy"))
        .when(memset)
        .then(pl.lit("memset"))
        .otherwise(pl.lit("kernel"))
    )
    name = (
        pl.when(copy.is_not_null())
        .then(pl.format("Memcpy {} ({} -> {})", copy_label, src, dst))
        .when(memset)
        .then(pl.format("Memset ({})", src))
        .otherwise(raw)
    )
    bytes_col = next((m for c in table.columns if (m := BYTES_COLUMN.match(c))), None)
    nbytes = pl.lit(None, pl.Int64)
    if bytes_col:
        factor = UNIT_BYTES[bytes_col.group(1)]
        scaled = pl.col(bytes_col.string).cast(pl.Float64, strict=False) * factor
        nbytes = pl.when(scaled.is_between(0, 2**62)).then(scaled.round()).cast(pl.Int64)
    device = (
        pl.col("Device").str.extract(r"(\d+)\)?\s*$", 1)
        if "Device" in table.columns
        else pl.lit(None, pl.String)
    )
    corr = "CorrId" if "CorrId" in table.columns else "CorrID"
    ids = _ids(table, {"device": device, "stream": pl.col("Strm"), "corr": pl.col(corr)}, out)
    return table.select(
        **_times(table),
        kind=kind,
        name=name,
        **ids,
        bytes=pl.when((kind == "kernel") | (nbytes < 0)).then(None).otherwise(nbytes),
        coll=pl.when(kind == "kernel").then(kernel_coll_expr(raw)),
    )


def _api_trace(table: pl.DataFrame, out: ParsedSource) -> pl.DataFrame:
    """Runtime rows; 2022 exports also list each call's CUDA-backtrace twin (same correlation
    id, slightly longer), which the SQLite parser drops by ``eventClass`` — here the shorter of
    the two is kept."""
    corr = "CorrID" if "CorrID" in table.columns else "CorrId"
    rows = table.select(
        **_times(table),
        kind=pl.lit("runtime"),
        name=pl.col("Name").fill_null("").str.replace(r"_v\d+$", ""),
        **_ids(table, {"pid": pl.col("Pid"), "tid": pl.col("Tid"), "corr": pl.col(corr)}, out),
    )
    paired = rows.filter(pl.col("corr").is_not_null()).sort(pl.col("end_ns") - pl.col("start_ns"))
    return pl.concat(
        [paired.unique(["pid", "tid", "corr"], keep="first"), rows.filter(pl.col("corr").is_null())]
    )
