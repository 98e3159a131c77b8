"""Run the sample scenarios and write each one's traces, logs and truth.json.

    python -m sample_traces.harness.run                      # everything, into sample_traces/runs
    python -m sample_traces.harness.run --only verl_grpo_colocated --device cuda
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from . import truth
from .capture import TRL_SCENARIO, capture_nsys, capture_trl
from .driver import Controller
from .scenarios import SCENARIOS, Scenario

RUNS = Path(__file__).resolve().parents[1] / "runs"


def run_scenario(sc: Scenario, out: Path, device: str = "cpu") -> dict[str, Any]:
    """Run ``sc`` once, in this process (the controller) and its workers; write truth.json."""
    out.mkdir(parents=True, exist_ok=True)
    ctl = Controller(sc, out, device)
    run_start = time.time_ns()
    try:
        ctl.fit()
    finally:
        gathered = ctl.close()
    stages = [*ctl.rec.stages]
    spans = [*ctl.rec.spans]
    waits: list[dict[str, Any]] = []
    collectives: list[dict[str, Any]] = []
    ranks = [
        {
            "rank": -1,
            "pool": "shared",
            "role": "driver",
            "pid": ctl.pid,
            "host": gathered[0]["host"],
            "trace": _rel(ctl.trace_path(-1), out, sc),
        }
    ]
    for g in gathered:
        stages += g["stages"]
        spans += g["spans"]
        waits += g["waits"]
        collectives += g["collectives"]
        ranks.append({"rank": g["rank"], "pool": sc.pool_of(g["rank"]), "pid": g["pid"],
                      "host": g["host"], "trace": _rel(ctl.trace_path(g["rank"]), out, sc)})
    stages.sort(key=lambda s: (s["start_ns"], s["rank"]))
    waits += truth.derive_waits(sc, stages, run_start)
    doc = {
        "format": truth.FORMAT,
        "synthetic": False,
        "generator": "sample_traces/harness",
        "scenario": sc.name,
        "config": {**sc.as_config(), "device": device},
        "ranks": ranks,
        "clock": {"source": "time.time_ns", "note": truth.CLOCK_NOTE, "per_rank": {}},
        "logs": [str(ctl.log.path.relative_to(out))],
        "stages": stages,
        "spans": sorted(spans, key=lambda s: (s["start_ns"], s["rank"])),
        "waits": sorted(waits, key=lambda w: (w["start_ns"], w["rank"])),
        "collectives": sorted(collectives, key=lambda c: (c["start_ns"], c["rank"])),
        "responses": ctl.lengths,
    }
    if sc.profiler == "torch":
        measure_kineto_clock(doc, out)
    truth.write(out / "truth.json", doc)
    return doc


def _rel(path: Path, out: Path, sc: Scenario) -> str | None:
    return str(path.relative_to(out)) if sc.profiler == "torch" else None


def measure_kineto_clock(doc: dict[str, Any], out: Path) -> None:
    for entry in doc["ranks"]:
        path = out / entry["trace"]
        rows, window = truth.kineto_ranges(path)
        entry["profile_window_ns"] = list(window)
        mine = [s for s in [*doc["stages"], *doc["spans"]] if s["rank"] == entry["rank"]]
        doc["clock"]["per_rank"][str(entry["rank"])] = truth.match_clock(
            mine, rows, window, f"{doc['scenario']} rank {entry['rank']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", nargs="*", help="scenario names (default: all)")
    ap.add_argument("--out", type=Path, default=RUNS)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for one GPU (colocated only)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    names = args.only or [*SCENARIOS, TRL_SCENARIO]
    unknown = sorted(set(names) - {*SCENARIOS, TRL_SCENARIO})
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; known: {[*SCENARIOS, TRL_SCENARIO]}")
    for name in names:
        out = args.out / name
        t0 = time.monotonic()
        if args.inner:
            run_scenario(SCENARIOS[name], out, args.device)
            continue
        shutil.rmtree(out, ignore_errors=True)
        if name == TRL_SCENARIO:
            capture_trl(out)
        elif SCENARIOS[name].profiler == "nsys":
            capture_nsys(SCENARIOS[name], out)
        else:
            run_scenario(SCENARIOS[name], out, args.device)
        print(f"{name}: {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
