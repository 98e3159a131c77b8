"""Base inputs for the fuzzer: small, real pieces of the corpus and the bundled samples.

A whole corpus trace costs a second to parse, so every base is a window: a few dozen events of a
Kineto trace (with its metadata and, where there is one, a profiler step around them), a SQLite
export with every table cut to one short time window, a run of log lines. The bank is built
once (it reads every file), pickled, and shared by the worker processes; the same files always
give the same bank.
"""

from __future__ import annotations

import gzip
import hashlib
import pickle
import random
import sqlite3
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

import parsers

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus"
SAMPLES = REPO / "sample_traces"
FIXTURES = REPO / "tests" / "fixtures" / "logs"

KINETO_WINDOW = 40
"""Events per Kineto window: enough for kernels, their launches and a step, small enough to
parse in a few milliseconds."""
LOG_WINDOW = 60
TABLE_ROWS = 80
"""Rows per SQLite table after trimming (the window's rows, capped)."""
LOG_FORMATS: tuple[str, ...] = (
    "verl-log", "openrlhf-log", "trl-log", "nemo-rl-log", "slime-log", "areal-log", "roll-log",
    "deepspeed-chat-log",
)


@dataclass(frozen=True)
class Base:
    """One base input: ``family`` names the parser it targets, ``data`` its bytes, ``name`` the
    file name it is written under (parsers read ranks and kinds from names)."""

    family: str
    origin: str
    name: str
    data: bytes


def build(cache: Path) -> Path:
    """The pickled bank under ``cache`` (built on first use; a change here makes a new one)."""
    path = cache / f"fuzz-bank-{hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:12]}.pkl"
    if not path.exists():
        bank = collect()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(bank))
        tmp.rename(path)
    return path


def load(path: Path) -> dict[str, list[Base]]:
    return pickle.loads(path.read_bytes())


def collect() -> dict[str, list[Base]]:
    """Every base, per family; a family without files (no corpus checkout) is left out."""
    rng = random.Random("rlperf-fuzz-bank")
    bank: dict[str, list[Base]] = {}
    for base in [*_kineto(rng), *_spans(), *_sqlite(), *_stats_csv(), *_logs(rng)]:
        bank.setdefault(base.family, []).append(base)
    return bank


def _files(fmt: str, roots: list[Path]) -> list[Path]:
    return [path for root in roots for path, found in _formats(root) if found == fmt]


@cache
def _formats(root: Path) -> tuple[tuple[Path, str | None], ...]:
    """Every input file under ``root`` with its sniffed format (rlperf's own truth files and the
    provenance notes are not inputs)."""
    if not root.exists():
        return ()
    files = [
        p
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "truth.json" and p.suffix != ".md"
    ]
    return tuple((p, parsers.sniff(p)) for p in files)


def _origin(path: Path) -> str:
    for root in (CORPUS, REPO):
        if path.is_relative_to(root):
            return str(path.relative_to(root))
    return path.name


# --- Kineto --------------------------------------------------------------------------------------


class _Head(msgspec.Struct):
    """What choosing a window needs of an event; the rest stays undecoded."""

    ph: Any = None
    ts: Any = None
    name: Any = None


_EVENTS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_HEADS = msgspec.json.Decoder(list[_Head])


def _kineto(rng: random.Random) -> list[Base]:
    """Windows of every Kineto trace; only the window's events are decoded (the largest corpus
    file has 216k events)."""
    out = []
    for path in _files("kineto", [CORPUS, SAMPLES / "runs", SAMPLES / "synthetic" / "colocated"]):
        raw = path.read_bytes()
        top = _EVENTS.decode(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        if "traceEvents" not in top:
            continue
        raws, heads = _RAWS.decode(top["traceEvents"]), _HEADS.decode(top["traceEvents"])
        meta = {k: msgspec.json.decode(v) for k, v in top.items() if k != "traceEvents"}
        name = path.name.removesuffix(".gz")
        for window in _kineto_windows(heads, rng):
            piece = {**meta, "traceEvents": [msgspec.json.decode(raws[i]) for i in window]}
            out.append(Base("kineto", _origin(path), name, msgspec.json.encode(piece)))
    return out


def _kineto_windows(heads: list[_Head], rng: random.Random) -> list[list[int]]:
    """Three windows of event indices: around a profiler step (when the trace has one) and two
    at random places; each keeps up to 12 of the trace's metadata (``M``) events."""
    meta = [i for i, e in enumerate(heads) if e.ph == "M"][:12]
    timed = sorted(
        (i for i, e in enumerate(heads) if e.ph != "M" and isinstance(e.ts, (int, float))),
        key=lambda i: heads[i].ts,
    )
    if not timed:
        return [meta + list(range(min(len(heads), KINETO_WINDOW)))]
    windows = []
    steps = [k for k, i in enumerate(timed) if str(heads[i].name or "").startswith("ProfilerStep#")]
    if steps:
        k = steps[len(steps) // 2]
        windows.append(timed[k : k + KINETO_WINDOW])
    for _ in range(3 - len(windows)):
        k = rng.randrange(max(1, len(timed) - KINETO_WINDOW))
        windows.append(timed[k : k + KINETO_WINDOW])
    return [meta + w for w in windows]


# --- framework span traces -----------------------------------------------------------------------


def _spans() -> list[Base]:
    out = []
    for path in _files("framework-spans", [FIXTURES, SAMPLES / "runs"]):
        out.append(Base("framework-spans", _origin(path), path.name, path.read_bytes()))
    return out


# --- Nsight Systems SQLite -----------------------------------------------------------------------


def _sqlite() -> list[Base]:
    out = []
    for path in _files("nsys-sqlite", [CORPUS, SAMPLES / "runs"]):
        out.append(Base("nsys-sqlite", _origin(path), path.name, trimmed_export(path)))
    return out


def trimmed_export(path: Path) -> bytes:
    """The export with every timed table cut to the window holding the middle 40 kernels (launch
    rows before them included) and every table capped at ``TABLE_ROWS`` rows."""
    src = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    db = sqlite3.connect(":memory:")
    src.backup(db)
    src.close()
    lo, hi = _kernel_window(db)
    for table in [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]:
        cols = {r[1] for r in db.execute(f'PRAGMA table_info("{table}")')}
        if lo is not None and "start" in cols:
            db.execute(f'DELETE FROM "{table}" WHERE start < ? OR start > ?', (lo - (hi - lo), hi))
        if table != "StringIds":
            db.execute(
                f'DELETE FROM "{table}" WHERE rowid NOT IN (SELECT rowid FROM "{table}" LIMIT '
                f'{TABLE_ROWS})'
            )
    db.commit()
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "trimmed.sqlite"
        db.execute("VACUUM INTO ?", (str(small),))
        db.close()
        packed = sqlite3.connect(small)
        packed.execute("PRAGMA page_size = 1024")
        packed.execute("VACUUM")
        packed.close()
        return small.read_bytes()


def _kernel_window(db: sqlite3.Connection) -> tuple[int | None, int | None]:
    try:
        starts = [
            r[0] for r in db.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")
        ]
    except sqlite3.Error:
        return None, None
    if not starts:
        return None, None
    mid = len(starts) // 2
    piece = starts[max(0, mid - 20) : mid + 20]
    return piece[0], piece[-1] + 1


# --- nsys stats CSV ------------------------------------------------------------------------------


def _stats_csv() -> list[Base]:
    out = []
    pptrace = CORPUS / "pipit" / "trace.csv"
    if pptrace.exists():
        lines = pptrace.read_bytes().splitlines(keepends=True)
        for start in (1, len(lines) // 2):
            out.append(Base("nsys-stats-csv", _origin(pptrace), "trace_nvtx_pushpop_trace.csv",
                            lines[0] + b"".join(lines[start : start + LOG_WINDOW])))
    saxpy = CORPUS / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    if saxpy.exists():
        origin = _origin(saxpy) + " (as nsys stats would print it)"
        gpu, api = _stats_from_export(saxpy)
        out.append(Base("nsys-stats-csv", origin, "saxpy_cuda_gpu_trace.csv", gpu))
        out.append(Base("nsys-stats-csv", origin, "saxpy_cuda_api_trace.csv", api))
    return out


def _stats_from_export(path: Path) -> tuple[bytes, bytes]:
    """``cuda_gpu_trace`` and ``cuda_api_trace`` reports in nsys' CSV layout, from the real rows
    of an export (the stats CLI itself takes seconds per call)."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    names = dict(db.execute("SELECT id, value FROM StringIds"))
    gpu = ["Start (ns),Duration (ns),CorrId,Bytes (MB),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name"]
    for start, end, dev, ctx, strm, corr, name in db.execute(
        "SELECT start, end, deviceId, contextId, streamId, correlationId, demangledName FROM "
        "CUPTI_ACTIVITY_KIND_KERNEL"
    ):
        gpu.append(
            f'{start},{end - start},{corr},,,,NVIDIA A100 '
            f'({dev}),{ctx},{strm},"{names.get(name, "")}"'
        )
    for start, end, dev, ctx, strm, corr, nbytes in db.execute(
        "SELECT start, end, deviceId, contextId, streamId, correlationId, bytes FROM "
        "CUPTI_ACTIVITY_KIND_MEMCPY"
    ):
        gpu.append(
            f"{start},{end - start},{corr},{nbytes / 1e6},Pageable,Device,NVIDIA A100 "
            f"({dev}),{ctx},{strm},[CUDA memcpy Host-to-Device]"
        )
    api = ["Start (ns),Duration (ns),Name,Result,CorrID,Pid,Tid,T-Pri,Thread Name"]
    for start, end, tid, corr, name in db.execute(
        "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
        "LIMIT 60"
    ):
        pid, thread = (tid >> 24) & 0xFFFFFF, tid & 0xFFFFFF
        api.append(f"{start},{end - start},{names.get(name, '')},0,{corr},{pid},{thread},0,saxpy")
    db.close()
    return ("\n".join(gpu) + "\n").encode(), ("\n".join(api) + "\n").encode()


# --- framework logs ------------------------------------------------------------------------------


def _logs(rng: random.Random) -> list[Base]:
    out = []
    roots = [CORPUS, FIXTURES, SAMPLES / "runs"]
    for fmt in LOG_FORMATS:
        for path in _files(fmt, roots):
            for piece in _log_windows(path.read_bytes(), rng):
                out.append(Base(fmt, _origin(path), path.name, piece))
    return out


def _log_windows(data: bytes, rng: random.Random) -> list[bytes]:
    """A small file whole; a large one as its head and two runs of lines around ``step`` lines."""
    lines = data.splitlines(keepends=True)
    if len(lines) <= 2 * LOG_WINDOW:
        return [data]
    marked = [i for i, line in enumerate(lines) if b"step" in line.lower()]
    starts = [0] + [max(0, rng.choice(marked) - LOG_WINDOW // 2) for _ in range(2) if marked]
    return [b"".join(lines[s : s + LOG_WINDOW]) for s in starts]
