"""The synthetic generator: its traces parse and validate, its ground truth is self-consistent
and follows docs/analyses.md, the traces reproduce the truth (stages, collectives, clock
offsets), runs are deterministic, and the committed samples are what they claim."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import deque
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers import parse_file, validate
from sample_traces.synth import generate, preset
from sample_traces.synth import intervals as iv
from sample_traces.synth.config import build_groups
from sample_traces.synth.samples import ROOT as SAMPLES_ROOT
from sample_traces.synth.samples import SAMPLES, make
from sample_traces.synth.truth import CAUSES, compute
from taxonomy.vocab import IDLE_CAUSES, STAGE_NAMES

REPO = Path(__file__).resolve().parents[1]


# --- helpers -----------------------------------------------------------------------------------


def load(run_dir: Path) -> tuple[dict, pl.DataFrame]:
    """The truth and every rank's parsed events (validated), with ``t0``/``t1`` de-skewed."""
    truth = json.loads((run_dir / "truth.json").read_text())
    frames = []
    for entry in truth["ranks"]:
        parsed = parse_file(run_dir / entry["trace"])
        validate(parsed.events, where=entry["trace"])
        assert parsed.meta["rank"] == entry["rank"]
        assert not parsed.warnings
        off = truth["clock_offsets_ns"][str(entry["rank"])]
        frames.append(
            parsed.events.with_columns(t0=pl.col("start_ns") - off, t1=pl.col("end_ns") - off)
        )
    return truth, pl.concat(frames)


def nccl(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter((pl.col("kind") == "kernel") & pl.col("coll").is_not_null())


def estimate_offsets(events: pl.DataFrame) -> dict[int, int]:
    """docs/analyses.md §2: matched instances end together; median differences, chained
    breadth-first from the lowest rank."""
    ends = nccl(events).select("rank", pl.col("pg").cast(pl.String), "seq", "end_ns")
    pairs = (
        ends.join(ends, on=["pg", "seq"], suffix="_b")
        .filter(pl.col("rank") != pl.col("rank_b"))
        .group_by("rank", "rank_b")
        .agg((pl.col("end_ns_b") - pl.col("end_ns")).median().alias("d"))
    )
    links: dict[int, list[tuple[int, float]]] = {}
    for a, b, d in pairs.sort("rank", "rank_b").iter_rows():
        links.setdefault(a, []).append((b, d))
    ref = min(links)
    offsets = {ref: 0.0}
    queue = deque([ref])
    while queue:
        q = queue.popleft()
        for r, d in links.get(q, []):
            if r not in offsets:
                offsets[r] = offsets[q] + d
                queue.append(r)
    return {r: round(v) for r, v in offsets.items()}


def check_run(run_dir: Path) -> tuple[dict, pl.DataFrame]:
    truth, events = load(run_dir)
    windows = {w["step"]: (w["start_ns"], w["end_ns"]) for w in truth["step_windows"]}

    with gzip.open(run_dir / truth["ranks"][0]["trace"]) as fh:
        head = fh.read(4096)
    assert b'"rlperf_synthetic": true' in head and b"synthetic" in head
    assert truth["synthetic"] is True and truth["format"] == "rlperf-truth/1"

    # productive busy + Σ idle = window per device and step; busy ≥ productive busy
    assert len(truth["devices"]) == truth["config"]["world_size"] * truth["config"]["steps"]
    for d in truth["devices"]:
        assert set(d["idle_ns"]) == set(IDLE_CAUSES)
        assert d["window_ns"] == windows[d["step"]][1] - windows[d["step"]][0]
        assert d["productive_busy_ns"] + sum(d["idle_ns"].values()) == d["window_ns"]
        assert d["busy_ns"] >= d["productive_busy_ns"] > 0
        assert min(d["idle_ns"].values()) >= 0

    # every stage interval inside its step window, named with the taxonomy's stage names
    for s in truth["stages"]:
        a, b = windows[s["step"]]
        assert a <= s["start_ns"] < s["end_ns"] <= b
        assert s["stage"] in STAGE_NAMES
    per_rank_step: dict[tuple[int, int], int] = {}
    for s in truth["stage_durations"]:
        per_rank_step[(s["rank"], s["step"])] = (
            per_rank_step.get((s["rank"], s["step"]), 0) + s["duration_ns"]
        )
    for (rank, step), total in per_rank_step.items():
        mine = [s for s in truth["stages"] if s["rank"] == rank and s["step"] == step]
        assert total == max(s["end_ns"] for s in mine) - min(s["start_ns"] for s in mine)

    # the stage ranges are in the trace, under their names, at the true times plus the offset
    ann = events.filter(pl.col("kind") == "annotation").select(
        "rank", pl.col("name").cast(pl.String), "t0", "t1")
    want = pl.DataFrame(
        [(s["rank"], s["name"], s["start_ns"], s["end_ns"]) for s in truth["stages"]]
        + [
            (s["rank"], s["worker_name"], s["worker_start_ns"], s["worker_end_ns"])
            for s in truth["stages"]
            if "worker_name" in s
        ],
        schema=["rank", "name", "t0", "t1"],
        orient="row",
    )
    # to the ns (measured 0 off on the four samples: the Kineto parser scales µs to ns in integers;
    # 1-2 ns were allowed while ts x 1000 was one float)
    found = want.join(ann, on=["rank", "name", "t0", "t1"])
    assert found.height == want.height, want.join(ann, on=["rank", "name", "t0", "t1"], how="anti")

    # collective time per dimension = Σ NCCL kernels of that dimension in the traces, de-skewed
    dims = {g["pg_name"]: g["dim"] for g in truth["config"]["process_groups"]}
    got = (
        nccl(events)
        .with_columns(dim=pl.col("pg").cast(pl.String).replace_strict(dims))
        .group_by("dim")
        .agg(
            count=pl.len(), bytes=pl.col("bytes").sum(), time_ns=(pl.col("t1") - pl.col("t0")).sum()
        )
        .sort("dim")
    )
    want_dims = truth["collectives_by_dim"]
    assert got["dim"].to_list() == [c["dim"] for c in want_dims]
    for row, c in zip(got.iter_rows(named=True), want_dims, strict=True):
        assert (row["count"], row["bytes"]) == (c["count"], c["bytes"])
        # measured 0 ns off (2 ns a call was allowed)
        assert row["time_ns"] == c["time_ns"], (
            row,
            c,
        )
        assert 0 <= c["wait_ns"] < c["time_ns"]

    # the clock offsets it injected are what the traces' collectives say
    est = estimate_offsets(events)
    assert set(est) == {e["rank"] for e in truth["ranks"]}
    for rank, off in est.items():
        # measured exact (2 ns allowed)
        assert off == truth["clock_offsets_ns"][str(rank)], (
            rank,
            off,
        )

    # launches precede their kernels; host ops on a thread never overlap (all at depth 0)
    launch = events.filter(pl.col("kind") == "runtime").select("rank", "corr", rt_end="end_ns")
    dev = events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"])).join(
        launch, on=["rank", "corr"]
    )
    assert dev.height == events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"])).height
    assert (dev["rt_end"] <= dev["start_ns"]).all()
    assert events.filter(pl.col("kind") == "cpu_op")["depth"].max() == 0
    return truth, events


# --- the interval algebra the truth rests on -----------------------------------------------------

_spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=8)


def _bitmap(pairs: list[tuple[int, int]]) -> np.ndarray:
    bits = np.zeros(61, dtype=bool)
    for a, b in pairs:
        bits[a:b] = True
    return bits


@settings(max_examples=300, deadline=None)
@given(_spans, _spans)
def test_interval_algebra_matches_a_bitmap(
    a: list[tuple[int, int]], b: list[tuple[int, int]]
) -> None:
    sa = iv.span([p[0] for p in a], [p[1] for p in a])
    sb = iv.span([p[0] for p in b], [p[1] for p in b])
    ba, bb = _bitmap(a), _bitmap(b)
    assert iv.measure(sa) == ba.sum()
    assert iv.measure(iv.union(sa, sb)) == (ba | bb).sum()
    assert iv.measure(iv.intersect(sa, sb)) == (ba & bb).sum()
    assert iv.measure(iv.subtract(sa, sb)) == (ba & ~bb).sum()
    starts = np.array([p[0] for p in b], dtype=np.int64)
    ends = np.array([max(p) for p in b], dtype=np.int64)
    each = iv.overlap_each(starts, ends, sa)
    assert each.tolist() == [int(ba[s:e].sum()) for s, e in zip(starts, ends, strict=True)]


# --- the truth on a timeline small enough to work out by hand ----------------------------------


def test_truth_follows_the_definitions_on_a_hand_made_timeline() -> None:
    """Two disaggregated ranks (0 rollout, 1 train) in one 100 µs step, times in µs:

    rank 0: rollout range [0, 40) with kernel [5, 35); weight_sync range [70, 100) with a
            broadcast kernel [72, 95) (instance 0)
    rank 1: old_logprob range [40, 60) with kernels [42, 50), [53, 58); weight_sync [70, 100)
            with the broadcast [80, 95) — rank 0 arrived first, so its wait is [72, 80)
    """
    cfg = preset("disaggregated", 2)
    groups = build_groups(cfg)
    sync_pg = next(i for i, g in enumerate(groups.all) if g.dim == "weight_sync")
    us = 1000
    ops = {
        "rank": np.array([0, 0, 1, 1, 1]), "start": np.array([5, 72, 42, 53, 80]) * us,
        "end": np.array([35, 95, 50, 58, 95]) * us, "inst": np.array([-1, 0, -1, -1, 0]),
        "step": np.ones(5, dtype=np.int32), "kind": np.zeros(5, dtype=np.int8),
    }
    insts = {"pg": np.array([sync_pg]), "in_nelems": np.array([10]), "out_nelems": np.array([10])}
    code = {"rollout": 1, "old_logprob": 3, "weight_sync": 9}
    stages = {
        "rank": np.array([0, 0, 1, 1]),
        "step": np.ones(4, dtype=np.int32),
        "stage": np.array(
            [code["rollout"], code["weight_sync"], code["old_logprob"], code["weight_sync"]]
        ),
        "start": np.array([0, 70, 40, 70]) * us,
        "end": np.array([40, 100, 60, 100]) * us,
        "role": np.zeros(4, dtype=np.int8),
    }
    stages["inner_start"], stages["inner_end"] = stages["start"], stages["end"]
    truth = compute(cfg, groups, {"ops": ops, "insts": insts, "stages": stages}, [(1, 0, 100 * us)])
    d0, d1 = (next(d for d in truth["devices"] if d["rank"] == r) for r in (0, 1))
    # rank 0: busy [5,35) ∪ [72,95) = 53; waiting [72,80) = 8 → productive 45;
    # weight_sync range [70,100) minus productive [80,95): 15; pool wait: rank 1's
    # old_logprob [40,60) where rank 0 has no range: 20; stage gap [40,70) less that: 10;
    # other: [0,5) and [35,40) are inside rank 0's rollout range → host_bound 10.
    assert d0["busy_ns"] == 53 * us and d0["productive_busy_ns"] == 45 * us
    assert {k: v // us for k, v in d0["idle_ns"].items() if v} == {
        "weight_sync": 15, "pool_wait": 20, "stage_gap": 10, "host_bound": 10}
    # rank 1: productive 8 + 5 + 15 = 28; before its first range [0,40): rank 0's rollout runs
    # → pool_wait 40; [40,42) [50,53) [58,60) host_bound 7; [60,70) stage_gap 10; wsync 15.
    assert d1["productive_busy_ns"] == 28 * us
    assert {k: v // us for k, v in d1["idle_ns"].items() if v} == {
        "pool_wait": 40, "host_bound": 7, "stage_gap": 10, "weight_sync": 15}
    (ws,) = truth["collectives_by_dim"]
    assert ws == {
        "dim": "weight_sync",
        "count": 2,
        "bytes": 40,
        "time_ns": 38 * us,
        "wait_ns": 8 * us,
    }
    # critical path: weight_sync on rank 0 ends last (tie → lowest rank) → old_logprob on rank 1
    # (ends at 60 ≤ 70) → rollout on rank 0 (ends at 40 ≤ 40)
    cp = truth["critical_path"][0]
    assert [(c["rank"], c["stage"]) for c in cp["chain"]] == [
        (0, "rollout"),
        (1, "old_logprob"),
        (0, "weight_sync"),
    ]
    assert (cp["rank"], cp["stage"]) == (0, "rollout")
    assert CAUSES == (
        "weight_sync",
        "rollout_tail",
        "pool_wait",
        "sync_wait",
        "host_bound",
        "stage_gap",
        "other",
    )


# --- generated runs: 2, 8 and 64 ranks
# -------------------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "ranks"),
    [(s, 2) for s in SAMPLES] + [(s, 8) for s in SAMPLES]
    + [("disaggregated", 64), ("one_step_off", 64), ("stage_fused", 64)],
)
def test_generated_run_matches_its_truth(tmp_path: Path, scenario: str, ranks: int) -> None:
    cfg = preset(scenario, ranks, steps=2, seed=ranks)
    generate(cfg, tmp_path, jobs=1)
    truth, _ = check_run(tmp_path)
    assert truth["config"]["world_size"] == ranks
    assert {r["pool"] for r in truth["ranks"]} == (
        {"shared"} if cfg.placement == "colocated" else {"rollout", "train"}
    )


def test_same_seed_gives_identical_bytes(tmp_path: Path) -> None:
    cfg = preset("one_step_off", 8, steps=2, seed=5)
    generate(cfg, tmp_path / "a", jobs=1)
    generate(cfg, tmp_path / "b", jobs=2)
    generate(preset("one_step_off", 8, steps=2, seed=6), tmp_path / "c", jobs=1)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert (tmp_path / "a" / "truth.json").read_bytes() != (
        tmp_path / "c" / "truth.json"
    ).read_bytes()


def test_skew_is_what_the_offsets_say(tmp_path: Path) -> None:
    """Rank 0 keeps the true clock; the others are off by 20 µs to 3 ms either way."""
    truth = generate(preset("colocated", 8, seed=3), tmp_path, jobs=1)
    offsets = [truth["clock_offsets_ns"][str(r)] for r in range(8)]
    assert offsets[0] == 0
    assert all(20_000 <= abs(o) <= 3_000_000 for o in offsets[1:])
    assert len({o > 0 for o in offsets[1:]}) == 2


def test_long_tailed_responses_make_a_rollout_tail() -> None:
    truth = json.loads((SAMPLES_ROOT / "colocated" / "truth.json").read_text())
    lengths = [n for r in truth["responses"] for n in r["lengths"]]
    cap = truth["config"]["max_response"]
    assert max(lengths) <= cap and np.mean(lengths) > np.median(lengths)
    tail = [d["idle_ns"]["rollout_tail"] for d in truth["devices"]]
    assert max(tail) > 1_000_000


# --- the committed samples ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def samples() -> dict[str, tuple[dict, pl.DataFrame]]:
    return {s: check_run(SAMPLES_ROOT / s) for s in SAMPLES}


def _content(path: Path) -> bytes:
    """What a file says (gunzipped: the compressor's version must not matter)."""
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def test_committed_samples_are_the_generators_output(tmp_path: Path) -> None:
    total = 0
    for scenario in SAMPLES:
        make(scenario, tmp_path / scenario)
        committed = SAMPLES_ROOT / scenario
        names = sorted(p.name for p in committed.iterdir())
        assert names == sorted(p.name for p in (tmp_path / scenario).iterdir())
        for name in names:
            assert _content(committed / name) == _content(tmp_path / scenario / name), name
            total += (committed / name).stat().st_size
    assert total <= 3_000_000


EXPECTED_COLLECTIVES = {
    "colocated": {
        ("all_gather", "mesh_fsdp"),
        ("reduce_scatter", "mesh_fsdp"),
        ("all_to_all", "mesh_sp"),
        ("all_reduce", "mesh_infer_tp"),
    },
    "disaggregated": {
        ("all_reduce", "TENSOR_MODEL_PARALLEL_GROUP"),
        ("all_reduce", "DATA_PARALLEL_GROUP"),
        ("broadcast", "undefined"),
    },
    "one_step_off": {
        ("send", "PIPELINE_MODEL_PARALLEL_GROUP"),
        ("recv", "PIPELINE_MODEL_PARALLEL_GROUP"),
        ("all_reduce", "DATA_PARALLEL_GROUP"),
        ("broadcast", "actor_rollout"),
        ("all_reduce", "TENSOR_MODEL_PARALLEL_GROUP"),
    },
    "stage_fused": {
        ("all_reduce", "TENSOR_MODEL_PARALLEL_GROUP"),
        ("all_gather", "CONTEXT_PARALLEL_GROUP"),
        ("all_to_all", "EXPERT_MODEL_PARALLEL_GROUP"),
        ("all_reduce", "DATA_PARALLEL_GROUP"),
    },
}


@pytest.mark.parametrize("scenario", list(SAMPLES))
def test_sample_has_the_collectives_of_its_layout(samples: dict, scenario: str) -> None:
    truth, events = samples[scenario]
    kinds = (
        nccl(events)
        .select(pl.col("coll").cast(pl.String), pl.col("pg_desc").cast(pl.String))
        .unique()
    )
    assert EXPECTED_COLLECTIVES[scenario] <= set(kinds.iter_rows())
    names = set(nccl(events)["name"].cast(pl.String).unique())
    assert all(n.startswith("ncclDevKernel_") for n in names)
    assert (
        events.filter(pl.col("kind") == "memcpy").height
        and events.filter(pl.col("kind") == "memset").height
    )
    if truth["config"]["placement"] == "disaggregated":
        pools = truth["config"]["pools"]
        sync = nccl(events).filter(pl.col("coll") == "broadcast")["pg_ranks"].unique().to_list()
        assert len(sync) == 1
        members = {int(r) for r in sync[0].split(",")}
        assert members & set(pools["rollout"]) and members & set(pools["train"])


def _ranges(events: pl.DataFrame, name: str) -> pl.DataFrame:
    return events.filter(
        (pl.col("kind") == "annotation") & (pl.col("name").cast(pl.String) == name)
    )


def _step_of(truth: dict, t: pl.Expr) -> pl.Expr:
    out = pl.lit(None, dtype=pl.Int64)
    for w in truth["step_windows"]:
        out = pl.when((t >= w["start_ns"]) & (t < w["end_ns"])).then(w["step"]).otherwise(out)
    return out


@pytest.mark.parametrize("scenario", ["disaggregated", "one_step_off"])
def test_disaggregated_pools_are_disjoint(samples: dict, scenario: str) -> None:
    truth, events = samples[scenario]
    gen = set(_ranges(events, "generate_sequences")["rank"].to_list())
    train = set(_ranges(events, "update_actor")["rank"].to_list())
    assert gen and train and not gen & train
    assert gen | train == set(range(truth["config"]["world_size"]))
    assert gen == set(truth["config"]["pools"]["rollout"])


def test_one_step_off_overlaps_rollout_and_training(samples: dict) -> None:
    truth, events = samples["one_step_off"]
    train_pool = truth["config"]["pools"]["train"]
    for w in truth["step_windows"]:
        in_step = (pl.col("t0") >= w["start_ns"]) & (pl.col("t1") <= w["end_ns"])
        gen = _ranges(events, "gen").filter(in_step)
        busy = events.filter(
            pl.col("kind").eq("annotation")
            & pl.col("rank").is_in(train_pool)
            & pl.col("name").cast(pl.String).is_in(["old_log_prob", "ref", "update_actor"])
            & in_step
        )
        g = iv.span(gen["t0"].to_numpy(), gen["t1"].to_numpy())
        t = iv.span(busy["t0"].to_numpy(), busy["t1"].to_numpy())
        assert iv.measure(iv.intersect(g, t)) > 0.5 * iv.measure(g)


def test_stage_fused_starts_prep_while_others_decode(samples: dict) -> None:
    truth, events = samples["stage_fused"]
    gen = _ranges(events, "gen").with_columns(step=_step_of(truth, pl.col("t0")))
    prep = _ranges(events, "old_log_prob").with_columns(step=_step_of(truth, pl.col("t0")))
    for step in (w["step"] for w in truth["step_windows"]):
        first_prep = prep.filter(pl.col("step") == step)["t0"].min()
        last_gen = gen.filter(pl.col("step") == step)["t1"].max()
        assert first_prep < last_gen


def test_colocated_ranks_run_every_stage(samples: dict) -> None:
    truth, events = samples["colocated"]
    for name in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights"):
        assert set(_ranges(events, name)["rank"].to_list()) == set(range(8)), name
    assert truth["config"]["layout"]["style"] == "fsdp"


# --- the command line
# ------------------------------------------------------------------------------


def test_cli_writes_a_run_and_rejects_bad_shapes(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "sample_traces.synth",
        "--scenario",
        "disaggregated",
        "--ranks",
        "4",
        "--seed",
        "9",
        "-o",
        str(tmp_path / "run"),
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "synthetic disaggregated: 4 ranks" in done.stdout
    assert sorted(p.name for p in (tmp_path / "run").iterdir())[:2] == [
        "rank-0.synthetic.pt.trace.json.gz", "rank-1.synthetic.pt.trace.json.gz"]
    bad = subprocess.run([*cmd[:-2], "--tp", "3", "-o", str(tmp_path / "bad")], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "does not divide" in bad.stderr


# --- nsys-schema SQLite
# -----------------------------------------------------------------------------


def test_nsys_export_says_what_the_kineto_trace_says(tmp_path: Path) -> None:
    """The nsys parser reads the SQLite (rank from the captured environment) and finds the same
    device rows at the same times and the same NVTX ranges as the Kineto trace of that rank."""
    truth = generate(preset("one_step_off", 4, seed=2), tmp_path, jobs=1, nsys=True)
    gpu = ["kernel", "memcpy", "memset"]
    for entry in truth["ranks"]:
        nsys = parse_file(tmp_path / entry["nsys"])
        kineto = parse_file(tmp_path / entry["trace"])
        assert nsys.format == "nsys-sqlite" and not nsys.warnings
        validate(nsys.events)
        assert nsys.meta["rank"] == entry["rank"]

        def rows(events: pl.DataFrame, kinds: list[str]) -> pl.DataFrame:
            return (
                events.filter(pl.col("kind").is_in(kinds))
                .select(
                    pl.col("kind").cast(pl.String),
                    pl.col("name").cast(pl.String),
                    "stream",
                    "start_ns",
                    "end_ns",
                )
                .sort("start_ns", "stream", "name")
            )

        assert rows(nsys.events, gpu).equals(rows(kineto.events, gpu))
        assert rows(nsys.events, ["annotation"]).equals(rows(kineto.events, ["annotation"]))
        launches = kineto.events.filter(pl.col("kind") == "runtime").height
        assert nsys.events.filter(pl.col("kind") == "runtime").height == launches
