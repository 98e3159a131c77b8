"""Reading one input file safely: only regular files, gzip within rlperf's size limit.

Every parser reads its file through here (:func:`open_bytes`, :func:`gunzip`), and discovery
asks :func:`not_regular` before it opens anything: a FIFO would block, ``/dev/zero`` never ends,
a gzip bomb stops at ``DECOMPRESSED_BYTES``. Kept apart from :mod:`parsers.discover`, which
imports every parser, so that the parsers need not import the module that lists them.
"""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path

from isal import isal_zlib

from .errors import InputError
from .limits import DECOMPRESSED_BYTES


def not_regular(path: Path) -> str | None:
    """Why ``path`` (links followed) is no file to read, or None for a regular file."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file or directory" + (" (a broken link)" if path.is_symlink() else "")
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    return f"not a regular file ({file_kind(mode)}); rlperf reads regular files and folders"


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words."""
    kinds = {
        stat.S_ISREG: "a regular file",
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((name for test, name in kinds.items() if test(mode)), "a special file")


GZIP_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    EOFError,
    zlib.error,
    isal_zlib.error,  # type: ignore[assignment]  # isal's stub declares the class an instance
)
"""What a cut (:class:`GzipCut`, an EOFError), mis-summed (OSError) or corrupt gzip stream raises in
:func:`gunzip`."""

UNNAMED = "<gzip stream>"
"""The name :func:`gunzip`'s errors carry when the caller gave none (``parse_file`` puts the
file's)."""


class GzipCut(EOFError):
    """A gzip stream that ends before its end marker; ``data`` is everything it held before the
    cut."""

    def __init__(self, data: bytes) -> None:
        super().__init__(f"gzip stream ends early (truncated file?) after {len(data):,} bytes")
        self.data = data


def gunzip(raw: bytes, path: str | Path = UNNAMED) -> bytes:
    """Every member of a gzip stream decompressed with ISA-L, at most ``DECOMPRESSED_BYTES``.

    One ISA-L call per member with the limit as its output bound: as fast as a buffer sized from
    the trailer, but the trailer (the size mod 2**32, garbage in a cut stream, anything in a
    crafted one) never sizes an allocation, and a bomb stops at the limit. Past the limit: one
    :class:`InputError` naming it; a cut stream: :class:`GzipCut` with what came before the cut.
    """
    limit = DECOMPRESSED_BYTES.value
    parts: list[bytes] = []
    total = 0
    rest = raw
    while True:
        stream = isal_zlib.decompressobj(wbits=31)
        part = stream.decompress(rest, limit - total + 1)
        total += len(part)
        parts.append(part)
        if total > limit:
            raise InputError(path, over_limit())
        if not stream.eof:
            raise GzipCut(b"".join(parts))
        rest = stream.unused_data
        if rest[:2] != b"\x1f\x8b":  # gzip ignores padding after the last member too
            return parts[0] if len(parts) == 1 else b"".join(parts)


def over_limit() -> str:
    limit = DECOMPRESSED_BYTES
    return (
        f"{limit.what} is over rlperf's limit (more than "
        f"{limit.value:,}); set {limit.env} to raise it"
    )


def open_bytes(path: Path) -> bytes:
    """The whole content of ``path``, gunzipped when needed, within ``DECOMPRESSED_BYTES``;
    unreadable is one :class:`InputError`."""
    problem = not_regular(path)
    if problem:
        raise InputError(path, problem)
    try:
        with path.open("rb") as fh:
            DECOMPRESSED_BYTES.check(path, os.fstat(fh.fileno()).st_size)
            data = fh.read()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        return gunzip(data, path)
    except GZIP_ERRORS as exc:
        raise InputError(path, f"broken gzip stream ({exc})") from None
