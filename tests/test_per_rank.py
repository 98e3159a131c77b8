"""Rank-local products (``@provides(..., per_rank=True)``): for every product so declared, on
multi-rank bundled samples and a multi-rank corpus run, the product computed rank by rank and
concatenated in rank order equals the whole-run product exactly (values, dtypes, row order); a
product wrongly declared rank-local fails the same check; a run read from a dataset computes
them from each rank's partition and gets the whole-run values."""

from __future__ import annotations

import dataclasses
import os
from functools import cache
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import analyzer
from analyzer.dataset.store import read_manifest
from analyzer.engines.local import LocalEngine
from analyzer.engines.per_rank import DatasetShards, sharded
from analyzer.model import products
from analyzer.model.products import SHARDED, ProductError, Provider, providers, provides
from analyzer.model.run import Run
from analyzer.model.sharded import InProcess, split
from parsers import InputError
from parsers.events import empty_events
from tests.report_truth import rlperf

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "HolisticTraceAnalysis"
RUNS = {
    "synthetic disaggregated": [REPO / "sample_traces/synthetic/disaggregated"],
    "verl ppo disaggregated": [REPO / "sample_traces/runs/verl_ppo_disaggregated"],
    "verl ppo multi-process nsys": [REPO / "sample_traces/runs/verl_ppo_multiprocess_nsys"],
    "HTA sampled ranks 0 and 1": [CORPUS / "sampled_rank-0.json.gz",
                                  CORPUS / "sampled_rank-1.json.gz"],
}
"""Bundled multi-rank samples (8-rank synthetic traces, a real verl run's traces and logs, one
Nsight report of several ranks' processes) and a two-rank run of the corpus."""
RANK_LOCAL = {"gpu_time", "annotations", "event_checks", "event_names", "rank_collective_calls"}


DAMAGED = "synthetic disaggregated, damaged"
"""The 8-rank synthetic run with rows the event checks find on several ranks (none of the
runs above has any): each rank's first 5 GPU rows twice (duplicates, overlaps on their
stream), and on ranks 0 and 3 a row ending before it starts."""
CLEAN = {"event_checks"}
"""Products that are empty on a run of clean inputs."""
SILENT = {"verl ppo multi-process nsys": {"rank_collective_calls"}}
"""Products empty on a run that records none of their rows: the multi-process Nsight report
holds CPU and NVTX ranges only, no collective call."""


@cache
def loaded(name: str) -> Run:
    if name == DAMAGED:
        return damaged(analyzer.load(RUNS["synthetic disaggregated"], use_cache=False))
    return analyzer.load(RUNS[name], use_cache=False)


def damaged(run: Run) -> Run:
    events = run.events
    gpu = events.filter(pl.col("kind") == "kernel")
    twice = gpu.group_by("rank", maintain_order=True).head(5).select(events.columns)
    backwards = gpu.filter(pl.col("rank").is_in([0, 3])).group_by("rank").head(1).with_columns(
        pl.col("start_ns").alias("end_ns"), pl.col("end_ns").alias("start_ns")
    ).select(events.columns)
    return dataclasses.replace(run, events=pl.concat([events, twice, backwards]), _cache={})


@pytest.fixture(params=[*RUNS, DAMAGED])
def run(request: pytest.FixtureRequest) -> Run:
    return loaded(request.param)


def rank_local() -> list[Provider]:
    return [p for p in providers().values() if p.per_rank]


def whole(run: Run, provider: Provider) -> pl.DataFrame:
    return provider.fn(**{q: run.read(q) for q in provider.params})


def broadcast(run: Run, provider: Provider) -> dict[str, dict]:
    return {provider.name: {q: run.read(q) for q in provider.params if q != SHARDED}}


def by_ranks(run: Run, provider: Provider) -> pl.DataFrame:
    return InProcess(run.events).evaluate([provider], broadcast(run, provider))[provider.name]


def test_the_rank_local_products_are_declared() -> None:
    assert {p.name for p in rank_local()} == RANK_LOCAL
    assert {p.name for p in rank_local() if p.every_rank} == {
        "event_checks", "event_names", "rank_collective_calls"}


def test_the_runs_have_several_ranks(run: Run) -> None:
    """What the check stands on: at least two ranks with events, and each rank-local product
    has rows of at least two ranks (else concatenation would be trivially the whole)."""
    assert len(split(run.events)) >= 2
    silent = next((v for k, v in SILENT.items() if run is loaded(k)), set())
    for p in rank_local():
        if p.name in silent:
            assert whole(run, p).height == 0, p.name
        elif p.name not in CLEAN or run is loaded(DAMAGED):
            assert whole(run, p)["rank"].n_unique() >= 2, p.name


def test_the_damaged_run_gives_every_event_check_rows() -> None:
    """What the damaged run holds, as data_quality reports it: 8 × 5 duplicated kernels, the
    same rows overlapping their copies (both of each pair), 2 backwards rows."""
    run = loaded(DAMAGED)
    found = run.event_checks.group_by("check").agg(
        pl.col("count").sum(), pl.col("rank").n_unique().alias("ranks")
    ).sort("check")
    assert found.rows() == [
        ("duplicate", 40, 8), ("negative_duration", 2, 2), ("overlap_stream", 80, 8)
    ]
    quality = run.data_quality.filter(pl.col("file") == "(all files)")
    assert quality.select("check", "count").rows() == [
        ("duplicate", 40), ("negative_duration", 2), ("overlap_stream", 80), ("clock_offset", 7)
    ]


def test_every_rank_local_product_equals_its_whole_run_value(run: Run) -> None:
    for p in rank_local():
        assert_frame_equal(by_ranks(run, p), whole(run, p), check_exact=True)


def test_a_product_wrongly_declared_rank_local_fails_the_check(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share of the run's whole event count (its denominator reads every rank) declared
    rank-local: the per-rank value differs, and the check says so."""
    monkeypatch.setattr(products, "_PROVIDERS", dict(products._PROVIDERS))

    @provides("_share_of_run", per_rank=True)
    def share(events: pl.DataFrame) -> pl.DataFrame:
        return events.group_by("rank").len().with_columns(
            (pl.col("len") / events.height).alias("share")
        ).sort("rank")

    with pytest.raises(AssertionError):
        assert_frame_equal(by_ranks(run, providers()["_share_of_run"]),
                           whole(run, providers()["_share_of_run"]), check_exact=True)


def test_collective_matching_declared_rank_local_fails_the_check() -> None:
    """A real cross-rank product (collective calls matched across members into instances)
    declared rank-local: the check fails on a run whose ranks talk to each other."""
    from analyzer.assemble.collectives import collective_calls, pg_config

    def matched(events: pl.DataFrame, sources: list, options: object) -> pl.DataFrame:
        return collective_calls(events, pg_config(sources))

    run = loaded("synthetic disaggregated")
    calls = dataclasses.replace(providers()["collective_calls"], per_rank=True, fn=matched,
                                params=("events", "sources", "options"))
    assert whole(run, calls)["rank"].n_unique() >= 2
    with pytest.raises(AssertionError):
        assert_frame_equal(by_ranks(run, calls), whole(run, calls), check_exact=True)


@pytest.mark.parametrize("reads", [("events", "warnings"), ("rank",), ("events", "lazy")])
def test_a_rank_local_provider_reads_one_ranks_events_and_nothing_mutable(reads) -> None:
    registry = dict(products._PROVIDERS)
    source = f"def fn({', '.join(reads)}): return None"
    namespace: dict = {}
    exec(source, namespace)
    try:
        with pytest.raises(ProductError, match="a per_rank provider reads 'events'"):
            provides("_bad", per_rank=True, lazy=("steps",) if "lazy" in reads else ())(
                namespace["fn"])
    finally:
        products._PROVIDERS.clear()
        products._PROVIDERS.update(registry)



def test_every_rank_is_declared_only_beside_per_rank() -> None:
    def fn(events):
        return None

    with pytest.raises(ProductError, match="every_rank is for a per_rank provider"):
        provides("_bad", every_rank=True)(fn)
    assert "_bad" not in products._PROVIDERS

# --- a run read from a dataset: each rank's partition ------------------------------------------

SHARDED_RUNS = ["synthetic disaggregated", "verl ppo disaggregated", "HTA sampled ranks 0 and 1"]
"""Runs whose dataset partitions are their ranks (every trace states its rank)."""


def ingested(capsys, folder: Path, name: str) -> Path:
    out = folder / "ds"
    status, _, err = rlperf(capsys, "ingest", *map(str, RUNS[name]), "-o", str(out), "-q",
                            "--no-cache")
    assert status == 0, err
    return out


@pytest.mark.parametrize("name", SHARDED_RUNS)
def test_a_dataset_run_computes_them_from_its_rank_partitions(capsys, tmp_path, name) -> None:
    """One call per rank partition computes every rank-local product in one pass, in this
    process (the local engine, given); the run's own event table is not read (emptied here),
    and the values equal the whole-run ones of the run read from its sources."""
    ds = ingested(capsys, tmp_path, name)
    assert analyzer.load([ds]).shards is None
    run = sharded(analyzer.load([ds]), [ds], LocalEngine())
    assert isinstance(run.shards, DatasetShards)
    partitions = len(run.shards.partitions)
    assert partitions == len(split(run.events)) >= 2
    run.events = empty_events()
    for p in rank_local():
        assert_frame_equal(run.product(p.name), whole(loaded(name), p), check_exact=True)
    assert run.shards.ran == [os.getpid()] * partitions


def test_a_dataset_whose_partitions_are_not_its_ranks_computes_over_the_whole_table(
    capsys, tmp_path
) -> None:
    """One Nsight report of several ranks' processes: the assembly gives its processes their
    ranks, so its rows sit in partition ``rank=-1``; the products come from the event table."""
    name = "verl ppo multi-process nsys"
    ds = ingested(capsys, tmp_path, name)
    run = sharded(analyzer.load([ds]), [ds], LocalEngine())
    assert run.shards is None
    assert sorted(p.name for p in (tmp_path / "ds" / "events").iterdir()) == ["rank=-1"]
    for p in rank_local():
        assert_frame_equal(run.product(p.name), whole(loaded(name), p), check_exact=True)


ALONE: dict[str, dict] = {"gpu_time": {}}
"""What ``gpu_time`` is given besides a rank's events: nothing."""


def test_a_call_on_a_node_with_other_code_or_without_the_dataset_is_one_error(
    capsys, tmp_path
) -> None:
    """What a Ray task on another node returns (the driver raises it: one line, exit 2)."""
    from analyzer.engines.per_rank import code, digest, rank_products

    root = ingested(capsys, tmp_path, "HTA sampled ranks 0 and 1")
    files = code(["gpu_time"])
    part = ((0, read_manifest(root)["sources"][0]["events"]["0"]),)
    other = rank_products(str(root), 0, part, ("gpu_time",), ALONE, None, files,
                          "another-rlperf")
    assert isinstance(other, InputError) and "runs another rlperf" in other.problem
    unseen = rank_products(str(tmp_path / "elsewhere"), 0, part, ("gpu_time",),
                           ALONE, None, files, digest(files))
    assert isinstance(unseen, InputError)
    assert "the dataset must be on a path every node sees" in unseen.problem
    where, values = rank_products(str(root), 0, part, ("gpu_time",), ALONE, None,
                                files, digest(files))
    assert where == os.getpid() and values[0]["gpu_time"]["rank"].to_list() == [0]
    short = ((0, part[0][1] + 1),)
    damaged = rank_products(str(root), 0, short, ("gpu_time",), ALONE, None, files,
                            digest(files))
    assert isinstance(damaged, InputError)
    assert f"where the manifest says {short[0][1]}: the dataset is damaged" in damaged.problem


class RecordingTask:
    """What ``in_flight`` uses of a Ray remote function: each submission recorded."""

    def __init__(self) -> None:
        self.submitted: list[tuple[int, ...]] = []

    def remote(self, *call: int) -> tuple[int, ...]:
        self.submitted.append(call)
        return call


@pytest.mark.parametrize(("window", "seen"), [
    (2, [2, 3, 4, 5, 5]), (1, [1, 2, 3, 4, 5]), (None, [5, 5, 5, 5, 5]), (9, [5, 5, 5, 5, 5]),
])
def test_jobs_bounds_the_ray_tasks_in_flight(window: int | None, seen: list[int]) -> None:
    """``--jobs N``: a task is submitted only while fewer than N handed out are unread (the
    count submitted as each result is handed out); the calls come back in order, each with
    its own task."""
    from analyzer.engines.on_ray import in_flight

    task = RecordingTask()
    calls = [(i,) for i in range(5)]
    out = [(call, ref, len(task.submitted)) for call, ref in in_flight(task, calls, window)]
    assert [(c, r) for c, r, _ in out] == [(c, c) for c in calls]
    assert [n for _, _, n in out] == seen
    assert task.submitted == calls


class DrainingRay:
    """What ``in_flight`` and ``quiet_shutdown`` use of ray: cancels and waits recorded; the
    shutdown writes to file descriptor 2 as Ray's core does while dropping a task."""

    def __init__(self) -> None:
        self.cancelled: list[tuple[int, ...]] = []
        self.waited: list[tuple[list[tuple[int, ...]], int, float]] = []

    def cancel(self, ref: tuple[int, ...]) -> None:
        self.cancelled.append(ref)

    def wait(self, refs: list, *, num_returns: int, timeout: float) -> None:
        self.waited.append((refs, num_returns, timeout))
        os.write(2, b"[2026-12-02 22:54:56,990 W 17871 17892] core_worker.cc:301: Task "
                    b"cancelled\n")

    def shutdown(self) -> None:
        os.write(2, b"[2026-12-02 22:54:56,991 E 17871 17892] task_manager.cc:1545: Failed to "
                    b"push error to driver for task 4482c0d3e15a41a8ffffffffffffffffffffffff\n")
        os.write(2, b"a line of the user's own\n")


def test_a_run_stopped_early_cancels_its_ray_tasks_and_waits_for_them(capfd) -> None:
    """The first source fails, the driver stops reading: the 2 tasks still out (window 3) are
    cancelled and waited for, all at once and boundedly, before the driver disconnects, and
    the core's lines about them are not passed on; a run read to its end cancels nothing."""
    from analyzer.engines.on_ray import DRAIN_S, in_flight

    ray, calls = DrainingRay(), [(i,) for i in range(5)]
    flight = in_flight(RecordingTask(), calls, 3, ray)
    assert next(flight) == ((0,), (0,))
    flight.close()
    assert ray.cancelled == [(1,), (2,)]
    assert ray.waited == [([(1,), (2,)], 2, DRAIN_S)]
    assert capfd.readouterr().err == ""
    whole = DrainingRay()
    assert len(list(in_flight(RecordingTask(), calls, 3, whole))) == 5
    assert whole.cancelled == [] and whole.waited == []


def test_ray_core_lines_written_while_disconnecting_are_not_passed_on(capfd) -> None:
    """CI saw ``rlperf: error: …`` preceded by Ray core's ``task_manager.cc:1545: Failed to
    push error to driver`` line; the core's lines written during shutdown are dropped, any
    other line passes."""
    from analyzer.engines.on_ray import quiet_shutdown

    quiet_shutdown(DrainingRay())  # type: ignore[arg-type]
    assert capfd.readouterr().err == "a line of the user's own\n"


@pytest.mark.parametrize("jobs", [3, None])
def test_jobs_reaches_the_dataset_shards(capsys, tmp_path, jobs: int | None) -> None:
    """``analyzer.load(..., jobs=)`` (``--jobs``) is what the Ray engine's per-rank calls get
    (choosing the engine connects to nothing)."""
    from analyzer import engines
    from analyzer.engines.on_ray import RayEngine

    ds = ingested(capsys, tmp_path, "HTA sampled ranks 0 and 1")
    with engines.using("ray", "127.0.0.1:1"):
        run = analyzer.load([ds], jobs=jobs)
    assert isinstance(run.shards, DatasetShards) and isinstance(run.shards.engine, RayEngine)
    assert run.shards.workers == jobs
