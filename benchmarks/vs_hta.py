"""End to end against Holistic Trace Analysis: the first analysis of one trace, no cache.

The user's wait: a fresh process that reads one PyTorch profiler trace and computes the GPU time
breakdown and the communication/computation overlap.

- rlperf: ``rlperf analyze FILE --format json --no-cache`` (every section, not only those two);
- HTA: ``TraceAnalysis`` load + ``get_temporal_breakdown`` + ``get_comm_comp_overlap`` (the
  same numbers, as ``rlperf crosscheck`` asks them);
- parse alone: rlperf's ``parse_file`` against HTA's ``TraceAnalysis`` load, beside the floor
  (gunzip + a typed msgspec tokenise of the same bytes that builds nothing).

The two processes alternate (rlperf, HTA, rlperf, …) and each figure is the median of
``--repeat`` runs: wall time and the whole process' peak RSS (``wait4``'s ``ru_maxrss``). On a
shared machine absolute times move with the load; the ratios, measured in the same run under the
same load, are the figures (docs/performance.md).

    .venv/bin/python benchmarks/vs_hta.py [FILE] [--repeat 5] [--json OUT]

Goals (issue 14): ≥ 10× faster and ≤ 1/4 of HTA's peak memory end to end; parse ≥ 25× HTA's
load. Exit status 0 always: the figures are reported, not asserted (speed goals are not tests).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks")]

from analyze_scale import timed  # noqa: E402  (wall seconds and peak RSS of one process)
from ingest import DEFAULT, _json_megabytes, in_process  # noqa: E402

HTA = r"""
import sys, shutil, tempfile, logging, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
d = tempfile.mkdtemp(); shutil.copy(sys.argv[1], d)
ta = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
ta.get_temporal_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
"""


def _argv(tool: str, path: Path, report: Path) -> list[str]:
    if tool == "hta":
        return [sys.executable, "-c", HTA, str(path)]
    rlperf = Path(sys.executable).with_name("rlperf")
    return [str(rlperf), "analyze", str(path), "--format", "json", "-o", str(report),
            "--no-cache", "--quiet"]


def alternating(path: Path, repeat: int, folder: Path) -> dict[str, dict[str, float]]:
    """Medians of ``repeat`` alternating runs of each tool."""
    runs: dict[str, list[dict[str, float]]] = {"rlperf": [], "hta": []}
    for _ in range(repeat):
        for tool in runs:
            runs[tool].append(timed(_argv(tool, path, folder / "report.json")))
    return {
        tool: {k: statistics.median(r[k] for r in rows) for k in ("seconds", "peak_rss_mib")}
        for tool, rows in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / args.file.name
        shutil.copy(args.file, local)
        whole = alternating(local, args.repeat, Path(tmp))
        row = {
            "file": args.file.name,
            "mb_json": _json_megabytes(local),
            "repeat": args.repeat,
            "whole": whole,
            "parse": {
                "rlperf": in_process("rlperf", local, args.repeat),
                "hta": in_process("hta", local, 1),
                "floor": in_process("floor", local, args.repeat),
            },
        }
    _print(row)
    if args.json:
        args.json.write_text(json.dumps(row, indent=2))


def _print(row: dict) -> None:
    r, h = row["whole"]["rlperf"], row["whole"]["hta"]
    p = row["parse"]
    print(f"{row['file']} ({row['mb_json']:.1f} MB of JSON), medians of {row['repeat']} "
          "alternating runs, whole process")
    print(f"  rlperf analyze --no-cache  {r['seconds']:6.2f} s  {r['peak_rss_mib']:5.0f} MiB")
    print(f"  HTA load+breakdown+overlap {h['seconds']:6.2f} s  {h['peak_rss_mib']:5.0f} MiB")
    print(f"  => {h['seconds'] / r['seconds']:.1f}x faster (goal 10x), "
          f"{r['peak_rss_mib'] / h['peak_rss_mib']:.2f} of HTA's peak memory (goal 0.25)")
    rp, hp, fl = p["rlperf"]["seconds"], p["hta"]["seconds"], p["floor"]["seconds"]
    print(f"  parse alone (in process, best of {row['repeat']}): rlperf {rp:.3f} s, HTA load "
          f"{hp:.3f} s => {hp / rp:.1f}x (goal 25x); floor gunzip+tokenise {fl:.3f} s "
          f"(rlperf = {rp / fl:.1f}x the floor)")


if __name__ == "__main__":
    main()
