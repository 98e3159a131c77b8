"""Guidelines judge only the runs they are about (``applies_to`` in taxonomy/guidelines.toml),
and a send/recv is pipeline-parallel only in a run that shows a pipeline.

Each case is a real corpus file that got advice wrong for its kind of run: RL-controller
advice on a single-process DDP ResNet and on DeepSpeed-Chat, a CUDA-only sentence on a TPU
run, and DDP send/recv kernels called pipeline parallel.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from test_guidelines import engine_config, make_run
from test_guidelines import row as guideline_row

import analyzer
from analyzer.analyses.guidelines import load_catalogue
from analyzer.classify import dims
from analyzer.model.options import Options
from parsers.errors import InputError
from taxonomy import guidelines as tg

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
HTA = CORPUS / "HolisticTraceAnalysis"
LOGS = CORPUS / "logs"
RESNET = HTA / "nccl_data.json.gz"
DDP_SENDRECV = HTA / "test.json.gz"
DSCHAT = LOGS / "deepspeed-chat" / "step3_actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log"
VERL_TPU = LOGS / "verl-tpu" / "chrisytz-verl_ppo_xla-tpu_verl_demo.log"
VERL_GPU = LOGS / "verl" / "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"
CUDA_GRAPHS = "CUDA-graph pools cannot be offloaded."
NOT_RL = "does not apply: no RL framework or RL stages recognised (framework generic;"


@cache
def run_of(path: Path) -> analyzer.Run:
    return analyzer.load([path], use_cache=False)


def row(path: Path, gid: str) -> dict[str, Any]:
    return run_of(path).violations.filter(pl.col("id") == gid).row(0, named=True)


def rl_only() -> list[str]:
    return [g.id for g in tg.load().guidelines if g.applies_to.needs_rl_stages]


def test_no_rl_guideline_is_judged_on_a_plain_ddp_resnet():
    """HTA's nccl_data (one rank of a DDP ResNet, no RL framework): its backward is labelled
    actor_update and the forward before it a 41% 'dispatch gap'; G24 was the top finding."""
    violations = run_of(RESNET).violations
    judged = violations.filter(pl.col("id").is_in(rl_only()))
    assert judged.height == len(rl_only()) == 20
    assert set(judged["status"].to_list()) == {"not_evaluated"}
    assert all(e.startswith(NOT_RL) for e in judged["evidence"].to_list())
    assert "G24" not in run_of(RESNET).findings["id"].to_list()


def test_guidelines_about_any_training_run_still_judge_the_resnet():
    """G16 (exposed DP communication) is no RL advice: it still fires on the DDP run."""
    got = row(RESNET, "G16")
    assert (got["status"], got["severity"]) == ("violated", "warn")
    assert got["value"] == pytest.approx(0.111, abs=5e-4)


def test_controller_dispatch_advice_is_not_for_deepspeed_chat():
    """DeepSpeed-Chat has no single controller: its 5.9% of untimed step time was called
    controller dispatch ("batch remote calls, keep tensors out of the object store")."""
    got = row(DSCHAT, "G24")
    assert (got["status"], got["value"], got["severity"]) == ("not_evaluated", None, None)
    assert got["evidence"] == (
        "does not apply: no single controller (framework deepspeed_chat; "
        "applies to verl, openrlhf, roll, nemo_rl, slime)"
    )
    assert "G24" not in run_of(DSCHAT).findings["id"].to_list()


def test_controller_dispatch_is_still_judged_on_a_verl_log():
    got = row(VERL_GPU, "G24")
    assert got["status"] == "passed"
    assert got["value"] == pytest.approx(0.000405, rel=5e-3)


def test_the_cuda_graph_sentence_only_on_cuda():
    """The verl TPU log states device tpu and a colocated (hybrid-engine) placement: G8 is
    judged, the evidence says where the placement came from, and no CUDA-graph advice."""
    tpu = row(VERL_TPU, "G8")
    assert (tpu["status"], tpu["severity"], tpu["value"]) == ("violated", "warn", 0.2)
    assert "colocated placement from the config" in tpu["evidence"]
    assert "CUDA" not in tpu["recommendation"]
    gpu = row(VERL_GPU, "G8")
    assert gpu["status"] == "passed" and gpu["recommendation"].endswith(CUDA_GRAPHS)


def test_a_colocated_guideline_needs_the_placement():
    """A verl run whose engine keeps its cache but whose placement nobody states: G8 is not
    judged as if it were colocated."""
    meta = engine_config(False)
    del meta["placement"]
    got = guideline_row(make_run(meta=meta), "G8")
    assert (got["status"], got["value"]) == ("not_evaluated", None)
    assert got["evidence"].startswith("needs the placement (colocated): neither the trace")
    split = guideline_row(make_run(meta=engine_config(False, "split")), "G8")
    assert (split["status"], split["value"]) == ("passed", None)
    assert split["evidence"] == (
        "does not apply: the placement is split (from the config), not colocated"
    )


def test_ddp_send_recv_is_no_pipeline():
    """HTA's test.json.gz (rank 1 of a 2-rank NCCL job, no process groups recorded): 43
    SendRecv kernels were called pp and G13 measured a pipeline that is not there. 42 of them
    are launched inside nccl:all_to_all and are all_to_all; the 43rd has no launch record and
    stays send_recv, of no known dimension (so G13 is not judged: it may be a pipeline's). The
    all-to-alls are a recommender's embedding exchange (``## sparse_data_dist ##``,
    ``split_embedding_*`` kernels), not experts: nothing in the trace shows experts, so they are
    of no known dimension either."""
    coll = run_of(DDP_SENDRECV).collectives
    kinds = coll.group_by("coll", "dim").len().sort("coll")
    assert kinds.select(pl.all().cast(pl.String)).rows() == [
        ("all_reduce", "unknown", "21"), ("all_to_all", "unknown", "42"),
        ("send_recv", "unknown", "1"),
    ]
    assert coll.filter(pl.col("dim") == "pp").height == 0
    got = row(DDP_SENDRECV, "G13")
    # the one send_recv of no known dimension may be a pipeline's: G13 passed at "pp = 1" beside
    # it; not judged now, and it says how to tell it
    assert (got["status"], got["value"]) == ("not_evaluated", None)
    assert got["evidence"] == (
        "needs the pipeline degree: the trace has 1 send/recv call of unknown dimension (no "
        "pipeline schedule named; --layout pp=N says it)")
    assert not any("pp" in f for f in run_of(DDP_SENDRECV).findings["id"].to_list())


def test_a_recommenders_embedding_all_to_all_is_not_expert_parallel():
    """HTA's sampled pair: a TorchRec trainer (``KJTAllToAll*Awaitable wait()`` ranges,
    ``split_embedding_*`` kernels) whose 8 all-to-alls were ep, and its exposed time
    an error-level "EP communication is not hidden" finding. Nothing shows experts: unknown,
    unless the user says ep in --layout."""
    pair = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]
    run = analyzer.load(pair, use_cache=False)
    a2a = run.collectives.filter(pl.col("coll") == "all_to_all")
    assert a2a.height == 8
    assert a2a["dim"].cast(pl.String).unique().to_list() == ["unknown"]
    ids = run.findings["id"].to_list()
    assert "comm.exposed.unknown" in ids and "comm.exposed.ep" not in ids
    said = run.findings.filter(pl.col("id") == "comm.exposed.unknown").row(0, named=True)
    assert said["recommendation"].startswith("rlperf cannot tell which parallelism")
    told = analyzer.load(pair, use_cache=False, options=Options(layout="ep=2"))
    assert told.collectives.filter(pl.col("coll") == "all_to_all")["dim"].cast(
        pl.String).unique().to_list() == ["ep"]


def p2p_rows(pg_desc: str | None = None) -> pl.DataFrame:
    text = {c: pl.String for c in ("group", "pg_desc", "name", "coll", "stage")}
    return pl.DataFrame(
        {
            "group": ["0,1|5", "0,1|5" if pg_desc is None else "0,1|6"],
            "pg_desc": [None, pg_desc],
            "name": ["ncclKernel_SendRecv"] * 2,
            "coll": ["send_recv", "send" if pg_desc is None else "recv"],
            "stage": ["actor_update"] * 2,
            "bytes": [64, 64],
        },
        schema={**text, "bytes": pl.Int64},
    )


POOLS = pl.DataFrame({"rank": [0, 1], "pool": ["shared", "shared"]})


def a2a_rows(pg_desc: str | None = None) -> pl.DataFrame:
    return p2p_rows(pg_desc).with_columns(pl.lit("all_to_all").alias("coll"),
                                          pl.lit("ncclDevKernel_SendRecv").alias("name"))


@pytest.mark.parametrize(
    ("dim", "pg_desc", "seen", "layout", "expected"),
    [
        ("pp", None, False, None, ["unknown", "unknown"]),
        ("pp", None, True, None, ["pp", "pp"]),
        ("pp", None, False, "pp=2", ["pp", "pp"]),
        ("pp", "PIPELINE_MODEL_PARALLEL_GROUP", False, None, ["pp", "pp"]),
        ("ep", None, False, None, ["unknown", "unknown"]),
        ("ep", None, True, None, ["ep", "ep"]),
        ("ep", None, False, "ep=2", ["ep", "ep"]),
        ("ep", "EXPERT_MODEL_PARALLEL_GROUP", False, None, ["ep", "ep"]),
    ],
    ids=["pp-no-evidence", "pp-schedule-ranges", "pp-layout", "pp-group",
         "ep-no-evidence", "ep-expert-names", "ep-layout", "ep-group"],
)
def test_a_pattern_dimension_needs_evidence_of_it(dim, pg_desc, seen, layout, expected):
    """send/recv is pp only with a pipeline shown, all-to-all ep only with experts shown: by
    the trace (``seen``), the layout or the group's description."""
    rows, evidence = (p2p_rows, "pipeline_seen") if dim == "pp" else (a2a_rows, "experts_seen")
    got = dims._dims_for(rows(pg_desc), Options(layout=layout), POOLS, **{evidence: seen})
    assert got["dim"].cast(pl.String).to_list() == expected


def test_moe_kernel_and_annotation_names_are_evidence_python_frames_are_not():
    def events(*pairs: tuple[str, str]) -> pl.DataFrame:
        return pl.DataFrame({"kind": [k for k, _ in pairs], "name": [n for _, n in pairs]})

    assert dims.expert_names(events(("kernel", "fused_moe_kernel")), Options())
    assert dims.expert_names(events(("annotation", "MoELayer.router")), Options())
    assert dims.expert_names(events(("kernel", "deep_ep::internode::dispatch<8>")), Options())
    assert not dims.expert_names(events(
        ("python", "sglang/srt/layers/moe/utils.py(46): is_deepep"),
        ("kernel", "split_embedding_codegen_forward_unweighted_kernel"),
        ("annotation", "## KJTAllToAllTensorsAwaitable wait() ##"),
    ), Options())
    assert not dims.expert_names(events(), Options())


def test_pipeline_schedule_and_chunk_names_are_evidence():
    def events(*names: str) -> pl.DataFrame:
        return pl.DataFrame({"kind": ["annotation"] * len(names), "name": list(names)})

    assert dims.pipeline_ranges(events("forward_backward_pipelining_without_interleaving"))
    assert dims.pipeline_ranges(events("attn (F)", "mlp (B)"))
    assert not dims.pipeline_ranges(events("forward", "backward", "ProfilerStep#3"))
    assert not dims.pipeline_ranges(events())


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[G8]\napplies_to = { placement = ['colocated'] }\n", "unknown field 'placement'"),
        ("[G8]\napplies_to = { placements = ['nearby'] }\n", "expected one of colocated"),
        ("[G8]\napplies_to = { needs_rl_stages = 'yes' }\n", "needs_rl_stages must be true"),
        ("[G8]\ndevice_notes = { cuda = 3 }\n", "G8.device_notes must be a table of texts"),
    ],
)
def test_a_bad_applies_to_is_one_line_naming_the_file(tmp_path: Path, text: str, problem: str):
    user = tmp_path / "user.toml"
    user.write_text(text)
    with pytest.raises(InputError) as err:
        load_catalogue(user)
    assert str(user) in str(err.value) and problem in str(err.value)
    assert "\n" not in str(err.value)


def test_a_user_file_can_widen_a_guideline_to_every_run(tmp_path: Path):
    user = tmp_path / "user.toml"
    user.write_text("[G24]\napplies_to = {}\n")
    assert tg.load(user)["G24"].applies_to == tg.AppliesTo()
    run = analyzer.load([DSCHAT], use_cache=False, options=Options(guidelines=str(user)))
    got = run.violations.filter(pl.col("id") == "G24").row(0, named=True)
    assert (got["status"], got["severity"]) == ("violated", "warn")
    assert got["value"] == pytest.approx(0.0592, abs=5e-5)
