"""The memory-lean formulations of the interval algebra and of the GPU findings give the numbers
the plain ones gave: each interval operation against a cell-by-cell count on random small
intervals, the GPU findings' name matching per distinct name against matching every row."""

from __future__ import annotations

import random
from itertools import groupby

import polars as pl
import pytest

from analyzer.analyses import gpu_findings as gf
from analyzer.model import frames
from analyzer.model import intervals as iv

SCHEMA = {"rank": pl.Int32, "label": pl.Int8, "start_ns": pl.Int64, "end_ns": pl.Int64}


def _random(rnd: random.Random, n: int) -> pl.DataFrame:
    rows = []
    for _ in range(n):
        start = rnd.randint(0, 40)
        rows.append((rnd.randint(0, 2), rnd.randint(0, 4), start, start + rnd.randint(-1, 9)))
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def _cells(frame: pl.DataFrame, rank: int) -> dict[int, int]:
    """Unit cell → lowest label covering it, for one rank."""
    out: dict[int, int] = {}
    for _, label, start, end in frame.filter(pl.col("rank") == rank).iter_rows():
        for t in range(start, end):
            out[t] = min(out.get(t, label), label)
    return out


def _runs(cells: dict[int, int], rank: int) -> list[tuple[int, int, int, int]]:
    """Maximal runs of consecutive cells of one label: (rank, label, start, end)."""
    runs = []
    ordered = sorted(cells.items())
    for _, group in groupby(enumerate(ordered), key=lambda x: (x[1][0] - x[0], x[1][1])):
        items = [cell for _, cell in group]
        runs.append((rank, items[0][1], items[0][0], items[-1][0] + 1))
    merged: list[tuple[int, int, int, int]] = []
    for r in runs:
        if merged and merged[-1][1] == r[1] and merged[-1][3] == r[2]:
            merged[-1] = (rank, r[1], merged[-1][2], r[3])
        else:
            merged.append(r)
    return merged


@pytest.mark.parametrize("seed", range(40))
def test_interval_operations_match_a_cell_count(seed: int) -> None:
    rnd = random.Random(seed)
    a, b = _random(rnd, rnd.randint(0, 20)), _random(rnd, rnd.randint(0, 20))
    union, diff, inter = [], [], []
    swept = []
    for rank in range(3):
        ca, cb = _cells(a, rank), _cells(b, rank)
        union += [(rk, s, e) for rk, _, s, e in _runs(dict.fromkeys(ca, 0), rank)]
        diff += [(rk, s, e) for rk, _, s, e in _runs({t: 0 for t in ca if t not in cb}, rank)]
        inter += [(rk, s, e) for rk, _, s, e in _runs({t: 0 for t in ca if t in cb}, rank)]
        swept += _runs(ca, rank)
    spans = ["rank", "start_ns", "end_ns"]
    assert iv.union(a, ["rank"]).sort(spans).rows() == union
    assert iv.difference(a, b, ["rank"]).sort(spans).rows() == diff
    assert iv.intersection(a, b, ["rank"]).sort(spans).rows() == inter
    got = iv.labelled_sweep(a, ["rank"], 5)
    assert got.rows() == swept
    assert got.schema == pl.Schema({"rank": pl.Int32, "label": pl.Int8,
                                    "start_ns": pl.Int64, "end_ns": pl.Int64})


def test_union_piece_ends_at_the_reach_of_a_long_interval() -> None:
    """A long interval that contains later, shorter ones ends the piece, not the last one."""
    frame = pl.DataFrame(
        [(0, 0, 0, 100), (0, 0, 10, 20), (0, 0, 30, 40), (0, 0, 150, 160), (1, 0, 5, 6)],
        schema=SCHEMA, orient="row",
    )
    assert iv.union(frame, ["rank"]).rows() == [(0, 0, 100), (0, 150, 160), (1, 5, 6)]


def test_labelled_sweep_refuses_more_labels_than_bits() -> None:
    frame = pl.DataFrame([(0, 0, 0, 1)], schema=SCHEMA, orient="row")
    with pytest.raises(ValueError, match="at most 62 labels"):
        iv.labelled_sweep(frame, ["rank"], iv.MAX_LABELS + 1)


def _trace() -> pl.DataFrame:
    """Two ranks: launches (two launch APIs, one not a launch), kernels of two families with
    tiny ones among them, a blocking sync, a host-side sync record and a copy."""
    rows = []
    for rank in range(2):
        t = 0
        for i in range(12):
            api = ("cudaLaunchKernel", "cudaGraphLaunch", "cudaGetDevice")[i % 3]
            rows.append((rank, "runtime", api, t, t + 3_000, 0, i, None, "rollout"))
            kernel = f"void ns::{'gemm' if i % 2 else 'elementwise'}_{i % 4}<float>(int)"
            length = (2_000 if i % 4 == 0 else 40_000) + 100 * i
            rows.append((rank, "kernel", kernel, t + 5_000, t + 5_000 + length, 0, i, None,
                         "rollout" if i < 6 else None))
            t += 60_000 + 10_000 * rank
        rows.append((rank, "runtime", "cudaStreamSynchronize", t, t + 90_000, 0, None, None,
                     None))
        rows.append((rank, "gpu_sync", "Stream Sync", t, t + 50_000, 0, None, None, None))
        rows.append((rank, "memcpy", "Memcpy HtoD (Pageable -> Device)", t + 100_000,
                     t + 160_000, 0, 99, 1 << 20, None))
    return pl.DataFrame(rows, schema={
        "rank": pl.Int32, "kind": pl.String, "name": pl.String, "start_ns": pl.Int64,
        "end_ns": pl.Int64, "stream": pl.Int32, "corr": pl.Int64, "bytes": pl.Int64,
        "stage": frames.STAGE,
    }, orient="row")


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    keys = [c for c, t in frame.schema.items() if not isinstance(t, pl.List)]
    return frame.sort(keys, nulls_last=True)


def test_gpu_measures_are_the_same_on_categorical_and_string_names() -> None:
    """Names are matched per distinct name and looked up by the categorical code: the numbers
    equal those of the same events with plain string names."""
    plain = _trace()
    coded = plain.with_columns(pl.col("name").cast(pl.Categorical))
    timeline = pl.DataFrame(schema=frames.STAGE_TIMELINE)
    waits = pl.DataFrame(schema=frames.COLLECTIVE_WAITS)
    exposed = pl.DataFrame(schema=frames.EXPOSED_INTERVALS)
    a = gf.measure(plain, timeline, waits, exposed, gf.rules())
    b = gf.measure(coded, timeline, waits, exposed, gf.rules())
    assert a["sync_blocking"].height == 2
    # tiny kernels i = 0, 4, 8 on each rank; i = 4's is launched by cudaGraphLaunch, in a graph
    assert a["small_kernels"].filter(pl.col("scope") == gf.WHOLE)["count"].item() == 4
    assert set(a["top_kernel"]["family"]) == {"gemm_1", "gemm_3", "elementwise_0",
                                              "elementwise_2"}
    for check in a:
        left, right = a[check], b[check]
        if "name" in left.columns:
            right = right.with_columns(pl.col("name").cast(pl.String))
        assert _sorted(left).equals(_sorted(right)), check


def test_duplicates_are_whole_copies_among_rows_of_one_start() -> None:
    """Only an identical row counts (checked among the rows whose start repeats): a row of the
    same start and another name, or the same row with another end, is no copy."""
    from analyzer.analyses import quality

    base = {"rank": 0, "source": 0, "kind": "kernel", "name": "k", "start_ns": 10, "end_ns": 20,
            "depth": 0}
    rows = [base, {**base, "depth": 1}, {**base, "name": "other"}, {**base, "end_ns": 21},
            {**base, "start_ns": 30, "end_ns": 40}, {**base, "start_ns": 30, "end_ns": 40}]
    frame = pl.DataFrame(rows, schema={"rank": pl.Int32, "source": pl.UInt32, "kind": pl.String,
                                       "name": pl.String, "start_ns": pl.Int64,
                                       "end_ns": pl.Int64, "depth": pl.Int16})
    assert quality._per_source(quality.duplicates(frame)).rows() == [(0, 2, "2 kernel")]
