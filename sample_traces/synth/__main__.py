"""``python -m sample_traces.synth``: write a synthetic run (traces + truth.json) to a folder."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import SCENARIOS, generate, preset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m sample_traces.synth",
        description="Write GPU-shaped SYNTHETIC RL post-training traces (Kineto JSON per rank, "
        "optionally nsys-schema SQLite) with an exact ground truth (truth.json).",
    )
    p.add_argument("--scenario", choices=SCENARIOS, required=True)
    p.add_argument("--ranks", type=int, default=8, help="world size, 2 to 1024 (default 8)")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--out", type=Path, required=True, help="output folder")
    p.add_argument("--nsys", action="store_true", help="also write an nsys-schema SQLite per rank")
    p.add_argument(
        "--decode-kernels-per-step", type=int, help="kernels per decode step (default 4)"
    )
    p.add_argument(
        "--max-response", type=int, help="response length cap in decode steps (default 64)"
    )
    p.add_argument("--response-median", type=float, help="median response length (default 24)")
    p.add_argument(
        "--responses-per-rank", type=int, help="responses per rollout engine (default 8)"
    )
    p.add_argument("--micro-batches", type=int)
    p.add_argument("--layer-chunks", type=int, help="forward/backward chunks per micro-batch")
    p.add_argument("--tp", type=int, help="training tensor parallel (Megatron scenarios)")
    p.add_argument("--cp", type=int)
    p.add_argument("--ep", type=int)
    p.add_argument("--pp", type=int)
    p.add_argument("--rollout-tp", type=int)
    p.add_argument("--gpus-per-node", type=int)
    p.add_argument("--skew-max-us", type=int, help="largest per-rank clock offset (default 3000)")
    p.add_argument(
        "--jobs", type=int, help="writer processes (default 1; spawned, each sent one rank)"
    )
    p.add_argument("--no-gzip", action="store_true", help="write plain .json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if not 2 <= a.ranks <= 1024:
        print("synth: --ranks must be between 2 and 1024", file=sys.stderr)
        return 2
    fields = {
        "decode_kernels_per_step": a.decode_kernels_per_step,
        "max_response": a.max_response,
        "response_median": a.response_median,
        "responses_per_rank": a.responses_per_rank,
        "micro_batches": a.micro_batches,
        "layer_chunks": a.layer_chunks,
        "rollout_tp": a.rollout_tp,
        "gpus_per_node": a.gpus_per_node,
        "tp": a.tp,
        "cp": a.cp,
        "ep": a.ep,
        "pp": a.pp,
        "skew_max_ns": a.skew_max_us * 1000 if a.skew_max_us is not None else None,
    }
    overrides = {k: v for k, v in fields.items() if v is not None}
    try:
        cfg = preset(a.scenario, a.ranks, steps=a.steps, seed=a.seed, **overrides)
    except ValueError as exc:
        print(f"synth: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    truth = generate(cfg, a.out, jobs=a.jobs, gz=not a.no_gzip, nsys=a.nsys)
    size = sum(f.stat().st_size for f in a.out.iterdir() if f.is_file())
    print(
        f"synthetic {a.scenario}: {cfg.ranks} ranks, {cfg.steps} steps, seed {cfg.seed} → {a.out} "
        f"({size / 1e6:.1f} MB, {len(truth['devices'])} device-steps) in "
        f"{time.perf_counter() - t0:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
