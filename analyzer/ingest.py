"""Find and parse the sources of a run: discovery, a Parquet cache, a process per file.

The cache key is the file's identity (resolved path, size, modification time) plus a hash of
the parser code, so a re-analysis of unchanged files skips parsing and a parser change
invalidates it. Bad input surfaces as :class:`parsers.InputError` naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl

from parsers import InputError, ParsedSource, discover, parse_file
from parsers.cachedir import cache_dir
from parsers.discover import PARSER_MODULES, parser_for, parser_modules

PARALLEL_MIN_BYTES = 32 * 1024 * 1024
"""Below this much input, a process pool costs more than it saves."""


@dataclass
class Ingested:
    sources: list[ParsedSource] = field(default_factory=list)
    unknown: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def ingest(
    paths: Iterable[str | Path],
    *,
    jobs: int | None = None,
    use_cache: bool | None = None,
    progress: Callable[[Path], None] | None = None,
) -> Ingested:
    """Discover every source under ``paths`` and parse it (in parallel, through the cache)."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise InputError(".", "no input paths given")
    found = discover(paths)
    _explain_explicit_unknowns(paths, found.unknown)
    if not found.sources:
        raise InputError(paths[0], "no trace, Nsight Systems export or framework log rlperf can read was found")
    use_cache = _cache_enabled() if use_cache is None else use_cache
    todo = [(i, p, fmt) for i, (p, fmt) in enumerate(found.sources)]
    results: dict[int, ParsedSource] = {}
    if use_cache:
        for i, p, fmt in list(todo):
            hit = _cache_get(p, fmt, i)
            if hit is not None:
                results[i] = hit
                todo.remove((i, p, fmt))
                if progress:
                    progress(p)
    for i, parsed in _parse_all(todo, jobs, progress):
        results[i] = parsed
        if use_cache:
            _cache_put(parsed)
    return Ingested(sources=[results[i] for i in sorted(results)], unknown=found.unknown, notes=found.notes)


def _explain_explicit_unknowns(paths: list[Path], unknown: list[Path]) -> None:
    """A file the user named that nobody claims gets its parser's own error, not silence."""
    named = {p.resolve() for p in paths if p.is_file()}
    for path in unknown:
        if path.resolve() not in named:
            continue
        for module in parser_modules():
            if any(path.name.endswith(ext) for ext in getattr(module, "EXTENSIONS", ())):
                module.parse(path)  # raises the parser's specific InputError
        raise InputError(path, "not a format rlperf reads (no parser recognised its content)")


def _parse_one(job: tuple[int, Path, str]) -> tuple[int, ParsedSource]:
    index, path, fmt = job
    return index, parse_file(path, fmt, source=index)


def _parse_all(todo: list[tuple[int, Path, str]], jobs: int | None, progress) -> Iterable[tuple[int, ParsedSource]]:
    total = sum(p.stat().st_size for _, p, _ in todo)
    workers = min(len(todo), jobs or os.cpu_count() or 1)
    if workers <= 1 or total < PARALLEL_MIN_BYTES:
        for job in todo:
            result = _parse_one(job)
            if progress:
                progress(job[1])
            yield result
        return
    import multiprocessing

    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for index, parsed in pool.map(_parse_one, todo):
            if progress:
                progress(parsed.path)
            yield index, parsed


# --- cache -------------------------------------------------------------------------------------


def _cache_enabled() -> bool:
    return os.environ.get("RLPERF_NO_CACHE", "") in ("", "0")


@cache
def _code_version(fmt: str) -> str:
    """A hash of the parser's code and the event contract: a change invalidates the cache."""
    digest = hashlib.sha1()
    module = parser_for(fmt)
    files = {Path(module.__file__)}
    files |= {Path(m.__file__) for m in parser_modules() if m.__name__.startswith(module.__name__)}
    import parsers

    root = Path(parsers.__file__).parent
    files |= {root / "events.py", root / "source.py", root / "nccl.py"}
    for f in sorted(files):
        digest.update(f.read_bytes())
    digest.update(",".join(PARSER_MODULES).encode())
    return digest.hexdigest()[:16]


def _cache_key(path: Path, fmt: str) -> str:
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{fmt}|{_code_version(fmt)}"
    return hashlib.sha1(ident.encode()).hexdigest()


def _cache_get(path: Path, fmt: str, index: int) -> ParsedSource | None:
    folder = cache_dir("parsed", create=False) / _cache_key(path, fmt)
    try:
        info = json.loads((folder / "source.json").read_text())
        events = pl.read_parquet(folder / "events.parquet")
        metrics = pl.read_parquet(folder / "metrics.parquet")
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None
    index_col = pl.lit(index, dtype=pl.UInt32)
    return ParsedSource(
        path=path,
        format=fmt,
        events=events.with_columns(index_col.alias("source")),
        meta=info["meta"],
        metrics=metrics.with_columns(index_col.alias("source")),
        warnings=info["warnings"],
    )


def _cache_put(parsed: ParsedSource) -> None:
    try:
        folder = cache_dir("parsed") / _cache_key(parsed.path, parsed.format)
        tmp = folder.with_suffix(".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        parsed.events.write_parquet(tmp / "events.parquet", compression="lz4")
        parsed.metrics.write_parquet(tmp / "metrics.parquet")
        info: dict[str, Any] = {"meta": parsed.meta, "warnings": parsed.warnings}
        (tmp / "source.json").write_text(json.dumps(info, default=_jsonable))
        if folder.exists():
            return
        tmp.rename(folder)
    except OSError:
        return


def _jsonable(value: object) -> object:
    """Sets as lists; anything else JSON lacks (paths, …) as its text."""
    return list(value) if isinstance(value, set) else str(value)
