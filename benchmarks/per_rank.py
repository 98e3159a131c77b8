"""Rank-local products of a dataset computed rank by rank against over the whole event table:
time and the driver's peak memory for the products declared
``per_rank`` (``gpu_time``, ``annotations``, ``event_checks``), same run, same machine, and
whether the two give the same frames.

A synthetic run (``sample_traces/synth``, ``--steps`` steps) of ``--ranks`` ranks is generated
and ingested into a temporary folder (removed at the end). Each mode runs in a fresh process,
alternating, ``--repeat`` times: the dataset is loaded (``analyzer.load``, the event table
held, as every command still does), then the products are computed, timed, with the peak RSS
of the process before and after:
- **whole**: over the run's whole event table (the run's shards removed);
- **per rank**: from the dataset's rank partitions, one after the other in this process
  (the local engine's :class:`analyzer.engines.per_rank.DatasetShards`).

    .venv/bin/python benchmarks/per_rank.py [--ranks 64] [--steps 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import analyzer
from analyzer.engines.local import LocalEngine
from analyzer.engines.per_rank import sharded as shard
from analyzer.model.products import providers
mode, ds, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
run = shard(analyzer.load([ds]), [ds], LocalEngine())
sharded = run.shards is not None
if mode == "whole":
    run.shards = None
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start = time.perf_counter()
names = sorted(p.name for p in providers().values() if p.per_rank)
values = {n: run.product(n) for n in names}
seconds = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
for n, v in values.items():
    v.write_parquet(out / f"{mode}-{n}.parquet")
print(json.dumps({"seconds": seconds, "loaded_mib": before, "peak_mib": after,
                  "sharded": sharded, "events": run.events.height, "products": names}))
"""


def child(mode: str, ds: Path, out: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(ds), str(out)],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scenario", default="disaggregated")
    args = ap.parse_args()
    import polars as pl

    from sample_traces.synth import generate, preset

    with tempfile.TemporaryDirectory(prefix="rlperf-per-rank-") as tmp:
        run, ds = Path(tmp) / "run", Path(tmp) / "ds"
        generate(preset(args.scenario, args.ranks, steps=args.steps), run, jobs=2)
        rlperf = Path(sys.executable).with_name("rlperf")
        subprocess.run([str(rlperf), "ingest", str(run), "-o", str(ds), "--no-cache", "-q"],
                       check=True, cwd=ROOT)
        rows: dict[str, list[dict]] = {"whole": [], "per rank": []}
        for _ in range(args.repeat):
            rows["whole"].append(child("whole", ds, Path(tmp)))
            rows["per rank"].append(child("per_rank", ds, Path(tmp)))
        same = all(
            pl.read_parquet(Path(tmp) / f"whole-{n}.parquet").equals(
                pl.read_parquet(Path(tmp) / f"per_rank-{n}.parquet"))
            for n in rows["whole"][0]["products"]
        )
        events = rows["whole"][0]["events"]
        print(f"{args.ranks} ranks, {events:,} events, medians of {args.repeat}; "
              f"sharded: {rows['per rank'][0]['sharded']}; same frames: {same}")
        print("| mode | products s | RSS after load MiB | peak RSS MiB | peak − load MiB |")
        print("|---|---|---|---|---|")
        for mode, got in rows.items():
            med = {k: statistics.median(r[k] for r in got)
                   for k in ("seconds", "loaded_mib", "peak_mib")}
            print(f"| {mode} | {med['seconds']:.2f} | {med['loaded_mib']:.0f} | "
                  f"{med['peak_mib']:.0f} | {med['peak_mib'] - med['loaded_mib']:.0f} |")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
