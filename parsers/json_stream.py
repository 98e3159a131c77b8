"""The one big array of a JSON document (a Chrome trace's ``traceEvents``) read a block at a time,
so memory is bounded by a block and not by the file (docs/formats-kineto.md, "Streaming").

The file is read (and gunzipped) :data:`BLOCK` bytes of JSON at a time. Before the array, a
vectorised scan (strings by quote parity, nesting by a cumulative sum of brackets) finds the key's
``[`` at the top level. Inside it, the run of complete elements a buffer holds ends at its last
``}`` followed by ``,`` and ``{``; that guess costs two ``rfind`` s and is proved by the decoder
itself: decoded as ``[`` + run + ``]`` from an element's start, the run is valid only when that
``}`` closes an element. A guess that fails, and the array's end, take the exact scan. Every byte
of the document is checked: the elements by the decoder, the bytes between runs as ``,`` and
blank, everything else (the other keys) as one small skeleton document, the array as ``[0]``,
which :meth:`ArrayStream.skeleton` gives the caller to decode.

A document that is itself the array (Chrome's JSON Array Format, ``[{...}, ...]``) is taken when
the caller allows it (``bare``): :attr:`ArrayStream.bare` then says so, and its skeleton is the
array's stand-in alone. Anything else (a cut or corrupt file, an array without its closing
``]``, a non-object element, an element longer than the string limit, nesting near the limit)
raises :class:`NotStreamed`: the caller then reads the file whole, and that reading states the
problem exactly as it always has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np
from isal import isal_zlib

from .errors import InputError
from .limits import DECOMPRESSED_BYTES, STRING_BYTES
from .reading import GZIP_ERRORS, UNNAMED, over_limit

BLOCK = 2**19
"""Bytes of JSON read at a time; tests set it tiny to put a block boundary at every byte."""
_GZIP_READ = 2**20
_TRIES = 64
"""Candidate ``}`` looked at from a buffer's end before the buffer waits for more data."""
_BLANK = b" \t\n\r"
SKELETON_ARRAY = b"[0]"
"""What stands for the array in :meth:`ArrayStream.skeleton`: decoded back, it proves the array
found is the one a whole-document decoder keeps (not a duplicate key's)."""


class NotStreamed(Exception):
    """The document is not one the stream reader takes; read it whole instead."""


def blocks(path: Path) -> Iterator[bytes]:
    """The file's JSON, gunzipped when needed, in pieces of at most :data:`BLOCK` bytes; at most
    ``DECOMPRESSED_BYTES`` in all (past it: the error :func:`~parsers.reading.gunzip` raises)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(2)
            if head == b"\x1f\x8b":
                yield from _gunzipped(fh, head)
                return
            yield head
            while piece := fh.read(BLOCK):
                yield piece
    except OSError:
        raise NotStreamed from None


def _gunzipped(fh: IO[bytes], head: bytes) -> Iterator[bytes]:
    """Every gzip member in turn, as :func:`~parsers.reading.gunzip` reads them; cut or corrupt
    is :class:`NotStreamed`."""
    limit, total = DECOMPRESSED_BYTES.value, 0
    pending = head + fh.read(_GZIP_READ)
    while True:
        stream = isal_zlib.decompressobj(wbits=31)
        ended = False
        while not stream.eof:
            if not pending:
                pending = fh.read(_GZIP_READ)
                ended = not pending
            try:
                part = stream.decompress(pending, BLOCK)
            except GZIP_ERRORS:
                raise NotStreamed from None
            pending = stream.unconsumed_tail
            if part:
                total += len(part)
                if total > limit:
                    raise InputError(UNNAMED, over_limit())
                yield part
            elif ended and not pending:
                raise NotStreamed
        rest = stream.unused_data
        while len(rest) < 2 and (more := fh.read(_GZIP_READ)):
            rest += more
        if rest[:2] != b"\x1f\x8b":
            return
        pending = rest


# --- the exact scan ------------------------------------------------------------------------------

_KINDS = bytearray(256)
_KINDS[ord('"')] = 1
_KINDS[ord("\\")] = 2
for _c in b"{[":
    _KINDS[_c] = 3
for _c in b"}]":
    _KINDS[_c] = 4
_KIND_TABLE = bytes(_KINDS)


def brackets(buf: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the brackets of ``buf`` outside strings, and the nesting depth after each
    (``buf`` starts outside a string at depth 0).

    One translate marks quotes, backslashes and brackets; a quote is escaped when an odd run of
    backslashes precedes it (rare: those few are looked at one by one); a bracket is outside a
    string when an even number of real quotes precedes it.
    """
    kinds = np.frombuffer(buf.translate(_KIND_TABLE), np.uint8)
    pos = np.flatnonzero(kinds)
    kind = kinds[pos]
    quote = kind == 1
    if buf.find(b"\\") >= 0:
        quote &= ~_escaped(buf, pos, kind)
    before = np.cumsum(quote, dtype=np.int64) - quote
    bracket = (kind >= 3) & ((before & 1) == 0)
    where = pos[bracket]
    step = np.where(kind[bracket] == 3, 1, -1).astype(np.int64)
    return where, np.cumsum(step)


def _escaped(buf: bytes, pos: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Which marked positions are quotes escaped by an odd run of backslashes before them."""
    data = np.frombuffer(buf, np.uint8)
    maybe = np.flatnonzero((kind == 1) & (pos > 0))
    maybe = maybe[data[pos[maybe] - 1] == 0x5C]
    escaped = np.zeros(len(pos), dtype=bool)
    for i in maybe.tolist():
        at, run = int(pos[i]) - 1, 0
        while at >= 0 and buf[at] == 0x5C:
            at, run = at - 1, run + 1
        escaped[i] = run % 2 == 1
    return escaped


def _skip_blank(buf: bytes, at: int) -> int:
    while at < len(buf) and buf[at] in _BLANK:
        at += 1
    return at


def _skip_blank_back(buf: bytes, at: int) -> int:
    while at > 0 and buf[at - 1] in _BLANK:
        at -= 1
    return at


def document_array(buf: bytes) -> int | None:
    """Where the ``[`` of a document that is itself an array is (None: ``buf`` is blank so far,
    or the document is no array)."""
    at = _skip_blank(buf, 0)
    return at if at < len(buf) and buf[at] == ord("[") else None


def array_start(buf: bytes, key: bytes) -> int | None:
    """Where the ``[`` of ``key``'s array is in the top-level object ``buf`` begins (None: not
    in ``buf`` yet); :class:`NotStreamed` when the top level is no object or ends without it."""
    where, depth = brackets(buf)
    if not len(where):
        return None
    if buf[int(where[0])] != ord("{"):
        raise NotStreamed
    closed = np.flatnonzero(depth < 1)
    end = int(where[closed[0]]) if len(closed) else len(buf)
    quoted = b'"' + key + b'"'
    for at in where[(depth == 2) & (where < end)].tolist():
        if buf[at] == ord("[") and _key_before(buf, at, quoted):
            return int(at)
    if len(closed):
        raise NotStreamed
    return None


def _key_before(buf: bytes, at: int, quoted: bytes) -> bool:
    """``quoted`` is the key of the value starting at ``at`` (its opening quote unescaped)."""
    colon = _skip_blank_back(buf, at)
    if colon == 0 or buf[colon - 1] != ord(":"):
        return False
    end = _skip_blank_back(buf, colon - 1)
    start = end - len(quoted)
    if start < 0 or buf[start:end] != quoted:
        return False
    run = start
    while run > 0 and buf[run - 1] == 0x5C:
        run -= 1
    return (start - run) % 2 == 0


# --- the array -----------------------------------------------------------------------------------


class ArrayStream:
    """The elements of ``key``'s array, decoded a run at a time by ``decode`` (``[`` + run +
    ``]`` → list); :meth:`skeleton` the rest of the document, once the elements are read.
    ``bare``: a document that is itself the array is taken too, and :attr:`bare` says it was.

    ``decode`` may be swapped between runs (a caller past a count limit only validates the rest).
    Its msgspec errors are the proof a guessed run fails; any other exception it raises passes.
    """

    def __init__(
        self, path: Path, key: bytes, decode: Callable[[bytes], list[Any]], bare: bool = False
    ) -> None:
        self.path, self.key, self.decode = path, key, decode
        self.allow_bare, self.bare = bare, False
        self.prefix = b""
        self.suffix = b""
        self.count = 0
        self._first = True

    def skeleton(self) -> bytes:
        """The document with the array replaced by :data:`SKELETON_ARRAY`."""
        return self.prefix + SKELETON_ARRAY + self.suffix

    def runs(self) -> Iterator[list[Any]]:
        """Each decoded run of elements, in file order."""
        pieces = blocks(self.path)
        buf = b""
        for piece in pieces:
            buf += piece
            at = self._start(buf)
            if at is not None:
                break
        else:
            raise NotStreamed
        self.prefix, buf = buf[:at], buf[at + 1 :]
        for piece in pieces:
            buf += piece
            while True:
                run = self._fast(buf)
                if run is None:
                    break
                items, buf = run
                yield items
        items, end = self._exact(buf, at_end=True)
        if items:
            yield items
        self.suffix = buf[end + 1 :]

    def _start(self, buf: bytes) -> int | None:
        if self.allow_bare and _skip_blank(buf, 0) < len(buf):
            at = document_array(buf)
            if at is not None:
                self.bare = True
                return at
        return array_start(buf, self.key)

    def _fast(self, buf: bytes) -> tuple[list[Any], bytes] | None:
        """The run before ``buf``'s last separator, decoded, and what follows it; None when
        ``buf`` has no separator yet. A guess the decoder refuses takes the exact scan."""
        start = self._run_start(buf)
        if start is None:
            return None
        cut = self._last_separator(buf, start)
        if cut is None:
            if len(buf) <= 2 * BLOCK + STRING_BYTES.value:
                return None
            return self._exactly(buf)
        if cut - start > STRING_BYTES.value:
            return self._exactly(buf)
        try:
            items = self.decode(b"".join((b"[", memoryview(buf)[start:cut], b"]")))
        except msgspec.DecodeError:
            return self._exactly(buf)
        except msgspec.ValidationError:
            raise NotStreamed from None
        self._took(len(items))
        return items, buf[cut:]

    def _exactly(self, buf: bytes) -> tuple[list[Any], bytes] | None:
        """:meth:`_exact` within the array: None when ``buf`` holds no complete element yet."""
        items, end = self._exact(buf, at_end=False)
        return (items, buf[end:]) if items else None

    def _run_start(self, buf: bytes) -> int | None:
        """Where the next element starts: after blanks (and a comma, past the first element);
        None when ``buf`` does not reach it, or the array ends there (the exact scan's case)."""
        at = _skip_blank(buf, 0)
        if not self._first:
            if at == len(buf) or buf[at] != ord(","):
                return None
            at = _skip_blank(buf, at + 1)
        return at if at < len(buf) and buf[at] == ord("{") else None

    @staticmethod
    def _last_separator(buf: bytes, start: int) -> int | None:
        """Just past the last ``}`` of ``buf`` followed by ``,`` and ``{`` (blanks between)."""
        end = len(buf)
        for _ in range(_TRIES):
            close = buf.rfind(b"}", start, end)
            if close < 0:
                return None
            comma = _skip_blank(buf, close + 1)
            if comma < len(buf) and buf[comma] == ord(","):
                brace = _skip_blank(buf, comma + 1)
                if brace < len(buf) and buf[brace] == ord("{"):
                    return close + 1
            end = close
        return None

    def _exact(self, buf: bytes, at_end: bool) -> tuple[list[Any], int]:
        """The complete elements of ``buf`` (from an element boundary) found by the exact scan,
        decoded, and where they end; ``at_end``: the array's ``]`` must be in ``buf``, and the
        position returned is its."""
        where, depth = brackets(buf)
        chars = np.frombuffer(buf, np.uint8)[where]
        opening = (chars == ord("{")) | (chars == ord("["))
        closing = np.flatnonzero(depth < 0)
        stop = int(where[closing[0]]) if len(closing) else None
        if stop is None and at_end:
            raise NotStreamed
        inside = where < stop if stop is not None else np.ones(len(where), dtype=bool)
        opens = where[inside & opening & (depth == 1)]
        closes = where[inside & ~opening & (depth == 0)]
        if (chars[inside & opening & (depth == 1)] != ord("{")).any():
            raise NotStreamed
        limit = STRING_BYTES.value
        if len(opens) > len(closes) and (stop is not None or len(buf) - opens[-1] > limit):
            raise NotStreamed
        if not len(closes):
            if stop is not None:
                _check_blank(buf[:stop])
            return [], (stop if stop is not None else 0)
        begin, end = int(opens[0]), int(closes[-1]) + 1
        if self._run_start(buf) != begin or (closes - opens[: len(closes)] + 1).max() > limit:
            raise NotStreamed
        if stop is not None:
            _check_blank(buf[end:stop])
        try:
            items = self.decode(b"".join((b"[", memoryview(buf)[begin:end], b"]")))
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise NotStreamed from None
        self._took(len(items))
        return items, (stop if stop is not None else end)

    def _took(self, n: int) -> None:
        self.count += n
        self._first = self._first and n == 0


def _check_blank(gap: bytes) -> None:
    """The bytes between the last element (or ``[``) and ``]``: blank, no trailing comma."""
    if gap.strip(_BLANK):
        raise NotStreamed
