"""The long fuzz run (``make fuzz``): many more cases than CI, counts per parser and outcome.

    .venv/bin/python -m tests.fuzz.long_run --cases 200000 --seed 0
    .venv/bin/python -m tests.fuzz.long_run --case kineto#1234 --seed 0   # replay one case

Exit status 1 when any case crashed, hung, ran out of memory or broke an invariant.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from . import mutators, runner, seeds
from .seeds import LOG_FORMATS

WEIGHTS: dict[str, float] = {
    "kineto": 0.25,
    "gzip": 0.06,
    "framework-spans": 0.07,
    "nsys-sqlite": 0.07,
    "nsys-stats-csv": 0.07,
    **{fmt: 0.44 / len(LOG_FORMATS) for fmt in LOG_FORMATS},
    runner.ORDER_FAMILY: 0.04,
}
"""Share of the cases per family: Kineto traces are the most varied input, then the logs."""


def plan(cases: int, families: list[str] | None = None) -> dict[str, int]:
    """``cases`` split over the families by :data:`WEIGHTS` (at least one each)."""
    chosen = {f: w for f, w in WEIGHTS.items() if not families or f in families}
    total = sum(chosen.values())
    return {f: max(1, round(cases * w / total)) for f, w in chosen.items()}


def main(argv: list[str] | None = None) -> int:
    args = _arguments().parse_args(argv)
    cache = Path(args.cache or tempfile.gettempdir()) / "rlperf-fuzz"
    cache.mkdir(parents=True, exist_ok=True)
    bank = seeds.build(cache)
    if args.case:
        return replay(bank, args.case, args.seed, Path(args.write) if args.write else cache)
    settings = runner.Settings(
        seed=args.seed,
        workers=args.workers,
        case_timeout_s=args.timeout,
        analyze_every=args.analyze_every,
        memory_bytes=int(args.memory_gb * 2**30),
    )
    families = args.families.split(",") if args.families else None
    summary = runner.run(
        plan(args.cases, families), settings, bank, progress=_partial, every_s=args.report_every
    )
    print(f"seed {args.seed}, {summary.total()} cases, {args.workers} workers")
    print(summary.table())
    return 1 if summary.failures() else 0


def _partial(summary: runner.Summary) -> None:
    print(f"--- {summary.total()} cases so far\n{summary.table()}", flush=True)


def replay(bank_path: Path, label: str, seed: int, folder: Path) -> int:
    """Write one case to ``folder`` and parse it here, with the traceback if it fails."""
    family, index = label.split("#")
    bank = seeds.load(bank_path)
    case = mutators.make_case(bank, family, int(index), seed)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / case.name
    path.write_bytes(case.data)
    print(f"{case.label()}\nwritten to {path} ({len(case.data):,} bytes)")
    import parsers

    try:
        source = parsers.parse_file(path, runner.parser_format(family))
    except parsers.InputError as exc:
        print(f"refused (the contract's one line): {exc}")
        return 0
    print(f"parsed: {source.events.height} events, warnings {source.warnings[:5]}")
    return 0


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--families", help="comma-separated families (default: all)")
    parser.add_argument(
        "--timeout", type=float, default=20.0, help="seconds per case before it counts as a hang"
    )
    parser.add_argument(
        "--memory-gb", type=float, default=3.0, help="address-space limit per worker"
    )
    parser.add_argument("--analyze-every", type=int, default=50)
    parser.add_argument("--case", help="replay one case, e.g. kineto#1234")
    parser.add_argument("--write", help="folder for the replayed case")
    parser.add_argument("--cache", help="folder for the seed bank")
    parser.add_argument(
        "--report-every", type=float, default=600.0, help="seconds between partial tables"
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
