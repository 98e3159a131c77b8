"""Find the sources of a run and tell each one's format from its content.

Every parser module in :data:`PARSER_MODULES` declares ``FORMAT`` (its name), ``sniff(head,
path) -> int`` (0 = not mine, up to 100 = certainly mine; ``head`` is the first bytes of the
file, already gunzipped) and ``parse(path, source=0) -> ParsedSource``. The highest score wins;
the extension only breaks ties. Files nobody claims are listed as unknown, never fatal.
"""

from __future__ import annotations

import importlib
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from isal import igzip, isal_zlib

from .errors import InputError

PARSER_MODULES: tuple[str, ...] = (
    "parsers.kineto",
    "parsers.nsys",
    "parsers.nsys_rep",
    "parsers.nsys_stats",
    "parsers.logs.verl",
    "parsers.logs.openrlhf",
    "parsers.logs.trl",
    "parsers.logs.nemo_rl",
    "parsers.logs.slime",
    "parsers.logs.areal",
    "parsers.logs.roll",
    "parsers.logs.deepspeed_chat",
    "parsers.spans",
)
"""Parser modules, in the order ties are broken."""

HEAD_BYTES = 256 * 1024
SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", "node_modules", ".rlperf-cache"})


@dataclass
class Discovery:
    """The sources found under some paths: (path, format) pairs, plus files nobody claimed."""

    sources: list[tuple[Path, str]] = field(default_factory=list)
    unknown: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def parser_modules() -> list[ModuleType]:
    return [importlib.import_module(name) for name in PARSER_MODULES]


def parser_for(fmt: str) -> ModuleType:
    for module in parser_modules():
        if fmt == module.FORMAT:
            return module
    raise KeyError(fmt)


def read_head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of the file's content, gunzipped when the file is gzip."""
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
        ext_bonus = 1 if any(str(path).endswith(e) for e in getattr(module, "EXTENSIONS", ())) else 0
        key = (score + ext_bonus, -order, module.FORMAT)
        if best is None or key > best:
            best = key
    return best[2] if best else None


def discover(paths: list[str | Path]) -> Discovery:
    """Walk files and directories (recursively) and sniff every file found."""
    found = Discovery()
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise InputError(path, "no such file or directory")
        files = [path] if path.is_file() else sorted(_walk(path))
        for file in files:
            resolved = file.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            head = read_head(file)
            if _is_own_output(head):
                found.notes.append(f"{file}: rlperf's own output (ground truth or report), not an input; skipped")
                continue
            fmt = sniff(file, head)
            if fmt is None:
                found.unknown.append(file)
            else:
                found.sources.append((file, fmt))
    _drop_shadowed(found)
    return found


_OWN_OUTPUT = re.compile(rb'^\s*\{\s*"(?:format|schema)"\s*:\s*"rlperf-(?:truth|report|compare|crosscheck)/')


def _is_own_output(head: bytes) -> bool:
    """Ground-truth files and JSON reports rlperf writes sit beside traces; they are not inputs."""
    return _OWN_OUTPUT.match(head[:512]) is not None


def _walk(root: Path):
    for child in root.iterdir():
        if child.name.startswith(".") or child.name in SKIP_DIRS:
            continue
        if child.is_dir():
            yield from _walk(child)
        elif child.is_file():
            yield child


def _drop_shadowed(found: Discovery) -> None:
    """Keep one input per capture: an ``.nsys-rep`` beside its own SQLite export is read once."""
    by_stem = {(p.parent, p.name.split(".")[0]): fmt for p, fmt in found.sources if fmt == "nsys-sqlite"}
    kept = []
    for path, fmt in found.sources:
        if fmt == "nsys-rep" and (path.parent, path.name.split(".")[0]) in by_stem:
            found.notes.append(f"{path}: read through its SQLite export beside it")
            continue
        kept.append((path, fmt))
    found.sources = kept


GZIP_ERRORS: tuple[type[Exception], ...] = (OSError, EOFError, zlib.error, isal_zlib.error)
"""What a cut (EOFError), mis-summed (OSError) or corrupt gzip stream raises in :func:`gunzip`."""


def gunzip(raw: bytes) -> bytes:
    """A whole gzip stream decompressed with ISA-L, into one buffer sized from the trailer."""
    size = int.from_bytes(raw[-4:], "little")  # gzip ISIZE: the content size mod 2**32
    if len(raw) > 18 and 0 < size < 8 * 2**30:
        return isal_zlib.decompress(raw, wbits=31, bufsize=size + 1)
    return igzip.decompress(raw)


def open_bytes(path: Path) -> bytes:
    """The whole content of ``path``, gunzipped when needed; unreadable is one :class:`InputError`."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        return gunzip(data)
    except GZIP_ERRORS as exc:
        raise InputError(path, f"broken gzip stream ({exc})") from None
