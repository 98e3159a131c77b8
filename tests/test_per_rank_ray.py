"""``--engine ray`` on a dataset: the rank-local products are Ray tasks, one per rank partition,
each reading only its partition from the dataset folder, on a Ray head on 127.0.0.1 (the one
``tests/test_ray_engine.py`` starts, started here for this module); they equal the local
engine's exactly, and so does the whole JSON report, with ``--ranks`` too (the tasks get the
selection the driver's whole-table products get)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from polars.testing import assert_frame_equal

import analyzer
from analyzer import engines
from analyzer.engines.on_ray import RayEngine
from analyzer.engines.per_rank import DatasetShards
from parsers.events import empty_events
from tests.report_truth import rlperf
from tests.test_per_rank import ingested, loaded, rank_local, whole
from tests.test_ray_engine import cluster  # noqa: F401  # the fixture: a Ray head

NAME = "synthetic disaggregated"
"""8 ranks, one trace each: 8 partitions, 8 tasks."""


def test_ray_tasks_compute_the_rank_local_products_of_a_dataset(
    cluster: str, capsys, tmp_path: Path  # noqa: F811
) -> None:
    """The run's own event table is emptied before the products are read: they come from the
    tasks, which ran in Ray's workers (not this process), one per partition. Ray is imported
    first, as any earlier test of this process may have done: the token it reads then is the
    cluster's (tests/conftest.py)."""
    import ray  # noqa: F401
    ds = ingested(capsys, tmp_path, NAME)
    with engines.using("ray", cluster):
        run = analyzer.load([ds])
    assert isinstance(run.shards, DatasetShards)
    assert isinstance(run.shards.engine, RayEngine)
    run.events = empty_events()
    for p in rank_local():
        assert_frame_equal(run.product(p.name), whole(loaded(NAME), p), check_exact=True)
    assert len(run.shards.ran) == len(run.shards.partitions) == 8
    assert os.getpid() not in run.shards.ran

    status, local, err = rlperf(capsys, "analyze", str(ds), "-f", "json", "-q")
    assert status == 0, err
    status, on_ray, err = rlperf(capsys, "analyze", str(ds), "-f", "json", "-q",
                                 "--engine", "ray", "--ray-address", cluster)
    assert status == 0, err
    assert json.loads(on_ray) == json.loads(local)
    assert json.loads(local)["gpu_time"] and json.loads(local)["annotations"]

    some = ("analyze", str(ds), "-f", "json", "-q", "--ranks", "2-3")
    status, local, err = rlperf(capsys, *some)
    assert status == 0, err
    status, on_ray, err = rlperf(capsys, *some, "--engine", "ray", "--ray-address", cluster)
    assert status == 0, err
    assert json.loads(on_ray) == json.loads(local)
    assert [r["rank"] for r in json.loads(local)["gpu_time"]] == [2, 3]
    assert {r["rank"] for r in json.loads(local)["annotations"]} == {2, 3}
