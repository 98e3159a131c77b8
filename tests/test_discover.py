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


SYNTH = ROOT / "sample_traces" / "synthetic" / "disaggregated"


def ingested(traces: Path, out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", "ingest", str(traces),
         "-o", str(out), "-q", "--no-cache"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_a_dataset_inside_an_input_folder_is_skipped_with_one_note(tmp_path: Path):
    """``rlperf ingest run/ -o run/ds`` then ``rlperf analyze run/``: the dataset's Parquet and
    JSON files are not sources nor unknown files (they would be the same traces twice), and one
    note names the dataset."""
    run = tmp_path / "run"
    shutil.copytree(SYNTH, run)
    before = discover([run])
    ingested(run, run / "ds")
    found = discover([run])
    assert found.sources == before.sources and len(found.sources) == 8
    assert found.unknown == before.unknown == []
    assert found.datasets == [run / "ds"]
    (note,) = [n for n in found.notes if "rlperf dataset" in n]
    assert note.startswith("an rlperf dataset found in the folders given, not read as sources: ")
    assert str(run / "ds") in note and "as the only path" in note


def test_several_datasets_are_one_note_and_a_foreign_manifest_is_walked(tmp_path: Path):
    """Five datasets (a parse cache kept under the input folder holds one per file) are one
    counted note; a folder with another tool's manifest.json is an ordinary folder."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy2(SYNTH / "rank-0.synthetic.pt.trace.json.gz", run)
    ds = ingested(run, tmp_path / "ds")
    for k in range(5):
        shutil.copytree(ds, run / "cache" / f"entry{k}")
    other = run / "other"
    other.mkdir()
    (other / "manifest.json").write_text('{"format": "something-else"}')
    shutil.copy2(SYNTH / "rank-1.synthetic.pt.trace.json.gz", other)
    found = discover([run])
    assert sorted(p.name for p, _ in found.sources) == [
        "rank-0.synthetic.pt.trace.json.gz", "rank-1.synthetic.pt.trace.json.gz"]
    assert found.unknown == [other / "manifest.json"]
    (note,) = [n for n in found.notes if "rlperf dataset" in n]
    assert note.startswith("5 rlperf datasets found in the folders given")
    assert "entry0" in note and "entry2" in note and "entry3" not in note and "and 2 more" in note


def test_a_damaged_gz_in_a_folder_is_skipped_with_its_problem(tmp_path: Path):
    """A rank trace whose bytes were lost in a run's folder was listed as 'not a format rlperf
    reads', like a README; named alone it gets its parser's problem. Now the folder says the
    problem too; a valid gzip of something else (a tarball) stays an unknown file."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy2(SYNTH / "rank-0.synthetic.pt.trace.json.gz", run)
    (run / "rank-1.pt.trace.json.gz").write_bytes(b"\0" * 4096)
    (run / "rank-2.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 64)
    (run / "logs.tar.gz").write_bytes(gzip.compress(b"\0" * 1024))
    found = discover([run])
    assert [p.name for p, _ in found.sources] == ["rank-0.synthetic.pt.trace.json.gz"]
    assert found.skipped == [
        (run / "rank-1.pt.trace.json.gz", "not gzip data (the name ends .gz)"),
        (run / "rank-2.pt.trace.json.gz", "damaged gzip data (its start does not inflate)"),
    ]
    assert found.unknown == [run / "logs.tar.gz"]
