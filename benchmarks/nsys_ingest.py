"""Nsight Systems ingest speed: rlperf's SQLite parser against two references on the same file.

* ``sqlite3``: plain row iteration (``SELECT * … fetchall()``) over the tables rlperf reads —
  the floor for any reader that goes through Python's sqlite3 module;
* ``nsys stats``: NVIDIA's own reports over the same export (the GPU trace and the NVTX push/pop
  trace, ``-f csv``), what a user would otherwise run.

Files: every nsys export in ``../shared/corpus`` and, with nsys on PATH, a real capture made on
the spot of a workload emitting ``--ranges`` NVTX ranges (default 100,000), exported by the nsys
CLI. Figures are medians of ``--repeat`` runs, printed as ratios measured in the same run.

Then the stats-CSV parser on an NVTX push/pop trace of ``--csv-rows`` rows (the corpus' pipit
``trace.csv`` repeated) against polars reading the same CSV: the floor for any CSV reader.

    .venv/bin/python benchmarks/nsys_ingest.py [--ranges N] [--repeat K] [--csv-rows R]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "workloads"))

import polars as pl  # noqa: E402

from parsers import nsys, nsys_stats  # noqa: E402
from parsers.nsys_rep import export_sqlite  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
TABLES = (
    "StringIds",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
)
WORKLOAD = """
import sys, nvtx
n = int(sys.argv[1])
for i in range(n // 4):
    with nvtx.annotate("step"):
        with nvtx.annotate("rollout"):
            with nvtx.annotate("generate"):
                pass
        with nvtx.annotate("update_actor"):
            pass
"""


def median_s(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def plain_sqlite(path: Path) -> int:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
    have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    rows = sum(len(con.execute(f'SELECT * FROM "{t}"').fetchall()) for t in TABLES if t in have)
    con.close()
    return rows


def nsys_stats_s(path: Path, work: Path, repeat: int) -> float | None:
    """Median wall time of ``nsys stats`` (GPU trace + NVTX push/pop trace) or None on failure."""
    import nsys_capture

    rc, listing, _ = nsys_capture.run_session(["nsys", "stats", "--help-reports"], 120, work)
    gpu = "cuda_gpu_trace" if "  cuda_gpu_trace" in listing else "gputrace"
    nvtx = "nvtx_pushpop_trace" if "  nvtx_pushpop_trace" in listing else "nvtxpptrace"
    copy = work / path.name
    shutil.copyfile(path, copy)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        rc, out, alive = nsys_capture.run_session(
            [
                "nsys",
                "stats",
                "-q",
                "-f",
                "csv",
                "--force-overwrite",
                "true",
                "-r",
                f"{gpu},{nvtx}",
                "-o",
                str(work / "st"),
                str(copy),
            ],
            600,
            work,
        )
        times.append(time.perf_counter() - t0)
        if rc != 0 or "ERROR" in out or alive:
            return None
    return statistics.median(times)


def stats_csv(rows: int, work: Path) -> Path:
    """An ``nsys stats`` NVTX push/pop trace of ``rows`` rows, from the corpus' real one."""
    header, *body = (CORPUS / "pipit" / "trace.csv").read_text().splitlines()
    path = work / "big_nvtxpptrace.csv"
    path.write_text("\n".join([header, *(body * (rows // len(body) + 1))[:rows]]) + "\n")
    return path


def capture(ranges: int, work: Path) -> Path:
    import nsys_capture

    script = work / "ranges.py"
    script.write_text(WORKLOAD)
    report = nsys_capture.profile([sys.executable, str(script), str(ranges)], work, "bench")
    return export_sqlite(report)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranges", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--csv-rows", type=int, default=1_000_000)
    args = ap.parse_args()
    have_nsys = shutil.which("nsys") is not None
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = sorted(CORPUS.glob("*/*.sqlite"))
        if have_nsys and args.ranges:
            files.append(capture(args.ranges, work))
        print(
            f"{'file':42} {'rows':>8} {'rlperf s':>9} {'sqlite3 s':>9} {'rlperf/sqlite3':>14} "
            f"{'nsys stats s':>12} {'stats/rlperf':>12}"
        )
        for path in files:
            nsys.parse(path)
            rows = plain_sqlite(path)
            ours = median_s(lambda p=path: nsys.parse(p), args.repeat)
            plain = median_s(lambda p=path: plain_sqlite(p), args.repeat)
            stats = nsys_stats_s(path, work, max(1, args.repeat // 2)) if have_nsys else None
            label = (
                path.name if path.parent.parent == CORPUS else f"capture, {args.ranges} NVTX ranges"
            )
            stats_cols = (
                f"{stats:12.3f} {stats / ours:12.1f}" if stats else f"{'failed':>12} {'-':>12}"
            )
            print(
                f"{label[:42]:42} {rows:8d} {ours:9.3f} {plain:9.3f} {ours / plain:14.2f} "
                f"{stats_cols}"
            )
        if args.csv_rows:
            csv = stats_csv(args.csv_rows, work)
            ours = median_s(lambda: nsys_stats.parse(csv), args.repeat)
            plain = median_s(lambda: pl.read_csv(csv, infer_schema=False), args.repeat)
            print(
                f"\n{'stats CSV':42} {'rows':>8} {'rlperf s':>9} {'polars s':>9} "
                f"{'rlperf/polars':>14}"
            )
            print(
                f"{'NVTX push/pop trace':42} {args.csv_rows:8d} {ours:9.3f} {plain:9.3f} "
                f"{ours / plain:14.2f}"
            )


if __name__ == "__main__":
    main()
