"""``rlperf analyze`` on a 64-rank synthetic run, generated on the fly: is it well under a minute?

Measured in one run, on the same files:
- the reference: a fresh process that only parses every trace (``analyzer.ingest``, same
  ``--jobs``, no cache) — what any tool must pay to read the run;
- the whole command: a fresh ``rlperf analyze DIR --format json --no-cache`` (wall time and
  peak RSS), and its ratio to the reference (what assembly, classification, the analyses and
  the report add on top of reading);
- in process, after loading: seconds for the assembly and classification products the analyses
  read, then seconds per analysis product (its own cost, its inputs already computed).

    .venv/bin/python benchmarks/analyze_scale.py [--ranks 64] [--scenario colocated] [--json OUT]
        [--memory]

``--memory`` also computes every product in declaration order in a fresh process (allocator told
to return freed pages at once, so resident memory is live memory) and prints, per product, how
far the process grew above its size before it (sampled every millisecond): the steps that set
the analysis' peak (docs/performance.md, "A run of tens of gigabytes of trace").

Exit status 1 when the whole command takes longer than ``--goal`` seconds (default 60).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from ingest import _env  # noqa: E402  (the same environment as the ingest benchmark: no cache)

INPUTS = ("aligned", "steps", "stage_ranges", "stage_timeline", "pools", "activity", "collectives")
"""Assembly and classification products the analyses read, computed before the analyses are
timed."""
ANALYSES = (
    "breakdown", "critical_path", "collective_waits", "device_states", "bubbles", "largest_bubbles",
    "collectives_by_dim", "weight_sync", "stragglers", "workdepth", "violations",
)
SECTIONS = ("breakdown", "bubbles", "sync", "workdepth", "guidelines")
"""Report sections the analyses contribute; each must hold rows for the run to count."""

INGEST = (
    "import sys; from analyzer.assemble.ingest import ingest; ingest([sys.argv[1]], "
    "jobs=int(sys.argv[2]), use_cache=False)"
)

PRODUCTS = r"""
import json, sys, time
from analyzer import load
t = time.perf_counter(); run = load([sys.argv[1]], jobs=int(sys.argv[2]), use_cache=False)
out = {"load": time.perf_counter() - t}
t = time.perf_counter()
for name in sys.argv[3].split(","):
    run.product(name)
out["inputs"] = time.perf_counter() - t
for name in sys.argv[4].split(","):
    t = time.perf_counter()
    run.product(name)
    out[name] = time.perf_counter() - t
print(json.dumps(out))
"""

MEMORY = r"""
import json, os, sys, threading, time
os.environ["_RJEM_MALLOC_CONF"] = "dirty_decay_ms:0,muzzy_decay_ms:0"
PAGE = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20
peak = [0.0]
def sample():
    while True:
        peak[0] = max(peak[0], rss())
        time.sleep(0.001)
def main():
    from analyzer import load
    from analyzer.model.products import order
    run = load([sys.argv[1]], jobs=int(sys.argv[2]), use_cache=False)
    out = {"events_mib": run.events.estimated_size() / 2**20, "after_load_mib": rss()}
    for name in order():
        before = peak[0] = rss()
        run.product(name)
        out[name] = peak[0] - before
    out["peak_mib"] = __import__("resource").getrusage(0).ru_maxrss / 1024
    print(json.dumps(out))
if __name__ == "__main__":
    threading.Thread(target=sample, daemon=True).start()
    main()
"""


def memory(run_dir: Path, jobs: int) -> dict[str, float]:
    """Per product, MiB the process grew above its size before it (see :data:`MEMORY`)."""
    script = run_dir.parent / "memory.py"
    script.write_text(MEMORY)
    done = subprocess.run([sys.executable, str(script), str(run_dir), str(jobs)], env=_env(),
                          capture_output=True, text=True, check=True, timeout=900)
    return json.loads(done.stdout.splitlines()[-1])


def timed(argv: list[str]) -> dict[str, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(
            f"{' '.join(argv[:4])}… failed (status {status}): {proc.stderr.read().decode()[-2000:]}"
        )
    return {"seconds": seconds, "peak_rss_mib": usage.ru_maxrss / 1024}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--scenario", default="colocated")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--goal", type=float, default=60.0, help="seconds the whole command may take"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--memory", action="store_true",
                        help="also measure each product's memory growth (a third process)")
    args = parser.parse_args()

    from sample_traces.synth import generate, preset

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        t = time.perf_counter()
        generate(preset(args.scenario, args.ranks, steps=args.steps), run_dir, jobs=args.jobs)
        generated = time.perf_counter() - t
        size = sum(f.stat().st_size for f in run_dir.iterdir())
        report = Path(tmp) / "report.json"
        ingest = timed([sys.executable, "-c", INGEST, str(run_dir), str(args.jobs)])
        rlperf = Path(sys.executable).with_name("rlperf")
        whole = timed([str(rlperf), "analyze", str(run_dir), "--format", "json", "-o", str(report),
                       "--no-cache", "--quiet", "--jobs", str(args.jobs)])
        document = json.loads(report.read_text())
        products = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    PRODUCTS,
                    str(run_dir),
                    str(args.jobs),
                    ",".join(INPUTS),
                    ",".join(ANALYSES),
                ],
                env=_env(),
                capture_output=True,
                text=True,
                check=True,
                timeout=900,
            ).stdout.splitlines()[-1]
        )
        grown = memory(run_dir, args.jobs) if args.memory else {}
    missing = [s for s in SECTIONS if not document.get(s)]
    row = {
        "scenario": args.scenario,
        "ranks": args.ranks,
        "steps": args.steps,
        "jobs": args.jobs,
        "trace_mb": size / 1e6,
        "generate_s": generated,
        "ingest": ingest,
        "analyze": whole,
        "ratio": whole["seconds"] / ingest["seconds"],
        "products_s": products,
        "empty_sections": missing,
    }
    print(
        f"synthetic {args.scenario}: {args.ranks} ranks × {args.steps} steps, {size / 1e6:.1f} MB "
        f"of traces "
        f"(generated in {generated:.1f} s), {args.jobs} jobs"
    )
    print(
        f"  reference: parse every trace    {ingest['seconds']:6.2f} s   "
        f"{ingest['peak_rss_mib']:5.0f} MiB"
    )
    print(
        f"  rlperf analyze --format json    {whole['seconds']:6.2f} s   "
        f"{whole['peak_rss_mib']:5.0f} MiB   "
        f"= {row['ratio']:.2f}× the parse"
    )
    print(
        f"  in process: load {products.pop('load'):.2f} s; assembly and classification "
        f"{products.pop('inputs'):.2f} s; analyses "
        + ", ".join(f"{k} {v:.3f} s" for k, v in products.items())
    )
    if grown:
        row["memory_mib"] = grown
        fixed = ("events_mib", "after_load_mib", "peak_mib")
        top = sorted((k for k in grown if k not in fixed), key=grown.__getitem__, reverse=True)
        print(f"  memory: event table {grown['events_mib']:.0f} MiB, after loading "
              f"{grown['after_load_mib']:.0f} MiB, peak {grown['peak_mib']:.0f} MiB; most grown: "
              + ", ".join(f"{k} +{grown[k]:.0f}" for k in top[:8]))
    if missing:
        print(f"  sections without rows: {', '.join(missing)} (their inputs were not computed)")
    verdict = whole["seconds"] <= args.goal
    print(f"  goal: under {args.goal:.0f} s — {'met' if verdict else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps(row, indent=2))
    return 0 if verdict and not missing else 1


if __name__ == "__main__":
    raise SystemExit(main())
