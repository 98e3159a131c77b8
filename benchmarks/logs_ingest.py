"""Log ingest speed: rlperf's verl log parser on a ~100 MB console log, against two references
measured in the same run on the same file.

- floor: read the file, decode it and split it into lines (what any reader must do);
- naive: the straightforward reader building the same long (step, key, value) table: a Python
  regex per line, ``float()`` per value, one tuple per value;
- rlperf: ``parsers.parse_file`` (events, metrics, run facts, warnings).

The log is built in a temporary directory (never committed) by repeating the real corpus log's
335 step lines with renumbered steps until it reaches the requested size. Each tool runs in a
fresh process; the best of N runs and the process's peak RSS are reported.

    .venv/bin/python benchmarks/logs_ingest.py [--mb 100] [--repeat 3] [--json OUT]

The goal is a few seconds for 100 MB on a small machine; the ratios say how close rlperf gets
to the floor and how far it is ahead of the naive reader.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "corpus" / "logs" / "verl" / (
    "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"
)

RUNNER = r"""
import gc, json, re, resource, sys, time
tool, path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])

def floor():
    return open(path, "rb").read().decode("utf-8", errors="replace").split("\n")

STEP = re.compile(r"step:(\d+) - (.*)$")
def naive():
    import polars as pl
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            found = STEP.search(line)
            if found:
                step = int(found.group(1))
                for item in found.group(2).split(" - "):
                    key, _, raw = item.rpartition(":")
                    try:
                        rows.append((step, key, float(raw)))
                    except ValueError:
                        pass
    schema = {"step": pl.Int32, "key": pl.String, "value": pl.Float64}
    return pl.DataFrame(rows, schema=schema, orient="row")

if tool == "rlperf":
    sys.path.insert(0, sys.argv[4])
    from parsers import parse_file
    run = lambda: parse_file(path)
else:
    run = {"floor": floor, "naive": naive}[tool]
best = float("inf")
for _ in range(repeat):
    gc.collect()
    t = time.perf_counter(); result = run(); best = min(best, time.perf_counter() - t)
    if tool == "rlperf":
        facts = {"events": result.events.height, "metrics": result.metrics.height,
                 "steps": result.meta["n_steps"], "warnings": len(result.warnings)}
    elif tool == "naive":
        facts = {"rows": result.height}
    else:
        facts = {"lines": len(result)}
    del result
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": best, "peak_rss_mib": peak, **facts}))
"""


def build(target_mb: float, folder: Path) -> Path:
    """The corpus log's preamble, then its step section repeated with steps renumbered."""
    lines = SOURCE.read_text().split("\n")
    first = next(i for i, line in enumerate(lines) if "step:101 - " in line)
    head, body = "\n".join(lines[:first]), "\n".join(lines[first:])
    step = re.compile(r"step:(\d+) - ")
    out = folder / "verl_100mb.log"
    size = 0
    with out.open("w") as fh:
        fh.write(head + "\n")
        size += len(head)
        copy = 0
        while size < target_mb * 1e6:
            chunk = step.sub(lambda m, off=copy * 335: f"step:{int(m.group(1)) + off} - ", body)
            fh.write(chunk if chunk.endswith("\n") else chunk + "\n")
            size += len(chunk)
            copy += 1
    return out


def measure(tool: str, path: Path, repeat: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, tool, str(path), str(repeat), str(ROOT)],
        capture_output=True, text=True, check=True, timeout=1800,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=100.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = build(args.mb, Path(tmp))
        mb = path.stat().st_size / 1e6
        results = {tool: measure(tool, path, args.repeat) for tool in ("floor", "naive", "rlperf")}
    rl = results["rlperf"]
    report = {
        "file_mb": round(mb, 1),
        "results": results,
        "rlperf_mb_per_s": round(mb / rl["seconds"], 1),
        "rlperf_over_floor": round(rl["seconds"] / results["floor"]["seconds"], 2),
        "naive_over_rlperf": round(results["naive"]["seconds"] / rl["seconds"], 2),
    }
    print(f"verl console log: {mb:.1f} MB, {results['floor']['lines']} lines, {rl['steps']} steps")
    for tool, r in results.items():
        print(f"  {tool:7s} {r['seconds']:7.2f} s   peak RSS {r['peak_rss_mib']:7.0f} MiB")
    print(
        f"  rlperf: {report['rlperf_mb_per_s']} MB/s, {report['rlperf_over_floor']}× the floor, "
        f"{report['naive_over_rlperf']}× faster than the naive reader; "
        f"{rl['events']} log_stage rows, {rl['metrics']} metric values, {rl['warnings']} warnings"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
