"""Ingest speed and memory: rlperf's Kineto parser against HTA's TraceAnalysis, same files, same
run.

Two views, each as a ratio HTA / rlperf:
- parse alone, in-process: libraries already imported, best of N, and the peak-RSS growth the
  parse causes;
- the whole process: a fresh Python that imports the tool and loads the file, wall time and
  peak RSS (what a user waits for and what the machine must hold).
Plus the floor: gunzip and tokenise the JSON without building anything.

    .venv/bin/python benchmarks/ingest.py [FILES…] [--repeat N] [--json OUT]

Default file: the corpus' df_index_resolver.json.gz (54 MB of JSON, 216k events).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
DEFAULT = [CORPUS / "HolisticTraceAnalysis" / "df_index_resolver.json.gz"]

IN_PROCESS = r"""
import gc, json, os, resource, sys, time, logging, warnings, shutil, tempfile
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
tool, path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
if tool == "rlperf":
    from parsers import parse_file
    run = lambda: parse_file(path)
elif tool == "hta":
    from hta.trace_analysis import TraceAnalysis
    folder = tempfile.mkdtemp(); shutil.copy(path, folder)
    run = lambda: TraceAnalysis(trace_dir=folder)
else:
    import gzip, msgspec
    class Nothing(msgspec.Struct):
        pass
    try:
        from isal.igzip import decompress
    except ImportError:
        decompress = gzip.decompress
    decoder = msgspec.json.Decoder(Nothing)
    read = lambda: open(path, "rb").read()
    run = lambda: decoder.decode(decompress(read()) if path.endswith(".gz") else read())
gc.collect()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
best = float("inf")
for _ in range(repeat):
    t = time.perf_counter(); result = run(); best = min(best, time.perf_counter() - t)
    del result; gc.collect()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": best, "peak_growth_mib": (after - before) / 1024}))
"""

WHOLE = {
    "rlperf": "import sys; from analyzer import load; load([sys.argv[1]], use_cache=False)",
    "hta": (
        "import sys, shutil, tempfile, logging, warnings; warnings.filterwarnings('ignore'); "
        "logging.disable(logging.CRITICAL); from hta.trace_analysis import TraceAnalysis; "
        "d = tempfile.mkdtemp(); shutil.copy(sys.argv[1], d); TraceAnalysis(trace_dir=d)"
    ),
}


def in_process(tool: str, path: Path, repeat: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, tool, str(path), str(repeat)],
        capture_output=True, text=True, check=True, timeout=900, env=_env(),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def whole_process(tool: str, path: Path) -> dict[str, float]:
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", WHOLE[tool], str(path)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"{tool} failed on {path} (status {status})")
    return {"seconds": seconds, "peak_rss_mib": usage.ru_maxrss / 1024}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["RLPERF_NO_CACHE"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rows = []
    for path in args.files:
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / path.name
            shutil.copy(path, local)
            row = {
                "file": path.name,
                "mb_json": _json_megabytes(local),
                "floor": in_process("floor", local, args.repeat),
                "rlperf_parse": in_process("rlperf", local, args.repeat),
                "hta_parse": in_process("hta", local, 1),
                "rlperf_process": whole_process("rlperf", local),
                "hta_process": whole_process("hta", local),
            }
        rows.append(row)
        _print(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


def _json_megabytes(path: Path) -> float:
    import gzip

    data = path.read_bytes()
    return len(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data) / 1e6


def _print(row: dict) -> None:
    rp, hp, fl = row["rlperf_parse"], row["hta_parse"], row["floor"]
    rw, hw = row["rlperf_process"], row["hta_process"]
    print(f"{row['file']} ({row['mb_json']:.1f} MB of JSON)")
    print(
        f"  parse alone   rlperf {rp['seconds']:.3f} s   HTA {hp['seconds']:.3f} s   "
        f"speed-up {hp['seconds'] / rp['seconds']:.1f}x   (floor: gunzip+tokenise "
        f"{fl['seconds']:.3f} s)"
    )
    print(
        f"                peak RSS growth rlperf {rp['peak_growth_mib']:.0f} MiB   HTA "
        f"{hp['peak_growth_mib']:.0f} MiB"
    )
    print(
        f"  whole process rlperf {rw['seconds']:.2f} s / {rw['peak_rss_mib']:.0f} MiB   "
        f"HTA {hw['seconds']:.2f} s / {hw['peak_rss_mib']:.0f} MiB   "
        f"speed-up {hw['seconds'] / rw['seconds']:.1f}x   memory "
        f"{rw['peak_rss_mib'] / hw['peak_rss_mib']:.2f} of HTA's"
    )


if __name__ == "__main__":
    main()
