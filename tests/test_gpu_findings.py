"""Generic GPU findings (analyzer/analyses/gpu_findings.py).

On the nsys-ai corpus exports every problem nsys-ai's ``analyze`` reports (docs/analyses.md,
"Generic GPU findings", records its findings and figures) is named by a finding here, and its
number is checked against one computed in this file straight from the SQLite export with
plain SQL and Python — not with rlperf's code. On built event tables each check fires at its
threshold and not below it, inside a stage as well as over the whole trace, and a trace with
no problem gets no warning.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import defaultdict
from functools import cache
from itertools import pairwise
from pathlib import Path

import polars as pl
import pytest
from report_truth import union_ns

import analyzer
from analyzer.analyses import gpu_findings as gf
from analyzer.analyses.findings import rules as finding_rules
from analyzer.model import frames

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
NSYS_AI = CORPUS / "nsys-ai"
HTA = CORPUS / "HolisticTraceAnalysis"
MFU = NSYS_AI / "mfu_2gpu_before.sqlite"
H100 = NSYS_AI / "h100_2gpu_1s.sqlite"
needs_corpus = pytest.mark.skipif(not NSYS_AI.is_dir(), reason="corpus not present")

REL = 1e-6
"""Tolerance for a number rlperf and the test both compute from the same rows (float sums)."""
WALL_REL = 0.01
"""Tolerance where the test's wall window (first to last row of the process's CUDA, NVTX and
runtime tables) may differ from rlperf's by rows rlperf does not keep."""


# --- independent readings of the raw files --------------------------------------------------


def _q(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(sql).fetchall()


def _pid(col: str) -> str:
    return f"(({col} >> 24) & 16777215)"


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _length(spans: list[tuple[int, int]]) -> int:
    return sum(b - a for a, b in _union(spans))


def _minus(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Length of the union of ``a`` not covered by the union of ``b``."""
    return _length(a) - _length([
        (max(x, y), min(x2, y2)) for x, x2 in _union(a) for y, y2 in _union(b)
        if min(x2, y2) > max(x, y)
    ])


def _kernels(path: Path) -> dict[int, list[tuple[int, int, str]]]:
    out: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for pid, s, e, name in _q(path, f"""
        SELECT {_pid('k.globalPid')}, k.start, k.[end], n.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds n ON n.id = k.demangledName"""):
        out[pid].append((s, e, name))
    return out


def _idle_gaps(path: Path, min_gap: int = 1_000_000) -> list[tuple[int, int, int]]:
    """Per process: (gaps ≥ min_gap with no kernel on any stream, their total, the longest)."""
    out = []
    for ks in _kernels(path).values():
        merged = _union([(s, e) for s, e, _ in ks])
        gaps = [b[0] - a[1] for a, b in pairwise(merged) if b[0] - a[1] >= min_gap]
        out.append((len(gaps), sum(gaps), max(gaps, default=0)))
    return sorted(out)


def _walls(path: Path) -> dict[int, int]:
    lo: dict[int, int] = {}
    hi: dict[int, int] = {}
    tables = [("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
              ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
              ("CUPTI_ACTIVITY_KIND_MEMSET", "globalPid"),
              ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "globalPid"),
              ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"), ("NVTX_EVENTS", "globalTid")]
    for table, col in tables:
        for pid, s, e in _q(path, f"SELECT {_pid(col)}, MIN(start), MAX(COALESCE([end], start)) "
                                  f"FROM {table} GROUP BY 1"):
            lo[pid] = min(lo.get(pid, s), s)
            hi[pid] = max(hi.get(pid, e), e)
    return {p: hi[p] - lo[p] for p in lo}


def _sync_shares(path: Path) -> list[tuple[int, float]]:
    """Per process: the union of host waits (Stream/Event/Context sync records, blocking
    synchronize and memcpy calls) and its share of the process's wall window."""
    spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for pid, s, e in _q(path, f"""SELECT {_pid('globalPid')}, start, [end]
            FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE syncType IN (1, 3, 4)"""):
        spans[pid].append((s, e))
    for pid, s, e, name in _q(path, f"""SELECT {_pid('r.globalTid')}, r.start, r.[end], n.value
            FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId"""):
        base = name.split("_v")[0]
        if base.endswith("Synchronize") or (base.startswith("cudaMemcpy") and "Async" not in name):
            spans[pid].append((s, e))
    walls = _walls(path)
    return sorted((_length(v), _length(v) / walls[p]) for p, v in spans.items())


@cache
def _run(path: Path) -> analyzer.Run:
    return analyzer.load([path])


@cache
def _measured(path: Path) -> dict[str, pl.DataFrame]:
    run = _run(path)
    return gf.measure(run.classified, run.stage_timeline, run.collective_waits,
                      run.exposed_intervals, gf.rules())


def _found(path: Path) -> pl.DataFrame:
    return _run(path).gpu_findings


def _one(path: Path, fid: str, stage: str = "") -> dict:
    rows = _found(path).filter((pl.col("id") == fid) & (pl.col("stage") == stage))
    assert rows.height == 1, (fid, _found(path).select("id", "stage").rows())
    return rows.row(0, named=True)


def _whole(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("scope") == gf.WHOLE)


# --- nsys-ai's findings, each named with its number -------------------------------------------


@needs_corpus
@pytest.mark.parametrize(("path", "name_part", "total_ms", "count"), [
    (MFU, "flash::flash_fwd_kernel", 272.32, 68),  # nsys-ai: "Top kernel dominates"
    (H100, "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3", 31.12, 248),
])
def test_top_kernel_is_nsys_ais(path: Path, name_part: str, total_ms: float, count: int) -> None:
    totals: dict[str, list[int]] = defaultdict(list)
    for ks in _kernels(path).values():
        for s, e, name in ks:
            totals[name].append(e - s)
    name, durs = max(totals.items(), key=lambda kv: sum(kv[1]))
    assert name_part in name
    assert (round(sum(durs) / 1e6, 2), len(durs)) == (total_ms, count)
    top = _whole(_measured(path)["top_kernel"]).row(0, named=True)
    assert top["name"] == name and top["count"] == len(durs) and top["total_ns"] == sum(durs)
    share = sum(durs) / sum(sum(v) for v in totals.values())
    assert top["share"] == pytest.approx(share, rel=REL)
    finding = _one(path, "gpu.top_kernel")
    assert finding["severity"] == "warn" and f"{100 * share:.1f}%" in finding["evidence"]
    assert f"{count} launches" in finding["evidence"]


@needs_corpus
def test_kernel_variability_names_nsys_ais_kernel() -> None:
    """nsys-ai: the bfloat16 copy kernel, max ÷ avg 5.0× over 1289 calls (top-15, ≥ 20 calls)."""
    totals: dict[str, list[int]] = defaultdict(list)
    for ks in _kernels(MFU).values():
        for s, e, name in ks:
            totals[name].append(e - s)
    top15 = sorted(totals.items(), key=lambda kv: -sum(kv[1]))[:15]
    flagged = {n: max(d) / (sum(d) / len(d)) for n, d in top15
               if len(d) >= 20 and max(d) / (sum(d) / len(d)) >= 5.0}
    copy = next(n for n in flagged if "bfloat16_copy_kernel_cuda" in n)
    assert len(totals[copy]) == 1289
    m = _whole(_measured(MFU)["top_kernel"])
    mine = m.filter((pl.col("place") <= 15) & (pl.col("count") >= 20) & (pl.col("ratio") >= 5.0))
    assert dict(zip(mine["name"], mine["ratio"], strict=True)) == pytest.approx(flagged, rel=REL)
    evidence = _one(MFU, "gpu.kernel_variability")["evidence"]
    assert f"{flagged[copy]:.1f}× (" in evidence and "1289 calls" in evidence


@needs_corpus
@pytest.mark.parametrize(("path", "nsys_ai"), [
    (H100, (56, 935.43)),   # "GPU Idle Summary (97.4% of profile)": 935.43 ms in 56 gaps, device 0
    (MFU, (2, 6.93)),       # two "GPU Idle Gap" findings on device 0: 4.49 ms and 2.43 ms
])
def test_idle_gaps_match_the_export(path: Path, nsys_ai: tuple[int, float]) -> None:
    expected = _idle_gaps(path)
    m = _whole(_measured(path)["idle_gaps"])
    assert sorted(m.select("gaps", "idle_ns", "longest_ns").rows()) == [e for e in expected if e[0]]
    worst = max(expected, key=lambda e: e[1])
    assert worst[0] == nsys_ai[0] and worst[1] / 1e6 == pytest.approx(nsys_ai[1], abs=0.01)
    evidence = _one(path, "gpu.idle_gaps")["evidence"]
    assert f"in {worst[0]} gaps ≥ 1 ms" in evidence


@needs_corpus
def test_idle_gaps_h100_is_a_warning_at_974_percent() -> None:
    """nsys-ai: "GPU idle 97% of profile" — the share of the kernel window with no kernel."""
    spans = [(s, e) for s, e, _ in next(iter(_kernels(H100).values()))]
    window = max(e for _, e in spans) - min(s for s, _ in spans)
    share = _idle_gaps(H100)[-1][1] / window
    assert round(100 * share, 1) == 97.4
    finding = _one(H100, "gpu.idle_gaps")
    assert finding["severity"] == "warn" and "97.4%" in finding["evidence"]


@needs_corpus
@pytest.mark.parametrize(("path", "nsys_ai_pct"), [(MFU, 58.7), (H100, 44.7)])
def test_sync_blocking_share_of_wall(path: Path, nsys_ai_pct: float) -> None:
    """nsys-ai: "CPU sync blocks 58.7% / 44.7% of wall time" (its union over both processes and
    all sync records, device-side waits included); rlperf: per rank, host waits only."""
    expected = _sync_shares(path)
    m = _whole(_measured(path)["sync_blocking"]).sort("blocked_ns")
    assert m["blocked_ns"].to_list() == [b for b, _ in expected]
    assert m["share"].to_list() == pytest.approx([s for _, s in expected], rel=WALL_REL)
    finding = _one(path, "gpu.sync_blocking")
    assert finding["severity"] == "warn"
    assert f"{100 * m['share'].max():.1f}%" in finding["evidence"]
    assert abs(100 * max(s for _, s in expected) - nsys_ai_pct) < 5


@needs_corpus
@pytest.mark.parametrize(("path", "kind", "direction", "longest_mb", "longest_ms", "severity"), [
    (MFU, 8, "DtoD", 95.8, 0.06, "info"),     # nsys-ai: "Large D2D Transfer (95.8MB)" ×5
    (H100, 1, "HtoD", 4200.6, 151.75, "warn"),  # nsys-ai: "Large H2D Transfer (4200.6MB)"
])
def test_large_copies(path: Path, kind: int, direction: str, longest_mb: float,
                      longest_ms: float, severity: str) -> None:
    rows = _q(path, f"SELECT bytes, [end] - start FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                    f"WHERE copyKind = {kind}")
    large = [r for r in rows if r[0] >= 10_000_000]
    longest = max(rows, key=lambda r: (r[1], r[0]))
    assert round(longest[0] / 1e6, 1) == longest_mb
    assert round(longest[1] / 1e6, 2) == pytest.approx(longest_ms, abs=0.01)
    m = _whole(_measured(path)["copies"]).filter(pl.col("direction") == direction)
    assert (m["count"].sum(), m["bytes"].sum(), m["large"].sum()) == (
        len(rows), sum(r[0] for r in rows), len(large)
    )
    assert m["longest_ns"].max() == longest[1]
    finding = _one(path, f"gpu.copies.{direction}")
    assert finding["severity"] == severity
    assert f"{len(rows)} {direction} copies" in finding["evidence"]


@needs_corpus
def test_copies_save_at_most_the_kernel_time_beside_which_they_could_run() -> None:
    """nsys-ai's h100_2gpu_1s: each device copies host to device for 921 ms of a 1 s window
    beside 22.4 ms of kernels. Overlapping the copies with kernels hides at most the kernel
    time with no copy running, not the 921 ms the finding once saved (95% of the window)."""
    bound = []
    for device in (0, 1):
        kernels = _q(H100, "SELECT start, [end] FROM CUPTI_ACTIVITY_KIND_KERNEL "
                           f"WHERE deviceId = {device}")
        copies = _q(H100, "SELECT start, [end], copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                          f"WHERE deviceId = {device}")
        spans = [(a, b) for a, b, _ in copies]
        htod = [(a, b) for a, b, kind in copies if kind == 1]
        exposed = union_ns(htod + kernels) - union_ns(kernels)
        room = union_ns(kernels + spans) - union_ns(spans)
        assert exposed > 900e6 and 20e6 < room < 25e6
        bound.append(min(exposed, room))
    finding = _one(H100, "gpu.copies.HtoD")
    assert finding["saving_ns"] == max(bound)
    assert "so overlap hides at most that" in finding["evidence"]


def _sendrecv_kinds(path: Path) -> dict[int, dict[str, list[int]]]:
    """Per process, the durations of its ``ncclDevKernel_SendRecv`` kernels by the kind of the
    host range their launch lies in: ``all_to_all`` where the runtime call of the kernel's
    correlation id (same process) lies inside an NVTX ``nccl:all_to_all…`` range of its thread,
    else ``send_recv`` (the kernel's own name)."""
    out: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for pid, dur, inside in _q(path, f"""
        SELECT {_pid('k.globalPid')}, k.[end] - k.start, EXISTS (
            SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN NVTX_EVENTS v
              ON v.globalTid = r.globalTid AND v.start <= r.start AND v.[end] >= r.[end]
            WHERE r.correlationId = k.correlationId
              AND {_pid('r.globalTid')} = {_pid('k.globalPid')}
              AND substr(v.text, 1, 15) = 'nccl:all_to_all')
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n ON n.id = k.demangledName
        WHERE substr(n.value, 1, 22) = 'ncclDevKernel_SendRecv'"""):
        out[pid]["all_to_all" if inside else "send_recv"].append(dur)
    return out


@needs_corpus
def test_nccl_variability_all_to_all() -> None:
    """nsys-ai: "High NCCL Variability (sendrecv, max/avg=6.9×)" on device 0: 3.604 ms vs 0.52,
    over its 33 SendRecv kernels. 32 of them per device are launched inside PyTorch's
    ``nccl:all_to_all`` NVTX ranges, so rlperf reads all_to_all: rank 0 6.8× (3.6 ms vs 534 µs),
    rank 1 7.2×; the 33rd of each (no launch in the capture) is a send_recv of 1 instance, below
    the rule's 3, so all_to_all is 98.5% of rank 1's collective time where send_recv read 100.0%
    (recomputed here with SQL on the export)."""
    kinds = _sendrecv_kinds(MFU)
    expected = []
    for by_kind in kinds.values():
        d = by_kind["all_to_all"]
        total = sum(sum(v) for v in by_kind.values())
        expected.append((len(d), max(d) / (sum(d) / len(d)), sum(d) / total))
        assert len(by_kind["send_recv"]) == 1
    m = _whole(_measured(MFU)["nccl_variability"]).filter(pl.col("coll") == "all_to_all")
    got = sorted(zip(m["count"], m["ratio"], m["share"], strict=True))
    assert [c for c, _, _ in got] == [c for c, _, _ in sorted(expected)] == [32, 32]
    assert [r for _, r, _ in got] == pytest.approx([r for _, r, _ in sorted(expected)], rel=REL)
    assert [x for _, _, x in got] == pytest.approx([x for _, _, x in sorted(expected)], rel=REL)
    assert sorted(round(r, 1) for _, r, _ in expected) == [6.8, 7.2]
    evidence = _one(MFU, "gpu.nccl_variability.all_to_all")["evidence"]
    assert "7.2×" in evidence and "6.8×" in evidence and "98.5% of its collective time" in evidence
    assert not _found(MFU)["id"].str.starts_with("gpu.nccl_variability.send_recv").any()


@needs_corpus
def test_exposed_communication() -> None:
    """nsys-ai: "Low Compute/NCCL Overlap (0.0%)", NCCL-only 17.17 ms on device 0."""
    gpu: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for table in ("MEMCPY", "MEMSET"):
        for pid, s, e in _q(MFU, f"SELECT {_pid('globalPid')}, start, [end] "
                                 f"FROM CUPTI_ACTIVITY_KIND_{table}"):
            gpu[pid].append((s, e))
    expected = []
    for pid, ks in _kernels(MFU).items():
        nccl = [(s, e) for s, e, n in ks if n.startswith("nccl")]
        other = [(s, e) for s, e, n in ks if not n.startswith("nccl")] + gpu[pid]
        expected.append(_minus(nccl, other))
    m = _whole(_measured(MFU)["exposed_comm"])
    assert sorted(m["exposed_ns"]) == pytest.approx(sorted(expected), rel=1e-3)
    assert any(round(x / 1e6, 2) == 17.17 for x in expected)
    finding = _one(MFU, "gpu.exposed_comm")
    assert finding["severity"] == "warn" and "0.0% overlapped" in finding["evidence"]
    assert finding["saving_ns"] == m["exposed_ns"].max()


@needs_corpus
def test_small_kernels_launch_overhead() -> None:
    """nsys-ai: "Small Kernel Overhead: vectorized_elementwise_kernel (1.7us avg, 437 launches)"."""
    durs = [e - s for ks in _kernels(H100).values() for s, e, _ in ks]
    tiny = [d for d in durs if d < 10_000]
    m = _whole(_measured(H100)["small_kernels"]).row(0, named=True)
    assert (m["count"], m["launches"], m["gpu_ns"]) == (len(tiny), len(durs), sum(tiny))
    assert m["family"] == "vectorized_elementwise_kernel"
    assert m["mean"] / 1e3 == pytest.approx(1.7, abs=0.05)
    assert _one(H100, "gpu.small_kernels")["severity"] == "warn"


@needs_corpus
def test_every_nsys_ai_problem_is_named() -> None:
    """The ids that answer each of nsys-ai's findings on the two exports (docs table)."""
    assert {"gpu.top_kernel", "gpu.kernel_variability", "gpu.sync_blocking", "gpu.copies.DtoD",
            "gpu.nccl_variability.all_to_all", "gpu.exposed_comm", "gpu.idle_gaps",
            "gpu.host_bound", "gpu.straggler"} <= set(_found(MFU)["id"])
    assert {"gpu.top_kernel", "gpu.small_kernels", "gpu.sync_blocking", "gpu.copies.HtoD",
            "gpu.idle_gaps"} <= set(_found(H100)["id"])


# --- HolisticTraceAnalysis traces (nsys-ai does not read Kineto JSON) ------------------------


def _kineto_kernels(path: Path) -> list[tuple[float, float, str]]:
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    return [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in doc["traceEvents"]
            if e.get("cat") == "kernel" and e.get("ph") == "X"]


@pytest.mark.skipif(not HTA.is_dir(), reason="corpus not present")
def test_hta_sampled_rank_top_kernel_and_idle_gaps() -> None:
    path = HTA / "sampled_rank-0.json.gz"
    ks = _kineto_kernels(path)
    totals: dict[str, float] = defaultdict(float)
    for s, e, n in ks:
        totals[n] += e - s
    name = max(totals, key=totals.__getitem__)
    top = _whole(_measured(path)["top_kernel"]).row(0, named=True)
    assert top["name"] == name
    assert top["share"] == pytest.approx(totals[name] / sum(totals.values()), rel=1e-4)
    merged = _union([(s, e) for s, e, _ in ks])
    gaps = [b[0] - a[1] for a, b in pairwise(merged) if b[0] - a[1] >= 1000]
    idle = _whole(_measured(path)["idle_gaps"]).row(0, named=True)
    assert idle["gaps"] == len(gaps)
    assert idle["idle_ns"] / 1e3 == pytest.approx(sum(gaps), rel=1e-4)
    assert _one(path, "gpu.idle_gaps")["severity"] == "warn"


# --- built event tables ------------------------------------------------------------------------

MS = 1_000_000
US = 1_000


def _ev(rank: int, kind: str, name: str, start: int, end: int, *, stream: int = 7,
        corr: int | None = None, nbytes: int | None = None, stage: str | None = None) -> dict:
    return {"rank": rank, "kind": kind, "name": name, "start_ns": start, "end_ns": end,
            "stream": stream if kind in ("kernel", "memcpy", "memset") else -1,
            "corr": corr, "bytes": nbytes, "stage": stage}


def _table(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={
        "rank": pl.Int32, "kind": pl.String, "name": pl.String, "start_ns": pl.Int64,
        "end_ns": pl.Int64, "stream": pl.Int32, "corr": pl.Int64, "bytes": pl.Int64,
        "stage": frames.STAGE,
    })


def _busy_trace(rank: int = 0, kernels: int = 50, names: int = 10, gap: int = 2 * US,
                stage: str | None = None) -> list[dict]:
    """Back-to-back kernels of many names, each launched well ahead of its start."""
    rows, t = [], 0
    for i in range(kernels):
        rows.append(_ev(rank, "runtime", "cudaLaunchKernel", t - 100 * US, t - 95 * US,
                        corr=1000 * rank + i, stage=stage))
        rows.append(_ev(rank, "kernel", f"void k{i % names}<float>(int)", t, t + 100 * US,
                        corr=1000 * rank + i, stage=stage))
        t += 100 * US + gap
    return rows


def _timeline(rows: list[tuple[int, str, int, int]] = ()) -> pl.DataFrame:
    return pl.DataFrame(
        [{"rank": r, "step": 0, "stage": s, "role": None, "name": s, "start_ns": a, "end_ns": b,
          "inferred": False} for r, s, a, b in rows], schema=frames.STAGE_TIMELINE)


def _waits(rows: list[dict] = ()) -> pl.DataFrame:
    base = {"instance": 0, "rank": 0, "step": None, "dim": None, "coll": "all_reduce",
            "group_size": 2, "bytes": 1, "stage": None, "start_ns": 0, "end_ns": 0,
            "arrival_ns": 0, "wait_ns": 0, "exposed_ns": 0}
    return pl.DataFrame([{**base, **r} for r in rows], schema=frames.COLLECTIVE_WAITS)


def _exposed(waits: pl.DataFrame) -> pl.DataFrame:
    """The exposed intervals the hand-made ``exposed_ns`` of ``waits`` stand for: each call's
    first ``exposed_ns``."""
    return pl.DataFrame(
        {"rank": waits["rank"], "start_ns": waits["start_ns"],
         "end_ns": waits["start_ns"] + waits["exposed_ns"]}, schema=frames.EXPOSED_INTERVALS,
    ).filter(pl.col("end_ns") > pl.col("start_ns"))


def _compute(rows: list[dict], timeline: pl.DataFrame | None = None,
             waits: pl.DataFrame | None = None, steps: int = 0) -> pl.DataFrame:
    step_frame = pl.DataFrame({"step": list(range(steps)), "start_ns": [0] * steps,
                               "end_ns": [1] * steps, "source": ["x"] * steps},
                              schema=frames.STEPS)
    waits = _waits() if waits is None else waits
    out = gf.compute(_table(rows), _timeline() if timeline is None else timeline,
                     waits, _exposed(waits), step_frame)
    return frames.check(out, frames.FINDING_CANDIDATES, "gpu_findings")


def test_a_trace_without_problems_gets_no_warning() -> None:
    out = _compute(_busy_trace())
    assert out["id"].to_list() == ["gpu.top_kernel"]
    assert out["severity"].to_list() == ["info"] and out["stage"].to_list() == [""]
    assert "10.0% of all kernel time" in out["evidence"][0]


def test_top_kernel_warns_at_its_share() -> None:
    rules = gf.rules()["top_kernel"]
    dominant = [r | {"name": "void big<float>(int)"} if r["kind"] == "kernel" and i % 20 < 6 else r
                for i, r in enumerate(_busy_trace())]
    out = _compute(dominant)
    row = out.filter(pl.col("id") == "gpu.top_kernel").row(0, named=True)
    assert rules["share_warn"] == 0.30 and row["severity"] == "warn"
    assert row["title"].endswith(": big") and "30.0% of all kernel time" in row["evidence"]


def _idle(gap: int, n_gaps: int, launch_late: bool) -> list[dict]:
    """Kernels of 1 ms separated by ``gap``; the launch of each closing kernel ends inside the
    gap (late) or before it (early)."""
    rows, t = [], 0
    for i in range(n_gaps + 1):
        launch_end = t - gap // 2 if launch_late and i else t - gap - 10 * US
        rows.append(_ev(0, "runtime", "cudaLaunchKernel", launch_end - 5 * US, launch_end, corr=i))
        rows.append(_ev(0, "kernel", f"void k{i % 9}<float>(int)", t, t + MS, corr=i))
        t += MS + gap
    return rows


def test_idle_gaps_threshold_and_saving() -> None:
    rule = gf.rules()["idle_gaps"]
    just_below = _compute(_idle(rule["min_gap_ns"] - 1, 4, launch_late=False))
    assert "gpu.idle_gaps" not in just_below["id"].to_list()
    out = _compute(_idle(rule["min_gap_ns"], 4, launch_late=False), steps=2)
    row = out.filter(pl.col("id") == "gpu.idle_gaps").row(0, named=True)
    assert row["severity"] == "warn" and "in 4 gaps ≥ 1 ms" in row["evidence"]
    # each closing kernel's launch returned 10 µs before its gap: past the queue lag the idle
    # GPU had it waiting (queued), which the host did not cause: 90 µs of each gap is saved
    lag = finding_rules().queue_lag_ns
    assert row["saving_ns"] == 4 * (lag - 10 * US) // 2
    assert f"{4 * (rule['min_gap_ns'] - lag + 10 * US) / MS:.2f} ms of that with launched " \
        "work queued" in row["evidence"]
    assert "gpu.host_bound" not in out["id"].to_list()


def test_idle_gap_filled_by_a_copy_saves_nothing() -> None:
    rows = _idle(2 * MS, 1, launch_late=False)
    rows.append(_ev(0, "memcpy", "Memcpy HtoD (Pinned -> Device)", MS, 3 * MS, stream=9,
                    nbytes=50_000_000))
    out = _compute(rows)
    idle = out.filter(pl.col("id") == "gpu.idle_gaps").row(0, named=True)
    assert idle["saving_ns"] == 0 and "no copy either for 0 ns" in idle["evidence"]
    copy = out.filter(pl.col("id") == "gpu.copies.HtoD").row(0, named=True)
    assert copy["severity"] == "warn" and copy["saving_ns"] == 2 * MS
    assert "1 of ≥ 9.54 MiB" in copy["evidence"]
    small = _idle(2 * MS, 1, launch_late=False)
    small.append(_ev(0, "memcpy", "Memcpy HtoD (Pinned -> Device)", MS, 3 * MS, stream=9,
                     nbytes=5_000_000))
    below = _compute(small).filter(pl.col("id") == "gpu.copies.HtoD").row(0, named=True)
    assert "(none of ≥ 9.54 MiB; longest 4.77 MiB in 2 ms" in below["evidence"]


def test_host_bound_needs_the_launch_to_end_inside_the_gap() -> None:
    late = _compute(_idle(100 * US, 10, launch_late=True))
    row = late.filter(pl.col("id") == "gpu.host_bound").row(0, named=True)
    assert row["saving_ns"] == 10 * 100 * US and "in 10 gaps" in row["evidence"]
    early = _compute(_idle(100 * US, 10, launch_late=False))
    assert "gpu.host_bound" not in early["id"].to_list()


def test_sync_blocking_counts_host_waits_not_stream_waits() -> None:
    rows = _busy_trace()
    span = rows[-1]["end_ns"]
    sync = _ev(0, "runtime", "cudaStreamSynchronize", 0, span // 4)
    device_wait = _ev(0, "gpu_sync", "Stream Wait Event", 0, span, stream=-1)
    out = _compute([*rows, sync, device_wait])
    row = out.filter(pl.col("id") == "gpu.sync_blocking").row(0, named=True)
    assert row["severity"] == "warn" and "cudaStreamSynchronize (1 call," in row["evidence"]
    wall = span - rows[0]["start_ns"]
    assert f"{100 * (span // 4) / wall:.1f}% of its wall time" in row["evidence"]
    async_only = _compute([*rows, sync | {"name": "cudaMemcpyAsync"}, device_wait])
    assert "gpu.sync_blocking" not in async_only["id"].to_list()


def _collectives(durations: list[int], rank: int = 0, stage: str | None = None) -> list[dict]:
    rows, t = [], 0
    for i, d in enumerate(durations):
        rows.append({"instance": i, "rank": rank, "start_ns": t, "end_ns": t + d,
                     "arrival_ns": t, "exposed_ns": d, "stage": stage})
        t += d + MS
    return rows


def test_nccl_variability_and_exposed_comm() -> None:
    rows = _busy_trace(kernels=200)
    waits = _waits(_collectives([100 * US] * 9 + [600 * US]))
    out = _compute(rows, waits=waits)
    var = out.filter(pl.col("id") == "gpu.nccl_variability.all_reduce").row(0, named=True)
    assert "4.0× max ÷ mean" in var["evidence"] and var["severity"] == "info"
    assert var["saving_ns"] == 10 * (150 * US - 100 * US)
    exposed = out.filter(pl.col("id") == "gpu.exposed_comm").row(0, named=True)
    assert exposed["saving_ns"] == 1500 * US and "0.0% overlapped" in exposed["evidence"]
    even = _compute(rows, waits=_waits(_collectives([100 * US] * 10)))
    assert "gpu.nccl_variability.all_reduce" not in even["id"].to_list()


def test_exposed_comm_counts_collectives_that_run_at_once_once() -> None:
    """Two all-reduces on two streams, [0, 1) and [0.5, 1.5) ms, nothing else running then:
    1.5 ms of the rank's time is exposed (the per-call sum would be 2 ms)."""
    rows = _busy_trace(kernels=20)
    base = rows[-1]["end_ns"] + MS
    calls = [{"instance": i, "rank": 0, "start_ns": base + a, "end_ns": base + a + MS,
              "arrival_ns": base + a, "exposed_ns": MS} for i, a in enumerate((0, MS // 2))]
    out = _compute(rows, waits=_waits(calls))
    exposed = out.filter(pl.col("id") == "gpu.exposed_comm").row(0, named=True)
    assert exposed["saving_ns"] == 3 * MS // 2
    assert "rank 0: 1.5 ms of 1.5 ms of collective time" in exposed["evidence"]


def test_exposed_comm_in_a_stage_says_it_is_a_share_of_the_stages_time() -> None:
    """In a stage, the window is the stage's time on the rank, and the words say so (a stage's
    row can be shown under another finding's "Where")."""
    rows = _busy_trace(kernels=20)
    base = rows[-1]["end_ns"] + MS
    calls = [{"instance": 0, "rank": 0, "start_ns": base, "end_ns": base + MS,
              "arrival_ns": base, "exposed_ns": MS, "stage": "actor_update"}]
    waits = _waits(calls)
    out = gf.compute(_table(rows), _timeline([(0, "actor_update", base, base + 2 * MS)]), waits,
                     _exposed(waits), pl.DataFrame(schema=frames.STEPS),
                     keep=frozenset({"exposed_comm"}))
    staged = out.filter((pl.col("id") == "gpu.exposed_comm") & (pl.col("stage") != ""))
    assert staged["evidence"].to_list() == [
        "rank 0: 1 ms of 1 ms of collective time runs with no other GPU work (0.0% overlapped) "
        "= 50.0% of its time in actor_update (2 ms)"
    ]


def test_straggler_is_the_last_arrival() -> None:
    rows = _busy_trace(rank=0) + _busy_trace(rank=1)
    waits = []
    for i in range(5):
        t = i * 2 * MS
        waits += [
            {"instance": i, "rank": 0, "start_ns": t, "end_ns": t + 600 * US,
             "arrival_ns": t + 500 * US, "wait_ns": 500 * US, "exposed_ns": 600 * US},
            {"instance": i, "rank": 1, "start_ns": t + 500 * US, "end_ns": t + 600 * US,
             "arrival_ns": t + 500 * US, "wait_ns": 0, "exposed_ns": 100 * US},
        ]
    out = _compute(rows, waits=_waits(waits))
    row = out.filter(pl.col("id") == "gpu.straggler").row(0, named=True)
    assert row["ranks"] == "1" and row["saving_ns"] == 5 * 500 * US
    assert "arrived last at 5 of the 5" in row["evidence"]


def test_findings_inside_each_stage() -> None:
    train = _busy_trace(kernels=40, names=10, stage="actor_update")
    end = train[-1]["end_ns"]
    gen = [r | {"start_ns": r["start_ns"] + end + 5 * MS, "end_ns": r["end_ns"] + end + 5 * MS,
                "stage": "rollout", "corr": r["corr"] + 500,
                "name": "void decode<half>(int)" if r["kind"] == "kernel" else r["name"]}
           for r in _busy_trace(kernels=40, names=1)]
    timeline = _timeline([(0, "actor_update", 0, end), (0, "rollout", end + 5 * MS,
                                                        gen[-1]["end_ns"])])
    out = _compute(train + gen, timeline=timeline)
    tops = out.filter(pl.col("id") == "gpu.top_kernel")
    # the whole trace's top kernel is rollout's decode, all of it there: one finding, in rollout
    assert tops["stage"].to_list() == ["actor_update", "rollout"]
    rollout = tops.filter(pl.col("stage") == "rollout").row(0, named=True)
    assert rollout["title"].endswith(": decode") and rollout["severity"] == "warn"
    assert "of all kernel time (sum" in rollout["evidence"]  # the whole trace's numbers
    assert rollout["evidence"].endswith("where it lies: rollout 100.0% (that stage's own "
                                        "finding folded in here)")
    idle = out.filter(pl.col("id") == "gpu.idle_gaps")
    assert idle["stage"].to_list() == [""]  # the gap lies between the stages, in neither


def _variable(actor_ms: list[int], rollout_ms: list[int]) -> pl.DataFrame:
    """all_reduce calls of rank 0, back to back, in two stages (durations in ms)."""
    rows, t = [], 0
    for stage, durations in (("actor_update", actor_ms), ("rollout", rollout_ms)):
        for d in durations:
            rows.append({"instance": len(rows), "stage": stage, "start_ns": t,
                         "end_ns": t + d * MS, "arrival_ns": t, "exposed_ns": d * MS})
            t += d * MS + MS
    return _waits(rows)


def test_a_stage_holding_most_of_a_problem_is_the_whole_traces_finding() -> None:
    """actor_update holds 12 of the 15 ms of all_reduce (80%): the whole trace's variability
    finding takes the stage and the stage's own row goes; at 12 of 27 ms (44%) both stay."""
    out = _compute(_busy_trace(), waits=_variable([1, 1, 10], [1, 1, 1]))
    nccl = out.filter(pl.col("id") == "gpu.nccl_variability.all_reduce")
    assert nccl.select("stage", "saving_ns").rows() == [("actor_update", 9 * MS)]  # 10 − 1, exposed
    assert "where it lies: actor_update 80.0%" in nccl["evidence"][0]
    out = _compute(_busy_trace(), waits=_variable([1, 1, 10], [5, 5, 5]))
    nccl = out.filter(pl.col("id") == "gpu.nccl_variability.all_reduce")
    assert nccl["stage"].to_list() == ["", "actor_update"]
    assert not nccl["evidence"].str.contains("where it lies").any()


def test_the_variability_saving_is_at_most_the_exposed_part_of_the_slow_calls() -> None:
    """The 10 ms call ran 8 ms beside compute (2 ms exposed): at the median (1 ms) it frees
    2 ms of the rank's time, not 9; the evidence gives both."""
    waits = _variable([1, 1, 10], []).with_columns(
        pl.when(pl.col("end_ns") - pl.col("start_ns") == 10 * MS).then(2 * MS)
        .otherwise(pl.col("exposed_ns")).alias("exposed_ns")
    )
    out = _compute(_busy_trace(), waits=waits)
    nccl = out.filter(pl.col("id") == "gpu.nccl_variability.all_reduce").row(0, named=True)
    assert nccl["saving_ns"] == 2 * MS
    assert "every slower instance at the median of its size: 9 ms less, 2 ms of it exposed" \
        in nccl["evidence"]


def test_a_slow_collective_is_brought_to_the_median_of_its_size() -> None:
    """[1, 2, 2, 10] ms all-reduces of one size: the median (2 ms) is the target, 8 ms saved,
    where count × (mean − min) said 11 ms. Calls of two sizes, each size as fast every time
    (three 1 MiB calls of 1 ms, one of 100 MiB of 10 ms), vary by design: nothing saved.
    Sizes not recorded: no saving, info, and the evidence says why (df_index_resolver: 2,020
    all-reduces, 4 µs to 4.98 ms, no size)."""
    one = _compute(_busy_trace(), waits=_variable([1, 2, 2, 10], []))
    row = one.filter(pl.col("id") == "gpu.nccl_variability.all_reduce").row(0, named=True)
    assert row["saving_ns"] == 8 * MS and "median 2 ms, min 1 ms" in row["evidence"]
    sizes = _variable([1, 1, 1, 10], []).with_columns(
        pl.when(pl.col("end_ns") - pl.col("start_ns") == 10 * MS).then(100 * 2**20)
        .otherwise(2**20).alias("bytes"))
    two = _compute(_busy_trace(), waits=sizes)
    row = two.filter(pl.col("id") == "gpu.nccl_variability.all_reduce").row(0, named=True)
    assert row["saving_ns"] == 0
    unsized = _compute(_busy_trace(), waits=_variable([1, 2, 2, 10], []).with_columns(
        pl.lit(None, pl.Int64).alias("bytes")))
    row = unsized.filter(pl.col("id") == "gpu.nccl_variability.all_reduce").row(0, named=True)
    assert row["saving_ns"] is None and row["severity"] == "info"
    assert "their sizes are not recorded, and instances of different sizes differ by design: " \
        "no saving estimated" in row["evidence"]
    real = _found(HTA / "df_index_resolver.json.gz").filter(
        pl.col("id") == "gpu.nccl_variability.all_reduce")
    assert real.height >= 1 and real["saving_ns"].is_null().all()
    assert "2020 instances, median 11 µs, min 4 µs" in real["evidence"][0]


def test_the_thresholds_are_data() -> None:
    table = gf.rules()
    table["top_kernel"] = table["top_kernel"] | {"share_warn": 0.05}
    m = gf.compute(_table(_busy_trace()), _timeline(), _waits(), _exposed(_waits()),
                   pl.DataFrame(schema=frames.STEPS), table)
    assert m["severity"].to_list() == ["warn"]


def test_a_communication_kernel_on_top_is_not_given_tensor_core_advice() -> None:
    """nccl_data: ncclKernel_AllReduce_RING_LL_Sum_float (28.8% of kernel time) was the 'Top
    kernel' told to use Tensor Cores and flash attention; the top compute kernel is named now,
    the communication share beside it."""
    path = HTA / "nccl_data.json.gz"
    if not path.exists():
        pytest.skip("corpus not present")
    found = analyzer.load([path]).findings.filter(pl.col("id") == "gpu.top_kernel")
    assert found.height > 0
    assert not found["title"].str.contains("(?i)nccl").any()
    whole = found.filter(pl.col("stage") == "").row(0, named=True)
    assert whole["title"] == "Top kernel: nchwToNhwcKernel"
    assert ("communication kernels take 28.8% of kernel time (the first kernel overall is "
            "ncclKernel_AllReduce_RING_LL_Sum_float, 28.8%)") in whole["evidence"]


def test_a_scope_of_communication_kernels_only_gets_communication_advice() -> None:
    kernels = pl.DataFrame({
        "scope": ["", ""], "name": ["ncclDevKernel_AllGather_RING_LL", "ncclKernel_Reduce"],
        "rank": [0, 0], "start_ns": [0, 100], "end_ns": [90, 120],
    })
    table = gf.rules()
    m = gf.top_kernels(kernels, table["top_kernel"] | table["names"])
    (row,) = gf._top_kernel(m, table["top_kernel"], 1)
    assert row["title"] == "Top kernel is communication: ncclDevKernel_AllGather_RING_LL"
    assert row["recommendation"] == table["top_kernel"]["recommendation_comm"]
    assert "communication kernels take 100.0% of kernel time" in row["evidence"]


@pytest.mark.parametrize("order", [[0, 1, 2], [2, 1, 0], [1, 2, 0]])
def test_kernels_tied_in_total_time_take_their_place_by_name(order: list[int]) -> None:
    """A tie in total time was broken by the group-by's arbitrary row order, so two kernels of
    equal time could swap places (and the top kernel's name) from one run to the next."""
    names, starts = ["gemm_b", "gemm_a", "gemm_c"], [0, 100, 200]
    ends = [50, 150, 230]
    kernels = pl.DataFrame({
        "scope": [""] * 3, "name": [names[i] for i in order], "rank": [0] * 3,
        "start_ns": [starts[i] for i in order], "end_ns": [ends[i] for i in order],
    })
    table = gf.rules()
    m = gf.top_kernels(kernels, table["top_kernel"] | table["names"])
    assert m.select("name", "place").rows() == [("gemm_a", 1), ("gemm_b", 2), ("gemm_c", 3)]


# --- inference engines on MI300X (TraceLens): what the GPU waited for, graphs, capture --------

TRACELENS = CORPUS / "TraceLens" / "inference"
SGLANG_PREFILL = TRACELENS / "sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"
VLLM_REPLAY = TRACELENS / "vllm_decode_full__graph_execution.json.gz"
VLLM_CAPTURE = TRACELENS / ("vllm_decode_full__capture_traces__graph_capture_rank_0"
                            ".1773709742341309550.pt.trace.json.gz")
SGLANG_CAPTURE = TRACELENS / "sglang_decode__capture_traces__bs_32_rank0.json.gz"
needs_tracelens = pytest.mark.skipif(not TRACELENS.is_dir(), reason="corpus not present")


def _kineto(path: Path) -> tuple[list[dict], dict[int, dict]]:
    """The GPU rows and the runtime calls by correlation id, times in ns, from the raw JSON."""
    with gzip.open(path, "rt") as f:
        rows = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    for e in rows:
        e["s"], e["e"] = round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)
    gpu = [e for e in rows if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    calls = {e["args"]["correlation"]: e for e in rows if e.get("cat") == "cuda_runtime"}
    return gpu, calls


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(max(x, y), min(x2, y2)) for x, x2 in _union(a) for y, y2 in _union(b)
            if min(x2, y2) > max(x, y)]


@needs_tracelens
def test_a_host_blocked_while_the_gpu_waits_on_a_stream_event_saves_nothing() -> None:
    """SGLang prefill: the host blocks 493 ms in a 60-byte hipMemcpyWithStream while the GPU
    idles, but resolve_future_token_ids_kernel, launched right after a hipStreamWaitEvent,
    starts 493 ms after its launch returned: the GPU waited for another stream. The test's
    numbers come from the raw JSON: queued = lag past the launch to the work's start."""
    gpu, calls = _kineto(SGLANG_PREFILL)
    lag = finding_rules().queue_lag_ns
    queued = [(calls[c]["e"] + lag, g["s"]) for g in gpu
              if (c := g["args"]["correlation"]) in calls and g["s"] - calls[c]["e"] > lag]
    busy = _union([(g["s"], g["e"]) for g in gpu])
    gaps = [(a[1], b[0]) for a, b in pairwise(busy) if b[0] - a[1] >= 10 * US]
    blocked = [(c["s"], c["e"]) for c in calls.values() if c["name"] == "hipMemcpyWithStream"]
    idle = _overlap(blocked, gaps)
    m = _whole(_measured(SGLANG_PREFILL)["sync_blocking"]).row(0, named=True)
    assert m["idle_ns"] == pytest.approx(_length(idle), abs=US)
    assert m["queued_ns"] == pytest.approx(_length(_overlap(idle, queued)), abs=US)
    assert m["queued_ns"] == pytest.approx(493_139_121, abs=US)
    row = _one(SGLANG_PREFILL, "gpu.sync_blocking", "rollout")
    rule = gf.rules()["sync_blocking"]
    assert row["severity"] == "info" and row["saving_ns"] is None
    assert row["title"] == rule["title_queued"]
    assert "the GPU idles for 493 ms of it; 493 ms of it with launched work queued" \
        in row["evidence"]
    assert "started 493 ms after its launch returned, queued behind a stream wait event " \
        "(hipStreamWaitEvent 11.7 µs before its launch)" in row["evidence"]
    host = _whole(_measured(SGLANG_PREFILL)["host_bound"]).row(0, named=True)
    assert host["queued_ns"] == m["queued_ns"] and host["starved_ns"] == 1_172_838
    assert not _found(SGLANG_PREFILL).filter(pl.col("id") == "gpu.host_bound").height
    gaps_m = _whole(_measured(SGLANG_PREFILL)["idle_gaps"]).row(0, named=True)
    assert gaps_m["empty_ns"] == 493_283_729 and gaps_m["free_ns"] == 144_608
    findings = _run(SGLANG_PREFILL).findings
    assert findings.filter(pl.col("saving_ns") > 100 * MS).height == 0


@needs_tracelens
def test_kernels_a_graph_launch_started_are_not_launch_overhead() -> None:
    """vLLM full-graph decode: 421 of its 425 kernels come from one hipGraphLaunch (its 507 µs
    once read as a tiny kernel's launch time); 3 of the 4 launched one by one are tiny."""
    gpu, calls = _kineto(VLLM_REPLAY)
    kernels = [g for g in gpu if g.get("cat") == "kernel"]
    by_graph = [g for g in kernels if calls[g["args"]["correlation"]]["name"] == "hipGraphLaunch"]
    alone = [g for g in kernels if g not in by_graph]
    small = _whole(_measured(VLLM_REPLAY)["small_kernels"]).row(0, named=True)
    assert (small["in_graphs"], small["launches"]) == (len(by_graph), len(alone)) == (421, 4)
    assert small["count"] == sum(g["e"] - g["s"] < 10 * US for g in alone) == 3
    assert small["api_ns"] < 20 * US
    assert not _found(VLLM_REPLAY).filter(pl.col("id") == "gpu.small_kernels").height


@needs_tracelens
def test_a_capture_traces_top_kernel_is_info_and_its_kernels_told_apart() -> None:
    """Graph-capture traces hold microseconds of kernel time (19.6 and 11 µs): the top kernel
    is no warning, and two vectorized_elementwise_kernel instantiations are named apart."""
    vllm = _one(VLLM_CAPTURE, "gpu.top_kernel")
    assert (vllm["severity"], vllm["confidence"]) == ("info", "low")
    assert vllm["recommendation"] == gf.rules()["top_kernel"]["recommendation_capture"]
    assert "vectorized_elementwise_kernel<4, FillFunctor<int>, array<char*, 1ul> > 41.3%; " \
        "vectorized_elementwise_kernel<4, FillFunctor<long>, array<char*, 1ul> > 38.1%" \
        in vllm["evidence"]
    sglang = _one(SGLANG_CAPTURE, "gpu.top_kernel")
    assert sglang["severity"] == "info" and "11 µs in 2 launches" in sglang["evidence"]
    assert "(sum of kernel durations over ranks); the only compute kernel; a graph-capture" \
        in sglang["evidence"]


def test_a_top_kernel_in_microseconds_of_kernel_time_is_no_warning() -> None:
    rule = gf.rules()["top_kernel"]
    one = [_ev(0, "kernel", "void big<float>(int)", 0, 10 * US),
           _ev(0, "kernel", "void small<float>(int)", 20 * US, 25 * US)]
    assert rule["warn_min_ns"] == MS
    top = pl.col("id") == "gpu.top_kernel"
    assert _compute(one).filter(top)["severity"].to_list() == ["info"]
    longer = [_ev(0, "kernel", "void big<float>(int)", 0, MS),
              _ev(0, "kernel", "void small<float>(int)", MS, MS + 500 * US)]
    assert _compute(longer).filter(top)["severity"].to_list() == ["warn"]


def test_a_kernel_in_an_anonymous_namespace_is_told_by_its_own_name() -> None:
    """Names as HTA's and SGLang's traces record them: ``(anonymous namespace)::`` stopped the
    short name at its ``(``, so the whole signature stood in for it, cut at 60 characters."""
    names = [
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native"
        "::(anonymous namespace)::OpaqueType<4u>, unsigned int, 1, 128, 1>(int)",
        "void (anonymous namespace)::elementwise_kernel_with_index<int, long>(int)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "launch_clamp_scalar>(int)",
    ]
    short = pl.DataFrame({"name": names}).select(gf._family(pl.col("name"))).to_series()
    assert short.to_list() == ["CatArrayBatchedCopy_aligned16_contig",
                               "elementwise_kernel_with_index", "vectorized_elementwise_kernel"]


def test_a_copy_with_no_size_recorded_is_named_so(tmp_path: Path) -> None:
    """The fuzzer blanked the ``Bytes (MB)`` cell of the longest HtoD copy of an nsys stats CSV
    and the finding failed (``None / int``): the copies' time counts all of them, their bytes
    only those with a size, and the longest is named without a rate."""
    rows = [
        "Start (ns),Duration (ns),CorrId,Bytes (MB),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name",
        '1000000,2000000,1,,,,NVIDIA A100 (0),1,7,"saxpy(double *, double *)"',
        "10000000,18000000,2,262.144,Pageable,Device,NVIDIA A100 (0),1,7,"
        "[CUDA memcpy Host-to-Device]",
        "30000000,19000000,3,,Pageable,Device,NVIDIA A100 (0),1,7,[CUDA memcpy Host-to-Device]",
        "50000000,1000000,4,1.5,Pageable,Device,NVIDIA A100 (0),1,7,[CUDA memcpy Host-to-Device]",
    ]
    path = tmp_path / "saxpy_cuda_gpu_trace.csv"
    path.write_text("\n".join(rows) + "\n")
    run = analyzer.load([path], use_cache=False)
    assert run.failures == {}
    (finding,) = run.gpu_findings.filter(pl.col("id") == "gpu.copies.HtoD").to_dicts()
    assert finding["evidence"].startswith(
        "3 HtoD copies, 38 ms, 251 MiB in the 2 with a size recorded (1 of ≥ 9.54 MiB; longest "
        "19 ms, its size not recorded); "
    )
