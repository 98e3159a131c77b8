"""Seconds of every analysis product on one trace, each with its inputs already computed.

In one process: the trace is loaded (``analyzer.load``, no cache) ``--repeat`` times, and after
each load every product of ``analyzer.model.products.order()`` is computed in that order and
timed (``Run.product``: its own cost, its inputs computed before it). The lowest of the repeats
is printed per product, the slowest first, with their sum. To compare two checkouts, run this
from each in turn, alternating, and compare the lowest figures (a shared machine's load moves
single runs by tens of percent).

    .venv/bin/python benchmarks/products.py [FILE] [--repeat 5] [--top 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT = ROOT.parent / "shared" / "corpus" / "HolisticTraceAnalysis" / "df_index_resolver.json.gz"


def timings(path: Path, repeat: int) -> dict[str, float]:
    """Per product, the lowest seconds over ``repeat`` fresh loads of ``path``."""
    import analyzer
    from analyzer.model.products import order

    best: dict[str, float] = {}
    for _ in range(repeat):
        run = analyzer.load([path], use_cache=False)
        gc.collect()
        for name in order():
            start = time.perf_counter()
            run.product(name)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--top", type=int, default=20, help="how many products to print")
    parser.add_argument("--json", type=Path, help="also write every product's seconds here")
    args = parser.parse_args()
    if not args.file.is_file():
        print(f"{args.file}: no such trace", file=sys.stderr)
        return 2
    best = timings(args.file, max(args.repeat, 1))
    print(f"{args.file.name}: {len(best)} products, lowest of {args.repeat} loads; "
          f"sum {sum(best.values()) * 1000:.1f} ms")
    for name, seconds in sorted(best.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {name:<22} {seconds * 1000:7.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(best, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
