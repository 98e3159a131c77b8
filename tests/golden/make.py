"""Writes the golden reports that ``tests/test_golden.py`` compares against.

    .venv/bin/python -m tests.golden.make            # regenerate everything (about a minute)
    .venv/bin/python -m tests.golden.make --check    # compare only, print the differences

``RLPERF_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_golden.py`` does the same as
the first line. Each input (a bundled sample run folder, or one corpus file on its own) goes
through the real command line (``analyzer.cli.main``) once per format, in a worker process of a
pool of two; the three formats of one input share a fresh parse cache, so the input is parsed
once. What is stored, and why, is in ``tests/test_golden.py``'s docstring.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus"
GOLDEN = Path(__file__).resolve().parent
REPORTS = GOLDEN / "reports"
MANIFEST = GOLDEN / "manifest.json"
FORMATS = {"text": "txt", "json": "json", "md": "md"}
WORKERS = 2
CORPUS_MAX_BYTES = 2_500_000
"""Corpus files larger than this are left out: the two above it (a 3 MB Kineto trace and a
2.7 MB Nsight export) took 40 of the walk's 180 worker-seconds on the loaded 2-core machine
(``make test`` budget); the manifest lists them under ``left_out``."""
PLACEHOLDERS = ((str(CORPUS), "<corpus>"), (str(REPO), "<repo>"))
"""The only thing normalised: where the checkout and the corpus lie on this machine. Inputs are
named relative to the checkout (``sample_traces/...``, ``../shared/corpus/...``, the same on every
machine), so a report that names one wraps its lines the same way wherever the checkout lies; the
placeholders catch a path rlperf makes absolute itself."""


@dataclass(frozen=True)
class Report:
    status: int
    body: str
    """The report itself when status is 0, else the command's stderr."""


def sample_inputs() -> dict[str, Path]:
    root = REPO / "sample_traces"
    return {f"samples/{kind}/{p.name}": p for kind in ("runs", "synthetic")
            for p in sorted((root / kind).iterdir()) if p.is_dir()}


def corpus_files() -> dict[str, Path]:
    if not CORPUS.is_dir():
        return {}
    return {f"corpus/{p.relative_to(CORPUS)}": p for p in sorted(CORPUS.rglob("*"))
            if p.is_file() and p.stat().st_size <= CORPUS_MAX_BYTES}


def corpus_left_out() -> list[str]:
    if not CORPUS.is_dir():
        return []
    return [f"corpus/{p.relative_to(CORPUS)}" for p in sorted(CORPUS.rglob("*"))
            if p.is_file() and p.stat().st_size > CORPUS_MAX_BYTES]


def normalise(text: str) -> str:
    for path, placeholder in PLACEHOLDERS:
        text = text.replace(path, placeholder)
    return text


@contextlib.contextmanager
def _argv(args: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = ["rlperf", *args]
    try:
        yield
    finally:
        sys.argv = saved


def _cli(args: list[str]) -> tuple[int, str]:
    """``rlperf ARGS`` in this process: (exit status, stderr)."""
    from analyzer.cli import main

    err = io.StringIO()
    with _argv(args), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main()
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
    return status, err.getvalue()


def render(path: Path) -> dict[str, Report]:
    """``path``'s report in every format, through the command line, with a parse cache of its
    own: the text report from a fresh parse (which fills the cache), the others from one more
    analysis that reads the cache and writes them all (several ``-o``), so that every report is
    also one of a cached parse and of a command writing several."""
    out: dict[str, Report] = {}
    with tempfile.TemporaryDirectory(prefix="rlperf-golden-") as tmp:
        os.environ["RLPERF_CACHE_DIR"] = str(Path(tmp) / "cache")
        os.environ.pop("RLPERF_NO_CACHE", None)
        first, *rest = FORMATS
        for group in ([first], rest):
            targets = {fmt: Path(tmp) / f"report.{FORMATS[fmt]}" for fmt in group}
            named = ["--format", first] if group == [first] else []
            outputs = [word for t in targets.values() for word in ("--output", str(t))]
            status, err = _cli(["analyze", os.path.relpath(path, REPO), *named, *outputs,
                                "--quiet", "--jobs", "1"])
            for fmt, target in targets.items():
                body = target.read_text(encoding="utf-8") if status == 0 else err
                out[fmt] = Report(status, normalise(body))
    return out


def _worker_init() -> None:
    os.chdir(REPO)
    sys.path.insert(0, str(REPO))
    os.environ.pop("GITHUB_ACTIONS", None)
    os.environ["COLUMNS"] = "120"


def render_all(inputs: dict[str, Path], workers: int = WORKERS) -> dict[str, dict[str, Report]]:
    """Every input rendered, a few at a time, each in a process that imports rlperf once."""
    names = sorted(inputs, key=lambda n: -_size(inputs[n]))  # the slowest first
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_init) as pool:
        done = dict(zip(names, pool.map(render, [inputs[n] for n in names]), strict=True))
    return dict(sorted(done.items()))


def _size(path: Path) -> int:
    return (
        sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        if path.is_dir()
        else path.stat().st_size
    )


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def report_file(name: str, fmt: str) -> Path:
    return REPORTS / f"{name.replace('/', '__')}.{FORMATS[fmt]}.gz"


def read_report(name: str, fmt: str) -> str:
    return gzip.decompress(report_file(name, fmt).read_bytes()).decode("utf-8")


def write_report(name: str, fmt: str, text: str) -> None:
    """Gzipped with no timestamp, so an unchanged report is an unchanged file."""
    path = report_file(name, fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)


def nsys_version() -> str | None:
    """The nsys on PATH: ``.nsys-rep`` reports depend on it (it does the export)."""
    exe = shutil.which("nsys")
    if exe is None:
        return None
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or None


def write(rendered: dict[str, dict[str, Report]]) -> None:
    """Every report of every input that analyses (exit 0) gzipped, and the manifest: per input
    and format the SHA-256 and line count, the corpus files refused (exit status and first
    error line, not compared) and those left out for size."""
    kept = {n: r for n, r in rendered.items() if all(x.status == 0 for x in r.values())}
    refused = {
        n: {fmt: f"{x.status}: {x.body.splitlines()[0] if x.body else ''}" for fmt, x in r.items()}
        for n, r in rendered.items()
        if n not in kept
    }
    wanted = {report_file(n, fmt) for n in kept for fmt in FORMATS}
    for old in REPORTS.glob("*.gz"):
        if old not in wanted:
            old.unlink()
    for name, reports in kept.items():
        for fmt, report in reports.items():
            write_report(name, fmt, report.body)
    manifest = {
        "formats": list(FORMATS),
        "corpus_max_bytes": CORPUS_MAX_BYTES,
        "nsys": nsys_version(),
        "left_out": corpus_left_out(),
        "refused": refused,
        "inputs": {
            n: {
                fmt: {"sha256": digest(x.body), "lines": x.body.count("\n")} for fmt, x in r.items()
            }
            for n, r in kept.items()
        },
    }
    MANIFEST.write_text(
        json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def read_manifest() -> dict[str, Any]:
    return json.loads(MANIFEST.read_text(encoding="utf-8"))


def inputs() -> dict[str, Path]:
    """What the generator renders: every bundled sample run, every corpus file within the size
    bound."""
    return {**sample_inputs(), **corpus_files()}


def expected_inputs() -> dict[str, Path]:
    """What the test renders: the inputs the manifest holds reports of."""
    every = inputs()
    return {n: every[n] for n in read_manifest()["inputs"] if n in every}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the stored reports, write nothing"
    )
    args = parser.parse_args()
    rendered = render_all(inputs() if not args.check else expected_inputs())
    if not args.check:
        write(rendered)
        total = sum(p.stat().st_size for p in [MANIFEST, *REPORTS.glob("*.gz")])
        print(
            f"wrote {len(rendered)} inputs x {len(FORMATS)} formats to {GOLDEN.relative_to(REPO)} "
            f"({total:,} bytes)"
        )
        return
    from tests.test_golden import differences

    found = differences(rendered)
    print("\n".join(found) if found else "no differences")
    raise SystemExit(1 if found else 0)


if __name__ == "__main__":
    main()
