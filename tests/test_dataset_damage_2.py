"""A dataset edited by hand or by another tool, and ingest's edges a new user meets: each is one
line naming the file and what is wrong with it (exit 2), or reads as the dataset it still is,
never an internal error."""

from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
from pathlib import Path

import polars as pl
import pytest
from report_truth import cli
from test_dataset_damage import copied, edited

from analyzer.dataset import products, read_manifest, read_sources
from parsers import InputError

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
HTA = CORPUS / "HolisticTraceAnalysis"
PAIR = ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz")
SEVERAL = ("event_sync_trace.json.gz", "inference_rank_1.json.gz", *PAIR,
           "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
"""Four runs by their time windows (tests/test_dataset_damage.py): the sampled pair is run 2."""
DISAGGREGATED = Path(__file__).resolve().parents[1] / "sample_traces/synthetic/disaggregated"
DAMAGED = "the manifest is damaged (run rlperf ingest again)"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """The sampled pair copied to ``run/`` and ingested, as given relatively, into ``ds``."""
    base = tmp_path_factory.mktemp("made")
    copied(base / "run", PAIR)
    done = cli("ingest", "run", "-o", "ds", "--quiet", cwd=base)
    assert done.returncode == 0, done.stderr
    return base


@pytest.fixture
def work(made, tmp_path) -> Path:
    """A fresh copy of :func:`made` (its run and dataset) to damage (its manifest still
    resolves the sources to :func:`made`'s)."""
    shutil.copytree(made, tmp_path, dirs_exist_ok=True)
    return tmp_path


def manifest_error(root: Path) -> str:
    with pytest.raises(InputError) as caught:
        read_manifest(root)
    return str(caught.value)


def one_line(done, line: str) -> None:
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"rlperf: error: {line}\n")


# --- 1. every manifest field read is checked for presence and type ---------------------------


def _del(*keys):
    def change(m):
        holder = m
        for k in keys[:-1]:
            holder = holder[k]
        del holder[keys[-1]]
    return change


def _set(value, *keys):
    def change(m):
        holder = m
        for k in keys[:-1]:
            holder = holder[k]
        holder[keys[-1]] = value
    return change


FIELD_CASES = {
    "record without sha256": (_del("sources", 0, "sha256"),
                              f"has a damaged source list: source 0 (run/{PAIR[0]}) lacks "
                              "'sha256'"),
    "record without size": (_del("sources", 1, "size"),
                            f"has a damaged source list: source 1 (run/{PAIR[1]}) lacks 'size'"),
    "size as text": (_set("12", "sources", 1, "size"),
                     f"has a damaged source list: source 1 (run/{PAIR[1]}) has 'size' as a "
                     "string, not an integer"),
    "index as true": (_set(True, "sources", 0, "index"),
                      f"has a damaged source list: source 0 (run/{PAIR[0]}) has 'index' as true "
                      "or false, not an integer"),
    "empty record": (_set({}, "sources", 0), "has a damaged source list: source 0 lacks 'index'"),
    "record as text": (_set("x", "sources", 1),
                       "has a damaged source list: source 1 is a string, not an object"),
    "partition not a rank": (_set({"zero": 4810}, "sources", 0, "events"),
                             f"has a damaged source list: source 0 (run/{PAIR[0]}) has 'events' "
                             "holding 'zero': 4810, not a rank's number and its row count"),
    "no notes": (_del("notes"), "lacks 'notes'"),
    "no unknown": (_del("unknown"), "lacks 'unknown'"),
    "no run": (_del("run"), "lacks 'run'"),
    "no sources": (_del("sources"), "lacks 'sources'"),
    "notes as text": (_set("hello", "notes"), "has 'notes' as a string, not a list"),
    "unknown as text": (_set("abc", "unknown"), "has 'unknown' as a string, not a list"),
    "a note a number": (_set(["fine", 7], "notes"),
                        "has 'notes' holding an integer, not only strings"),
    "choice a number": (_set(4, "run", "choice"),
                        "has the run's 'choice' as an integer, not a string or null"),
}


@pytest.mark.parametrize("case", FIELD_CASES)
def test_a_manifest_field_missing_or_mistyped_is_named(work, case):
    """Was: an internal error (exit 3) in analyzer.dataset.store (KeyError: 'sha256') or in
    analyzer.assemble.ingest (KeyError: 'notes'); or 'note: h', 'note: e', … for notes
    'hello'."""
    change, problem = FIELD_CASES[case]
    edited(work / "ds", change)
    assert manifest_error(work / "ds") == f"{work}/ds/manifest.json: {problem}: {DAMAGED}"


@pytest.mark.parametrize("case", ["record without sha256", "no notes", "notes as text"])
def test_analyze_and_ingest_of_a_damaged_manifest_are_one_line(work, case):
    change, problem = FIELD_CASES[case]
    edited(work / "ds", change)
    line = f"ds/manifest.json: {problem}: {DAMAGED}"
    one_line(cli("analyze", "ds", "--quiet", cwd=work), line)
    one_line(cli("ingest", "ds", "-o", "again", "--quiet", cwd=work), line)
    assert not (work / "again").exists()


# --- 2. partitions rewritten by another Parquet tool ------------------------------------------


def report(cwd: Path, *args: str) -> dict:
    done = cli("analyze", "ds", "-f", "json", "--quiet", "--no-cache", *args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def rewritten(root: Path, change) -> Path:
    part = root / "events" / "rank=0" / "part-00000.parquet"
    change(pl.read_parquet(part)).write_parquet(part)
    return part


def test_reordered_and_extra_columns_read_as_the_dataset_they_are(work):
    """Was: exit 3, 'ShapeError: unable to vstack, column names don't match' (reversed) and
    'unable to append ... width 25 with ... 24' (an extra column)."""
    before = read_sources(work / "ds", read_manifest(work / "ds"))
    expected = report(work)
    rewritten(work / "ds", lambda t: t.select(t.columns[::-1]))
    metrics = work / "ds" / "metrics" / "part-00001.parquet"
    table = pl.read_parquet(metrics)
    table.select(table.columns[::-1]).write_parquet(metrics)
    again = read_sources(work / "ds", read_manifest(work / "ds"))
    for old, new in zip(before, again, strict=True):
        assert new.events.equals(old.events) and new.metrics.equals(old.metrics)
        assert new.events.columns == old.events.columns
    assert again[0].events.height == 4810
    assert report(work) == expected
    rewritten(work / "ds", lambda t: t.with_columns(pl.lit(1).alias("zzz")))
    assert read_sources(work / "ds", read_manifest(work / "ds"))[0].events.equals(before[0].events)
    assert report(work) == expected


def test_a_dropped_column_is_said_missing(work):
    """Was: "has column 'host' as missing where the event table has Categorical"."""
    part = rewritten(work / "ds", lambda t: t.drop("host"))
    line = (f"ds/{part.relative_to(work / 'ds')}: lacks the column 'host' (Categorical) of the "
            "event table: the dataset is damaged (run rlperf ingest again)")
    one_line(cli("analyze", "ds", "--quiet", cwd=work), line)
    part = rewritten(work / "ds", lambda t: t.with_columns(pl.lit(1).alias("host")).drop("_row"))
    with pytest.raises(InputError) as caught:
        read_sources(work / "ds", read_manifest(work / "ds"))
    assert str(caught.value) == (f"{part}: has column 'host' as Int32 where the event table has "
                                 "Categorical: the dataset is damaged (run rlperf ingest again)")


# --- 3. an output inside the dataset ingested --------------------------------------------------


@pytest.mark.parametrize("inside", ["ds/sub", "ds/events/sub"])
def test_ingest_into_a_folder_inside_its_input_dataset_is_refused(work, inside):
    """Was: accepted, a dataset inside the dataset, and then `rlperf ingest run -o ds` said 'holds
    files that are not part of the dataset: sub'."""
    listing = sorted(p.relative_to(work) for p in (work / "ds").rglob("*"))
    done = cli("ingest", "ds", "-o", inside, "--quiet", cwd=work)
    one_line(done, f"{inside}: is inside the dataset ds, the input of this ingest: name a folder "
                   "outside ds")
    assert sorted(p.relative_to(work) for p in (work / "ds").rglob("*")) == listing
    assert [p.name for p in work.iterdir() if p.name.startswith(".")] == []
    assert cli("ingest", "ds", "-o", "ds", "--quiet", cwd=work).returncode == 0


@pytest.mark.parametrize(("command", "output"), [
    ("analyze", "ds/report.html"), ("analyze", "ds/events/x.json"), ("export", "ds/run.pftrace"),
])
def test_a_report_inside_a_dataset_is_refused(work, command, output):
    """Was: written there, and the next `rlperf ingest run -o ds` refused the dataset as
    holding a file that is not part of it."""
    listing = sorted(p.relative_to(work) for p in (work / "ds").rglob("*"))
    one_line(cli(command, "ds", "-o", output, "--quiet", cwd=work),
             f"{output}: is inside the dataset {work / 'ds'}, which holds only what rlperf "
             "ingest writes (it keeps its own reports): write the report outside it")
    assert sorted(p.relative_to(work) for p in (work / "ds").rglob("*")) == listing
    assert cli("analyze", "ds", "-o", "report.html", "--quiet", cwd=work).returncode == 0
    assert cli("ingest", "run", "-o", "ds", "--quiet", cwd=work).returncode == 0


# --- 4. kept reports are as readable as the dataset -------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_a_kept_report_folder_has_the_umask_permissions(work, mask):
    """Was: products/KEY/ was 0700 (mkdtemp) while the dataset's folders follow the umask."""
    old = os.umask(mask)
    try:
        done = cli("analyze", "ds", "-f", "json", "-o", "out.json", "--quiet", cwd=work)
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    (kept,) = products.reports(work / "ds")
    assert kept.stat().st_mode & 0o777 == 0o777 & ~mask
    assert (kept / "report").stat().st_mode & 0o777 == 0o666 & ~mask
    assert (kept / "report").read_bytes() == (work / "out.json").read_bytes()


# --- 5. a stale source: the hint names what to run; copying a dataset says it copies ----------


def halved(path: Path) -> None:
    document = json.loads(gzip.decompress(path.read_bytes()))
    document["traceEvents"] = document["traceEvents"][: len(document["traceEvents"]) // 2]
    path.write_bytes(gzip.compress(json.dumps(document).encode()))


def warnings_of(done) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("rlperf: warning:")]


def test_the_stale_hint_is_a_command_that_reads_the_source_anew(tmp_path):
    """Was: '(run rlperf ingest again to read it anew)', and the natural `rlperf ingest ds -o ds`
    copied the old tables, said 'wrote the dataset' and the warning stayed."""
    work = tmp_path
    copied(work / "run", PAIR)
    assert cli("ingest", "run", "-o", "ds", "--quiet", cwd=work).returncode == 0
    halved(work / "run" / PAIR[0])
    hint = f"rlperf ingest run/{PAIR[0]} run/{PAIR[1]} -o ds"
    analyzed = cli("analyze", "ds", "-f", "json", "--quiet", cwd=work)
    assert analyzed.returncode == 0, analyzed.stderr
    assert warnings_of(analyzed) == [
        f"rlperf: warning: dataset ds: {PAIR[0]} changed since it was ingested; the report reads "
        f"the tables ingested then (to read it anew, ingest the sources into the dataset: {hint})"
    ]
    copied_again = cli("ingest", "ds", "-o", "ds", "--quiet", cwd=work)
    assert copied_again.returncode == 0, copied_again.stderr
    assert warnings_of(copied_again) == [
        f"rlperf: warning: dataset ds: {PAIR[0]} changed since it was ingested; its tables are "
        "copied from the dataset, not read anew (to read it anew, ingest the sources into the "
        f"dataset: {hint})"
    ]
    rows = json.loads((work / "ds" / "manifest.json").read_text())["sources"][0]["events"]
    assert rows == {"0": 4810}  # copied: still the tables of before
    args = shlex.split(hint)[1:]
    assert cli(*args, "--quiet", cwd=work).returncode == 0
    fresh = cli("analyze", "ds", "-f", "json", "--quiet", cwd=work)
    assert warnings_of(fresh) == []
    rows = json.loads((work / "ds" / "manifest.json").read_text())["sources"][0]["events"]
    assert 0 < rows["0"] < 4810


def test_the_stale_hint_names_the_common_folder_and_run_past_three_sources(tmp_path):
    """Eight ranks of a bundled sample beside another run, the eight chosen by a path prefix:
    the hint names their folder and the choice, and running it reads the source anew."""
    job = tmp_path / "runs" / "job"
    job.mkdir(parents=True)
    for trace in sorted(DISAGGREGATED.glob("rank-*.pt.trace.json.gz")):
        shutil.copyfile(trace, job / trace.name)
    shutil.copyfile(HTA / "inference_rank_1.json.gz", tmp_path / "runs" / "inference.json.gz")
    done = cli("ingest", "runs", "--run", "runs/job", "-o", "ds", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert manifest["run"]["choice"] == "runs/job" and len(manifest["sources"]) == 8
    halved(job / "rank-3.synthetic.pt.trace.json.gz")
    (line,) = warnings_of(cli("analyze", "ds", "-f", "json", "--quiet", cwd=tmp_path))
    hint = "rlperf ingest runs/job --run runs/job -o ds"
    assert line.endswith(f"(to read it anew, ingest the sources into the dataset: {hint})")
    assert cli(*shlex.split(hint)[1:], "--quiet", cwd=tmp_path).returncode == 0
    assert warnings_of(cli("analyze", "ds", "-f", "json", "--quiet", cwd=tmp_path)) == []


def test_ingesting_a_dataset_again_keeps_its_run_choice_with_its_note(tmp_path):
    """Was: run.choice '2' became null in the copy while its note still said 'run 2 of 4'."""
    copied(tmp_path / "runs", SEVERAL)
    done = cli("ingest", "runs", "--run", "2", "-o", "ds", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert first["run"]["choice"] == "2"
    assert first["notes"] == ["run 2 of 4 separate runs in the input (--run 2); the others are "
                              "not analysed"]
    assert cli("ingest", "ds", "-o", "copy", "--quiet", cwd=tmp_path).returncode == 0
    copy = json.loads((tmp_path / "copy" / "manifest.json").read_text())
    assert (copy["run"], copy["notes"]) == (first["run"], first["notes"])
    assert [r["path"] for r in copy["sources"]] == [f"runs/{n}" for n in PAIR]
