"""Tests that kill surviving mutants of parsers/nsys*.py (docs/mutation.md): damaged copies of
a real export (nvFuser's, 18 kernels), each expected value read from the copy with plain SQL."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from parsers import nsys
from parsers.nsys_db import Db
from parsers.nsys_procs import launch_command

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
NVFUSER = CORPUS / "nvFuser" / "report1.sqlite"
I64_MAX = 2**63 - 1


def damaged(tmp_path: Path, *statements: str) -> Path:
    copy = tmp_path / NVFUSER.name
    copy.write_bytes(NVFUSER.read_bytes())
    con = sqlite3.connect(copy)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()
    return copy


def sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def names(path: Path, kind: str) -> set[str]:
    events = nsys.parse(path).events
    return set(events.filter(pl.col("kind").cast(pl.String) == kind)["name"].to_list())


def test_a_kernel_without_its_long_name_is_named_by_its_short_name(tmp_path: Path) -> None:
    path = damaged(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = -12345")
    short = sql(
        path,
        "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.shortName",
    )
    assert short and names(path, "kernel") == {v for (v,) in short}


def test_a_synchronization_of_an_unknown_type_is_named_unknown_sync(tmp_path: Path) -> None:
    path = damaged(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET syncType = 999")
    assert sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")[0][0] == 3
    assert names(path, "gpu_sync") == {"Unknown Sync"}


def test_a_session_that_starts_at_the_epoch_is_a_usable_time_base(tmp_path: Path) -> None:
    """utcEpochNs = 0 is in 0…MAX_SESSION_START_NS: times stay as exported, nothing counted."""
    path = damaged(tmp_path, "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 0")
    parsed = nsys.parse(path)
    assert "unusable_time_base" not in parsed.meta.get("quality", {})
    assert not [w for w in parsed.warnings if "utcEpochNs" in w]
    first = sql(path, "SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    kernels = parsed.events.filter(pl.col("kind").cast(pl.String) == "kernel")
    assert kernels["start_ns"].min() == first


@pytest.mark.parametrize(
    "assign",
    [f"start = {I64_MAX - 1000}, end = {I64_MAX - 990}", f"end = {I64_MAX - 1000}"],
    ids=["both past", "end past"],
)
def test_a_row_past_the_int64_range_is_dropped_with_its_reason(tmp_path: Path, assign: str) -> None:
    """Session times past int64 once the epoch base (2025) is added: a row whose end alone is
    past it is dropped as well (its start is the exported one, in range)."""
    path = damaged(
        tmp_path,
        f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {assign} "
        "WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)",
    )
    parsed = nsys.parse(path)
    assert parsed.meta["quality"]["dropped_out_of_range"] == 1
    assert parsed.warnings == [
        f"{path.name}: 1 rows whose epoch time would be past the int64 range were left out"
    ]


@pytest.mark.parametrize(
    ("drop", "expected"),
    [
        (
            "name = 'PROCESS_0:COMMAND'",
            "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_0:ARGUMENT_%'",
        ),
        ("name LIKE 'PROCESS_0:%'", "SELECT value FROM META_DATA_CAPTURE WHERE 0"),
    ],
    ids=["no command", "nothing recorded"],
)
def test_the_launch_command_without_its_command_row_is_its_arguments(
    tmp_path: Path, drop: str, expected: str
) -> None:
    path = damaged(tmp_path, f"DELETE FROM META_DATA_CAPTURE WHERE {drop}")
    args = sql(path, expected.replace("SELECT value", "SELECT name, value"))
    ordered = [v for _, v in sorted(args, key=lambda r: int(r[0].rsplit("_", 1)[1]))]
    assert launch_command(Db(path)) == ordered


def test_an_export_without_an_nvtx_table_still_parses_its_kernels(tmp_path: Path) -> None:
    path = damaged(tmp_path, "DROP TABLE NVTX_EVENTS")
    kernels = sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    events = nsys.parse(path).events
    assert events.filter(pl.col("kind").cast(pl.String) == "kernel").height == kernels == 18
