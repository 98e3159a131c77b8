"""The per-file parse cache: each file parsed once kept as a dataset of one source in
``$RLPERF_CACHE_DIR/parsed/KEY/``, where ``KEY`` is the file's identity (resolved path, size,
modification time) and its parser's version, so unchanged files skip parsing and a parser
change misses. Read by the driver, written by whoever parsed the file on this machine (the
driver or a process of its pool)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import polars as pl

from parsers import InputError, ParsedSource
from parsers.cachedir import cache_dir

from .store import FORMAT, VERSION, parser_version, read_manifest, read_sources, write_dataset


def enabled() -> bool:
    return os.environ.get("RLPERF_NO_CACHE", "") in ("", "0")


def key(path: Path, fmt: str) -> str:
    """The file's identity and its parser's version (the dataset layout's version too: an entry
    of another layout is never read as this one)."""
    st = path.stat()
    ident = (
        f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{fmt}|{parser_version(fmt)}"
        f"|{FORMAT}-{VERSION}"
    )
    return hashlib.sha1(ident.encode()).hexdigest()


def get(path: Path, fmt: str, index: int) -> ParsedSource | None:
    """The cached parse of ``path`` as source ``index``, or None when there is none or it
    cannot be read (the file is parsed again). Not marked as read from a dataset: it stands for
    the file as it is now, which an ingest describes itself."""
    folder = cache_dir("parsed", create=False) / key(path, fmt)
    try:
        manifest = read_manifest(folder)
        (hit,) = read_sources(folder, manifest)
    except (InputError, OSError, ValueError, pl.exceptions.PolarsError):
        return None
    column = pl.lit(index, dtype=pl.UInt32).alias("source")
    return replace(
        hit,
        path=path,
        events=hit.events.with_columns(column),
        metrics=hit.metrics.with_columns(column),
        ingested=None,
    )


def put(parsed: ParsedSource) -> None:
    """Written beside its place and renamed into it, so a reader never sees half an entry; a
    cache that cannot be written is no cache, not an error."""
    try:
        folder = cache_dir("parsed") / key(parsed.path, parsed.format)
        if folder.exists():
            return
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            write_dataset([parsed], tmp, hashed=False)
            tmp.rename(folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        return
