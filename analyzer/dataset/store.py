"""Writing and reading an rlperf dataset: a run's parsed tables as Parquet, partitioned by rank,
with a manifest (the format is a contract: docs/architecture.md, "The dataset").

One source is written by :func:`write_source` alone (no other file is touched), so that parsing
workers (a process pool, Ray tasks) can each write their own sources into one folder; the
manifest, written last by :func:`write_manifest`, is what makes the folder a dataset.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Iterable, Iterator
from functools import cache
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import polars as pl

import parsers
from parsers import InputError, ParsedSource
from parsers.discover import PARSER_MODULES, parser_for, parser_modules

FORMAT = "rlperf-dataset"
VERSION = 1
"""The layout version: a dataset of another version is refused (exit 2), never misread."""
MANIFEST = "manifest.json"
ROW = "_row"
"""The event's position in its source's table: partitions are put back in the parser's order."""
HASH_CHUNK = 1 << 22
Compression = Literal["lz4", "zstd"]
EVENTS_COMPRESSION: Compression = "lz4"
METRICS_COMPRESSION: Compression = "zstd"


# --- identity ----------------------------------------------------------------------------------


@cache
def parser_version(fmt: str) -> str:
    """A hash of the parser's code and the event contract: tables another version wrote are
    stale (the per-file cache misses them, a dataset warns)."""
    digest = hashlib.sha1()
    module = parser_for(fmt)
    files = {_file_of(module)}
    files |= {_file_of(m) for m in parser_modules() if m.__name__.startswith(module.__name__)}
    root = Path(parsers.__file__).parent
    files |= {root / "events.py", root / "source.py", root / "nccl.py"}
    for f in sorted(files):
        digest.update(f.read_bytes())
    digest.update(",".join(m.__name__ for m in PARSER_MODULES).encode())
    return digest.hexdigest()[:16]


def _file_of(module: ModuleType) -> Path:
    """The file a parser module's code is in (a module built without one cannot be hashed)."""
    if module.__file__ is None:
        raise ValueError(f"{module.__name__} has no source file")
    return Path(module.__file__)


def content_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


IDENTITY = ("path", "resolved", "size", "mtime_ns", "sha256", "format", "parser_version")
"""The keys of a source record that name its bytes and the parser that read them."""


def identity(path: Path, fmt: str, *, hashed: bool = True) -> dict[str, Any]:
    """What names a source's bytes: where it was (as given and resolved), size, modification
    time, content hash (None when not ``hashed``: the per-file cache keys on the rest), and the
    parser that read it."""
    st = path.stat()
    return {
        "path": str(path),
        "resolved": str(path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256": content_hash(path) if hashed else None,
        "format": fmt,
        "parser_version": parser_version(fmt),
    }


def rlperf_version() -> str:
    try:
        return metadata.version("rlperf")
    except metadata.PackageNotFoundError:
        return "unknown"


# --- writing -----------------------------------------------------------------------------------


def write_source(
    parsed: ParsedSource, root: Path, index: int | None = None, *, hashed: bool = True
) -> dict[str, Any]:
    """Write one source's tables into the dataset folder ``root`` as source ``index`` (default:
    the ``source`` its events carry): ``events/rank=R/part-NNNNN.parquet`` per rank the parser
    stated (-1: none), ``metrics/part-NNNNN.parquet`` and ``sources/part-NNNNN.json`` (identity,
    meta, warnings, rows per partition). Returns the source's manifest record. Touches no file
    of another source, so parallel workers can call it on one folder."""
    if index is None:
        index = int(parsed.events["source"][0]) if parsed.events.height else 0
    part = f"part-{index:05d}"
    events = parsed.events.with_row_index(ROW)
    pieces = events.partition_by("rank", as_dict=True) if events.height else {(-1,): events}
    partitions: dict[str, int] = {}
    for (rank,), piece in sorted(pieces.items(), key=lambda kv: kv[0]):
        folder = root / "events" / f"rank={rank}"
        folder.mkdir(parents=True, exist_ok=True)
        piece.write_parquet(folder / f"{part}.parquet", compression=EVENTS_COMPRESSION)
        partitions[str(rank)] = piece.height
    (root / "metrics").mkdir(parents=True, exist_ok=True)
    parsed.metrics.write_parquet(
        root / "metrics" / f"{part}.parquet", compression=METRICS_COMPRESSION
    )
    if parsed.ingested is None:
        ident, warnings = identity(parsed.path, parsed.format, hashed=hashed), parsed.warnings
    else:
        ident = {k: parsed.ingested[k] for k in IDENTITY}
        warnings = parsed.ingested["warnings"]
    record = {
        "index": index,
        **ident,
        "events": partitions,
        "metrics": parsed.metrics.height,
    }
    (root / "sources").mkdir(parents=True, exist_ok=True)
    info = {**record, "meta": parsed.meta, "warnings": warnings}
    (root / "sources" / f"{part}.json").write_text(json.dumps(to_json(info)))
    return record


def renumber(
    root: Path, record: dict[str, Any], index: int, warnings: list[str]
) -> dict[str, Any]:
    """Source ``record["index"]`` of ``root`` made source ``index`` (the run chosen after its
    sources were written, copies or other runs left out), with ``warnings``: its files renamed,
    their ``source`` column rewritten, its record rewritten. One partition at a time, so the
    driver choosing the run never holds a source's events. Renumbering in increasing order of
    ``index`` never overwrites a source still to be moved (a source's new number is at most
    its old one)."""
    old = int(record["index"])
    if old != index:
        for rank in record["events"]:
            folder = root / "events" / f"rank={rank}"
            _moved(folder / f"part-{old:05d}.parquet", folder / f"part-{index:05d}.parquet",
                   index, EVENTS_COMPRESSION)
        folder = root / "metrics"
        _moved(folder / f"part-{old:05d}.parquet", folder / f"part-{index:05d}.parquet",
               index, METRICS_COMPRESSION)
    before = root / "sources" / f"part-{old:05d}.json"
    info = json.loads(before.read_text())
    info |= {"index": index, "warnings": to_json(list(warnings))}
    (root / "sources" / f"part-{index:05d}.json").write_text(json.dumps(info))
    if old != index:
        before.unlink()
    return {**record, "index": index}


def _moved(src: Path, dst: Path, index: int, compression: Compression) -> None:
    table = pl.read_parquet(src)
    column = pl.lit(index, dtype=table.schema["source"]).alias("source")
    table.with_columns(column).write_parquet(dst, compression=compression)
    src.unlink()


def remove_source(root: Path, record: dict[str, Any]) -> None:
    """A written source's files removed (a source of another run, a copy read once)."""
    part = f"part-{int(record['index']):05d}"
    files = [root / "events" / f"rank={r}" / f"{part}.parquet" for r in record["events"]]
    for f in [*files, root / "metrics" / f"{part}.parquet", root / "sources" / f"{part}.json"]:
        f.unlink(missing_ok=True)
    for r in record["events"]:
        folder = root / "events" / f"rank={r}"
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def write_manifest(
    root: Path,
    records: list[dict[str, Any]],
    *,
    run: dict[str, Any] | None = None,
    notes: Iterable[str] = (),
    unknown: Iterable[Path] = (),
) -> dict[str, Any]:
    """The manifest over the sources already written (``records``, as :func:`write_source`
    returned them): written last and atomically, it is what makes ``root`` a dataset. Each note
    once: a dataset ingested again says its own notes and its run's choice says some again."""
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "rlperf": rlperf_version(),
        "run": run or {},
        "notes": list(dict.fromkeys(notes)),
        "unknown": [str(p) for p in unknown],
        "sources": sorted(records, key=lambda r: r["index"]),
    }
    tmp = root / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, root / MANIFEST)
    return manifest


def write_dataset(
    sources: list[ParsedSource],
    root: Path,
    *,
    hashed: bool = True,
    run: dict[str, Any] | None = None,
    notes: Iterable[str] = (),
    unknown: Iterable[Path] = (),
) -> dict[str, Any]:
    """Every source (numbered in list order) and the manifest."""
    root.mkdir(parents=True, exist_ok=True)
    records = [write_source(s, root, i, hashed=hashed) for i, s in enumerate(sources)]
    return write_manifest(root, records, run=run, notes=notes, unknown=unknown)


TAGS = ("$tuple", "$set", "$path", "$items")
"""How meta values JSON lacks are kept, so that a source's meta reads back equal to what its
parser returned (a tuple stays a tuple, an int key an int)."""


def to_json(value: Any) -> Any:
    """``value`` with tuples, sets, paths and non-string keys tagged; anything else JSON lacks
    as its text."""
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: to_json(v) for k, v in value.items()}
        return {"$items": [[to_json(k), to_json(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [to_json(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {"$set": [to_json(v) for v in sorted(value, key=repr)]}
    if isinstance(value, Path):
        return {"$path": str(value)}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _from_json(obj: dict[str, Any]) -> Any:
    if len(obj) == 1:
        (tag, inner), = obj.items()
        if tag == "$tuple":
            return tuple(inner)
        if tag == "$set":
            return set(inner)
        if tag == "$path":
            return Path(inner)
        if tag == "$items":
            return {_hashable(k): v for k, v in inner}
    return obj


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


# --- reading -----------------------------------------------------------------------------------


def is_dataset(path: Path) -> bool:
    """A folder with a manifest (what it holds is checked when it is read)."""
    return path.is_dir() and (path / MANIFEST).is_file()


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest, checked: not JSON, not an rlperf dataset, another layout version, or a
    field a reader uses missing or of another type is an InputError naming the manifest (and
    the field, and the source record it is in)."""
    where = root / MANIFEST
    try:
        manifest = json.loads(where.read_text())
    except OSError as exc:
        raise InputError(where, f"cannot be read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(where, f"is not a dataset manifest (not JSON: {exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(where, f"is not an rlperf dataset manifest (no \"format\": \"{FORMAT}\")")
    if not _is(manifest.get("version"), int) or manifest["version"] != VERSION:
        raise InputError(
            where,
            f"is dataset layout version {manifest.get('version')!r}; this rlperf reads version "
            f"{VERSION}: run rlperf ingest again",
        )
    problem = next(_manifest_problems(manifest), None)
    if problem is not None:
        raise InputError(where, f"{problem}: the manifest is damaged (run rlperf ingest again)")
    sources = manifest["sources"]
    if [r["index"] for r in sources] != list(range(len(sources))):
        raise InputError(where, "has a damaged source list (sources are not numbered 0..N-1)")
    return manifest


Kind = type | tuple[type, ...]
TOP_FIELDS: dict[str, Kind] = {"run": dict, "notes": list, "unknown": list, "sources": list}
"""The manifest's fields a reader uses, besides ``format`` and ``version``."""
RECORD_FIELDS: dict[str, Kind] = {
    "index": int, "path": str, "resolved": str, "size": int, "mtime_ns": int,
    "sha256": (str, type(None)), "format": str, "parser_version": str, "events": dict,
    "metrics": int,
}
"""A source record's fields (:data:`IDENTITY` among them) and their JSON types."""
KIND_NAMES = {int: "an integer", str: "a string", dict: "an object", list: "a list",
              type(None): "null", bool: "true or false", float: "a number"}


def _kind(value: object) -> str:
    return KIND_NAMES.get(type(value), type(value).__name__)


def _wanted(kind: Kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(KIND_NAMES[k] for k in kinds)


def _is(value: object, kind: Kind) -> bool:
    """JSON's ``true`` is no integer, though Python's bool is one."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


def _field_problem(holder: dict[str, Any], name: str, kind: Kind) -> str | None:
    if name not in holder:
        return f"lacks {name!r}"
    if not _is(holder[name], kind):
        return f"has {name!r} as {_kind(holder[name])}, not {_wanted(kind)}"
    return None


def _manifest_problems(manifest: dict[str, Any]) -> Iterator[str]:
    """What is wrong with the fields a reader uses, the first problem first (a field missing or
    of another type would be an internal error wherever it is read)."""
    for name, kind in TOP_FIELDS.items():
        if problem := _field_problem(manifest, name, kind):
            yield problem
    for name in ("notes", "unknown"):
        bad = [v for v in manifest[name] if not isinstance(v, str)]
        if bad:
            yield f"has {name!r} holding {_kind(bad[0])}, not only strings"
    choice = manifest["run"].get("choice")
    if choice is not None and not isinstance(choice, str):
        yield f"has the run's 'choice' as {_kind(choice)}, not a string or null"
    for position, record in enumerate(manifest["sources"]):
        if problem := _record_problem(record):
            yield f"has a damaged source list: {_which(position, record)} {problem}"


def _record_problem(record: object) -> str | None:
    if not isinstance(record, dict):
        return f"is {_kind(record)}, not an object"
    for name, kind in RECORD_FIELDS.items():
        if problem := _field_problem(record, name, kind):
            return problem
    for rank, rows in record["events"].items():
        if not RANK_KEY.fullmatch(rank) or not _is(rows, int):
            return (f"has 'events' holding {rank!r}: {json.dumps(rows)}, not a rank's number and "
                    "its row count")
    return None


RANK_KEY = re.compile(r"-?[0-9]+")


def _which(position: int, record: object) -> str:
    """A record as the user finds it in the file: its place in the list and its path."""
    path = record.get("path") if isinstance(record, dict) else None
    return f"source {position}" + (f" ({path})" if isinstance(path, str) else "")


def read_sources(root: Path, manifest: dict[str, Any]) -> list[ParsedSource]:
    """Every source's tables as the parser returned them (row order and dtypes included)."""
    _unlisted(root, manifest["sources"])
    return [_read_source(root, record) for record in manifest["sources"]]


PARTS = ("events/rank=*/part-*.parquet", "metrics/part-*.parquet", "sources/part-*.json")


def _unlisted(root: Path, records: list[dict[str, Any]]) -> None:
    """A part file no source record lists is damage: a record deleted from the manifest would
    otherwise leave its rank out of every report in silence."""
    listed = {Path("sources", f"part-{int(r['index']):05d}.json") for r in records}
    for r in records:
        part = f"part-{int(r['index']):05d}"
        listed |= {Path("events", f"rank={rank}", f"{part}.parquet") for rank in r["events"]}
        listed.add(Path("metrics", f"{part}.parquet"))
    for pattern in PARTS:
        for found in sorted(root.glob(pattern)):
            if found.relative_to(root) not in listed:
                raise InputError(found, "is a partition no source of the manifest lists: the "
                                 "dataset is damaged (run rlperf ingest again)")


def rank_partition(root: Path, rank: int, index: int, rows: int) -> pl.DataFrame:
    """Source ``index``'s rows in partition ``rank``, checked against the manifest's ``rows``,
    the event table's schema and the partition's rank (with their :data:`ROW` column)."""
    path = root / "events" / f"rank={rank}" / f"part-{index:05d}.parquet"
    return _rank_checked(_schema_checked(_table(path, rows), path), path, rank)


def _read_source(root: Path, record: dict[str, Any]) -> ParsedSource:
    index = int(record["index"])
    part = f"part-{index:05d}"
    pieces = [rank_partition(root, int(r), index, n) for r, n in record["events"].items()]
    events = pieces[0] if len(pieces) == 1 else pl.concat(pieces).sort(ROW)
    info = _info(root / "sources" / f"{part}.json")
    _format_checked(root, record, info)
    metrics = root / "metrics" / f"{part}.parquet"
    source_col = pl.lit(index, dtype=pl.UInt32).alias("source")
    return ParsedSource(
        path=_path(record),
        format=record["format"],
        events=events.drop(ROW).with_columns(source_col),
        meta=info["meta"],
        metrics=_metrics_checked(_table(metrics, record["metrics"]), metrics).with_columns(
            source_col
        ),
        warnings=list(info["warnings"]),
        ingested={**{k: record[k] for k in IDENTITY}, "warnings": list(info["warnings"])},
    )


def _format_checked(root: Path, record: dict[str, Any], info: dict[str, Any]) -> None:
    """The format the manifest gives a source is the one whose parser wrote its tables: an
    edited format would read them as another format's (other traits, other numbers) with only
    a stale warning. The source's own record and the parser version say which wrote them."""
    fmt, name = record["format"], Path(record["path"]).name
    try:
        parser_for(fmt)
    except KeyError:
        raise InputError(root / MANIFEST, f"says {name} is {fmt!r}, not a format rlperf reads: "
                         "the manifest is damaged (run rlperf ingest again)") from None
    wrote = info.get("format", fmt)
    if wrote == fmt and parser_version(fmt) != record["parser_version"]:
        wrote = _written_by(record["parser_version"]) or fmt
    if wrote != fmt:
        raise InputError(root / MANIFEST, f"says {name} is {fmt}, but its tables were written by "
                         f"the {wrote} parser: the manifest is damaged (run rlperf ingest again)")


def _written_by(version: str) -> str | None:
    """The format whose parser is now at ``version`` (None: none is, another rlperf's)."""
    return next((m.FORMAT for m in parser_modules() if parser_version(m.FORMAT) == version), None)


def _table(path: Path, rows: int) -> pl.DataFrame:
    """A partition file, its row count checked against the manifest's."""
    try:
        table = pl.read_parquet(path)
    except FileNotFoundError:
        missing = "is missing from the dataset (a partition the manifest lists)"
        raise InputError(path, missing) from None
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise InputError(path, f"is a damaged dataset partition: {exc}") from None
    if table.height != rows:
        raise InputError(
            path, f"holds {table.height} rows where the manifest says {rows}: the dataset is "
            "damaged (run rlperf ingest again)"
        )
    return table


def _schema_checked(table: pl.DataFrame, path: Path) -> pl.DataFrame:
    """A partition's columns: the event table's and :data:`ROW` (see :func:`_columns`)."""
    from parsers.events import EVENT_SCHEMA  # deferred: the contract's names load on first use

    return _columns(table, path, {**EVENT_SCHEMA, ROW: pl.UInt32()}, "event table")


def _metrics_checked(table: pl.DataFrame, path: Path) -> pl.DataFrame:
    from parsers.source import METRICS_SCHEMA  # deferred: as the event contract

    return _columns(table, path, dict(METRICS_SCHEMA), "metrics table")


def _columns(
    table: pl.DataFrame, path: Path, wanted: dict[str, pl.DataType], what: str
) -> pl.DataFrame:
    """The ``wanted`` columns by name, in that order, their dtypes checked (another dtype would
    fail deep in an analysis, an internal error, instead of naming the damaged file). A file
    rewritten by another Parquet tool may order its columns otherwise or add its own: Parquet
    columns are named, so their order is no damage, and a column the contract lacks is one no
    analysis reads, left out (as a reader selecting the contract's columns would)."""
    for name, dtype in wanted.items():
        have = table.schema.get(name)
        if have is None:
            raise InputError(path, f"lacks the column {name!r} ({dtype}) of the {what}: the "
                             "dataset is damaged (run rlperf ingest again)")
        if have != dtype:
            raise InputError(path, f"has column {name!r} as {have} where the {what} has "
                             f"{dtype}: the dataset is damaged (run rlperf ingest again)")
    return table if table.columns == list(wanted) else table.select(list(wanted))


def _rank_checked(table: pl.DataFrame, path: Path, rank: int) -> pl.DataFrame:
    """A partition holds only its own rank's rows (a file moved into another partition is
    damage, not another rank)."""
    if table.height and not (table["rank"] == rank).all():
        raise InputError(path, f"holds rows of another rank than its partition's ({rank}): the "
                         "dataset is damaged (run rlperf ingest again)")
    return table


def _info(path: Path) -> dict[str, Any]:
    try:
        info = json.loads(path.read_text(), object_hook=_from_json)
    except FileNotFoundError:
        missing = "is missing from the dataset (a source the manifest lists)"
        raise InputError(path, missing) from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(path, f"is a damaged dataset source record: {exc}") from None
    if not isinstance(info, dict) or not isinstance(info.get("meta"), dict) \
            or not isinstance(info.get("warnings"), list):
        raise InputError(path, "is a damaged dataset source record (no meta or warnings)")
    return info


def _path(record: dict[str, Any]) -> Path:
    """The path as it was given at ingest while it still names the same file from here (so a
    report names it as the first analysis did), else the resolved one."""
    given = Path(record["path"])
    return given if str(given.resolve()) == record["resolved"] else Path(record["resolved"])


# --- freshness ---------------------------------------------------------------------------------


def stale(
    root: Path, manifest: dict[str, Any], *, copied_to: Path | None = None
) -> dict[int, str]:
    """Source index → why its tables no longer say what the source would: the file changed
    since ingest (size or time differ and so does its content, when a hash was kept) or this
    rlperf parses its format differently. A source no longer there is not stale: a dataset is
    kept so that it can outlive its sources. ``copied_to``: the dataset is being ingested into
    that folder, which copies its tables as they are (the warning says so, and how to read the
    sources anew instead)."""
    out: dict[int, str] = {}
    reads = ("its tables are copied from the dataset, not read anew" if copied_to is not None
             else "the report reads the tables ingested then")
    again = reingest(manifest, copied_to or root)
    for r in manifest["sources"]:
        name = Path(r["path"]).name
        if changed(r):
            out[r["index"]] = (f"dataset {root}: {name} changed since it was ingested; {reads} "
                               f"(to read it anew, ingest the sources into the dataset: {again})")
        elif _other_parser(r):
            out[r["index"]] = (
                f"dataset {root}: {name} was ingested by another version of the {r['format']} "
                f"parser; {reads.replace('ingested then', 'it wrote')} (to parse it with this "
                f"rlperf, ingest the sources into the dataset: {again})"
            )
    return out


SHOWN_SOURCES = 3
"""Past this many sources, the command that ingests them again names their common folder."""


def reingest(manifest: dict[str, Any], into: Path) -> str:
    """The command that reads a dataset's sources anew into ``into``: by their paths (as
    :func:`_path` finds them from here), or past :data:`SHOWN_SOURCES` their common folder with
    the run's ``--run`` choice (the paths themselves are the chosen run alone)."""
    paths = [str(_path(r)) for r in manifest["sources"]]
    choice = None
    if len(paths) > SHOWN_SOURCES:
        try:
            paths = [os.path.commonpath(paths) or "."]
        except ValueError:  # relative and absolute paths mixed
            paths = [os.path.commonpath([str(Path(p).absolute()) for p in paths])]
        choice = manifest["run"].get("choice")
    run = f" --run {shlex.quote(choice)}" if choice else ""
    named = " ".join(shlex.quote(p) for p in paths)
    return f"rlperf ingest {named}{run} -o {shlex.quote(str(into))}"


def changed(record: dict[str, Any]) -> bool:
    """The source file differs from what was ingested (size or time differ and so does the
    content, when a hash was kept); a file no longer there has not changed."""
    path = Path(record["resolved"])
    try:
        st = path.stat()
    except OSError:
        return False
    if (st.st_size, st.st_mtime_ns) == (record["size"], record["mtime_ns"]):
        return False
    if st.st_size != record["size"] or not record.get("sha256"):
        return True
    return content_hash(path) != record["sha256"]


def _other_parser(record: dict[str, Any]) -> bool:
    try:
        return parser_version(record["format"]) != record["parser_version"]
    except (KeyError, ValueError):
        return True
