"""Run fuzz cases in worker processes and count what happened, per parser and per outcome.

A worker (``python -m fuzz.runner``, with ``tests/`` on the path) runs under an address-space
limit, makes each case from its (family, index, seed), writes it to a scratch folder and parses
it as ``analyzer.load`` would (sniff, then parse); every ``analyze_every``-th case that parses
is also analysed and rendered as the JSON report. A per-case alarm turns a slow case into a
``hang``; a worker that stops answering (stuck in native code) is killed by the parent, its
case counted as a hang, and a fresh worker carries on after it; a worker that dies (native abort
under the memory limit, a segfault) has its case counted as a crash.

Outcomes: ``ok``, ``input_error`` (the contract's one-line refusal), ``crash`` (any other
exception, or an analysis recorded as failed), ``hang``, ``oom`` (MemoryError), ``invariant``
(parsed, but an invariant of :mod:`invariants` broke) and ``fuzzer_error`` (a bug here).
"""

from __future__ import annotations

import json
import os
import random
import resource
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .seeds import REPO

OUTCOMES: tuple[str, ...] = (
    "ok",
    "input_error",
    "crash",
    "hang",
    "oom",
    "invariant",
    "fuzzer_error",
)
ORDER_FAMILY = "kineto-order"
"""Kineto windows parsed as written and with their events shuffled: the tables must agree."""
PACKAGES = ("parsers", "analyzer", "taxonomy")


@dataclass
class Settings:
    seed: int = 0
    workers: int = 2
    case_timeout_s: float = 10.0
    memory_bytes: int = 3 * 2**30
    analyze_every: int = 50
    """Every n-th case that parses is analysed and rendered too (0: never)."""
    sniff_every: int = 4
    """Every n-th case is sniffed first (as discovery does); the others go to their parser."""


@dataclass
class Finding:
    """One class of failure: the first case that showed it and how often it came."""

    family: str
    outcome: str
    kind: str
    where: str
    message: str
    example: str
    count: int = 0

    def line(self) -> str:
        return (
            f"{self.outcome:9} {self.family:18} ×{self.count:<5} {self.kind} at {self.where}: "
            f"{self.message[:160]}  [{self.example[:200]}]"
        )


@dataclass
class Summary:
    counts: dict[str, Counter] = field(default_factory=dict)
    findings: dict[tuple[str, ...], Finding] = field(default_factory=dict)
    analysed: int = 0
    seconds: float = 0.0
    busy: Counter = field(default_factory=Counter)
    """Worker seconds per family."""

    def add(self, result: dict[str, Any]) -> None:
        self.counts.setdefault(result["family"], Counter())[result["outcome"]] += 1
        self.busy[result["family"]] += float(result.get("seconds", 0.0))
        self.analysed += int(result.get("analysed", 0))
        if result["outcome"] in ("ok", "input_error"):
            return
        key = (result["family"], result["outcome"], result.get("kind", ""), result.get("where", ""))
        found = self.findings.setdefault(key, Finding(
            result["family"], result["outcome"], result.get("kind", ""), result.get("where", ""),
            result.get("message", ""), result.get("example", ""),
        ))
        found.count += 1

    def total(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())

    def failures(self) -> int:
        return sum(f.count for f in self.findings.values())

    def table(self) -> str:
        head = (
            f"{'parser':20}"
            + "".join(f"{o:>12}" for o in OUTCOMES)
            + f"{'total':>10}{'ms/case':>9}"
        )
        lines = [head]
        for family in sorted(self.counts):
            c = self.counts[family]
            per = 1000 * self.busy[family] / max(1, sum(c.values()))
            lines.append(
                f"{family:20}"
                + "".join(f"{c[o]:>12}" for o in OUTCOMES)
                + f"{sum(c.values()):>10}{per:>9.1f}"
            )
        grand = Counter()
        for c in self.counts.values():
            grand.update(c)
        lines.append(
            f"{'all':20}" + "".join(f"{grand[o]:>12}" for o in OUTCOMES) + f"{self.total():>10}"
        )
        lines.append(
            f"{self.analysed} of them analysed and rendered "
            f"as the JSON report; {self.seconds:.1f} s"
        )
        lines += [f.line() for f in sorted(self.findings.values(), key=lambda f: -f.count)]
        return "\n".join(lines)


# --- parent --------------------------------------------------------------------------------------


def run(plan: dict[str, int], settings: Settings, bank_path: Path,
        progress: Callable[[Summary], None] | None = None, every_s: float = 300.0) -> Summary:
    """Run ``plan`` (family → number of cases) over ``settings.workers`` processes; ``progress``
    sees the counts so far every ``every_s`` seconds."""
    started = time.monotonic()
    chunks: list[list[tuple[str, int, int]]] = [[] for _ in range(max(1, settings.workers))]
    for family, count in plan.items():
        step = -(-count // len(chunks))
        for w, lo in enumerate(range(0, count, step)):
            chunks[w].append((family, lo, min(count, lo + step)))
    summary = Summary()
    lock = threading.Lock()
    threads = [
        threading.Thread(target=_drive, args=(c, settings, bank_path, summary, lock))
        for c in chunks
        if c
    ]
    for t in threads:
        t.start()
    due = started + every_s
    while any(t.is_alive() for t in threads):
        time.sleep(0.2)
        if progress and time.monotonic() >= due:
            due += every_s
            with lock:
                summary.seconds = time.monotonic() - started
                progress(summary)
    summary.seconds = time.monotonic() - started
    return summary


def _drive(
    tasks: list[tuple[str, int, int]], settings: Settings, bank: Path, summary: Summary, lock
) -> None:
    """Feed one worker its tasks; when it dies or stops answering, count its case and restart
    it just after that case."""
    pending = list(tasks)
    while pending:
        with tempfile.TemporaryDirectory(prefix="rlperf-fuzz-") as scratch:
            job = {"bank": str(bank), "tasks": pending, "scratch": scratch, **settings.__dict__}
            pending = _one_worker(job, settings, summary, lock)


def _one_worker(
    job: dict, settings: Settings, summary: Summary, lock
) -> list[tuple[str, int, int]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]),
           "POLARS_MAX_THREADS": "1", "RLPERF_NO_CACHE": "1"}
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "fuzz.runner"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=REPO)
        proc.stdin.write(json.dumps(job).encode())
        proc.stdin.close()
        return _follow(proc, stderr, job, settings, summary, lock)


def _follow(
    proc, stderr, job: dict, settings: Settings, summary: Summary, lock
) -> list[tuple[str, int, int]]:
    """Read a worker's answers until it ends; what is left to do when it ended early."""
    current: tuple[str, int] | None = None
    quiet_limit = settings.case_timeout_s * 3 + 60
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], quiet_limit)
        if not ready:
            proc.kill()
            proc.wait()
            return _after(job["tasks"], current, summary, lock, "hang", "no answer", "worker stuck")
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            if proc.returncode == 0:
                return []
            stderr.seek(0)
            tail = stderr.read()[-400:].decode(errors="replace").strip().replace("\n", " | ")
            why = f"worker exited with {_status(proc.returncode)}"
            return _after(job["tasks"], current, summary, lock, "crash", why, tail)
        message = json.loads(line)
        if "start" in message:
            current = tuple(message["start"])
            continue
        current = None
        with lock:
            summary.add(message)


def _status(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"


def _after(tasks, current, summary: Summary, lock, outcome: str, kind: str, message: str):
    """The tasks left after ``current`` (the case that took the worker down, counted here)."""
    if current is None:
        return []
    family, index = current
    with lock:
        summary.add(
            {
                "family": family,
                "outcome": outcome,
                "kind": kind,
                "where": "worker",
                "message": message,
                "example": f"{family}#{index}",
            }
        )
    holder = next(i for i, (f, lo, hi) in enumerate(tasks) if f == family and lo <= index < hi)
    rest = [(family, index + 1, tasks[holder][2]), *tasks[holder + 1 :]]
    return [(f, lo, hi) for f, lo, hi in rest if lo < hi]


# --- worker --------------------------------------------------------------------------------------


class CaseTimeout(Exception):
    pass


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    def ring(signum, frame):
        raise CaseTimeout(f"over {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def worker(job: dict) -> None:
    limit = int(job["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from . import mutators, seeds

    bank = seeds.load(Path(job["bank"]))
    scratch = Path(job["scratch"])
    ok_seen = 0
    for family, lo, hi in job["tasks"]:
        for index in range(lo, hi):
            _send({"start": [family, index]})
            result = {"family": family, "index": index}
            began = time.process_time()
            try:
                if family == ORDER_FAMILY:
                    outcome = order_case(bank, index, job, scratch)
                else:
                    case = mutators.make_case(bank, family, index, job["seed"])
                    analyse = bool(job["analyze_every"]) and ok_seen % job["analyze_every"] == 0
                    sniff = bool(job["sniff_every"]) and index % job["sniff_every"] == 0
                    outcome = run_case(case, scratch, job["case_timeout_s"], analyse, sniff)
            except Exception as exc:
                outcome = {"outcome": "fuzzer_error", **_where(exc), "example": f"{family}#{index}"}
            if outcome["outcome"] == "ok":
                ok_seen += 1
            _send({**result, **outcome, "seconds": time.process_time() - began})


def _send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def run_case(
    case, scratch: Path, timeout: float, analyse: bool, sniff: bool = True
) -> dict[str, Any]:
    """Parse one case (and analyse it when asked) and say what happened.

    Without ``sniff`` the case goes straight to its family's parser, as a file named on the
    command line does when no parser claims it (the parser then gives its own error)."""
    path = scratch / case.name
    path.write_bytes(case.data)
    try:
        with alarm(timeout):
            outcome = _parse_and_check(path, analyse, None if sniff else parser_format(case.family))
    except BaseException as exc:
        outcome = _classify(exc)
    finally:
        path.unlink(missing_ok=True)
    if outcome["outcome"] != "ok":
        outcome["example"] = case.label()
    return outcome


def parser_format(family: str) -> str:
    return "kineto" if family == "gzip" else family


def _parse_and_check(path: Path, analyse: bool, fmt: str | None) -> dict[str, Any]:
    import parsers

    from . import invariants

    source = parsers.parse_file(path, fmt)
    problems = invariants.parsed(source)
    if problems:
        return {
            "outcome": "invariant",
            "kind": "parse",
            "where": source.format,
            "message": "; ".join(problems),
        }
    if not analyse:
        return {"outcome": "ok"}
    return {**analyse_paths([path]), "analysed": 1}


def analyse_paths(paths: list[Path]) -> dict[str, Any]:
    """``analyzer.load`` + the JSON report, with the report-level invariants."""
    import analyzer
    from analyzer.report import json as json_report
    from analyzer.report import sections as sections_module

    from . import invariants

    run = analyzer.load(paths, use_cache=False, jobs=1)
    text = json_report.render(run)
    sections = sections_module.sections(run)
    failed = getattr(sections_module, "failures", lambda _run: [])(run)
    if failed:
        first = failed[0]
        return {"outcome": "crash", "kind": first.error.split(":")[0], "where": first.module,
                "message": f"{first.what}: {first.error}"}
    problems = invariants.report(run, text, sections)
    if "bubbles" in run.computed():
        problems += invariants.bubbles(run.bubbles)
    if problems:
        return {
            "outcome": "invariant",
            "kind": "report",
            "where": problems[0].split(":")[0],
            "message": "; ".join(problems),
        }
    return {"outcome": "ok"}


def _classify(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, CaseTimeout):
        return {"outcome": "hang", **_where(exc)}
    if isinstance(exc, MemoryError):
        return {"outcome": "oom", **_where(exc)}
    if isinstance(exc, _expected()):
        return {"outcome": "input_error"}
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        raise exc
    return {"outcome": "crash", **_where(exc)}


def _expected() -> tuple[type[BaseException], ...]:
    """The contract's refusals: bad input, and the user errors the CLI prints as one line."""
    from analyzer.report import sections
    from parsers import InputError

    return tuple(getattr(sections, "user_errors", lambda: (InputError,))())


def _where(exc: BaseException) -> dict[str, str]:
    """The exception's type, message and the deepest rlperf line it passed through."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if any(f"/{p}/" in f.filename for p in PACKAGES)
    ]
    frames = frames or traceback.extract_tb(exc.__traceback__)[-1:]
    where = "?"
    if frames:
        last = frames[-1]
        where = f"{_short(last.filename)}:{last.name}"
    return {"kind": type(exc).__name__, "where": where, "message": " ".join(str(exc).split())[:300]}


def _short(filename: str) -> str:
    for p in PACKAGES:
        marker = f"/{p}/"
        if marker in filename:
            return p + "/" + filename.split(marker, 1)[1]
    return Path(filename).name


# --- order invariance ----------------------------------------------------------------------------


def order_case(bank: dict, index: int, job: dict, scratch: Path) -> dict[str, Any]:
    """A Kineto window (lightly damaged half the time) parsed as written and shuffled."""
    from . import mutators

    rng = mutators.rng_for(job["seed"], ORDER_FAMILY, index)
    base = rng.choice(bank["kineto"])
    doc = json.loads(base.data)
    notes = []
    if rng.random() < 0.5:
        notes.append(mutators._json_mutation(doc, rng))
    shuffled = doc
    if isinstance(doc.get("traceEvents"), list):
        shuffled = {**doc, "traceEvents": list(doc["traceEvents"])}
        random.Random(rng.random()).shuffle(shuffled["traceEvents"])
    label = f"{ORDER_FAMILY}#{index} ({base.origin}: {', '.join(notes) or 'as cut'})"
    a = _parse_frame(scratch / base.name, mutators.dumps(doc), job["case_timeout_s"])
    b = _parse_frame(scratch / base.name, mutators.dumps(shuffled), job["case_timeout_s"])
    if a[0] != b[0]:
        return {"outcome": "invariant", "kind": "order", "where": "kineto", "example": label,
                "message": f"as written: {a[0]}, shuffled: {b[0]}"}
    if a[0] != "ok":
        return {"outcome": a[0], **a[2], "example": label}
    if not a[1].equals(b[1], null_equal=True):
        return {
            "outcome": "invariant",
            "kind": "order",
            "where": "kineto",
            "example": label,
            "message": "shuffling the events changes the event table "
                       f"({_first_difference(a[1], b[1])})",
        }
    return {"outcome": "ok"}


def _parse_frame(path: Path, data: bytes, timeout: float):
    """(outcome, canonical event table or None, failure detail)."""
    import parsers

    path.write_bytes(data)
    try:
        with alarm(timeout):
            events = parsers.parse_file(path).events
        return "ok", canonical(events), {}
    except BaseException as exc:
        detail = _classify(exc)
        return detail.pop("outcome"), None, detail
    finally:
        path.unlink(missing_ok=True)


def canonical(events):
    """The event table as a set of rows, with ``depth`` as the multiset of depths per interval:
    of two ranges with the very same start and end, which one encloses the other is not in the
    data (rlperf takes the earlier row as the outer one), so only that pairing may change."""
    import polars as pl

    text = events.with_columns(pl.col(pl.Categorical, pl.Enum).cast(pl.String))
    rows = text.drop("depth")
    rows = rows.sort(rows.columns, nulls_last=True)
    spans = ["pid", "tid", "start_ns", "end_ns"]
    depths = text.group_by(spans).agg(pl.col("depth").sort()).sort(spans)
    return pl.concat([rows.with_columns(pl.lit(None, pl.List(pl.Int16)).alias("depth")),
                      depths.select(spans, "depth")], how="diagonal_relaxed")


def _first_difference(a, b) -> str:
    if a.height != b.height:
        return f"{a.height} vs {b.height} rows"
    for col in a.columns:
        if not a[col].equals(b[col], null_equal=True):
            return f"column {col} differs"
    return "rows differ"


if __name__ == "__main__":
    worker(json.loads(sys.stdin.read()))
