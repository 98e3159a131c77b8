"""Reading an Nsight Systems SQLite export: the connection, column-aware SELECTs, the version.

Exports differ across nsys releases (2022.x … 2026.x): the metadata table was renamed
(``EXPORT_META_DATA`` → ``META_DATA_EXPORT``), ENUM tables appeared, columns were added, and
tables exist only when there was data of that kind. Every query here therefore asks SQLite
which tables and columns exist and selects ``NULL`` for a missing column.

SQLite stores any value in any column, so a damaged export can hold text where nsys writes
integers. Cells are therefore read by their SQLite type: an integer column takes only integer
cells, a text column only text (numbers as their text); every other cell becomes NULL and is
counted per ``table.column`` in :attr:`Db.wrong_types`, text that is not UTF-8 in
:attr:`Db.undecodable`, so the parser can warn instead of failing in a cast.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from .errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_TABLES = ("TARGET_INFO_SESSION_START_TIME", "StringIds")
"""Tables every nsys export has (with data or not); both together mark an nsys export."""
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
BATCH_ROWS = 250_000
INTEGER_TYPES = (pl.Int64(), pl.Int32(), pl.Int16(), pl.Int8())


class Db:
    """A read-only connection to one export, with its table and column lists."""

    def __init__(self, path: Path) -> None:
        self.path = path
        uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
        try:
            self.con = sqlite3.connect(uri, uri=True)
            rows = self.con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(path, sqlite_problem(exc)) from None
        except UnicodeDecodeError:
            # SQLite's "malformed database schema (<name>)" quotes the damaged bytes, which
            # Python fails to decode into the message: the same damage, another exception.
            raise InputError(
                path, "SQLite database is truncated or corrupt (a schema name is not UTF-8)"
            ) from None
        self.tables: frozenset[str] = frozenset(r[0] for r in rows)
        self._columns: dict[str, frozenset[str]] = {}
        self.wrong_types: dict[str, int] = {}
        self.undecodable = 0
        self.con.text_factory = self._decode

    def _decode(self, raw: bytes) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError:
            self.undecodable += 1
            return raw.decode("utf-8", "replace")

    def close(self) -> None:
        self.con.close()

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> frozenset[str]:
        if table not in self._columns:
            rows = self.con.execute(f'PRAGMA table_info("{table}")').fetchall()
            self._columns[table] = frozenset(r[1] for r in rows)
        return self._columns[table]

    def frame(
        self,
        table: str,
        schema: Mapping[str, pl.DataType],
        where: str = "",
        checked: Sequence[str] = (),
    ) -> pl.DataFrame:
        """``SELECT`` the ``schema`` columns of ``table`` (NULL where the column is missing or
        the cell has the wrong type; no rows where the table is missing), straight into polars.
        ``checked`` names integer columns ``where`` filters on, whose wrong-typed cells would
        otherwise drop rows unseen."""
        if not self.has(table):
            return pl.DataFrame(schema=dict(schema))
        have = self.columns(table)
        present = {name: dtype for name, dtype in schema.items() if name in have}
        self._count_wrong_types(table, present, checked)
        select = [
            _typed(name, present[name]) if name in present else f"NULL AS {name}" for name in schema
        ]
        sql = f'SELECT {", ".join(select)} FROM "{table}" {where}'
        return self.query(sql, schema)

    def _count_wrong_types(
        self, table: str, present: Mapping[str, pl.DataType], checked: Sequence[str]
    ) -> None:
        """Count, in one pass of SQLite, the cells that :func:`_typed` turns into NULL (and the
        wrong-typed cells of ``checked`` integer columns a WHERE clause filters on). The count is
        over the whole table whatever ``where`` keeps, so a table read twice is counted once."""
        tests = {name: _wrong_type(name, dtype) for name, dtype in present.items()}
        tests.update({c: _wrong_type(c, pl.Int64()) for c in checked if c in self.columns(table)})
        tests = {name: test for name, test in tests.items() if test}
        if not tests:
            return
        sums = ", ".join(f"total({test})" for test in tests.values())
        row = self.con.execute(f'SELECT {sums} FROM "{table}"').fetchone()
        for name, bad in zip(tests, row, strict=True):
            if bad:
                key = f"{table}.{name}"
                self.wrong_types[key] = int(bad)

    def query(self, sql: str, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
        """Rows of ``sql`` as columns, fetched in batches so that only one batch of Python rows
        exists at a time (a multi-GB export has tens of millions of kernel rows)."""
        cursor = self.con.execute(sql)
        parts = []
        while batch := cursor.fetchmany(BATCH_ROWS):
            parts.append(pl.DataFrame(batch, schema=dict(schema), orient="row"))
        if not parts:
            return pl.DataFrame(schema=dict(schema))
        return pl.concat(parts, rechunk=True) if len(parts) > 1 else parts[0]

    def scalar(self, sql: str, params: Sequence[object] = ()) -> object:
        row = self.con.execute(sql, params).fetchone()
        return row[0] if row else None

    def metadata(self) -> dict[str, str]:
        """The export's own metadata (``EXPORT_PRODUCT_VERSION``, …) from whichever table exists."""
        for table in META_TABLES:
            if self.has(table):
                return {
                    str(k): str(v)
                    for k, v in self.con.execute(f'SELECT name, value FROM "{table}"')
                }
        return {}

    def enum(self, table: str, fallback: Mapping[int, str]) -> dict[int, str]:
        """An ``ENUM_*`` table as id → label; older exports lack them, so ``fallback`` fills in."""
        labels = dict(fallback)
        if self.has(table) and {"id", "label"} <= self.columns(table):
            rows = self.frame(table, {"id": pl.Int64(), "label": pl.String()}).drop_nulls()
            labels.update(dict(rows.iter_rows()))
        return labels


def _typed(name: str, dtype: pl.DataType) -> str:
    """The SELECT expression that reads column ``name`` only where its cell has ``dtype``'s type."""
    col = f'"{name}"'
    if dtype in INTEGER_TYPES:
        return f"CASE WHEN typeof({col}) = 'integer' THEN {col} END AS {col}"
    if dtype == pl.String():
        return (
            f"CASE WHEN typeof({col}) = 'text' THEN {col} "
            f"WHEN typeof({col}) IN ('integer', 'real') THEN CAST({col} AS TEXT) END AS {col}"
        )
    return col


def _wrong_type(name: str, dtype: pl.DataType) -> str | None:
    """SQL that is 1 for a non-NULL cell of ``name`` that :func:`_typed` reads as NULL."""
    col = f'"{name}"'
    if dtype in INTEGER_TYPES:
        return f"typeof({col}) NOT IN ('integer', 'null')"
    if dtype == pl.String():
        return f"typeof({col}) = 'blob'"
    return None


def is_nsys(tables: frozenset[str] | set[str]) -> bool:
    return all(t in tables for t in NSYS_TABLES)


def sqlite_problem(exc: sqlite3.Error) -> str:
    """One line for an SQLite failure, worded for the user."""
    text = " ".join(str(exc).split())
    if "not a database" in text:
        return "not an SQLite database (the file header is wrong)"
    if "malformed" in text or "disk image" in text:
        return f"SQLite database is truncated or corrupt ({text})"
    return f"cannot read the SQLite database ({text})"
