"""Find the sources of a run and tell each one's format from its content.

Every parser module in :data:`PARSER_MODULES` declares ``FORMAT`` (its name), ``sniff(head,
path) -> int`` (0 = not mine, up to 100 = certainly mine; ``head`` is the first bytes of the
file, already gunzipped) and ``parse(path, source=0) -> ParsedSource``. The highest score wins;
the extension only breaks ties. Files nobody claims are listed as unknown, never fatal.

Only regular files are read: a FIFO would block, ``/dev/zero`` never ends. Named on the command
line, anything else is one :class:`InputError`; found in a folder, it is skipped and counted.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from .errors import InputError
from .reading import not_regular

if TYPE_CHECKING:
    PARSER_MODULES: tuple[ModuleType, ...]
    """Parser modules, in the order ties are broken (:func:`_parser_modules`)."""


@cache
def _parser_modules() -> tuple[ModuleType, ...]:
    """Parser modules, in the order ties are broken, imported on first use (they import polars,
    which ``rlperf --help`` and a kept report do without). Add one line (and its import) per
    module."""
    from . import kineto, nsys, nsys_rep, nsys_stats, spans  # deferred: polars
    from .logs import (  # deferred: polars
        areal,
        deepspeed_chat,
        nemo_rl,
        openrlhf,
        roll,
        slime,
        trl,
        verl,
    )

    return (
        kineto,
        nsys,
        nsys_rep,
        nsys_stats,
        verl,
        openrlhf,
        trl,
        nemo_rl,
        slime,
        areal,
        roll,
        deepspeed_chat,
        spans,
    )


def __getattr__(name: str) -> tuple[ModuleType, ...]:
    if name == "PARSER_MODULES":
        return _parser_modules()
    raise AttributeError(f"module 'parsers.discover' has no attribute {name!r}")


HEAD_BYTES = 256 * 1024
SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "node_modules", ".rlperf-cache"})


@dataclass
class Discovery:
    """The sources found under some paths: (path, format) pairs, plus files nobody claimed."""

    sources: list[tuple[Path, str]] = field(default_factory=list)
    unknown: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    """Files found in a folder and not read: (path, why)."""
    named: set[Path] = field(default_factory=set)
    """The resolved files the user named: their failures stop the run, a folder's are skipped."""
    datasets: list[Path] = field(default_factory=list)
    """rlperf datasets (``rlperf ingest``'s folders) met inside the folders given: not read."""


def parser_modules() -> list[ModuleType]:
    return list(_parser_modules())


def parser_for(fmt: str) -> ModuleType:
    for module in parser_modules():
        if fmt == module.FORMAT:
            return module
    raise KeyError(fmt)


def format_traits(fmt: str) -> frozenset[str]:
    """The traits (``parsers.source.FORMAT_TRAITS``) the parser of ``fmt`` declares; none for a
    format no parser reads."""
    try:
        return frozenset(getattr(parser_for(fmt), "TRAITS", frozenset()))
    except KeyError:
        return frozenset()


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of the file's content, gunzipped when the file is gzip."""
    problem = not_regular(path)
    if problem:
        raise InputError(path, problem)
    try:
        with path.open("rb") as fh:
            raw = fh.read(size)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, size)
        except zlib.error:
            return b""
    return raw


def sniff(path: Path, head: bytes | None = None) -> str | None:
    """The format of ``path`` by content, or None when no parser claims it."""
    head = read_head(path) if head is None else head
    best: tuple[int, int, str] | None = None
    for order, module in enumerate(parser_modules()):
        score = int(module.sniff(head, path))
        if score <= 0:
            continue
        ext_bonus = (
            1 if any(str(path).endswith(e) for e in getattr(module, "EXTENSIONS", ())) else 0
        )
        key = (score + ext_bonus, -order, module.FORMAT)
        if best is None or key > best:
            best = key
    return best[2] if best else None


def discover(paths: Iterable[str | Path]) -> Discovery:
    """Walk files and directories (recursively) and sniff every file found."""
    found = Discovery()
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        problem = not_regular(path)
        if problem and not path.is_dir():
            raise InputError(path, problem)
        refuse_dataset_part(path)
        if problem is None:
            found.named.add(path.resolve())
        for file in [path] if problem is None else _walk(path, found, set()):
            resolved = file.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            _classify(file, found)
    _drop_shadowed(found)
    note = datasets_note(found.datasets)
    if note:
        found.notes.append(note)
    return found


def _classify(file: Path, found: Discovery) -> None:
    try:
        head = read_head(file)
    except InputError as exc:
        if file.resolve() in found.named:
            raise
        found.skipped.append((file, exc.problem))
        return
    if _is_own_output(head):
        if file.resolve() in found.named:
            raise InputError(file, NAMED_OWN_OUTPUT)
        found.notes.append(
            f"{file}: rlperf's own output (ground truth or report), not an input; skipped"
        )
        return
    fmt = sniff(file, head)
    if fmt is not None:
        found.sources.append((file, fmt))
    elif file.resolve() not in found.named and (damage := _gzip_damage(file, head)):
        found.skipped.append((file, damage))
    else:
        found.unknown.append(file)


def _gzip_damage(file: Path, head: bytes) -> str | None:
    """Why a file named ``.gz`` that no parser claims is damaged rather than another kind of
    file (a tarball stays unknown): its bytes are not gzip, or their start does not inflate.
    A damaged rank trace in a run's folder is then said with the problem (a named one gets its
    parser's own error)."""
    if not file.name.lower().endswith(".gz"):
        return None
    try:
        with file.open("rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if magic != b"\x1f\x8b":
        return "not gzip data (the name ends .gz)"
    return "damaged gzip data (its start does not inflate)" if not head else None


NAMED_OWN_OUTPUT = (
    "rlperf's own output (a report or ground truth), not a trace: `rlperf audit --baseline` reads "
    "a JSON report; give analyze and compare the traces it was made from"
)
"""A report named as an input: it once met "no trace … rlperf can read was found"."""

SKIPPED_SHOWN = 3
"""How many skipped files the one line about them names."""


def skipped_note(skipped: list[tuple[Path, str]]) -> str | None:
    """One line for every file of a folder that was not read: the count and the first few, why."""
    if not skipped:
        return None
    shown = "; ".join(f"{path} ({why})" for path, why in skipped[:SKIPPED_SHOWN])
    more = len(skipped) - SKIPPED_SHOWN
    tail = f"; and {more} more" if more > 0 else ""
    noun = "file" if len(skipped) == 1 else "files"
    return f"skipped {len(skipped)} {noun} found in the folders given: {shown}{tail}"


DATASET_MANIFEST = "manifest.json"
_DATASET = re.compile(rb'^\s*\{\s*"format"\s*:\s*"rlperf-dataset"')


def is_dataset_folder(folder: Path) -> bool:
    """A folder ``rlperf ingest`` wrote (its manifest says so; the dataset layer checks the
    rest when the folder is read as a dataset)."""
    try:
        with (folder / DATASET_MANIFEST).open("rb") as fh:
            return _DATASET.match(fh.read(512)) is not None
    except OSError:
        return False


DATASET_ENTRIES = frozenset(
    {DATASET_MANIFEST, f".{DATASET_MANIFEST}.tmp", "events", "metrics", "sources", "products"}
)
"""What a dataset holds at its top (analyzer/dataset/store.py writes the manifest, events/,
metrics/ and sources/; analyzer/dataset/products.py the kept reports): ``rlperf ingest``
replaces these and nothing else, and a path inside one of them is part of a dataset."""
_SOURCE_RECORD = re.compile(r"part-\d{5}\.json")
NO_MANIFEST = "looks like an rlperf dataset but has no manifest.json: re-ingest it"


def looks_like_dataset(folder: Path) -> bool:
    """Laid out as a dataset (events/, metrics/, sources/ of part-NNNNN.json records), manifest
    or not: what is left of one whose manifest was deleted."""
    try:
        records = [p.name for p in (folder / "sources").iterdir()]
    except OSError:
        return False
    return (
        bool(records)
        and all(_SOURCE_RECORD.fullmatch(n) for n in records)
        and (folder / "events").is_dir()
        and (folder / "metrics").is_dir()
    )


def refuse_dataset_part(path: Path) -> None:
    """A path that is part of a dataset (its manifest, a partition, a source record) or a
    dataset without its manifest: one line saying what to give, instead of "no trace found"
    or "not a format rlperf reads" about files rlperf wrote."""
    full = path.absolute()
    if full.is_dir() and not is_dataset_folder(full) and looks_like_dataset(full):
        raise InputError(path, NO_MANIFEST)
    for child, folder in zip([full, *full.parents], full.parents, strict=False):
        if child.name not in DATASET_ENTRIES:
            continue
        shown = folder
        if not path.is_absolute() and folder.is_relative_to(Path.cwd()):
            shown = folder.relative_to(Path.cwd())
        if is_dataset_folder(folder):
            raise InputError(path, f"is inside the rlperf dataset {shown}: give {shown}")
        if looks_like_dataset(folder):
            raise InputError(shown, NO_MANIFEST)


def datasets_note(datasets: list[Path]) -> str | None:
    """One line for the datasets met in the folders given: their tables are derived from
    traces (often the very traces beside them), so they are not read as sources."""
    if not datasets:
        return None
    shown = ", ".join(str(p) for p in sorted(datasets)[:SKIPPED_SHOWN])
    more = len(datasets) - SKIPPED_SHOWN
    tail = f" and {more} more" if more > 0 else ""
    what = "an rlperf dataset" if len(datasets) == 1 else f"{len(datasets)} rlperf datasets"
    return (
        f"{what} found in the folders given, not read as sources: {shown}{tail} "
        "(to analyse a dataset, give its folder as the only path)"
    )


_OWN_OUTPUT = re.compile(
    rb'^\s*\{\s*"(?:format|schema)"\s*:\s*"rlperf-(?:truth|report|compare|crosscheck)/'
)


def _is_own_output(head: bytes) -> bool:
    """Ground-truth files and JSON reports rlperf writes sit beside traces; they are not inputs."""
    return _OWN_OUTPUT.match(head[:512]) is not None


def _walk(root: Path, found: Discovery, visited: set[tuple[int, int]]) -> Iterator[Path]:
    """Every file under ``root``, sorted; special files are skipped and counted, linked
    folders entered once (a link to a parent would loop)."""
    st = root.stat()
    if (st.st_dev, st.st_ino) in visited:
        return
    visited.add((st.st_dev, st.st_ino))
    try:
        children = sorted(root.iterdir())
    except OSError as exc:
        found.skipped.append((root, f"cannot list: {exc.strerror or exc}"))
        return
    for child in children:
        if child.name.startswith(".") or child.name in SKIP_DIRS:
            continue
        problem = not_regular(child)
        if problem is None:
            yield child
        elif child.is_dir() and is_dataset_folder(child):
            found.datasets.append(child)
        elif child.is_dir():
            yield from _walk(child, found, visited)
        else:
            found.skipped.append((child, problem))


def _drop_shadowed(found: Discovery) -> None:
    """Keep one input per capture: an ``.nsys-rep`` beside its own SQLite export is read once."""
    by_stem = {
        (p.parent, p.name.split(".")[0]): fmt for p, fmt in found.sources if fmt == "nsys-sqlite"
    }
    kept = []
    for path, fmt in found.sources:
        if fmt == "nsys-rep" and (path.parent, path.name.split(".")[0]) in by_stem:
            found.notes.append(f"{path}: read through its SQLite export beside it")
            continue
        kept.append((path, fmt))
    found.sources = kept
