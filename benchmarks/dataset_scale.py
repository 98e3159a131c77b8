"""A generated run of many ranks ingested into a dataset and analysed from it, against the
first analysis from its sources, same run, same machine: time and peak memory per step, and
whether the reports agree.

For each ``--ranks`` count, a synthetic run (``sample_traces/synth``, 3 steps) is generated in a
temporary folder (removed at the end) and measured as whole processes (``benchmarks/measure.py``:
the main process's peak RSS and the sampled peak of the whole process tree):
- **ingest**: ``rlperf ingest RUN -o DS --no-cache`` (each pool worker writes its sources);
- **from dataset**: ``rlperf analyze DS -f json --no-cache`` (the tables read, not parsed; no
  kept report);
- **from sources**: ``rlperf analyze RUN -f json --no-cache`` (``--no-sources`` leaves it out).

    .venv/bin/python benchmarks/dataset_scale.py [--ranks 1024] [--scenario disaggregated]
        [--jobs N] [--no-sources] [--json OUT]

Exit status 1 when the two reports differ; the sections that differ are named, and so is a
change of rlperf's code while the row ran (the checkout edited between the analysis of the sources
and the ingest: two codes compared, not the dataset against its sources).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.measure import measure  # noqa: E402

RLPERF = Path(sys.executable).with_name("rlperf")


def env() -> dict[str, str]:
    """No cache of the user's touched, and a terminal width that does not depend on the shell."""
    return {**os.environ, "RLPERF_NO_CACHE": "1", "COLUMNS": "120"}


def checked(argv: list[str]) -> dict[str, float]:
    """Measured; a failed command stops the benchmark (its stderr's tail is said)."""
    return measure(argv, env())


def code_version() -> str:
    """rlperf's code as it is now on disk (not the value cached by this process)."""
    from analyzer.dataset.recall import code_version

    return code_version(fresh=True)


def differing(first: dict, second: dict, ignored: tuple[str, ...] = ()) -> list[str]:
    """The top-level sections of two JSON reports that differ (one missing counts)."""
    keys = (set(first) | set(second)) - set(ignored)
    return sorted(k for k in keys if first.get(k, ...) != second.get(k, ...))


def one(ranks: int, scenario: str, jobs: int, sources: bool, tmp: Path) -> dict:
    from sample_traces.synth import generate, preset

    run, ds = tmp / f"run{ranks}", tmp / f"ds{ranks}"
    code = code_version()
    start = time.perf_counter()
    generate(preset(scenario, ranks, steps=3), run, jobs=jobs)
    row: dict = {"ranks": ranks, "scenario": scenario, "generate_s": time.perf_counter() - start,
                 "trace_mb": sum(f.stat().st_size for f in run.iterdir()) / 1e6}
    common = ["--no-cache", "--quiet", "--jobs", str(jobs)]
    row["ingest"] = checked([str(RLPERF), "ingest", str(run), "-o", str(ds), *common])
    row["dataset_mb"] = sum(f.stat().st_size for f in ds.rglob("*") if f.is_file()) / 1e6
    row["files"] = sum(1 for f in ds.rglob("*") if f.is_file())
    report = tmp / f"from-dataset{ranks}.json"
    row["from_dataset"] = checked(
        [str(RLPERF), "analyze", str(ds), "-f", "json", "-o", str(report), *common]
    )
    if sources:
        first = tmp / f"from-sources{ranks}.json"
        row["from_sources"] = checked(
            [str(RLPERF), "analyze", str(run), "-f", "json", "-o", str(first), *common]
        )
        row["differing"] = differing(json.loads(first.read_text()), json.loads(report.read_text()))
        row["same_report"] = not row["differing"]
    row["code_changed"] = code_version() != code
    return row


def line(row: dict) -> str:
    def fig(key: str) -> str:
        f = row.get(key)
        if not f:
            return "—"
        return f"{f['seconds']:.1f} s, {f['peak_rss_mib']:.0f} MiB (tree {f['tree_peak_mib']:.0f})"

    same = {True: "same report", False: "REPORTS DIFFER", None: ""}[row.get("same_report")]
    if row.get("differing"):
        same += f" ({', '.join(row['differing'])})"
    if row.get("code_changed"):
        same += " (rlperf's code changed during this row: compared two codes)"
    return (
        f"{row['ranks']:>5} ranks, {row['trace_mb']:.0f} MB of traces → dataset "
        f"{row['dataset_mb']:.0f} MB in {row['files']} files | ingest {fig('ingest')} | "
        f"from dataset {fig('from_dataset')} | from sources {fig('from_sources')} {same}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", default="1024", help="rank counts, comma-separated")
    parser.add_argument("--scenario", default="disaggregated")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-sources", action="store_true", help="skip the analysis of sources")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlperf-dataset-scale-") as tmp:
        for ranks in (int(r) for r in args.ranks.split(",")):
            rows.append(one(ranks, args.scenario, args.jobs, not args.no_sources, Path(tmp)))
            print(line(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if any(r.get("same_report") is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
