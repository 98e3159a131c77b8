"""A console log as a frame of clean lines, and the bookkeeping of lines that cannot be read.

Framework logs reach us through Ray, terminals and copy-pastes: ANSI colour codes, Ray actor
prefixes ``(TaskRunner pid=14640)`` / ``(WorkerDict pid=1609, ip=10.0.0.2)``, Ray's dedup
suffix ``[repeated 16x across cluster]`` and tqdm's ``\\r`` redraws. :func:`lines_frame` removes
all of that with column expressions (no Python loop per line) and keeps what the prefix said
(actor, pid, ip) in columns, so parsers see the text the framework printed.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from ..errors import InputError
from ..events import as_int
from ..reading import open_bytes
from ..source import ParsedSource
from .progress import describe, stop_point

ANSI = r"\x1b\[[0-9;?]*[ -/]*[@-~]"
RAY_PREFIX = (
    r"^(?<prefix>(?:"
    + ANSI
    + r")*\((?:(?<actor>[^()\s]+) )?pid=(?<pid>\d+)?(?:, ip=(?<ip>[^)\s]+))?\)(?:"
    + ANSI
    + r")* ?)"
)
REPEATED = (
    r"\s*(?:" + ANSI + r")*\s*\[repeated (?<repeat>\d+)x across cluster\](?:" + ANSI + r")*\s*$"
)

LINES_SCHEMA = pl.Schema({
    "line": pl.UInt32(),
    "text": pl.String(),
    "actor": pl.String(),
    "pid": pl.Int64(),
    "ip": pl.String(),
    "repeat": pl.Int32(),
})
"""One row per printed line (a ``\\r`` redraw counts as its own row, with its file line number)."""

DOCUMENT_SUFFIXES = (".md", ".markdown", ".rst", ".adoc", ".py")
"""Documents and source code: they quote or format log lines, and are never a log."""
_TITLE = re.compile(rb"\A\s*(?:#{1,6} \S|---\r?\n)")
_MARKUP = re.compile(rb"(?m)^(?:#{1,6} \S|\s{0,3}(?:```|~~~))")


def is_document(head: bytes, path: Path) -> bool:
    """Whether the file is a document (a README, a PROVENANCE note, these docs, a script) rather
    than a log: it may quote log lines, but a log never has a Markdown or source name, nor opens
    with a heading (or front matter) followed by more headings or fenced code. Every log sniffer
    refuses it."""
    if Path(path).suffix.lower() in DOCUMENT_SUFFIXES:
        return True
    return _TITLE.match(head) is not None and len(_MARKUP.findall(head)) >= 2


WARN_LISTED = 5
"""How many unreadable lines a warning names before it only counts the rest."""


def read_text(path: Path) -> tuple[str, bool]:
    """The file's text (gunzipped, undecodable bytes replaced) and whether it ends with a
    newline."""
    raw = open_bytes(path)
    if b"\x00" in raw[:4096]:
        raise InputError(path, "binary content, not a text log")
    return raw.decode("utf-8", errors="replace"), raw.endswith(b"\n")


def open_log(path: Path, fmt: str, framework: str) -> tuple[ParsedSource, pl.DataFrame]:
    """The empty result for a log file and its clean lines."""
    path = Path(path)
    text, _ = read_text(path)
    out = ParsedSource(path=path, format=fmt, meta={"framework": framework})
    return out, lines_frame(text, out)


def lines_frame(text: str, out: ParsedSource | None = None) -> pl.DataFrame:
    """Clean lines with their 1-based file line numbers and the Ray prefix split off.

    A Ray pid or repeat count past its column's range is left empty and counted into ``out``.
    """
    frame = pl.DataFrame({"text": text.split("\n")}, schema={"text": pl.String()})
    frame = frame.with_row_index("line", offset=1).with_columns(pl.col("line").cast(pl.UInt32))
    if text.endswith("\n"):
        frame = frame.slice(0, frame.height - 1)
    if "\r" in text:
        frame = (
            frame.with_columns(pl.col("text").str.split("\r"))
            .explode("text")
            .filter(pl.col("text").str.len_bytes() > 0)
        )
    texts = frame["text"]
    n = texts.len()
    actor = pl.Series("actor", [None] * n, dtype=pl.String)
    pid = pl.Series("pid", [None] * n, dtype=pl.Int64)
    ip = pl.Series("ip", [None] * n, dtype=pl.String)
    repeat = pl.Series("repeat", [None] * n, dtype=pl.Int32)

    where = _rows(texts.str.contains(r"^(?:\x1b\[[0-9;]*m)*\((?:\S+ )?pid=\d*[,)]"))
    if where.len():
        sub = texts.gather(where)
        groups = sub.str.extract_groups(RAY_PREFIX).struct.unnest()
        actor = actor.scatter(where, groups["actor"])
        pids = groups["pid"].cast(pl.Int64, strict=False)
        _count_unusable(out, "Ray pid", groups["pid"], pids)
        pid = pid.scatter(where, pids)
        ip = ip.scatter(where, groups["ip"])
        texts = texts.scatter(where, sub.str.slice(groups["prefix"].str.len_chars().fill_null(0)))
    where = _rows(texts.str.contains("[repeated ", literal=True))
    if where.len():
        sub = texts.gather(where)
        raw = sub.str.extract(REPEATED, 1)
        counts = raw.cast(pl.Int64, strict=False)
        counts = pl.select(
            pl.when(pl.lit(counts).is_between(0, 2**31 - 1)).then(pl.lit(counts))
        ).to_series()
        _count_unusable(out, "Ray repeat count", raw, counts)
        repeat = repeat.scatter(where, counts.cast(pl.Int32))
        texts = texts.scatter(where, sub.str.replace(REPEATED, ""))
    where = _rows(texts.str.contains("\x1b", literal=True))
    if where.len():
        texts = texts.scatter(where, texts.gather(where).str.replace_all(ANSI, ""))
    lines = pl.DataFrame([frame["line"], texts.alias("text"), actor, pid, ip, repeat])
    if "\r" in text:
        lines = lines.with_columns(pl.col("actor", "pid", "ip").forward_fill().over("line"))
    return lines.cast(LINES_SCHEMA)


def _count_unusable(out: ParsedSource | None, what: str, raw: pl.Series, value: pl.Series) -> None:
    bad = int((raw.is_not_null() & value.is_null()).sum())
    if bad and out is not None:
        out.warn(f"{bad} {what}s past their column's range were left empty")
        out.tally("dropped_out_of_range", bad)


def _rows(mask: pl.Series) -> pl.Series:
    return mask.fill_null(False).arg_true()


class LineIssues:
    """Unreadable lines of one file: every one counted, the first few named in the warning."""

    def __init__(self, what: str = "line") -> None:
        self.what = what
        self.count = 0
        self.listed: list[str] = []
        self.kinds: dict[str, int] = {}

    def add(self, line: int, problem: str, kind: str = "unreadable_line") -> None:
        self.count += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if len(self.listed) < WARN_LISTED:
            self.listed.append(f"line {line}: {problem}")

    def add_frame(
        self, bad: pl.DataFrame, problem_col: str = "problem", kind: str = "unreadable_line"
    ) -> None:
        """Record every row of ``bad`` (columns ``line`` and ``problem_col``)."""
        if bad.height == 0:
            return
        room = max(WARN_LISTED - len(self.listed), 0)
        for line, problem in bad.head(room).select("line", problem_col).iter_rows():
            self.listed.append(f"line {line}: {problem}")
        self.count += bad.height
        self.kinds[kind] = self.kinds.get(kind, 0) + bad.height

    def report(self, out: ParsedSource, *, rename: tuple[str, str] | None = None) -> None:
        """Warn with :meth:`message` and count each kind of skipped line into ``out``."""
        message = self.message()
        if message:
            out.warn(message.replace(*rename) if rename else message)
        for kind, n in self.kinds.items():
            out.tally(kind, n)

    def message(self) -> str | None:
        if not self.count:
            return None
        more = self.count - len(self.listed)
        tail = f"; and {more} more" if more > 0 else ""
        noun = self.what if self.count == 1 else f"{self.what}s"
        return f"{self.count} unreadable {noun} skipped ({'; '.join(self.listed)}{tail})"


STAMP_YEARS = (2000, 2100)
"""Years a log stamp may name; others (``9999-12-31``, ``1500-…``) are damage and are ignored,
so step times laid from a stamp stay far inside int64 ns."""


def timestamps_ns(texts: pl.Expr) -> pl.Expr:
    """Epoch ns of the date-time stamped in each text (read as UTC: logs state no zone).

    Only stamps that carry a year count (Python/Ray logging's ``YYYY-MM-DD HH:MM:SS[,ms]``,
    AReaL's ``YYYYMMDD-HH:MM:SS.mmm``): month-day stamps cannot be placed on the absolute clock.
    Stamps outside :data:`STAMP_YEARS` are null.
    """
    iso = (
        texts.str.extract(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)", 1)
        .str.replace("T", " ", literal=True)
        .str.replace(",", ".", literal=True)
        .str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us", time_zone="UTC")
    )
    areal = texts.str.extract(r"(\d{8}-\d{2}:\d{2}:\d{2}(?:\.\d+)?)", 1).str.to_datetime(
        "%Y%m%d-%H:%M:%S%.f", strict=False, time_unit="us", time_zone="UTC"
    )
    stamp = pl.coalesce(iso, areal)
    return pl.when(stamp.dt.year().is_between(STAMP_YEARS[0], STAMP_YEARS[1] - 1)).then(
        stamp.dt.epoch("ns")
    )


CRASH = (
    r"^Traceback \(most recent call last\)|^Error executing "
    r"job|RayTaskError|^\w*(?:Error|Exception): "
)


def note_ending(out: ParsedSource, lines: pl.DataFrame, records: pl.DataFrame) -> None:
    """Say how the log ends: a traceback after the last step record (the last line of
    ``records``) means the run died in the next step (which the log therefore does not contain);
    no record at all records where the run stopped (``meta["stopped_at"]``, see
    :func:`progress.stop_point`) and ``meta["ended"] = "before_first_step"`` unless a traceback
    says it crashed."""
    last_record_line = as_int(records["line"].max()) if records.height else None
    after = lines.filter(pl.col("line") > (last_record_line or 0))
    after = after.filter(pl.col("text").str.contains(CRASH))
    if last_record_line is None:
        out.meta["stopped_at"] = stop_point(lines)
        if after.height:
            out.meta["ended"] = "crashed"
            where = out.meta["stopped_at"]
            where["traceback_line"] = int(after["line"][0])
            where["description"] = describe(where)
            out.warn(
                f"no step record: the run failed before its first step (traceback at line "
                f"{after['line'][0]})"
            )
        else:
            out.meta["ended"] = "before_first_step"
        return
    if after.height:
        out.meta["ended"] = "crashed"
        out.warn(
            f"the run stopped after step {out.meta.get('last_step')}: a traceback follows the last "
            f"step record (line {after['line'][0]}); the unfinished step is not in the log"
        )
    else:
        out.meta.setdefault("ended", "completed")
