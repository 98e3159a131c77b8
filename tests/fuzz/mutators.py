"""Deterministic damage: case ``i`` of a family under seed ``s`` is always the same bytes.

Every case starts from one base of :mod:`seeds` and applies one to three mutations drawn from the
family's list: byte damage (truncation, bit flips, insertions, deletions), JSON-aware damage
(values swapped for huge, negative, non-finite or wrongly typed ones, deep nesting, very long
strings, removed keys, duplicated and shuffled events), damaged SQLite tables (wrong-typed cells,
NULLs, dropped tables and columns, a truncated file), garbage log lines (huge numbers, binary,
ANSI escapes, megabyte lines, cuts mid-line) and gzip damage (a cut stream, a corrupt trailer).
``Case.mutations`` names what was done, so a finding can be read and replayed.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .seeds import LOG_FORMATS, Base

FAMILIES: tuple[str, ...] = (
    "kineto", "framework-spans", "nsys-sqlite", "nsys-stats-csv", *LOG_FORMATS, "gzip",
)


@dataclass
class Case:
    family: str
    index: int
    origin: str
    name: str
    data: bytes
    mutations: list[str] = field(default_factory=list)

    def label(self) -> str:
        return f"{self.family}#{self.index} ({self.origin}: {', '.join(self.mutations)})"


class Raw(str):
    """JSON text spliced in verbatim where a value was (what ``json.dumps`` cannot write:
    1e400, 2000-deep nesting, a megabyte string)."""


def rng_for(seed: int, family: str, index: int) -> random.Random:
    """One generator per case (string seeds hash with SHA-512: the same on every machine)."""
    return random.Random(f"{seed}/{family}/{index}")


def make_case(bank: dict[str, list[Base]], family: str, index: int, seed: int) -> Case:
    rng = rng_for(seed, family, index)
    source = "kineto" if family == "gzip" else family
    base = rng.choice(bank[source])
    case = Case(family, index, base.origin, base.name, base.data)
    if family == "gzip":
        _gzip_case(case, rng)
    else:
        MUTATE[_kind(family)](case, rng)
    return case


def _kind(family: str) -> str:
    return "log" if family in LOG_FORMATS else family


# --- evil values ---------------------------------------------------------------------------------

HUGE_TEXT: tuple[str, ...] = (
    "1e30",
    "-1e30",
    "1e400",
    "-1e16",
    str(2**63),
    str(2**63 - 1),
    str(-(2**63)),
    str(2**64),
    str(2**70),
    "1" + "0" * 40,
    "NaN",
    "nan",
    "Infinity",
    "-Infinity",
    "inf",
    "-0",
    "0",
    "-1",
    "1.",
    ".5",
    "1e-300",
)
"""Numbers as text, for logs and CSV cells (also JSON where JSON allows them)."""


def evil_value(rng: random.Random) -> Any:
    """A JSON value a parser must reject or clamp, never crash on or wrap."""
    pick = rng.randrange(9)
    if pick == 0:
        return rng.choice(
            [
                1e30,
                -1e30,
                -1e16,
                2**63,
                2**63 - 1,
                -(2**63),
                -(2**63) - 1,
                2**64,
                2**70,
                -1,
                0,
                1.5,
                1e-300,
            ]
        )
    if pick == 1:
        return Raw(rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 400]))
    if pick == 2:
        return rng.choice(
            [
                "0x" + "f" * 40,
                "0x" + "f" * 16,
                "",
                "abc",
                "1.5",
                "-5",
                "NaN",
                "1e30",
                "\u202e\u2066bidi",
                "\x1b[31mred",
                "<script>x</script>",
            ]
        )
    if pick == 3:
        return rng.choice([None, True, False, [], {}, [1, 2], {"a": 1}, [None]])
    if pick == 4:
        depth = rng.choice([40, 300, 1200, 5000, 40000])
        return Raw(
            "[" * depth + "]" * depth if rng.random() < 0.5 else '{"a":' * depth + "1" + "}" * depth
        )
    if pick == 5:
        return "x" * rng.choice([300, 70_000, 2**20])
    if pick == 6:
        return rng.choice([-1, -1000, -(10**12), -(2**31), 2**31, 2**32, 32768, 65536])
    if pick == 7:
        return rng.randint(-(2**70), 2**70)
    return rng.uniform(-1e20, 1e20)


def swapped_type(value: Any, rng: random.Random) -> Any:
    """The same datum in another JSON type (``12`` → ``"12"``, ``"x"`` → ``["x"]`` …)."""
    if isinstance(value, bool) or value is None:
        return rng.choice(["true", 1, [value]])
    if isinstance(value, (int, float)):
        return rng.choice([str(value), [value], {"v": value}, bool(value), None])
    if isinstance(value, str):
        return rng.choice([[value], {"v": value}, len(value), None, 0])
    if isinstance(value, list):
        return rng.choice([{"v": value}, str(value), len(value)])
    if isinstance(value, dict):
        return rng.choice([list(value.values()), str(value), len(value)])
    return None


# --- byte damage ---------------------------------------------------------------------------------


def damage_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    pick = rng.randrange(5)
    n = len(data)
    if pick == 0 or n < 4:
        cut = rng.randrange(n + 1)
        return data[:cut], f"truncate@{cut}/{n}"
    if pick == 1:
        buf = bytearray(data)
        flips = rng.randint(1, 8)
        for _ in range(flips):
            buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
        return bytes(buf), f"bitflip×{flips}"
    if pick == 2:
        at = rng.randrange(n)
        junk = rng.choice(
            [
                bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))),
                b"{",
                b"}",
                b"]",
                b",",
                b'"',
                b"\x00",
                b"\xff\xfe",
            ]
        )
        return data[:at] + junk + data[at:], f"insert@{at}"
    if pick == 3:
        at = rng.randrange(n)
        size = rng.randint(1, max(1, n // 10))
        return data[:at] + data[at + size :], f"delete@{at}+{size}"
    at = rng.randrange(n)
    size = rng.randint(1, max(1, n // 10))
    return data[:at] + data[at : at + size] * 2 + data[at + size :], f"duplicate@{at}+{size}"


# --- JSON damage ---------------------------------------------------------------------------------

EVENT_KEYS: tuple[str, ...] = (
    "ts",
    "dur",
    "pid",
    "tid",
    "name",
    "cat",
    "ph",
    "args",
    "id",
    "s",
    "bp",
)
ARG_KEYS: tuple[str, ...] = (
    "correlation",
    "External id",
    "stream",
    "device",
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "Process Group Ranks",
    "Process Group Name",
    "dtype",
    "bytes",
    "Trace iteration",
    "global_step",
    "step",
    "rank",
    "Sequence number",
    "wait_on_stream",
)
TOP_PATHS: tuple[tuple[str, ...], ...] = (
    ("baseTimeNanoseconds",),
    ("distributedInfo", "rank"),
    ("distributedInfo", "world_size"),
    ("distributedInfo", "pg_config"),
    ("deviceProperties",),
    ("displayTimeUnit",),
    ("schemaVersion",),
    ("traceEvents",),
)


def _events_of(doc: Any) -> list | None:
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return doc["traceEvents"]
    return doc if isinstance(doc, list) else None


def _pick_event(doc: Any, rng: random.Random) -> dict | None:
    events = _events_of(doc)
    dicts = [e for e in events or [] if isinstance(e, dict)]
    return rng.choice(dicts) if dicts else None


def _set_field(doc: Any, rng: random.Random, value_of: Callable[[Any], Any]) -> str:
    """Replace one event field, one arg or one top-level value."""
    event = _pick_event(doc, rng)
    roll = rng.random()
    if isinstance(doc, dict) and (roll < 0.15 or event is None):
        path = rng.choice(TOP_PATHS)
        target = doc
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        target[path[-1]] = value_of(target.get(path[-1]))
        return ".".join(path)
    if event is None:
        return "nothing"
    if roll < 0.55:
        key = rng.choice(EVENT_KEYS)
        event[key] = value_of(event.get(key))
        return f"event.{key}"
    args = event.setdefault("args", {}) if isinstance(event.get("args", {}), dict) else {}
    keys = [*args, *ARG_KEYS]
    key = rng.choice(keys)
    args[key] = value_of(args.get(key))
    return f"args.{key}"


def _json_mutation(doc: Any, rng: random.Random) -> str:
    pick = rng.randrange(10)
    events = _events_of(doc)
    if pick <= 3:
        return "evil " + _set_field(doc, rng, lambda _old: evil_value(rng))
    if pick == 4:
        return "type-swap " + _set_field(doc, rng, lambda old: swapped_type(old, rng))
    if pick == 5:
        event = _pick_event(doc, rng)
        if event:
            key = rng.choice(list(event) or ["ts"])
            event.pop(key, None)
            return f"remove {key}"
        return "remove nothing"
    if events is None or not events:
        return "no events"
    if pick == 6:
        extra = [
            json.loads(json.dumps(e))
            for e in rng.sample(events, min(len(events), rng.randint(1, 10)))
        ]
        events.extend(extra)
        return f"duplicate {len(extra)} events"
    if pick == 7:
        rng.shuffle(events)
        return "shuffle events"
    if pick == 8:
        del events[rng.randrange(len(events)) :]
        return "drop tail events"
    times = rng.choice([200, 2000])
    small = [e for e in events if isinstance(e, dict) and len(json.dumps(e)) < 1000] or [
        {"ph": "X", "ts": 1, "dur": 1}
    ]
    events.append(Raw(",".join([dumps(rng.choice(small)).decode()] * times)))
    return f"repeat one event ×{times}"


def dumps(doc: Any) -> bytes:
    """JSON text with the :class:`Raw` pieces spliced in verbatim."""
    raws: list[str] = []

    def mark(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(str(value))
            return f"@@raw{len(raws) - 1}@@"
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        if isinstance(value, list):
            return [mark(v) for v in value]
        return value

    text = json.dumps(mark(doc), allow_nan=True)
    if raws:
        text = re.sub(r'"@@raw(\d+)@@"', lambda m: raws[int(m.group(1))], text)
    return text.encode()


def _json_case(case: Case, rng: random.Random) -> None:
    lines = case.name.endswith(".jsonl")
    try:
        docs = (
            [json.loads(line) for line in case.data.splitlines() if line.strip()]
            if lines
            else json.loads(case.data)
        )
    except ValueError:
        _lines_case(case, rng)
        return
    for _ in range(rng.randint(1, 3)):
        case.mutations.append(_json_mutation(docs, rng))
    data = b"\n".join(dumps(d) for d in docs) if lines and isinstance(docs, list) else dumps(docs)
    if rng.random() < 0.3:
        data, what = damage_bytes(data, rng)
        case.mutations.append(what)
    case.data = data


# --- gzip damage ---------------------------------------------------------------------------------


def _gzip_case(case: Case, rng: random.Random) -> None:
    if rng.random() < 0.5:
        _json_case(case, rng)
    packed = gzip.compress(case.data, compresslevel=1, mtime=0)
    pick = rng.randrange(6)
    n = len(packed)
    if pick == 0:
        cut = rng.randrange(2, n)
        packed, what = packed[:cut], f"gzip cut@{cut}/{n}"
    elif pick == 1:
        packed, what = (
            packed[:-8] + bytes(rng.randrange(256) for _ in range(4)) + packed[-4:],
            "gzip bad crc",
        )
    elif pick == 2:
        size = rng.choice([0, 1, 2**32 - 1, 2**31, rng.randrange(2**32)])
        packed, what = packed[:-4] + size.to_bytes(4, "little"), f"gzip isize={size}"
    elif pick == 3:
        buf = bytearray(packed)
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(10, n)] ^= 1 << rng.randrange(8)
        packed, what = bytes(buf), "gzip body bitflip"
    elif pick == 4:
        packed, what = packed + rng.choice([packed, b"\x00" * 16, b"garbage"]), "gzip trailing data"
    else:
        packed, what = packed, "gzip intact"
    case.data = packed
    case.name = case.name.removesuffix(".gz") + ".gz"
    case.mutations.append(what)


# --- logs and CSV --------------------------------------------------------------------------------

NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def garbage_line(rng: random.Random, like: bytes) -> bytes:
    pick = rng.randrange(8)
    if pick == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
    if pick == 1:
        return b"\x1b[36m" + like.rstrip(b"\n") + b"\x1b[0m\n"
    if pick == 2:
        return (
            like.rstrip(b"\n")
            + b" [repeated "
            + rng.choice(HUGE_TEXT).encode()
            + b"x across cluster]\n"
        )
    if pick == 3:
        return b"step:1 - " + b"timing_s/gen:1.0 " * (2**20 // 17) + b"\n"
    if pick == 4:
        return b"\x00" * rng.randint(1, 64) + b"\n"
    if pick == 5:
        return like.replace(b"\n", b"\r")
    if pick == 6:
        return "\u202e\u2066 step 3 ünï \udcff".encode("utf-8", "surrogateescape") + b"\xc3\x28\n"
    return like[: rng.randrange(len(like) + 1)]


def _swap_number(lines: list[bytes], rng: random.Random) -> str:
    with_numbers = [i for i, line in enumerate(lines) if NUMBER.search(line)]
    if not with_numbers:
        return "no number"
    i = rng.choice(with_numbers)
    spots = list(NUMBER.finditer(lines[i]))
    spot = rng.choice(spots)
    new = rng.choice(HUGE_TEXT).encode()
    lines[i] = lines[i][: spot.start()] + new + lines[i][spot.end() :]
    return f"line {i}: number → {new[:24].decode()}"


def _line_mutation(lines: list[bytes], rng: random.Random) -> str:
    if not lines:
        lines.append(b"\n")
    pick = rng.randrange(7)
    if pick <= 2:
        return _swap_number(lines, rng)
    i = rng.randrange(len(lines))
    if pick == 3:
        lines.insert(i, garbage_line(rng, lines[i]))
        return f"garbage line at {i}"
    if pick == 4:
        lines.insert(i, lines[i])
        return f"duplicate line {i}"
    if pick == 5:
        del lines[i : i + rng.randint(1, 5)]
        return f"delete lines from {i}"
    rng.shuffle(lines)
    return "shuffle lines"


def _lines_case(case: Case, rng: random.Random) -> None:
    lines = case.data.splitlines(keepends=True)
    for _ in range(rng.randint(1, 3)):
        case.mutations.append(_line_mutation(lines, rng))
    case.data = b"".join(lines)
    if rng.random() < 0.25:
        case.data, what = damage_bytes(case.data, rng)
        case.mutations.append(what)


def _log_case(case: Case, rng: random.Random) -> None:
    if case.data.lstrip()[:1] in (b"{", b"[") and rng.random() < 0.5:
        try:
            _json_case(case, rng)
            return
        except ValueError:
            pass
    _lines_case(case, rng)


CSV_CELLS: tuple[str, ...] = (
    "abc",
    "",
    "1e400",
    "-5",
    "99999999999999999999",
    "1.5",
    '"',
    "NaN",
    "-1e16",
    "0x10",
    str(2**63),
)


def _csv_case(case: Case, rng: random.Random) -> None:
    lines = case.data.splitlines(keepends=True)
    pick = rng.randrange(4)
    if pick <= 1 and len(lines) > 1:
        i = rng.randrange(1, len(lines))
        cells = lines[i].rstrip(b"\n").split(b",")
        j = rng.randrange(len(cells))
        cells[j] = rng.choice(CSV_CELLS).encode()
        lines[i] = b",".join(cells) + b"\n"
        case.mutations.append(f"row {i} cell {j} → {cells[j][:20].decode()}")
    elif pick == 2 and lines:
        header = lines[0].rstrip(b"\n").split(b",")
        j = rng.randrange(len(header))
        if rng.random() < 0.5:
            lines = [
                b",".join(c for k, c in enumerate(line.rstrip(b"\n").split(b",")) if k != j) + b"\n"
                for line in lines
            ]
            case.mutations.append(f"drop column {j}")
        else:
            header[j] = (
                re.sub(rb"\((ns|nsec)\)", rng.choice([b"(us)", b"(s)", b"(ms)", b"(x)"]), header[j])
                if b"(" in header[j]
                else b"Start (ns)"
            )
            lines[0] = b",".join(header) + b"\n"
            case.mutations.append(f"header {j} → {header[j].decode(errors='replace')}")
    else:
        case.mutations.append(_line_mutation(lines, rng))
    case.data = b"".join(lines)
    if rng.random() < 0.3:
        case.data, what = damage_bytes(case.data, rng)
        case.mutations.append(what)


# --- SQLite --------------------------------------------------------------------------------------

HOT_CELLS: tuple[tuple[str, str], ...] = (
    ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"),
    ("TARGET_INFO_GPU", "cuDevice"),
    ("TARGET_INFO_GPU", "id"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "start"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "end"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "streamId"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"),
    ("CUPTI_ACTIVITY_KIND_KERNEL", "correlationId"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "start"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "bytes"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind"),
    ("NVTX_EVENTS", "text"),
    ("NVTX_EVENTS", "start"),
    ("NVTX_EVENTS", "end"),
    ("NVTX_EVENTS", "eventType"),
    ("NVTX_EVENTS", "textId"),
    ("StringIds", "value"),
    ("StringIds", "id"),
    ("PROCESSES", "pid"),
    ("PROCESSES", "globalPid"),
    ("META_DATA_EXPORT", "value"),
    ("META_DATA_CAPTURE", "value"),
    ("ThreadNames", "nameId"),
    ("TARGET_INFO_SYSTEM_ENV", "value"),
)
SQL_VALUES: tuple[Any, ...] = (
    "abc", "1.5", "", b"\x00\xff\x10", None, 2**63 - 1, -(2**63), -1, 0, 1e30, -1e16, 2**31, 1.5,
    "0x" + "f" * 40, "x" * 70_000,
)


def _tables(db: sqlite3.Connection) -> list[str]:
    return [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]


def _sql_mutation(db: sqlite3.Connection, rng: random.Random) -> str:
    tables = _tables(db)
    pick = rng.randrange(10)
    if pick <= 4:
        hot = [(t, c) for t, c in HOT_CELLS if t in tables and c in _columns(db, t)]
        table, col = rng.choice(hot) if hot and rng.random() < 0.7 else _any_cell(db, tables, rng)
        value = rng.choice(SQL_VALUES)
        every = rng.random() < 0.3
        rows = db.execute(f'SELECT rowid FROM "{table}"').fetchall()
        where = "" if every or not rows else f"WHERE rowid = {rng.choice(rows)[0]}"
        try:
            db.execute(f'UPDATE "{table}" SET "{col}" = ? {where}', (value,))
        except sqlite3.Error:
            return f"{table}.{col} = {str(value)[:20]!r} refused"
        return f"{table}.{col} = {str(value)[:20]!r}{' (all rows)' if every else ''}"
    table = rng.choice(tables)
    if pick == 5:
        db.execute(f'DROP TABLE "{table}"')
        return f"drop table {table}"
    if pick == 6:
        col = rng.choice(_columns(db, table))
        try:
            db.execute(f'ALTER TABLE "{table}" DROP COLUMN "{col}"')
        except sqlite3.Error:
            return f"drop column {table}.{col} refused"
        return f"drop column {table}.{col}"
    if pick == 7:
        db.execute(f'DELETE FROM "{table}"')
        return f"empty table {table}"
    if pick == 8:
        try:
            db.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}"')
        except sqlite3.Error:
            return f"duplicate rows of {table} refused"
        return f"duplicate rows of {table}"
    timed = [t for t in tables if {"start", "end"} <= set(_columns(db, t))]
    if not timed:
        return "no timed table"
    table = rng.choice(timed)
    try:
        db.execute(f'UPDATE "{table}" SET start = "end", "end" = start')
    except sqlite3.Error:
        return f"swap start/end in {table} refused"
    return f"swap start/end in {table}"


def _any_cell(db: sqlite3.Connection, tables: list[str], rng: random.Random) -> tuple[str, str]:
    table = rng.choice(tables)
    return table, rng.choice(_columns(db, table))


def _sqlite_case(case: Case, rng: random.Random) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "case.sqlite"
        path.write_bytes(case.data)
        db = sqlite3.connect(path)
        for _ in range(rng.randint(1, 3)):
            case.mutations.append(_sql_mutation(db, rng))
        db.commit()
        db.close()
        case.data = path.read_bytes()
    if rng.random() < 0.1:
        case.data, what = damage_bytes(case.data, rng)
        case.mutations.append(what)


MUTATE: dict[str, Callable[[Case, random.Random], None]] = {
    "kineto": _json_case,
    "framework-spans": _json_case,
    "nsys-sqlite": _sqlite_case,
    "nsys-stats-csv": _csv_case,
    "log": _log_case,
}
