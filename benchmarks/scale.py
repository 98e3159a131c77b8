"""Time and memory against ranks: ``rlperf analyze`` on synthetic runs of 8 … 1,024 ranks.

For each rank count a run is generated on the fly (``sample_traces.synth``, same scenario,
steps and seed), analysed end to end by a fresh ``rlperf analyze DIR --format json --no-cache``
and deleted. Reported per row: the JSON size, the events, wall seconds, the main process' peak
RSS and the sampled peak of the whole process tree (main process + parser workers, see
``measure.py``), and the per-rank cost (seconds and MiB per rank), whose flatness is what
"grows linearly" means. The first analysis, no cache: what a user waits for.

    .venv/bin/python benchmarks/scale.py [--ranks 8,64,256,1024] [--scenario disaggregated]
        [--steps 3] [--per-rank-mb MB] [--no-gzip] [--dataset] [--json OUT]

``--dataset`` also writes each run into a dataset (``rlperf ingest``, measured) and analyses the
dataset (measured), checking that report's sections equal the report from the files (the
sections that differ are named, and so is an edit of rlperf's code during the row, which compares
two codes; exit status 1 when they differ).

``--per-rank-mb`` raises the decode length until each rank's trace holds about that many MB
of JSON (the "64 ranks × 100 MB" run: ``--ranks 64 --per-rank-mb 100 --steps 1``).

Absolute times on a shared machine move with its load; run with ``nice -n 10`` and compare the
per-rank columns within one run (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from dataset_scale import code_version, differing  # noqa: E402
from ingest import _env  # noqa: E402
from measure import measure  # noqa: E402

GIB = 2**30


def one(ranks: int, args: argparse.Namespace, tmp: Path) -> dict:
    from sample_traces.synth import generate, preset

    run = tmp / f"run{ranks}"
    code = code_version()
    overrides = _sized(args) if args.per_rank_mb else {}
    config = preset(args.scenario, ranks, steps=args.steps, seed=1, **overrides)
    t = time.perf_counter()
    generate(config, run, jobs=args.jobs, gz=not args.no_gzip)
    generated = time.perf_counter() - t
    size = sum(_json_bytes(f) for f in run.iterdir() if f.name.endswith((".json", ".gz")))
    rlperf = Path(sys.executable).with_name("rlperf")
    report = tmp / "report.json"
    figures = measure(
        [str(rlperf), "analyze", str(run), "--format", "json", "-o", str(report), "--no-cache",
         "--quiet", "--jobs", str(args.jobs)],
        _env(),
    )
    document = json.loads(report.read_text())
    extra = _from_dataset(run, tmp, rlperf, report, args) if args.dataset else {}
    if args.dataset:
        extra["code_changed"] = code_version() != code
    shutil.rmtree(run)
    report.unlink()
    return {
        **extra,
        "ranks": ranks,
        "file_mb": size / 1e6,
        "generate_s": generated,
        "sections": len(document),
        **figures,
    }


def _from_dataset(run: Path, tmp: Path, rlperf: Path, report: Path, args) -> dict:
    """``rlperf ingest`` of the run into a dataset, then ``rlperf analyze`` of the dataset, each
    measured; the second report must equal the one analysed from the files."""
    dataset = tmp / "dataset"
    ingest = measure([str(rlperf), "ingest", str(run), "-o", str(dataset), "--quiet", "--jobs",
                      str(args.jobs)], _env())
    again = tmp / "again.json"
    analyse = measure([str(rlperf), "analyze", str(dataset), "--format", "json", "-o", str(again),
                       "--quiet"], _env())
    differ = differing(_numbers(again), _numbers(report))
    shutil.rmtree(dataset)
    again.unlink()
    return {"ingest": ingest, "from_dataset": analyse, "dataset_report_equal": not differ,
            "differing": differ}


def _numbers(report: Path) -> dict:
    """The report less what names where its inputs lie (files or a dataset)."""
    document = json.loads(report.read_text())
    return {k: v for k, v in document.items() if k not in ("sources", "inputs", "run")}


def _json_bytes(path: Path) -> int:
    """The JSON a file holds: a gzip member's own size field (ISIZE, mod 2**32), else the file."""
    if not path.name.endswith(".gz"):
        return path.stat().st_size
    with path.open("rb") as fh:
        fh.seek(-4, os.SEEK_END)
        return int.from_bytes(fh.read(4), "little")


def _sized(args: argparse.Namespace) -> dict[str, float]:
    """Decode long enough for ~``per_rank_mb`` MB of JSON per rank: the response length (and its
    cap) scaled from an 8-rank probe of the same shape."""
    from sample_traces.synth import generate, preset

    with tempfile.TemporaryDirectory() as probe:
        generate(preset(args.scenario, 8, steps=args.steps, seed=1), Path(probe), jobs=1)
        per_rank = sum(map(_json_bytes, Path(probe).glob("*.gz"))) / 8 / 1e6
    factor = max(1.0, args.per_rank_mb / per_rank)
    return {"response_median": 24.0 * factor, "max_response": int(64 * factor)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", default="8,64,256,1024")
    parser.add_argument("--scenario", default="disaggregated")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--per-rank-mb", type=float, default=0.0)
    parser.add_argument("--dataset", action="store_true",
                        help="also ingest each run into a dataset and analyse that")
    parser.add_argument("--no-gzip", action="store_true", help="write plain JSON (faster)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rows = []
    print(f"synthetic {args.scenario}, {args.steps} steps, {args.jobs} jobs, first analysis "
          "(no cache)")
    print(f"{'ranks':>6} {'JSON MB':>9} {'seconds':>8} {'main MiB':>9} {'tree MiB':>9} "
          f"{'s/rank':>7} {'MiB/rank':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in (int(r) for r in args.ranks.split(",")):
            row = one(ranks, args, Path(tmp))
            rows.append(row)
            print(f"{ranks:6d} {row['file_mb']:9.1f} {row['seconds']:8.2f} "
                  f"{row['peak_rss_mib']:9.0f} {row['tree_peak_mib']:9.0f} "
                  f"{row['seconds'] / ranks:7.3f} {row['tree_peak_mib'] / ranks:9.2f}",
                  flush=True)
            if args.dataset:
                i, d = row["ingest"], row["from_dataset"]
                print(f"       rlperf ingest {i['seconds']:.2f} s / {i['tree_peak_mib']:.0f} MiB; "
                      f"analyze DATASET {d['seconds']:.2f} s / {d['tree_peak_mib']:.0f} MiB; "
                      f"report equal to the files': {row['dataset_report_equal']}"
                      f"{' (' + ', '.join(row['differing']) + ')' if row['differing'] else ''}"
                      f"{' (code changed during the row)' if row['code_changed'] else ''}",
                      flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if any(r.get("dataset_report_equal") is False for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
