"""Reading an Nsight Systems SQLite export: the connection, column-aware SELECTs, the version.

Exports differ across nsys releases (2022.x … 2026.x): the metadata table was renamed
(``EXPORT_META_DATA`` → ``META_DATA_EXPORT``), ENUM tables appeared, columns were added, and
tables exist only when there was data of that kind. Every query here therefore asks SQLite
which tables and columns exist and selects ``NULL`` for a missing column.
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


class Db:
    """A read-only connection to one export, with its table and column lists."""

    def __init__(self, path: Path) -> None:
        self.path = path
        uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
        try:
            self.con = sqlite3.connect(uri, uri=True)
            rows = self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(path, sqlite_problem(exc)) from None
        self.tables: frozenset[str] = frozenset(r[0] for r in rows)
        self._columns: dict[str, frozenset[str]] = {}

    def close(self) -> None:
        self.con.close()

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> frozenset[str]:
        if table not in self._columns:
            rows = self.con.execute(f'PRAGMA table_info("{table}")').fetchall()
            self._columns[table] = frozenset(r[1] for r in rows)
        return self._columns[table]

    def frame(self, table: str, schema: Mapping[str, pl.DataType], where: str = "") -> pl.DataFrame:
        """``SELECT`` the ``schema`` columns of ``table`` (NULL where the column is missing;
        no rows where the table is), straight into polars."""
        if not self.has(table):
            return pl.DataFrame(schema=dict(schema))
        have = self.columns(table)
        select = [f'"{name}"' if name in have else f"NULL AS {name}" for name in schema]
        sql = f'SELECT {", ".join(select)} FROM "{table}" {where}'
        return self.query(sql, schema)

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
                return {str(k): str(v) for k, v in self.con.execute(f'SELECT name, value FROM "{table}"')}
        return {}

    def enum(self, table: str, fallback: Mapping[int, str]) -> dict[int, str]:
        """An ``ENUM_*`` table as id → label; older exports lack them, so ``fallback`` fills in."""
        labels = dict(fallback)
        if self.has(table) and "label" in self.columns(table):
            labels.update({int(i): str(v) for i, v in self.con.execute(f'SELECT id, label FROM "{table}"')})
        return labels


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
