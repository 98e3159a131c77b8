"""Legacy Nsight Systems reports (alpa, 2023) and near-empty, self-contradicting verl profiler
stubs (rl-insight): read, or refused in one line naming the nsys needed; the stubs analysed to
what they can tell, each contradiction named with both values in every report format."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import analyzer
from parsers import nsys_rep
from parsers.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
ALPA = CORPUS / "alpa"
RL_INSIGHT = CORPUS / "rl-insight"
ACTOR_UPDATE = RL_INSIGHT / "actor_update__prof_rank-0_031904.json.gz"
ACTOR_LOGPROB = RL_INSIGHT / "actor_compute_log_prob__prof_rank-1_031847.json.gz"
ROLLOUT = RL_INSIGHT / (
    "agent_loop_rollout_replica_0__huawei_372640.1771730291744166997.pt.trace.json.gz"
)
WORLD = "distributedInfo world_size 2, default group 'default_pg' has 4 ranks (0,1,2,3)"
ROLE = (
    "file-name prefix names actor_update (stage actor_update), the process names "
    "ray::WorkerDict.actor_rollout_compute_log_prob (stage old_logprob)"
)


def rlperf(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", *args],
        capture_output=True, text=True, timeout=300,
        env={"RLPERF_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "COLUMNS": "400"},
    )


# --- legacy reports ---------------------------------------------------------------------------


def test_the_alpa_headers_are_the_old_report_format_written_by_nsys_2022_1() -> None:
    for name in ("report1.nsys-rep", "report2.nsys-rep"):
        data = (ALPA / name).read_bytes()
        assert nsys_rep.report_version(data[:128]) is None
        assert nsys_rep.legacy_format(data[:128]) == "1"
        assert nsys_rep.writer_version(data) == "2022.1.3.3"
        assert nsys_rep.describe(ALPA / name) == {
            "report_written_by": "2022.1.3.3", "report_format": "1",
            "unsupported_cuda_driver": "12.0"}


needs_nsys = pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys CLI not installed")


@needs_nsys
@pytest.mark.parametrize(
    "name, kinds",
    [("report1.nsys-rep",
      {"runtime": 1242, "gpu_sync": 69, "memset": 66, "memcpy": 34, "annotation": 2}),
     ("report2.nsys-rep", {"runtime": 381, "memcpy": 3, "gpu_sync": 3})],
)
def test_the_installed_nsys_exports_the_legacy_reports(name: str, kinds: dict) -> None:
    """Counts as the export's own tables hold them (CUPTI_ACTIVITY_KIND_RUNTIME, …): no kernel
    table at all, which the report itself explains (its nsys did not support the driver)."""
    run = analyzer.load([ALPA / name])
    source = run.sources[0]
    assert source.format == "nsys-rep"
    assert source.meta["report_written_by"] == "2022.1.3.3"
    assert source.meta["report_format"] == "1"
    assert source.meta["unsupported_cuda_driver"] == "12.0"
    found = run.events.group_by(pl.col("kind").cast(pl.String)).len()
    assert dict(zip(found["kind"], found["len"], strict=True)) == kinds
    assert run.events["host"].cast(pl.String).unique().to_list() == ["64eb8d2274f3"]
    assert run.ranks == [0]
    assert any(
        "Nsight Systems (2022.1.3.3) did not support the CUDA driver (12.0)" in w
        and name in w for w in run.warnings
    )


def test_an_export_that_fails_on_a_legacy_report_names_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the installed nsys cannot read a format-1 report, the refusal names the version
    that wrote it (read from the report's body) and the one on PATH."""
    monkeypatch.setenv("RLPERF_CACHE_DIR", str(tmp_path / "cache"))
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2020.3.1.1-abc"; '
        'exit 0; fi\necho "Error: Version number is invalid" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    with pytest.raises(InputError) as caught:
        nsys_rep.export_sqlite(ALPA / "report2.nsys-rep")
    line = str(caught.value)
    assert "\n" not in line and "report2.nsys-rep" in line
    assert "Nsight Systems 2022.1.3.3 (report format 1)" in line
    assert "nsys on PATH (2020.3.1.1)" in line and "nsys 2022.1.3.3 or newer" in line


# --- near-empty, contradicting stubs ------------------------------------------------------------


def test_a_stub_states_its_world_groups_and_process() -> None:
    source = analyzer.load([ACTOR_UPDATE]).sources[0]
    assert source.meta["world_size"] == 2 and source.meta["rank"] == 0
    assert source.meta["process_names"] == ["ray::WorkerDict.actor_rollout_compute_log_prob"]
    assert [g["pg_desc"] for g in source.meta["pg_config"]] == [
        "default_pg", "mesh_dp", "mesh_infer_tp", "mesh_infer_pp"]


@pytest.mark.parametrize(
    "path, found",
    [(ACTOR_UPDATE, {"world_size_mismatch": WORLD, "role_mismatch": ROLE}),
     (ACTOR_LOGPROB, {"world_size_mismatch": WORLD}),
     (ROLLOUT, {})],
    ids=["actor_update", "actor_compute_log_prob", "rollout"],
)
def test_each_contradiction_is_a_quality_row_and_a_warning(path: Path, found: dict) -> None:
    run = analyzer.load([path])
    quality = run.data_quality.filter(pl.col("file") == path.name)
    rows = dict(zip(quality["check"], quality["detail"], strict=True))
    assert {k: v for k, v in rows.items() if k in ("world_size_mismatch", "role_mismatch")} == found
    said = [w for w in run.warnings if "contradict" in w or "default group" in w
            or "file-name prefix names" in w]
    assert len(said) == len(found)
    assert all(any(detail in w and path.name in w for w in said) for detail in found.values())


def test_a_consistent_world_and_role_raise_nothing(tmp_path: Path) -> None:
    """The same stub with world_size 4 and its process in its own role's folder."""
    doc = json.loads(__import__("gzip").decompress(ACTOR_UPDATE.read_bytes()))
    doc["distributedInfo"]["world_size"] = 4
    fixed = tmp_path / "actor_compute_log_prob__prof_rank-0.json"
    fixed.write_text(json.dumps(doc))
    quality = analyzer.load([fixed]).data_quality
    assert not set(quality["check"]) & {"world_size_mismatch", "role_mismatch"}


def test_a_role_folder_is_read_as_well_as_a_prefix(tmp_path: Path) -> None:
    """verl's own layout: ``torch_profile/<role>/<file>``."""
    folder = tmp_path / "torch_profile" / "actor_update"
    folder.mkdir(parents=True)
    copy = folder / "prof_rank-0_031904.json.gz"
    copy.write_bytes(ACTOR_UPDATE.read_bytes())
    quality = analyzer.load([copy]).data_quality
    detail = quality.filter((pl.col("check") == "role_mismatch") & (pl.col("file") == copy.name))
    assert detail["detail"].to_list() == [ROLE.replace("file-name prefix names", "folder names")]


def test_copies_in_another_role_folder_say_both_roles() -> None:
    run = analyzer.load([RL_INSIGHT])
    copies = sorted(w for w in run.warnings if "a copy of" in w)
    assert len(copies) == 2
    assert all("its file-name prefix names actor_update (actor_update) and the other's "
               "file-name prefix actor_compute_log_prob (old_logprob)" in w for w in copies)


@pytest.mark.parametrize("fmt", ["text", "json", "md", "html"])
def test_every_format_names_both_values_and_exits_0(fmt: str, tmp_path: Path) -> None:
    out = tmp_path / f"report.{fmt}"
    done = rlperf("analyze", str(ACTOR_UPDATE), "-q", "-f", fmt, "-o", str(out), cache=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    text = out.read_text()
    if fmt == "html":
        text = text.replace("&#x27;", "'").replace("&#39;", "'")
    for needle in ("world_size 2", "has 4 ranks", "actor_update (stage actor_update)",
                   "ray::WorkerDict.actor_rollout_compute_log_prob (stage old_logprob)"):
        assert needle in text, (fmt, needle)
    if fmt == "json":
        doc = json.loads(text)
        assert {r["check"] for r in doc["data_quality"]} >= {"world_size_mismatch",
                                                             "role_mismatch"}
        assert sum("default group" in w for w in doc["warnings"]) == 1


@pytest.mark.parametrize("path", sorted(RL_INSIGHT.glob("*.json.gz")), ids=lambda p: p.name[:30])
def test_every_stub_analyses_without_a_crash(path: Path, tmp_path: Path) -> None:
    done = rlperf("analyze", str(path), "-q", "-f", "json", cache=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    doc = json.loads(done.stdout)
    assert doc["sources"][0]["format"] == "kineto"
    assert doc["failures"] == []
