"""Discovery: formats told by content, rlperf's own outputs skipped, unknown files listed."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl

from parsers import discover, sniff

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
TRL_RUN = ROOT / "sample_traces" / "runs" / "trl_grpo"


def test_format_is_told_by_content_not_extension(tmp_path: Path):
    trace = tmp_path / "renamed.txt"
    trace.write_bytes(
        gzip.decompress(
            (CORPUS / "HolisticTraceAnalysis" / "inference_rank_1.json.gz").read_bytes()
        )
    )
    export = tmp_path / "capture.bin"
    shutil.copy(CORPUS / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite", export)
    log = tmp_path / "job.out"
    shutil.copy(CORPUS / "logs" / "verl" / "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log", log)
    assert sniff(trace) == "kineto"
    assert sniff(export) == "nsys-sqlite"
    assert sniff(log) == "verl-log"


def test_ground_truth_and_reports_beside_traces_are_not_inputs(tmp_path: Path):
    found = discover([TRL_RUN])
    names = {p.name for p, _ in found.sources}
    assert "truth.json" not in names
    assert {"trainer_state.json", "rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"} <= names
    assert any("truth.json" in note and "not an input" in note for note in found.notes)
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"schema": "rlperf-report/1", "traceEvents": []}, indent=2))
    assert discover([tmp_path]).sources == []


def test_unknown_files_are_listed_not_fatal(tmp_path: Path):
    (tmp_path / "README.txt").write_text("notes")
    shutil.copy(CORPUS / "HolisticTraceAnalysis" / "event_sync_trace.json.gz", tmp_path)
    found = discover([tmp_path])
    assert [p.name for p in found.unknown] == ["README.txt"]
    assert [f for _, f in found.sources] == ["kineto"]


def test_a_bad_rules_file_is_one_line_and_exit_two(tmp_path: Path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rules]]\nmatch = "^gen$"\n')
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from analyzer.cli import main; main()",
            "analyze",
            "--rules",
            str(rules),
            str(TRL_RUN),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"RLPERF_CACHE_DIR": str(tmp_path / "c"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlperf: error: {rules}")


def test_emit_nvtx_calls_are_grouped_by_operator():
    """nsys' PyTorch NVTX names every call apart; the annotation breakdown groups them by op."""
    import analyzer

    run = analyzer.load([CORPUS / "nsys-ai" / "mfu_2gpu_before.sqlite"])
    names = set(run.annotations["name"])
    assert "aten::to" in names
    assert not any(", op_id = " in n or ", seq = " in n for n in names)
    to = run.annotations.filter(run.annotations["name"] == "aten::to")
    assert sorted(to["rank"]) == [0, 1] and (to["count"] > 100).all()
    assert (run.annotations.group_by("rank").agg(pl.col("share").sum())["share"] <= 1.0).all()
