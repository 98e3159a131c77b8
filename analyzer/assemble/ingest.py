"""Find and parse the sources of a run: discovery, a Parquet cache, a process per file.

The cache key is the file's identity (resolved path, size, modification time) plus a hash of
the parser code, so a re-analysis of unchanged files skips parsing and a parser change
invalidates it. Bad input surfaces as :class:`parsers.InputError` naming the file when the user
named the file; a file found in a folder that fails to parse is skipped and counted in one note,
so one stray file does not stop a whole folder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parsers import InputError, ParsedSource, discover, parse_file
from parsers.discover import Discovery, parser_modules, skipped_note

from .. import dataset, engines
from ..dataset import cache as parse_cache
from ..engines.base import Written, written


@dataclass
class Ingested:
    sources: list[ParsedSource] = field(default_factory=list)
    unknown: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    """A dataset's run record (its ``--run`` choice), when a dataset was read."""


_WRITES: ContextVar[tuple[Path, ...]] = ContextVar("rlperf_writes", default=())


@contextmanager
def writing(outputs: Iterable[Path | None]) -> Iterator[None]:
    """The files the command will write: :func:`ingest` refuses a run that reads one of them
    (``-o`` naming an input, a hard link or a symbolic link to it would overwrite the trace)."""
    token = _WRITES.set(tuple(p for p in outputs if p is not None))
    try:
        yield
    finally:
        _WRITES.reset(token)


def ingest(
    paths: Iterable[str | Path],
    *,
    jobs: int | None = None,
    use_cache: bool | None = None,
    progress: Callable[[Path], None] | None = None,
    copying: bool = False,
) -> Ingested:
    """Discover every source under ``paths`` and parse it (in parallel, through the cache).
    ``copying``: a dataset among them is being ingested into the folder :func:`writing`
    names."""
    given = [Path(p) for p in paths]
    if not given:
        raise InputError(".", "no input paths given")
    if any(dataset.is_dataset(p) for p in given):
        return _from_dataset(given, _WRITES.get()[0] if copying and _WRITES.get() else None)
    found = _found(given)
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
    for i, parsed in engines.selected().parse(todo, jobs, progress):
        if isinstance(parsed, InputError):
            _skip_or_raise(found, found.sources[i][0], parsed)
            continue
        results[i] = parsed
        if use_cache:
            _cache_put(parsed)
    notes = _notes(given, found, bool(results))
    return Ingested(
        sources=[results[i] for i in sorted(results)], unknown=found.unknown, notes=notes
    )


@dataclass
class Staged:
    """A run's sources written into a folder by the workers that parsed them, before the run
    is chosen and the manifest written (``rlperf ingest``): no source's events are held."""

    written: dict[int, Written] = field(default_factory=dict)
    """Source number (in path order) → what its worker wrote."""
    paths: dict[int, Path] = field(default_factory=dict)
    unknown: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def write_into(
    paths: Iterable[str | Path],
    root: Path,
    *,
    jobs: int | None = None,
    use_cache: bool | None = None,
    progress: Callable[[Path], None] | None = None,
) -> Staged:
    """Discover every source under ``paths`` and have the engine's workers parse and write each
    into the folder ``root`` (a cached parse is copied there by this process, one at a time)."""
    given = [Path(p) for p in paths]
    if not given:
        raise InputError(".", "no input paths given")
    found = _found(given)
    use_cache = _cache_enabled() if use_cache is None else use_cache
    todo = [(i, p, fmt) for i, (p, fmt) in enumerate(found.sources)]
    staged = Staged(paths={i: p for i, p, _ in todo}, unknown=found.unknown)
    if use_cache:
        for i, p, fmt in list(todo):
            hit = _cache_get(p, fmt, i)
            if hit is not None:
                staged.written[i] = _staged_hit(hit, root, i)
                todo.remove((i, p, fmt))
                if progress:
                    progress(p)
    for i, wrote in engines.selected().write(todo, root, jobs, progress, keep=use_cache):
        if isinstance(wrote, engines.OutputError):
            raise wrote
        if isinstance(wrote, InputError):
            _skip_or_raise(found, found.sources[i][0], wrote)
            continue
        staged.written[i] = wrote
    staged.notes = _notes(given, found, bool(staged.written))
    return staged


def _staged_hit(hit: ParsedSource, root: Path, index: int) -> Written:
    return written(hit, dataset.write_source(hit, root, index))


def _found(given: list[Path]) -> Discovery:
    found = discover(given)
    _in_path_order(found)
    _explain_explicit_unknowns(given, found.unknown)
    _refuse_overwrite(found.sources, _WRITES.get())
    return found


def _notes(given: list[Path], found: Discovery, any_read: bool) -> list[str]:
    """The run's notes (what discovery said, the files skipped); no source read is an error."""
    note = skipped_note(found.skipped)
    if not any_read:
        why = f" ({note})" if note else ""
        raise InputError(
            given[0],
            f"no trace, Nsight Systems export or framework log rlperf can read was found{why}",
        )
    return [*found.notes, *([note] if note else [])]


def _from_dataset(given: list[Path], into: Path | None) -> Ingested:
    """A dataset read in place of its sources (``into``: ingested into that folder): a source
    changed since, or parsed by another parser version, keeps its tables with a warning saying
    so."""
    root = next(p for p in given if dataset.is_dataset(p))
    if len(given) > 1:
        raise InputError(root, "is an rlperf dataset: give it as the only path of its run")
    if into is not None:
        _refuse_inside(root, into)
    manifest = dataset.read_manifest(root)
    sources = dataset.read_sources(root, manifest)
    for index, why in dataset.stale(root, manifest, copied_to=into).items():
        sources[index].warnings.append(why)
    return Ingested(sources=sources, unknown=[Path(u) for u in manifest["unknown"]],
                    notes=list(manifest["notes"]), run=dict(manifest["run"]))


def _refuse_inside(root: Path, into: Path) -> None:
    """A dataset written inside the dataset it copies would be a folder the dataset does not
    list: the next ingest into ``root`` refuses it as a foreign file, and a reader of ``root``
    would have a second copy of its run inside it."""
    if root.resolve() in into.resolve().parents:
        raise InputError(into, f"is inside the dataset {root}, the input of this ingest: name a "
                         f"folder outside {root}")


def _in_path_order(found: Discovery) -> None:
    """Sources, skipped files and notes sorted by path (part by part, as a folder is walked): the
    run (source numbers, every list in the report) is the same whatever order the files were
    named in."""
    found.sources.sort()
    found.skipped.sort()
    found.unknown.sort()
    found.notes.sort()


def _skip_or_raise(found: Discovery, path: Path, error: InputError) -> None:
    """A file the user named stops the run; one found in a folder is skipped and counted."""
    if path.resolve() in found.named:
        raise error
    found.skipped.append((path, error.problem))


def _refuse_overwrite(sources: list[tuple[Path, str]], outputs: tuple[Path, ...]) -> None:
    """Checked before anything is parsed: the same file (by device and inode, so through links)."""
    for output in outputs:
        try:
            out = output.stat()
        except OSError:
            continue
        for path, _ in sources:
            st = path.stat()
            if (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino):
                same = "" if output.absolute() == path.absolute() else f" (the same file as {path})"
                raise InputError(
                    output,
                    f"is an input of this run{same}; writing there would overwrite it: "
                    "name another output file",
                )


def _explain_explicit_unknowns(paths: list[Path], unknown: list[Path]) -> None:
    """A file the user named that nobody claims gets its parser's own error, not silence."""
    named = {p.resolve() for p in paths if p.is_file()}
    for path in unknown:
        if path.resolve() not in named:
            continue
        for module in parser_modules():
            if any(path.name.endswith(ext) for ext in getattr(module, "EXTENSIONS", ())):
                parse_file(path, module.FORMAT)  # raises the parser's specific InputError
        raise InputError(path, "not a format rlperf reads (no parser recognised its content)")


# --- cache (analyzer.dataset.cache) --------------------------------------------------------------

_cache_enabled = parse_cache.enabled
_cache_key = parse_cache.key
_cache_get = parse_cache.get
_cache_put = parse_cache.put
