"""``rlperf export`` then ``rlperf analyze`` of the export gives the same figures as the run.

The issue: HTA's sampled rank pair lost its TFLOP/s (``efficiency``, ``efficiency_steps``
null: the export wrote no FLOPs) and G14's dp_imbalance moved 0.13106 → 0.13051 (the two
ranks' correlation ids collide in one file, so a rank-1 kernel was staged by a rank-0 launch);
the vLLM decode trace also lost its MFU (no ``deviceProperties``, so no peak FLOP/s).

Compared, from ``analyze --format json``: the whole ``overview``; G14's row of ``guidelines``;
every row of ``efficiency`` and ``efficiency_steps``. Left out by name: ``file`` (the input's
file name: the export's own on reading back) and ``source`` (the input's index: one file
instead of one per rank).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_truth import REPO, cli

import analyzer
from analyzer.ops.perfetto import export, losses

CORPUS = REPO.parent / "shared" / "corpus"
CASES = {
    "hta_sampled_pair": [
        CORPUS / "HolisticTraceAnalysis" / f"sampled_rank-{r}.json.gz" for r in (0, 1)
    ],
    "vllm_decode": [
        CORPUS / "TraceLens" / "inference" / "vllm_decode_full__graph_execution.json.gz"
    ],
}
NOT_COMPARED = ("file", "source")


def analysed(*paths: Path) -> dict:
    done = cli("analyze", *map(str, paths), "--format", "json", "--quiet")
    assert done.returncode in (0, 3), done.stderr
    return json.loads(done.stdout)


def figures(document: dict) -> dict:
    rows = {key: [{k: v for k, v in row.items() if k not in NOT_COMPARED}
                  for row in document[key] or []]
            for key in ("efficiency", "efficiency_steps")}
    g14 = [g for g in document["guidelines"] if g["id"] == "G14"]
    return {"overview": document["overview"], "G14": g14, **rows}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_export_analyses_to_the_same_figures(case: str, tmp_path: Path):
    paths = CASES[case]
    out = tmp_path / "x.json.gz"
    done = cli("export", *map(str, paths), "-o", str(out), "-q")
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
    original, again = figures(analysed(*paths)), figures(analysed(out))
    assert original["efficiency"] and original["efficiency_steps"]
    assert again == original


def test_the_pair_keeps_its_dp_imbalance_and_tflops(tmp_path: Path):
    """The numbers of the issue, read back."""
    out = tmp_path / "x.json.gz"
    assert cli("export", *map(str, CASES["hta_sampled_pair"]), "-o", str(out), "-q").returncode == 0
    document = analysed(out)
    g14 = next(g for g in document["guidelines"] if g["id"] == "G14")
    assert g14["value"] == pytest.approx(0.1310560749927514, abs=1e-12)
    steps = {(r["step"], r["metric"]): r["value"] for r in document["efficiency_steps"]}
    assert steps[(551, "achieved_tflops")] == pytest.approx(1.410034023259485, rel=1e-12)


def test_the_vllm_trace_keeps_its_mfu(tmp_path: Path):
    out = tmp_path / "v.json.gz"
    assert cli("export", *map(str, CASES["vllm_decode"]), "-o", str(out), "-q").returncode == 0
    steps = {(r["step"], r["metric"]): r["value"] for r in analysed(out)["efficiency_steps"]}
    assert steps[(1, "mfu")] == pytest.approx(0.0014831914510239081, rel=1e-12)


def test_a_framework_log_left_out_is_one_warning(tmp_path: Path):
    """A log has no trace events to export: the export says so in one line."""
    log = tmp_path / "train.log"
    log.write_text("step:1 - timing_s/gen:1.5 - timing_s/update_actor:2.0\n"
                   "step:2 - timing_s/gen:1.4 - timing_s/update_actor:2.1\n")
    out = tmp_path / "y.json"
    done = cli("export", *map(str, CASES["vllm_decode"]), str(log), "-o", str(out), "-q")
    lines = [line for line in done.stderr.splitlines() if "warning" in line]
    assert done.returncode == 0, done.stderr
    assert lines == ["rlperf: warning: train.log: not exported (no trace events: a framework "
                     "log's metrics and step numbers do not come back on reading the export)"]


def rank_trace(path: Path, rank: int, device: str) -> Path:
    """A one-kernel Kineto trace of ``rank`` on ``device``, its matmul's FLOPs recorded."""
    trace = {
        "schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
        "deviceProperties": [{"id": 0, "name": device}],
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0,
             "dur": 5.0, "args": {"flops": 2_000_000, "External id": 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": 2.0, "dur": 1.0, "args": {"correlation": 7, "External id": 1}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 4.0,
             "dur": 3.0, "args": {"device": 0, "stream": 7, "correlation": 7}},
        ],
    }
    path.write_text(json.dumps(trace))
    return path


def test_two_device_models_in_one_export_are_one_warning(tmp_path: Path):
    """Rank 0 on an H100, rank 1 on an A100: one file's deviceProperties cannot say which."""
    ranks = [rank_trace(tmp_path / f"r{r}.json", r, name)
             for r, name in ((0, "NVIDIA H100 80GB HBM3"), (1, "NVIDIA A100-SXM4-80GB"))]
    run = analyzer.load(ranks)
    assert losses(run) == [
        "the sources name 2 device models (NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3): one "
        "exported file cannot say which rank ran on which, so MFU read back from the export "
        "may use another rank's peak"
    ]
    out = tmp_path / "x.json"
    assert export(run, out)["warnings"] == losses(run)
    kernels = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    assert sorted((e["pid"], e["args"]["correlation"]) for e in kernels) == [(0, 7), (1, 8)]


def test_one_device_model_on_every_rank_is_no_warning(tmp_path: Path):
    ranks = [rank_trace(tmp_path / f"r{r}.json", r, "NVIDIA H100 80GB HBM3") for r in (0, 1)]
    assert losses(analyzer.load(ranks)) == []
