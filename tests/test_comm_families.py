"""Communication beyond NCCL (issue 12, item 1): the family table (taxonomy/comm_families.toml)
decides which kernels are communication, of which kind and dimension; on a DeepEP generator run
rlperf's communication time, overlap, exposed time and ``ep`` attribution equal the truth."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest

import analyzer
from analyzer.assemble.collectives import fill_groups, mark_communication
from analyzer.classify import dims
from analyzer.model.options import Options
from parsers.events import COLL
from parsers.nccl import kernel_coll
from sample_traces.synth import deepep
from taxonomy import collectives as tc

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
DOCS = ROOT / "docs"
KINETO_CORPUS = sorted(
    [*CORPUS.glob("TraceLens/**/*.json.gz"), *CORPUS.glob("HolisticTraceAnalysis/*.json.gz")]
)
VLLM_REPLAY = CORPUS / "TraceLens" / "inference" / "vllm_decode_full__graph_execution.json.gz"
FAMILIES = tc.load_families()


def claimed(names: list[str]) -> dict[str, tuple[str, str]]:
    frame = tc.family_frame(pl.Series(names, dtype=pl.String), FAMILIES)
    return {n: (f, c) for n, f, c in frame.select("name", "family", "coll").iter_rows()}


# --- the table ----------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES, ids=[f.name for f in FAMILIES])
def test_every_family_claims_its_examples_and_none_of_its_counter_examples(
    family: tc.Family,
) -> None:
    assert family.examples, f"{family.name} has no real or literal kernel name to match"
    got = claimed(list(family.examples + family.not_examples))
    assert {n: f for n, (f, _) in got.items()} == dict.fromkeys(family.examples, family.name)
    assert all(c != "other" or family.name in ("rccl", "mscclpp") for _, c in got.values())


def test_the_families_cover_every_library_the_issue_names() -> None:
    libraries = " ".join(f.library for f in FAMILIES)
    for lib in ("NCCL", "RCCL", "DeepEP", "NVSHMEM", "custom all-reduce", "symmetric memory",
                "MSCCL++", "HCCL", "gloo"):
        assert lib in libraries


def test_kinds_read_from_names() -> None:
    names = [
        "void deep_ep::internode::dispatch<false, 8, true, 8>(int4*)",
        "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*)",
        "void deep_ep::intranode::barrier<8>(int**, int, int)",
        "hcom_receive__117_3_1",
        "void fcollect_on_stream_kernel<float>(int)",
        "void c10d::symmetric_memory::multimem_all_gather_kernel<16>(char*)",
        "gloo:broadcast",
    ]
    got = claimed(names)
    assert [got[n][1] for n in names] == [
        "all_to_all", "all_to_all", "barrier", "recv", "all_gather", "all_gather", "broadcast"
    ]


def test_nccl_family_kind_is_the_parsers_kind() -> None:
    nccl = next(f for f in FAMILIES if f.name == "nccl")
    got = claimed(list(nccl.examples))
    assert {n: c for n, (_, c) in got.items()} == {n: kernel_coll(n) for n in nccl.examples}


def corpus_kernel_names() -> set[str]:
    names: set[str] = set()
    for path in KINETO_CORPUS:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        names |= {e["name"] for e in events if e.get("cat") == "kernel" and "name" in e}
    return names


def test_every_real_corpus_kernel_is_claimed_exactly_when_it_communicates() -> None:
    """Over every kernel name of the Kineto corpus (HTA, TraceLens; 'reduce' kernels of
    attention, cuBLAS split-K and ATen included): the families claim the NCCL ones, with
    NCCL's kind, and nothing else."""
    names = corpus_kernel_names()
    nccl = {n for n in names if kernel_coll(n) is not None}
    assert len(names) > 200 and len(nccl) >= 5
    assert sum("reduce" in n.lower() for n in names - nccl) >= 10
    got = claimed(sorted(names))
    assert set(got) == nccl
    assert all(got[n] == ("nccl", kernel_coll(n)) for n in nccl)


# --- the event table ----------------------------------------------------------------------


def events(names: list[str], kinds: list[str], colls: list[str | None]) -> pl.DataFrame:
    return pl.DataFrame(
        {"name": names, "kind": kinds, "coll": colls},
        schema={"name": pl.Categorical, "kind": pl.String, "coll": COLL},
    )


def test_marking_fills_what_the_parser_left_and_keeps_what_it_found() -> None:
    ev = events(
        ["void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*)",
         "void vllm::cross_device_reduce_1stage<float, 8>(vllm::RankData*)",
         "void deep_ep::internode::combine<__nv_bfloat16, 8, 4096>(int4*)",
         "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)",
         "gloo:all_reduce"],
        ["kernel", "cpu_op", "kernel", "kernel", "annotation"],
        [None, None, "all_gather", None, "all_reduce"],
    )
    got = mark_communication(ev)["coll"].cast(pl.String).to_list()
    assert got == ["all_reduce", None, "all_gather", None, "all_reduce"]
    assert mark_communication(ev, ())["coll"].cast(pl.String).to_list()[0] is None


def test_a_users_family_is_tried_first_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text(
        '[[family]]\nname = "acme"\nlibrary = "Acme A2A"\ndim = "ep"\nexamples = ["acme_a2a"]\n'
        '[[family.rule]]\nmatch = "^acme_a2a"\ncoll = "all_to_all"\n'
    )
    fams = tc.load_families(mine)
    assert fams[0].name == "acme" and fams[1:] == FAMILIES
    got = mark_communication(events(["acme_a2a_v2"], ["kernel"], [None]), fams)
    assert got["coll"].cast(pl.String).to_list() == ["all_to_all"]
    for body, problem in (
        ('[[family]]\nname = "x"\n', "needs a name and at least one"),
        ('[[family]]\nname = "x"\n[[family.rule]]\nmatch = "a"\ncoll = "alltoall"\n', "coll is"),
        ('[[family]]\nname = "x"\n[[family.rule]]\nmatch = "a"\ncoll = "from_name"\n',
         "needs a capture group"),
        ('[[family]]\nname = "x"\ndim = "zz"\n[[family.rule]]\nmatch = "a"\ncoll = "other"\n',
         "unknown dim"),
        ('[[family]]\nname = "x"\n[[family.rule]]\nmatch = "(?=a)"\ncoll = "other"\n',
         "bad regex"),
    ):
        bad = tmp_path / "bad.toml"
        bad.write_text(body)
        with pytest.raises(tc.CollectiveRulesError, match=problem) as err:
            tc.load_families(bad)
        assert str(bad) in str(err.value) and "\n" not in str(err.value)


# --- groups and dimensions ----------------------------------------------------------------

CALL = {"rank": pl.Int32, "source": pl.UInt32, "name": pl.String, "coll": pl.String,
        "pg": pl.String, "pg_desc": pl.String, "pg_ranks": pl.String, "group_size": pl.Int32}


def test_a_librarys_own_calls_are_grouped_apart_from_ungrouped_nccl_of_the_same_kind() -> None:
    """Two ranks, each with one DeepEP all-to-all and one NCCL all-to-all without a group (as
    in nsys): matched by order within one group they would pair DeepEP with NCCL."""
    a2a = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
    dispatch = "void deep_ep::internode::dispatch<false, 8, true, 8>(int4*)"
    calls = pl.DataFrame(
        {"rank": [0, 0, 1, 1], "source": [0, 0, 1, 1], "name": [dispatch, a2a, a2a, dispatch],
         "coll": ["all_to_all"] * 4, "pg": [None] * 4, "pg_desc": [None] * 4,
         "pg_ranks": [None] * 4, "group_size": [None] * 4},
        schema=CALL,
    )
    out = fill_groups(calls, {})
    groups = dict(zip(out["name"], out["group"], strict=False))
    assert groups[dispatch] == "0,1|~deepep:all_to_all"
    assert groups[a2a] == "0,1|~all_to_all"
    assert out["group_recorded"].to_list() == [False] * 4


def test_a_family_dimension_decides_only_without_a_recorded_group() -> None:
    combine = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*)"
    rows = pl.DataFrame(
        {"group": ["0,1|~deepep:all_to_all", "0,1|7"],
         "pg_desc": [None, "TENSOR_MODEL_PARALLEL_GROUP"],
         "name": [combine, combine], "coll": ["all_to_all"] * 2, "stage": ["actor_update"] * 2,
         "bytes": [None, None], "group_recorded": [False, True]},
        schema={"group": pl.String, "pg_desc": pl.String, "name": pl.String, "coll": pl.String,
                "stage": pl.String, "bytes": pl.Int64, "group_recorded": pl.Boolean},
    )
    pools = pl.DataFrame({"rank": [0, 1], "pool": ["shared", "shared"]})
    got = dims._dims_for(rows, Options(layout="tp=2"), pools)
    assert got.select(pl.col("dim").cast(pl.String), "dim_by").rows() == [
        ("ep", "family"), ("tp", "description")
    ]


# --- generator: DeepEP DualPipe ------------------------------------------------------------


@pytest.fixture(scope="module")
def deepep_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[analyzer.Run, dict]:
    out = tmp_path_factory.mktemp("deepep")
    doc = deepep.generate(deepep.DeepEPConfig(ranks=4, steps=2, layers=3, seed=5), out)
    return analyzer.load([out]), doc["deepep"]


def test_deepep_time_overlap_and_exposed_equal_the_truth(deepep_run) -> None:
    """Exact: the generator's intervals are integer ns, written as µs with three decimals
    (exact ns), on one clock with no skew, and the estimated offsets are 0; any difference is
    a wrong number, not rounding."""
    run, truth = deepep_run
    want = pl.DataFrame(truth["ranks"]).select(
        pl.col("rank").cast(pl.Int32), "comm_ns", "overlap_ns", "exposed_ns", "calls", "time_ns"
    )
    gpu = run.gpu_time.select("rank", "comm_ns", "overlap_ns")
    waits = run.collective_waits.group_by("rank").agg(
        pl.col("exposed_ns").sum(),
        pl.len().cast(pl.Int64).alias("calls"),
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("time_ns"),
    )
    got = gpu.join(waits, on="rank").sort("rank").select(want.columns)
    assert got.to_dicts() == want.to_dicts()
    assert all(0 < r["overlap_ns"] < r["comm_ns"] for r in truth["ranks"])
    assert run.clock["offset_ns"].to_list() == [0] * 4


def test_deepep_is_attributed_to_ep_by_its_family(deepep_run) -> None:
    run, truth = deepep_run
    coll = run.collectives
    assert coll.select(pl.col("dim").cast(pl.String), "dim_by", "coll").unique().rows() == [
        (truth["dim"], "family", truth["coll"])
    ]
    by_dim = run.collectives_by_dim
    assert by_dim["dim"].cast(pl.String).to_list() == ["ep"]
    assert by_dim["time_ns"].item() == sum(r["time_ns"] for r in truth["ranks"])
    assert by_dim["exposed_ns"].item() == sum(r["exposed_ns"] for r in truth["ranks"])
    assert by_dim["busbw_gbps"].item() is None
    per_call = sum(truth["calls_per_rank_by_kernel"].values())
    assert (coll["instance"] >= 0).all() and coll["instance"].n_unique() == per_call


def test_without_the_families_the_same_run_has_no_communication(deepep_run) -> None:
    """The regression the issue reports: DeepEP alone read as 0 ns of communication."""
    run, _ = deepep_run
    bare = run.events.with_columns(pl.lit(None, dtype=COLL).alias("coll"))
    assert mark_communication(bare, ())["coll"].null_count() == bare.height
    assert mark_communication(bare)["coll"].null_count() < bare.height


# --- a real inference-engine trace with a custom all-reduce --------------------------------


def test_custom_all_reduce_in_a_corpus_vllm_trace_counts_as_tp_communication(
    tmp_path: Path,
) -> None:
    """The corpus vLLM/SGLang traces are TP=1 (world size 1): none holds a custom all-reduce.
    So a real vLLM graph-replay trace gets one literal vLLM custom all-reduce kernel on a
    stream of its own, put over one of its own kernels' time; it must count as communication
    along tp, overlapping exactly that kernel."""
    doc = json.loads(gzip.decompress(VLLM_REPLAY.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    host = next(e for e in kernels if "rms_norm" in e["name"].lower() or "Rmsnorm" in e["name"])
    ar = dict(host, name="void vllm::cross_device_reduce_1stage<__hip_bfloat16, 2>("
              "vllm::RankData*, vllm::RankSignals, vllm::Signal*, __hip_bfloat16*, int, int)",
              tid=9999, args={**host.get("args", {}), "stream": 9999})
    doc["traceEvents"].append(ar)
    path = tmp_path / "vllm_custom_ar.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    run = analyzer.load([path])
    comm = run.gpu_time["comm_ns"].item()
    assert comm == round(float(ar["dur"]) * 1000)
    assert run.gpu_time["overlap_ns"].item() == comm
    assert run.collectives.select(pl.col("dim").cast(pl.String), "dim_by", "coll").rows() == [
        ("tp", "family", "all_reduce")
    ]


# --- docs ---------------------------------------------------------------------------------


def test_the_docs_list_every_family_in_the_order_of_the_table() -> None:
    text = (DOCS / "analyses.md").read_text(encoding="utf-8")
    section = text.split("### Communication families", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|", section, re.M)
    want = tc.families_frame(FAMILIES)
    assert [(f, lib.strip(), k.strip(), d.strip()) for f, lib, k, d in rows] == [
        (r["family"], r["library"], r["kinds"], r["dim"] or "—") for r in want.iter_rows(named=True)
    ]
    bullets = re.findall(r"^- `([a-z_]+)`: ", section, re.M)
    assert bullets == want["family"].to_list()
