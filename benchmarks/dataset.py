"""Re-analysis from a dataset against the first analysis, same run, same inputs: is it at least
50× faster, and is every report byte-identical?

For each input, in one process (libraries imported and the command line built once, so the
ratio is what the analysis costs, not Python's start-up), ``rlperf analyze INPUT -f json -o
FILE`` timed as:
- **first**: from the sources, ``--no-cache`` (parse, assemble, analyse, render);
- **from cache**: from the sources again, the per-file parse cache warm;
- **from dataset**: ``rlperf ingest`` once, then the dataset analysed for the first time with
  these options (tables read instead of parsed; the report is kept in the dataset);
- **re-analysis**: the dataset analysed again with the same options (the kept report read).
Medians of ``--repeat`` alternating rounds. Then the same two ends as whole processes (a fresh
``rlperf``: Python, imports and all), which is what a user waits for at a shell, alternating,
medians of 3, with their CPU seconds beside (the wall seconds move with the machine's load).

    .venv/bin/python benchmarks/dataset.py [INPUTS…] [--repeat 5] [--goal 50] [--json OUT]

Default inputs: the corpus' df_index_resolver.json.gz and the 8-rank synthetic disaggregated
sample. Exit status 1 when a report differs or either ratio (in process, whole process) is
under ``--goal``; the last lines say which ratio met it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CORPUS = ROOT.parent / "shared" / "corpus"
DEFAULT = [
    CORPUS / "HolisticTraceAnalysis" / "df_index_resolver.json.gz",
    ROOT / "sample_traces" / "synthetic" / "disaggregated",
]


@cache
def cli():
    """The command line as ``rlperf`` builds it, built once (building it is start-up, which the
    whole-process figures count)."""
    import typer

    from analyzer.cli import app, plain_help

    return plain_help(typer.main.get_command(app))


def command(*args: str) -> float:
    """``rlperf ARGS`` in this process: its seconds (a non-zero exit stops the benchmark)."""
    start = time.perf_counter()
    status = cli()([*args, "-q"], standalone_mode=False, prog_name="rlperf")
    seconds = time.perf_counter() - start
    if status:
        raise RuntimeError(f"rlperf {' '.join(args)} exited {status}")
    return seconds


def process(*args: str) -> tuple[float, float]:
    """A fresh ``rlperf ARGS`` (the console entry point): its wall seconds and its CPU seconds
    (user + system; on a loaded machine the CPU seconds say what the process cost, the wall
    what the user waited)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from analyzer.entry import main; main()", *args, "-q"],
                   check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def measure(source: Path, work: Path, repeat: int) -> dict[str, object]:
    dataset = work / "ds"
    out = {k: work / f"{k}.json" for k in ("first", "cache", "dataset", "again")}
    ingest_s = command("ingest", str(source), "-o", str(dataset))
    analyze = ("analyze", "-f", "json", "-o")
    times: dict[str, list[float]] = {k: [] for k in out}
    command(*analyze, str(out["cache"]), str(source))  # fills the parse cache
    command(*analyze, str(out["again"]), str(dataset))  # keeps the report in the dataset
    for _ in range(repeat):
        times["first"].append(command(*analyze, str(out["first"]), str(source), "--no-cache"))
        times["cache"].append(command(*analyze, str(out["cache"]), str(source)))
        times["dataset"].append(
            command(*analyze, str(out["dataset"]), str(dataset), "--no-cache")
        )
        times["again"].append(command(*analyze, str(out["again"]), str(dataset)))
    reports = {k: p.read_bytes() for k, p in out.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    runs: dict[str, list[tuple[float, float]]] = {"first": [], "again": []}
    for _ in range(3):
        runs["first"].append(process(*analyze, str(out["first"]), str(source), "--no-cache"))
        runs["again"].append(process(*analyze, str(out["again"]), str(dataset)))
    whole = {k: medians(v)[0] for k, v in runs.items()}
    cpu = {k: medians(v)[1] for k, v in runs.items()}
    ratio = median["first"] / median["again"]
    whole_ratio = whole["first"] / whole["again"]
    line = (
        f"{source.name}: first {median['first']:.3f} s, from cache {median['cache']:.3f} s, "
        f"from dataset {median['dataset']:.3f} s, re-analysis {median['again']:.4f} s: "
        f"{ratio:.0f}x; whole process {whole['first']:.2f} s vs {whole['again']:.2f} s = "
        f"{whole_ratio:.1f}x (CPU {cpu['first']:.2f} s vs {cpu['again']:.2f} s = "
        f"{cpu['first'] / cpu['again']:.1f}x); ingest {ingest_s:.3f} s; reports identical: "
        f"{len(set(reports.values())) == 1}"
    )
    return {
        "input": str(source),
        "ingest_s": round(ingest_s, 4),
        "seconds": {k: round(v, 4) for k, v in median.items()},
        "ratio_first_over_again": round(ratio, 1),
        "ratio_first_over_dataset": round(median["first"] / median["dataset"], 2),
        "whole_process_s": {k: round(v, 3) for k, v in whole.items()},
        "ratio_whole_process": round(whole_ratio, 1),
        "whole_process_cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "identical": len(set(reports.values())) == 1,
        "report_bytes": len(reports["first"]),
        "line": line,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("inputs", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--goal", type=float, default=50.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RLPERF_CACHE_DIR"] = str(Path(tmp) / "cache")
        for i, source in enumerate(args.inputs):
            work = Path(tmp) / str(i)
            work.mkdir()
            results.append(measure(source, work, args.repeat))
    for r in results:
        print(r["line"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    verdicts = []
    for kind, field in (("in process", "ratio_first_over_again"),
                        ("whole process", "ratio_whole_process")):
        ratios = [float(str(r[field])) for r in results]
        met = all(x >= args.goal for x in ratios)
        shown = ", ".join(f"{x:g}x" for x in ratios)
        print(f"re-analysis {kind}: {shown} against the goal {args.goal:g}x: "
              f"{'met' if met else 'NOT met'}")
        verdicts.append(met)
    identical = all(r["identical"] for r in results)
    if not identical:
        print("a report differs between the first analysis and the re-analysis")
    return 0 if identical and all(verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
