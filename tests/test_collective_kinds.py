"""A communication kernel's kind is its host collective's (docs/assembly.md, "One clock").

PyTorch runs all_to_all (and, in the build of HTA's sampled pair, all_reduce and
_all_gather_base) as grouped send/recv: the kernel is ``ncclKernel_SendRecv_…`` while its
launch lies inside ``nccl:all_to_all``. Classed by the kernel name, every call of that pair was a
point-to-point ``send_recv`` (dimension pp, the point-to-point bus factor). Taken from the host
range, they are collectives, matched by order within their group unless their instances show the
trace lacks calls, as this event-sampled pair does: then by time.
"""

from __future__ import annotations

import polars as pl
import pytest
from conftest import CORPUS

import analyzer
from analyzer.assemble.collectives import _instances, host_kinds
from parsers.events import EVENT_SCHEMA, empty_events

SAMPLED = [CORPUS / "HolisticTraceAnalysis" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
MS = 1_000_000
US = 1_000


@pytest.fixture(scope="module")
def sampled() -> analyzer.Run:
    return analyzer.load([str(p) for p in SAMPLED])


def numbered(run: analyzer.Run, product: str) -> pl.DataFrame:
    """The product's rows of each rank in start order, numbered per rank (``n``)."""
    return run.product(product).sort("rank", "start_ns").with_columns(
        pl.int_range(pl.len()).over("rank").alias("n")
    )


def test_the_sampled_pairs_sendrecv_kernels_take_their_host_collectives_kind(sampled) -> None:
    """Each rank's 10 SendRecv kernels are launched inside 4 ``nccl:all_to_all``, 4
    ``nccl:all_reduce`` and 2 ``nccl:_all_gather_base`` ranges (raw JSON: the cudaLaunchKernel
    with the kernel's correlation id lies inside the range, on its thread). Before: 20
    ``send_recv``."""
    c = numbered(sampled, "collective_calls")
    kinds = c.group_by("rank", "coll").len().sort("rank", "coll").rows()
    assert kinds == [
        (0, "all_gather", 2), (0, "all_reduce", 4), (0, "all_to_all", 4),
        (1, "all_gather", 2), (1, "all_reduce", 4), (1, "all_to_all", 4),
    ]
    assert c.filter(pl.col("rank") == 0)["coll"].to_list() == [
        "all_to_all", "all_to_all", "all_reduce", "all_reduce", "all_gather",
        "all_to_all", "all_to_all", "all_reduce", "all_reduce", "all_gather",
    ]
    assert set(c["group"]) == {"0,1|~all_to_all", "0,1|~all_reduce", "0,1|~all_gather"}
    events = sampled.events.filter((pl.col("kind") == "kernel") & pl.col("coll").is_not_null())
    assert events.height == 20 and "send_recv" not in set(events["coll"].cast(pl.String))


def test_the_sampled_pair_gets_dimensions_and_a_bus_factor(sampled) -> None:
    """No group is recorded: all_reduce and all_gather over every traced rank are data
    parallel by the layout (before: all pp); all_to_all matches the pattern rule, but nothing
    in this recommender's trace shows experts (its all-to-all exchanges embeddings), so its
    dimension is unknown (before: ep). Kernels carry no sizes here, so no bandwidth is
    computed, but the kinds now have a bus factor."""
    dims = sampled.product("collectives").group_by("coll", "dim", "dim_by").len().sort("coll")
    assert dims.select(pl.all().cast(pl.String)).rows() == [
        ("all_gather", "dp", "layout", "4"), ("all_reduce", "dp", "layout", "8"),
        ("all_to_all", "unknown", "pattern", "8"),
    ]
    by_dim = sampled.product("collectives_by_dim").sort("coll")
    assert by_dim.select("dim", "coll", "count", "wait_ns").rows() == [
        ("dp", "all_gather", 4, 1_376_000), ("dp", "all_reduce", 8, 3_907_000),
        ("unknown", "all_to_all", 8, 4_599_000),
    ]


def test_the_sampled_pair_matches_its_collectives_by_order_only_where_they_end_together(
    sampled,
) -> None:
    """By order the 2 all_gather end together (ends 332 and 189 µs apart) and stay matched by
    order. The k-th all_reduce and all_to_all of rank 0 is not rank 1's k-th — the files are
    event-sampled (rank 0 keeps 1,204 runtime calls over 259,690 correlation ids): by order, 2
    of 4 all_reduce and 4 of 4 all_to_all instances ended 68–754 ms apart — so they are matched
    by time: rank 0's all_reduce #2 and #8 with rank 1's #2 and #8 (ends 55 and 8 µs apart),
    rank 0's all_to_all #1 with rank 1's #0 (ends at the same µs). The other 5 calls of each
    rank have no counterpart in the other file. Rank 1 arrives last in all five: rank 0 waits
    4.859 − 0.260 + 3.302 − 1.505 + 0.084 + 22.328 − 20.218 + 1.292 = 9.882 ms (from the
    kernels' starts, less rank 0's own kernels in the wait). By order (the kinds fixed, the
    matching not) it was 144.582 ms on rank 0 and 14.493 ms on rank 1, on a clock
    uncertainty of 32.7 ms."""
    c = numbered(sampled, "collective_calls")
    on = {r: dict(zip(g["n"], g["instance"], strict=True)) for (r,), g in c.group_by(["rank"])}
    pairs = {(n0, n1) for n0, i0 in on[0].items() for n1, i1 in on[1].items() if i0 == i1 >= 0}
    assert pairs == {(1, 0), (2, 2), (4, 4), (8, 8), (9, 9)}
    waits = sampled.product("collective_waits")
    assert waits.group_by("rank").agg(pl.col("wait_ns").sum()).sort("rank").rows() == [
        (0, 9_882_000), (1, 0)
    ]
    clock = sampled.product("clock").sort("rank")
    assert clock.select("rank", "offset_ns", "matched").rows() == [(0, 0, 5), (1, 0, 5)]
    assert clock["uncertainty_ns"].max() < 30 * US


def test_the_sampled_pairs_communication_time_equals_htas(sampled) -> None:
    """The kind decides which instance a call joins, not what is communication: each rank's
    union of communication kernels is HTA's (``TraceAnalysis`` on the two files: 396.199 and
    379.053 ms of NCCL kernels), its exposed part unchanged."""
    exposed = sampled.product("exposed_comm").sort("rank")
    assert exposed.select("rank", "comm_ns", "exposed_ns").rows() == [
        (0, 396_199_000, 336_033_000), (1, 379_053_000, 299_495_000)
    ]


def events(rows: list[dict[str, object]]) -> pl.DataFrame:
    """An event table of ``rows`` (missing columns null), times in µs."""
    frame = pl.DataFrame(rows).with_columns(
        (pl.col("start_ns") * US), (pl.col("end_ns") * US)
    )
    return pl.concat([empty_events(), frame], how="diagonal_relaxed").with_columns(
        pl.col(c).cast(EVENT_SCHEMA[c]) for c in ("kind", "coll", "name", "source", "rank")
    )


def host_row(name: str, coll: str, start: int, end: int, pid: int = 7, tid: int = 7) -> dict:
    return {"source": 0, "rank": 0, "pid": pid, "tid": tid, "kind": "annotation",
            "name": name, "coll": coll, "start_ns": start, "end_ns": end}


def launch(corr: int, start: int, pid: int = 7, tid: int = 7) -> dict:
    return {"source": 0, "rank": 0, "pid": pid, "tid": tid, "kind": "runtime",
            "name": "cudaLaunchKernel", "corr": corr, "start_ns": start, "end_ns": start + 5}


def kernel(corr: int, start: int, pid: int = 0) -> dict:
    return {"source": 0, "rank": 0, "pid": pid, "tid": 84, "kind": "kernel",
            "name": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "coll": "send_recv",
            "corr": corr, "start_ns": start, "end_ns": start + 100}


def test_the_outermost_host_range_around_the_launch_decides_else_the_kernel_name() -> None:
    """Kernel 1's launch lies in ``nccl:all_to_all``: all_to_all. Kernel 2's in ``nccl:send``:
    send. Kernel 3's launch is outside any range, kernel 4's inside ``nccl:coalesced`` (a range
    that names no collective), kernel 5's inside a range of another thread: the name decides
    (send_recv)."""
    table = events([
        host_row("nccl:all_to_all", "all_to_all", 0, 50), launch(1, 10), kernel(1, 60),
        host_row("nccl:send", "send", 100, 150), launch(2, 120), kernel(2, 160),
        launch(3, 200), kernel(3, 260),
        host_row("nccl:coalesced", "other", 300, 350), launch(4, 320), kernel(4, 360),
        host_row("nccl:all_reduce", "all_reduce", 400, 450, tid=8), launch(5, 420),
        kernel(5, 460),
    ])
    got = host_kinds(table).filter(pl.col("kind") == "kernel").sort("corr")
    assert got["coll"].cast(pl.String).to_list() == [
        "all_to_all", "send", "send_recv", "send_recv", "send_recv"
    ]
    assert host_kinds(table).drop("coll").equals(table.drop("coll"))


def test_correlation_ids_repeated_across_processes_link_by_pid() -> None:
    """In one Nsight report, two processes both number a launch 1: each kernel takes the kind
    of the range its own process launched it in."""
    table = events([
        host_row("nccl:all_to_all", "all_to_all", 0, 50, pid=1, tid=1), launch(1, 10, 1, 1),
        kernel(1, 60, pid=1),
        host_row("nccl:all_reduce", "all_reduce", 0, 50, pid=2, tid=2), launch(1, 12, 2, 2),
        kernel(1, 62, pid=2),
    ])
    got = host_kinds(table).filter(pl.col("kind") == "kernel").sort("pid")
    assert got["coll"].cast(pl.String).to_list() == ["all_to_all", "all_reduce"]


def calls(rows: list[tuple[int, int, int]], coll: str = "all_reduce") -> pl.DataFrame:
    """Calls ``(rank, start_ms, end_ms)`` of one collective group, no ``seq``."""
    return pl.DataFrame(
        {
            "rank": [r for r, _, _ in rows], "source": [r for r, _, _ in rows],
            "coll": coll, "group": "0,1,2|dp", "seq": None,
            "start_ns": [s * MS for _, s, _ in rows], "end_ns": [e * MS for _, _, e in rows],
        },
        schema={"rank": pl.Int32, "source": pl.UInt32, "coll": pl.String, "group": pl.String,
                "seq": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
    )


def members(frame: pl.DataFrame) -> set[frozenset[tuple[int, int]]]:
    got = _instances(frame).filter(pl.col("instance") >= 0)
    return {frozenset(zip(g["rank"], g["start_ns"] // MS, strict=True))
            for g in got.partition_by("instance")}


def test_a_complete_trace_matches_by_order_whatever_the_clocks() -> None:
    """Three ranks, four all-reduces, rank 2's clock 3 ms ahead and rank 1 late each time: the
    instances end together once the offset is taken out, so order holds, three members
    each."""
    rows = [(r, 20 * k + (4 if r == 1 else 0) + (3 if r == 2 else 0),
             20 * k + 10 + (3 if r == 2 else 0)) for k in range(4) for r in range(3)]
    got = members(calls(rows))
    assert len(got) == 4 and all(len(m) == 3 for m in got)
    assert frozenset({(0, 20), (1, 24), (2, 23)}) in got


def test_calls_missing_from_one_rank_are_matched_by_time_not_order() -> None:
    """Rank 1's trace lacks the 2nd of four all-reduces. By order its 2nd (the 3rd) would join
    the others' 2nd, its 3rd their 3rd — ends 20 ms apart: three of its four instances wrong.
    Their ends say which ran together: ranks 0 and 1 pair at 0, 40 and 60 ms, rank 0's 20 ms
    call stays alone."""
    rows = [(0, 0, 10), (0, 20, 30), (0, 40, 50), (0, 60, 70),
            (1, 2, 10), (1, 42, 50), (1, 61, 70)]
    assert members(calls(rows)) == {
        frozenset({(0, 0), (1, 2)}), frozenset({(0, 40), (1, 42)}),
        frozenset({(0, 60), (1, 61)}),
    }


def test_rooted_collectives_and_recorded_seq_keep_their_matching() -> None:
    """A broadcast's root leaves before its receivers (ends apart by design): order is kept.
    With ``seq`` recorded, seq decides."""
    rows = [(0, 0, 2), (1, 0, 10), (0, 20, 22), (1, 20, 40)]
    assert members(calls(rows, "broadcast")) == {
        frozenset({(0, 0), (1, 0)}), frozenset({(0, 20), (1, 20)})
    }
    seq = calls([(0, 0, 10), (0, 20, 30), (1, 22, 30)]).with_columns(
        pl.Series("seq", [1, 2, 2])
    )
    assert members(seq) == {frozenset({(0, 20), (1, 22)})}


def test_without_the_ends_check_the_sampled_pair_waits_what_order_says(monkeypatch) -> None:
    """The kinds fixed and every collective matched by order (the check of their ends turned
    off): 6 of the 10 instances join calls that did not run together, and the waits are
    144.582 ms on rank 0 and 14.493 ms on rank 1 where the five real pairs give 9.882 and 0."""
    monkeypatch.setattr(
        "analyzer.assemble.collectives._out_of_order", lambda _: pl.Series([], dtype=pl.String)
    )
    run = analyzer.load([str(p) for p in SAMPLED])
    waits = run.product("collective_waits")
    assert waits.group_by("rank").agg(pl.col("wait_ns").sum()).sort("rank").rows() == [
        (0, 144_582_000), (1, 14_493_000)
    ]


def test_nsys_nvtx_collective_ranges_give_their_kernels_a_kind() -> None:
    """nsys-ai's mfu_2gpu_before.sqlite: PyTorch's NVTX names its ranges
    ``nccl:all_to_all, op_id = N``; 64 of the 66 ncclDevKernel_SendRecv kernels are launched
    inside one (checked on the sqlite), the other 2 have no launch in the capture. The Kineto
    parser read the kind from such names, the Nsight Systems one did not: all 66 were
    send_recv of unknown group. The workload (a 2-GPU sequence-parallel run, "sp2" in the name
    of the report it is cut from) shows no experts: its all-to-alls are of no known dimension
    (before: ep by the pattern rule)."""
    run = analyzer.load([CORPUS / "nsys-ai" / "mfu_2gpu_before.sqlite"])
    events = run.events
    ranges = events.filter(pl.col("kind") == "annotation")
    named = ranges.filter(pl.col("name").cast(pl.String).str.starts_with("nccl:all_to_all, op_id"))
    assert named.height == 66
    assert named["coll"].cast(pl.String).unique().to_list() == ["all_to_all"]
    assert ranges.filter(pl.col("coll").is_not_null()).height == 132
    kernels = events.filter((pl.col("kind") == "kernel") & pl.col("coll").is_not_null())
    kinds = dict(kernels.group_by(pl.col("coll").cast(pl.String)).len().iter_rows())
    assert kinds == {"all_to_all": 64, "send_recv": 2}
    by_dim = {(r["dim"], r["coll"]): r["count"]
              for r in run.collectives_by_dim.iter_rows(named=True)}
    assert by_dim == {("unknown", "all_to_all"): 64, ("unknown", "send_recv"): 2}
