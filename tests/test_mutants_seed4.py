"""Tests for the survivors of the seed-4 mutation sample (docs/mutation.md), each on a tiny input
built here whose right answer is worked out by hand."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import polars as pl
import pytest
from test_logs_steps import verl_run

import analyzer
from analyzer.analyses import log_steps
from analyzer.assemble.collectives import fill_groups
from analyzer.assemble.runs import RunsError, _overlap, _window, choose
from analyzer.model.units import spans as _spans
from parsers import ParsedSource, kineto
from parsers.events import conform
from parsers.nsys_db import Db
from taxonomy.collectives import CollectiveRulesError, load_rules

VERL_LOG = (
    Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "logs" / "verl"
    / "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"
)
EPOCH = 1_780_000_000 * 10**9
CALL = {"rank": pl.Int32, "source": pl.UInt32, "name": pl.String, "coll": pl.String,
        "pg": pl.String, "pg_desc": pl.String, "pg_ranks": pl.String, "group_size": pl.Int32}


def test_a_real_logs_stage_rows_reach_the_run_as_its_product() -> None:
    """The verl PPO log's 335 steps each log their stages: the run's ``log_stages`` product is
    the log analysis' frame itself, no section failed."""
    run = analyzer.load([VERL_LOG])
    stages = run.log_stages
    assert stages["step"].n_unique() == 335
    assert stages.columns == list(log_steps.STAGES_SCHEMA)
    assert run.failures == {}


def test_a_log_without_steps_has_the_steps_table_with_its_columns() -> None:
    result = verl_run({}, "0.5")
    assert result.steps.height == 0
    assert result.steps.schema == log_steps.STEPS_SCHEMA


def test_a_window_holding_another_overlaps_it() -> None:
    """[0, 100] holds [10, 20]: they overlap, in either order, with no slack at all."""
    assert _overlap((0, 100), (10, 20), 0) and _overlap((10, 20), (0, 100), 0)
    assert not _overlap((0, 5), (10, 20), 4) and _overlap((0, 5), (10, 20), 5)


def test_rank_lists_are_written_as_runs() -> None:
    assert _spans([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_a_group_named_by_a_call_takes_its_description_and_ranks_from_the_config() -> None:
    """A call recording only its process group's name (``pg`` 3) on source 0: the config of
    source 0 names group 3's description and members."""
    calls = pl.DataFrame(
        {"rank": [0], "source": [0], "name": ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"],
         "coll": ["all_reduce"], "pg": ["3"], "pg_desc": [None], "pg_ranks": [None],
         "group_size": [None]},
        schema=CALL,
    )
    config = {0: [{"pg_name": "3", "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP", "ranks": "0,1"}]}
    out = fill_groups(calls, config)
    assert out.select("pg_desc", "pg_ranks", "group", "group_size").rows() == [
        ("TENSOR_MODEL_PARALLEL_GROUP", "0,1", "0,1|3", 2)
    ]


def log_source(path: Path, start: int, world: int) -> ParsedSource:
    events = conform(
        {"kind": ["log_stage"], "name": ["timing_s/gen"], "start_ns": [start],
         "end_ns": [start + 1_000], "step": [1]},
        rank=-1,
    )
    return ParsedSource(path, "verl-log", events=events, meta={"world_size": world})


def test_the_refusal_names_the_one_input_or_counts_the_others(tmp_path: Path) -> None:
    """Two logs whose worlds disagree are two runs; the refusal's line names the input given,
    and with two inputs the first and how many more."""
    sources = [
        log_source(tmp_path / "a.log", EPOCH, 8), log_source(tmp_path / "b.log", EPOCH + 5_000, 16)
    ]
    with pytest.raises(RunsError) as one:
        choose(sources, None, [tmp_path])
    assert str(one.value).startswith(f"{tmp_path}: 2 separate runs found")
    with pytest.raises(RunsError) as two:
        choose(sources, None, [tmp_path / "a.log", tmp_path / "b.log"])
    assert str(two.value).startswith(f"{tmp_path / 'a.log'} (+1 more inputs): 2 separate runs")


def test_a_session_relative_time_base_gives_no_window(tmp_path: Path) -> None:
    """Times that look like epoch ns but are stated relative are no wall-clock window."""
    source = log_source(tmp_path / "a.log", EPOCH, 8)
    assert _window(source) == (EPOCH, EPOCH + 1_000)
    source.meta["time_base"] = "Session-relative (session start unknown)"
    assert _window(source) is None


def test_the_kineto_base_is_utc_whatever_the_local_zone(monkeypatch, tmp_path: Path) -> None:
    """1696125600000 ms is 2023-10-01 02:00 UTC, 4 h into New York's 30 September: libkineto's
    base before it is 214 periods of 7,889,238 s = 1688296932 s, counted from the epoch, which no
    local zone moves (a calendar-quarter reading would take 1 October's or, locally, July's)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        path = tmp_path / "node7_4242.1696125600000.pt.trace.json"
        event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10,
                 "dur": 5}
        path.write_text(json.dumps({"traceEvents": [event]}))
        assert kineto.parse(path).events["start_ns"].to_list() == [1_688_296_932 * 10**9 + 10_000]
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()



@pytest.mark.parametrize("kind", ["description", "kernel"])
def test_a_name_rule_without_a_regex_is_one_error_naming_the_file(tmp_path: Path, kind) -> None:
    user = tmp_path / "rules.toml"
    user.write_text(f'[[{kind}]]\ndim = "tp"\n')
    with pytest.raises(CollectiveRulesError) as caught:
        load_rules(user)
    assert str(caught.value) == f"{user}: {kind} rule 1: needs a match regex"


def test_a_table_read_twice_counts_its_wrong_cells_once(tmp_path: Path) -> None:
    """Two of three ``deviceId`` cells are text; the count is over the table whatever the
    WHERE clause keeps, so a second read (another filter) gives the same two, not four."""
    path = tmp_path / "export.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE T (id INTEGER, deviceId INTEGER)")
    con.executemany("INSERT INTO T VALUES (?, ?)", [(1, 0), (2, "x"), (3, "y")])
    con.commit()
    con.close()
    db = Db(path)
    schema = {"id": pl.Int64(), "deviceId": pl.Int64()}
    assert db.frame("T", schema)["deviceId"].to_list() == [0, None, None]
    assert db.frame("T", schema, where="WHERE id > 1").height == 2
    assert db.wrong_types == {"T.deviceId": 2}
