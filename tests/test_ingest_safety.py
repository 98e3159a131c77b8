"""``rlperf ingest -o DIR`` onto an existing folder replaces only what the dataset wrote (never a
user's file, never an input), the folder follows the umask, a folder that cannot be made is
named with its cause; a path inside a dataset, ``--jobs 0`` and a local Ray's start each get
one line."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import typer

from analyzer import engines
from analyzer.cli import app
from analyzer.dataset import products, write_dataset
from analyzer.engines import on_ray
from parsers import parse_file
from parsers.discover import DATASET_ENTRIES
from tests.report_truth import cli, one_line_error, rlperf

REPO = Path(__file__).resolve().parents[1]
MULTI = REPO / "sample_traces" / "synthetic" / "disaggregated"
"""8 ranks, one Kineto trace each."""


def traces(folder: Path, first: int, count: int) -> Path:
    """A private copy of ``count`` traces of the multi-rank sample, from the ``first``-th."""
    folder.mkdir(parents=True)
    for path in sorted(MULTI.glob("*.json.gz"))[first:first + count]:
        shutil.copy2(path, folder / path.name)
    return folder


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture
def ds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A dataset of two ranks at tmp_path/ds."""
    root = tmp_path / "ds"
    status, _, err = rlperf(capsys, "ingest", str(traces(tmp_path / "a", 0, 2)), "-o", str(root),
                            "-q")
    assert status == 0, err
    return root


# --- 1. replacing a dataset deletes nothing else ------------------------------------------------


def test_a_dataset_folder_holding_other_files_is_refused_and_left_as_it_was(
    ds: Path, capsys: pytest.CaptureFixture[str]
):
    """The new user's loss: traces copied into the dataset folder and ingested from there, and
    a note beside them, were deleted with the old dataset (exit 0)."""
    inputs = traces(ds / "traces", 2, 2)
    (ds / "NOTES.txt").write_text("x\n")
    before = snapshot(ds)
    status, _, err = rlperf(capsys, "ingest", str(inputs), "-o", str(ds), "-q")
    assert status == 2
    assert err == (f"rlperf: error: {ds}: holds files that are not part of the dataset: "
                   "NOTES.txt, traces; move them or choose another folder\n")
    assert snapshot(ds) == before
    assert len([p for p in before if p.startswith("traces/")]) == 2


def test_a_report_written_into_the_dataset_folder_is_not_deleted_by_a_new_ingest(
    ds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """rlperf writes no report there (tests/test_dataset_damage_2.py), but a user may put one
    there by hand."""
    report = ds / "report.json"
    out = tmp_path / "report.json"
    assert rlperf(capsys, "analyze", str(ds), "-f", "json", "-o", str(out), "-q")[0] == 0
    report.write_bytes(out.read_bytes())
    kept = report.read_bytes()
    status, _, err = rlperf(capsys, "ingest", str(traces(tmp_path / "b", 2, 3)), "-o", str(ds),
                            "-q")
    assert (status, err) == (2, f"rlperf: error: {ds}: holds files that are not part of the "
                                "dataset: report.json; move them or choose another folder\n")
    assert report.read_bytes() == kept and len(kept) > 1000


def test_a_dataset_is_replaced_whole_kept_reports_included(
    ds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Only the dataset's own entries were there: the new run replaces them (kept reports are
    the old tables' and go with them), atomically, leaving nothing beside the folder."""
    out = tmp_path / "r.json"
    assert rlperf(capsys, "analyze", str(ds), "-f", "json", "-o", str(out), "-q")[0] == 0
    assert len(products.reports(ds)) == 1
    status, _, err = rlperf(capsys, "ingest", str(traces(tmp_path / "b", 2, 3)), "-o", str(ds),
                            "-q")
    assert status == 0, err
    assert sorted(p.name for p in ds.iterdir()) == ["events", "manifest.json", "metrics",
                                                   "sources"]
    assert sorted(p.name for p in (ds / "events").iterdir()) == ["rank=2", "rank=3", "rank=4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "ds", "r.json"]


def test_a_failed_ingest_leaves_the_old_dataset_and_no_staging_folder(
    ds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    before = snapshot(ds)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2, 3]")
    status, _, err = rlperf(capsys, "ingest", str(bad), "-o", str(ds), "-q")
    assert status == 2 and err.startswith(f"rlperf: error: {bad}: "), err
    assert snapshot(ds) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "bad.json", "ds"]


def test_an_input_inside_the_target_folder_is_refused(
    ds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """A link outside the folder to a file inside it: replacing the folder would delete what
    is being read."""
    link = tmp_path / "link.json"
    link.symlink_to(ds / "sources" / "part-00000.json")
    before = snapshot(ds)
    status, _, err = rlperf(capsys, "ingest", str(link), "-o", str(ds), "-q")
    assert (status, err) == (2, f"rlperf: error: {ds}: holds {link}, an input of this ingest: "
                                "move it or choose another folder\n")
    assert snapshot(ds) == before


def test_the_dataset_entries_are_exactly_what_the_writer_writes(tmp_path: Path):
    """DATASET_ENTRIES is what replacing may delete: every top-level name a dataset and a kept
    report create is listed (a new one would be refused as the user's), and nothing more but
    the manifest's staging name."""
    root = tmp_path / "ds"
    parsed = parse_file(sorted(MULTI.glob("*.json.gz"))[0])
    write_dataset([parsed], root)
    products.keep(root, "k" * 40, b"report", [])
    written = {p.name for p in root.iterdir()}
    assert written == {"manifest.json", "events", "metrics", "sources", "products"}
    assert DATASET_ENTRIES - written == {".manifest.json.tmp"}


# --- 2. permissions ----------------------------------------------------------------------------


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o755), (0o027, 0o750), (0o002, 0o775)])
def test_the_dataset_folder_follows_the_umask(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], umask: int, mode: int
):
    """mkdtemp made it 0700 whatever the umask, its sub-folders 0755: other users and Ray
    workers running as another user could not read a dataset on shared storage."""
    src = traces(tmp_path / "a", 0, 1)
    previous = os.umask(umask)
    try:
        status, _, err = rlperf(capsys, "ingest", str(src), "-o", str(tmp_path / "ds"), "-q")
    finally:
        os.umask(previous)
    assert status == 0, err
    assert oct((tmp_path / "ds").stat().st_mode & 0o777) == oct(mode)
    assert oct((tmp_path / "ds" / "events").stat().st_mode & 0o777) == oct(mode)


# --- 8. a folder that cannot be made -----------------------------------------------------------


def test_a_parent_that_is_a_file_is_named(tmp_path: Path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    src = traces(tmp_path / "a", 0, 1)
    for target in ("afile/ds", "afile/a/b/ds"):
        done = cli("ingest", str(src), "-o", target, "-q", cwd=tmp_path)
        line = one_line_error(done)
        assert line == f"rlperf: error: {target}: cannot create the folder: afile is a file"


def test_a_parent_that_takes_no_folder_is_named_with_the_cause(tmp_path: Path):
    """/proc takes no new folder (the cause the system gives: no such entry for root, no
    permission for anyone else)."""
    done = cli("ingest", str(traces(tmp_path / "a", 0, 1)), "-o", "/proc/rlperf-ds", "-q")
    line = one_line_error(done)
    assert line.startswith(
        "rlperf: error: /proc/rlperf-ds: cannot create the folder: /proc is not writable ("
    ), line
    assert line.endswith(("(No such file or directory)", "(Permission denied)")), line


def test_an_unwritable_parent_says_the_systems_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    src = traces(tmp_path / "a", 0, 1)

    def refused(**_: object) -> str:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    target = tmp_path / "out" / "ds"
    status, _, err = rlperf(capsys, "ingest", str(src), "-o", str(target), "-q")
    assert (status, err) == (2, f"rlperf: error: {target}: cannot create the folder: "
                                f"{tmp_path / 'out'} is not writable (Read-only file system)\n")


# --- 9. part of a dataset given as the input ---------------------------------------------------


@pytest.mark.parametrize("part", ["events", "events/rank=0", "sources", "manifest.json",
                                  "events/rank=1/part-00001.parquet", "sources/part-00000.json",
                                  "metrics"])
def test_a_path_inside_a_dataset_names_the_dataset(
    ds: Path, capsys: pytest.CaptureFixture[str], part: str
):
    inside = ds / part
    assert inside.exists()
    for command in ("analyze", "export", "ingest"):
        extra = ["-o", str(ds.parent / f"{command}.out")]
        status, _, err = rlperf(capsys, command, str(inside), *extra, "-q")
        assert (status, err) == (2, f"rlperf: error: {inside}: is inside the rlperf dataset "
                                    f"{ds}: give {ds}\n"), command


def test_a_relative_path_inside_a_dataset_names_it_as_given(ds: Path):
    done = cli("analyze", "ds/events/rank=0", "-q", cwd=ds.parent)
    assert one_line_error(done) == (
        "rlperf: error: ds/events/rank=0: is inside the rlperf dataset ds: give ds"
    )


def test_a_dataset_without_its_manifest_says_to_ingest_again(
    ds: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    (ds / "manifest.json").unlink()
    line = f"rlperf: error: {ds}: looks like an rlperf dataset but has no manifest.json: " \
           "re-ingest it\n"
    assert rlperf(capsys, "analyze", str(ds), "-q")[::2] == (2, line)
    assert rlperf(capsys, "analyze", str(ds / "events"), "-q")[::2] == (2, line)
    status, _, err = rlperf(capsys, "ingest", str(tmp_path / "a"), "-o", str(ds), "-q")
    assert status == 0, err
    assert (ds / "manifest.json").is_file()


def test_trace_folders_named_like_dataset_entries_are_still_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    src = traces(tmp_path / "events" / "sources", 0, 2)
    status, out, err = rlperf(capsys, "analyze", str(src), "-f", "json", "-q")
    assert status == 0, err
    assert [Path(s["path"]).name for s in json.loads(out)["sources"]] == sorted(
        p.name for p in src.iterdir()
    )


# --- 10. a local Ray's start is said -----------------------------------------------------------


class FakeRay:
    """What connected() uses of ray, recording the start."""

    def __init__(self) -> None:
        self.started: list[dict[str, object]] = []

    def is_initialized(self) -> bool:
        return False

    def init(self, **options: object) -> None:
        self.started.append(options)

    def shutdown(self) -> None:
        pass


@pytest.mark.parametrize(("quiet", "said"), [
    (False, "rlperf: starting a local Ray cluster (about a minute)…\n"), (True, ""),
])
def test_starting_a_local_ray_is_said_unless_quiet(
    capsys: pytest.CaptureFixture[str], quiet: bool, said: str
):
    ray = FakeRay()
    with on_ray.connected(ray, "local", 2, quiet=quiet):  # type: ignore[arg-type]
        pass
    assert [o["num_cpus"] for o in ray.started] == [2]
    assert capsys.readouterr().err == said


def test_an_existing_cluster_is_joined_without_the_line(capsys: pytest.CaptureFixture[str]):
    with on_ray.connected(FakeRay(), "auto", 2):  # type: ignore[arg-type]
        pass
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("args", "quiet"), [
    (["--engine", "ray", "-q"], True), (["-q", "--engine", "ray"], True),
    (["--engine", "ray"], False),
])
def test_quiet_reaches_the_ray_engine_in_either_order(args: list[str], quiet: bool):
    command = typer.main.get_command(app).commands["analyze"]  # type: ignore[attr-defined]
    with engines.using("local"):
        engines.choose(quiet=not quiet)
        command.make_context("analyze", ["x", *args])
        engine = engines.selected()
        assert isinstance(engine, on_ray.RayEngine)
        assert engine.quiet is quiet


# --- 11. --jobs below one ----------------------------------------------------------------------


@pytest.mark.parametrize(("command", "jobs"), [("analyze", "0"), ("ingest", "-2")])
def test_jobs_below_one_is_one_line(tmp_path: Path, command: str, jobs: str):
    src = traces(tmp_path / "a", 0, 1)
    done = cli(command, str(src), "--jobs", jobs, "-o", str(tmp_path / "out"), "-q")
    assert one_line_error(done) == f"rlperf: error: --jobs: must be at least 1 (got {jobs})"
    assert not (tmp_path / "out").exists()


# --- help --------------------------------------------------------------------------------------


def test_the_help_says_what_a_dataset_replaces_and_that_analyze_reads_one():
    ingest_help = " ".join(cli("ingest", "--help").stdout.split())
    assert "ingest this one" in ingest_help and "analyse this one" not in ingest_help
    assert "a folder holding anything else is refused" in ingest_help
    analyze_help = " ".join(cli("analyze", "--help").stdout.split())
    assert "PATH may instead be a dataset (rlperf ingest): with -o, the report is kept in it" \
        in analyze_help


def test_strict_ingest_refuses_a_warning_and_writes_no_dataset(tmp_path: Path, capsys) -> None:
    """Ingest judges ``--strict`` with the analyze commands' refusal: the first warning and the
    count, exit 2, no dataset left behind."""
    log = REPO.parent / "shared" / "corpus" / "VERL-Maze" / "verl_demo.log"
    loose = rlperf(capsys, "ingest", str(log), "-o", str(tmp_path / "loose"), "-q")
    warnings = [line for line in loose[2].splitlines() if line.startswith("rlperf: warning: ")]
    assert loose[0] == 0 and warnings
    status, _, err = rlperf(capsys, "ingest", str(log), "-o", str(tmp_path / "ds"), "--strict")
    first = warnings[0].removeprefix("rlperf: warning: ")
    count = f"{len(warnings)} warning{'s' if len(warnings) > 1 else ''}"
    assert status == 2
    assert err.strip().splitlines()[-1] == (
        f"rlperf: error: --strict: warning treated as an error: {first} ({count} in all)"
    )
    assert not (tmp_path / "ds").exists()
