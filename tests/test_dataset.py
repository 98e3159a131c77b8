"""The rlperf dataset (``rlperf ingest``): tables read back equal, partitions per rank, the
manifest, stale and damaged datasets, every command reading one, reports byte-identical."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sys
from pathlib import Path

import polars as pl
import pytest

import analyzer
from analyzer.assemble import ingest as ingest_module
from analyzer.dataset import MANIFEST, parser_version, products
from parsers.cachedir import cache_dir
from tests.report_truth import cli, one_line_error, rlperf

REPO = Path(__file__).resolve().parents[1]
MULTI = REPO / "sample_traces" / "synthetic" / "disaggregated"
"""8 ranks, one Kineto trace each."""
MIXED = REPO / "sample_traces" / "runs" / "verl_ppo_disaggregated"
"""Traces of several ranks, the driver and a framework log."""


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("multi") / "ds"
    assert cli("ingest", str(MULTI), "-o", str(root), "-q").returncode == 0
    return root


def copied(tmp_path: Path, files: int = 2) -> Path:
    """A private copy of the first ``files`` traces of the multi-rank sample."""
    folder = tmp_path / "run"
    folder.mkdir()
    for path in sorted(MULTI.glob("*.json.gz"))[:files]:
        shutil.copy2(path, folder / path.name)
    return folder


# --- round trip --------------------------------------------------------------------------------


@pytest.mark.parametrize("run", [MULTI, MIXED], ids=["kineto-8-ranks", "traces-driver-log"])
def test_every_table_reads_back_equal(tmp_path: Path, capsys, run: Path) -> None:
    assert rlperf(capsys, "ingest", str(run), "-o", str(tmp_path / "ds"), "-q")[0] == 0
    parsed = ingest_module.ingest([run], use_cache=False).sources
    back = ingest_module.ingest([tmp_path / "ds"]).sources
    assert len(back) == len(parsed) > 1
    for a, b in zip(parsed, back, strict=True):
        assert a.events.schema == b.events.schema and a.events.equals(b.events), a.path
        assert a.metrics.schema == b.metrics.schema and a.metrics.equals(b.metrics), a.path
        assert (a.path, a.format, a.meta, a.warnings) == (b.path, b.format, b.meta, b.warnings)
    first, again = analyzer.load([run], use_cache=False), analyzer.load([tmp_path / "ds"])
    assert first.events.equals(again.events) and first.metrics.equals(again.metrics)
    assert [s.rank for s in first.sources] == [s.rank for s in again.sources]


def test_meta_keeps_what_json_lacks(tmp_path: Path) -> None:
    """A tuple stays a tuple, a set a set, an int key an int (the old cache made them lists and
    strings)."""
    from analyzer.dataset import read_manifest, read_sources, write_dataset
    from parsers import ParsedSource

    trace = copied(tmp_path, 1)
    path = next(trace.iterdir())
    meta = {"window": (1.5, 2.5), "seen": {"a", "b"}, "by_rank": {0: "x", 3: "y"}, "p": path}
    write_dataset([ParsedSource(path, "kineto", meta=meta)], tmp_path / "ds")
    (back,) = read_sources(tmp_path / "ds", read_manifest(tmp_path / "ds"))
    assert back.meta == meta and isinstance(back.meta["window"], tuple)


# --- layout and manifest -----------------------------------------------------------------------


def test_events_are_partitioned_by_rank(multi: Path) -> None:
    parts = sorted(p.name for p in (multi / "events").iterdir())
    assert parts == [f"rank={r}" for r in range(8)]
    for rank in range(8):
        (file,) = (multi / "events" / f"rank={rank}").iterdir()
        table = pl.read_parquet(file)
        assert file.name == f"part-{rank:05d}.parquet"  # rank-R.… is source R in path order
        assert table.height > 500 and table["rank"].unique().to_list() == [rank]


def test_a_source_of_several_ranks_is_split_and_put_back_in_order(tmp_path: Path) -> None:
    from analyzer.dataset import read_manifest, read_sources, write_dataset
    from parsers import ParsedSource
    from parsers.events import conform

    events = conform({"kind": ["kernel"] * 5, "name": list("abcde"), "rank": [1, 0, 1, 2, 0],
                      "start_ns": [5, 1, 4, 2, 3], "end_ns": [6, 2, 5, 3, 4]})
    (tmp_path / "x.json").write_text("{}")
    write_dataset([ParsedSource(tmp_path / "x.json", "kineto", events=events)], tmp_path / "ds",
                  hashed=False)
    manifest = read_manifest(tmp_path / "ds")
    assert manifest["sources"][0]["events"] == {"0": 2, "1": 2, "2": 1}
    (back,) = read_sources(tmp_path / "ds", manifest)
    assert back.events.equals(events)


def test_the_manifest_names_each_source_its_identity_and_parser(multi: Path) -> None:
    manifest = json.loads((multi / MANIFEST).read_text())
    assert (manifest["format"], manifest["version"]) == ("rlperf-dataset", 1)
    files = sorted(MULTI.glob("*.json.gz"))
    assert [Path(r["resolved"]) for r in manifest["sources"]] == [f.resolve() for f in files]
    for record, file in zip(manifest["sources"], files, strict=True):
        st = file.stat()
        assert (record["size"], record["mtime_ns"]) == (st.st_size, st.st_mtime_ns)
        assert record["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
        assert record["format"] == "kineto"
        assert record["parser_version"] == parser_version("kineto")
        assert sum(record["events"].values()) > 500 and record["metrics"] == 0
    assert manifest["run"]["ranks"] == list(range(8))
    assert manifest["run"]["formats"] == ["kineto"]


def test_the_cache_is_a_dataset_of_one_source(tmp_path: Path) -> None:
    trace = next(copied(tmp_path, 1).iterdir())
    first = ingest_module.ingest([trace], use_cache=True).sources[0]
    entry = cache_dir("parsed") / ingest_module._cache_key(trace, "kineto")
    manifest = json.loads((entry / MANIFEST).read_text())
    assert [r["resolved"] for r in manifest["sources"]] == [str(trace.resolve())]
    hit = ingest_module._cache_get(trace, "kineto", 3)
    assert hit is not None and hit.events["source"].unique().to_list() == [3]
    assert hit.events.drop("source").equals(first.events.drop("source"))
    (entry / "events" / "rank=0" / "part-00000.parquet").unlink()
    assert ingest_module._cache_get(trace, "kineto", 0) is None  # damaged: parsed again


def test_ingest_from_a_warm_cache_records_the_file_as_given(tmp_path: Path, capsys) -> None:
    """A cache hit is a dataset read back; its identity is the cache's (no content hash, the
    path of the first parse), so ingest must describe the file itself, not copy the cache's."""
    run = copied(tmp_path, 1)
    trace = next(run.iterdir())
    ingest_module.ingest([trace], use_cache=True)  # the cache now holds this trace
    link = tmp_path / "link"
    link.symlink_to(run)
    rlperf(capsys, "ingest", str(link), "-o", str(tmp_path / "ds"), "-q")
    (record,) = json.loads((tmp_path / "ds" / MANIFEST).read_text())["sources"]
    assert record["path"] == str(link / trace.name)
    assert record["sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()


# --- stale and damaged -------------------------------------------------------------------------


def test_a_source_changed_since_ingest_is_a_warning(tmp_path: Path, capsys) -> None:
    run = copied(tmp_path)
    rlperf(capsys, "ingest", str(run), "-o", str(tmp_path / "ds"), "-q")
    path = sorted(run.iterdir())[0]
    data = json.loads(gzip.decompress(path.read_bytes()))
    data["traceEvents"] = data["traceEvents"][: len(data["traceEvents"]) // 2]
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    status, _, err = rlperf(capsys, "analyze", str(tmp_path / "ds"), "-f", "json", "-q")
    assert status == 0
    assert f"rlperf: warning: dataset {tmp_path / 'ds'}: {path.name} changed since it was " \
           "ingested" in err


def test_a_source_touched_but_unchanged_is_not_stale(tmp_path: Path, capsys) -> None:
    run = copied(tmp_path)
    rlperf(capsys, "ingest", str(run), "-o", str(tmp_path / "ds"), "-q")
    path = sorted(run.iterdir())[0]
    path.write_bytes(path.read_bytes())  # a new modification time, the same content
    _, _, err = rlperf(capsys, "analyze", str(tmp_path / "ds"), "-f", "json", "-q")
    assert "changed since" not in err


def test_another_parser_version_is_a_warning(tmp_path: Path, capsys) -> None:
    run = copied(tmp_path)
    rlperf(capsys, "ingest", str(run), "-o", str(tmp_path / "ds"), "-q")
    manifest = json.loads((tmp_path / "ds" / MANIFEST).read_text())
    manifest["sources"][1]["parser_version"] = "0" * 16
    (tmp_path / "ds" / MANIFEST).write_text(json.dumps(manifest))
    _, _, err = rlperf(capsys, "analyze", str(tmp_path / "ds"), "-f", "json", "-q")
    name = Path(manifest["sources"][1]["path"]).name
    assert f"{name} was ingested by another version of the kineto parser" in err
    assert "changed since" not in err


def test_a_dataset_ingested_again_keeps_what_its_sources_were(tmp_path: Path, capsys) -> None:
    """A dataset outlives its sources: ingesting it into another folder read each source's
    file for its identity (a deleted source: 'cannot write: No such file or directory') and
    stamped this rlperf's parser version on tables an older one wrote, so the copy said fresh
    where the original said stale."""
    run = copied(tmp_path)
    first, again = tmp_path / "ds", tmp_path / "again"
    rlperf(capsys, "ingest", str(run), "-o", str(first), "-q")
    manifest = json.loads((first / MANIFEST).read_text())
    manifest["sources"][1]["parser_version"] = "0" * 16
    (first / MANIFEST).write_text(json.dumps(manifest))
    gone = sorted(run.iterdir())[0]
    gone.unlink()
    status, _, err = rlperf(capsys, "ingest", str(first), "-o", str(again), "-q")
    assert status == 0, err
    copy = json.loads((again / MANIFEST).read_text())
    keys = ("path", "resolved", "size", "mtime_ns", "sha256", "format", "parser_version")
    assert [{k: r[k] for k in keys} for r in copy["sources"]] == [
        {k: r[k] for k in keys} for r in manifest["sources"]
    ]
    _, _, err = rlperf(capsys, "analyze", str(again), "-f", "json", "-q")
    name = Path(manifest["sources"][1]["path"]).name
    assert err.count(f"dataset {again}: {name} was ingested by another version") == 1
    assert f"dataset {first}" not in err


@pytest.mark.parametrize("stale", [3, 5])
def test_sources_stale_alike_are_said_once_past_three(tmp_path: Path, capsys, stale: int) -> None:
    """A dataset of 1,024 sources read by another parser version printed 1,024 warning lines;
    past three alike, the terminal gets the first and the others counted, the report each."""
    run = copied(tmp_path, 5)
    rlperf(capsys, "ingest", str(run), "-o", str(tmp_path / "ds"), "-q")
    manifest = json.loads((tmp_path / "ds" / MANIFEST).read_text())
    for record in manifest["sources"][:stale]:
        record["parser_version"] = "0" * 16
    (tmp_path / "ds" / MANIFEST).write_text(json.dumps(manifest))
    _, out, err = rlperf(capsys, "analyze", str(tmp_path / "ds"), "-f", "json")
    lines = [line for line in err.splitlines() if "another version" in line]
    assert len(json.loads(out)["warnings"]) == stale
    names = [Path(r["path"]).name for r in manifest["sources"][:stale]]
    if stale == 3:
        assert [n for line, n in zip(lines, names, strict=True) if n in line] == names
    else:
        (line,) = lines
        assert line.endswith(
            f"(and the same for 4 more sources: {names[1]}, {names[2]}, {names[3]}, …)"
        )


def damage(root: Path, how: str) -> tuple[Path, str]:
    """Damage a dataset; the file the error must name and a word of its problem."""
    manifest = root / MANIFEST
    if how == "missing partition":
        victim = root / "events" / "rank=1" / "part-00001.parquet"
        victim.unlink()
        return victim, "missing"
    if how == "wrong rows":
        victim = root / "events" / "rank=1" / "part-00001.parquet"
        pl.read_parquet(victim).head(10).write_parquet(victim)
        return victim, "holds 10 rows where the manifest says"
    if how == "wrong rank":
        victim = root / "events" / "rank=1" / "part-00001.parquet"
        shutil.copy(root / "events" / "rank=0" / "part-00000.parquet", victim)
        return victim, "another rank than its partition's (1)"
    if how == "damaged partition":
        victim = root / "events" / "rank=0" / "part-00000.parquet"
        victim.write_bytes(victim.read_bytes()[:100])
        return victim, "damaged dataset partition"
    if how == "missing source record":
        victim = root / "sources" / "part-00000.json"
        victim.unlink()
        return victim, "missing"
    if how == "not json":
        manifest.write_text("{")
        return manifest, "not JSON"
    if how == "other version":
        data = json.loads(manifest.read_text())
        manifest.write_text(json.dumps({**data, "version": 99}))
        return manifest, "version 99"
    data = json.loads(manifest.read_text())
    del data["sources"][0]["size"]
    manifest.write_text(json.dumps(data))
    return manifest, "damaged source list"


@pytest.mark.parametrize("how", [
    "missing partition", "wrong rows", "wrong rank", "damaged partition", "missing source record",
    "not json", "other version", "record without fields",
])
def test_a_damaged_dataset_is_one_line_naming_the_file(tmp_path: Path, how: str) -> None:
    run = copied(tmp_path)
    assert cli("ingest", str(run), "-o", str(tmp_path / "ds"), "-q").returncode == 0
    victim, word = damage(tmp_path / "ds", how)
    one_line_error(cli("analyze", str(tmp_path / "ds"), "-q"), str(victim), word)


def test_ingest_does_not_overwrite_a_folder_that_is_not_a_dataset(tmp_path: Path) -> None:
    run = copied(tmp_path, 1)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    result = cli("ingest", str(run), "-o", str(tmp_path / "mine"), "-q")
    one_line_error(result, str(tmp_path / "mine"), "holds other files")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_a_dataset_is_given_alone(tmp_path: Path, multi: Path) -> None:
    result = cli("analyze", str(multi), str(MIXED), "-q")
    one_line_error(result, str(multi), "give it as the only path")


def test_ingest_again_replaces_the_dataset(tmp_path: Path, capsys) -> None:
    run = copied(tmp_path, 2)
    rlperf(capsys, "ingest", str(run), "-o", str(tmp_path / "ds"), "-q")
    sorted(run.iterdir())[1].unlink()
    assert rlperf(capsys, "ingest", str(run), "-o", str(tmp_path / "ds"), "-q")[0] == 0
    manifest = json.loads((tmp_path / "ds" / MANIFEST).read_text())
    assert len(manifest["sources"]) == 1
    assert sorted(p.name for p in (tmp_path / "ds" / "events").iterdir()) == ["rank=0"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# --- every command -----------------------------------------------------------------------------


def test_every_command_reads_a_dataset_as_its_sources(tmp_path: Path, capsys, multi) -> None:
    """analyze, compare, audit, export and crosscheck: the same output from the dataset as from
    the sources."""
    run = copied(tmp_path, 2)
    ds = tmp_path / "ds"
    assert rlperf(capsys, "ingest", str(run), "-o", str(ds), "-q")[0] == 0
    baseline = tmp_path / "base.json"
    rlperf(capsys, "analyze", str(multi), "-f", "json", "-o", str(baseline), "-q")
    for args in (
        ("analyze", "-f", "json"),
        ("audit", "--baseline", str(baseline), "--width", "1000"),  # paths differ in length
        ("crosscheck", "-f", "json"),
    ):
        from_sources = rlperf(capsys, args[0], str(run), *args[1:], "-q", "--no-cache")
        from_dataset = rlperf(capsys, args[0], str(ds), *args[1:], "-q")
        assert from_sources[0] == from_dataset[0] in (0, 1), (args, from_dataset[2])
        said = from_sources[1]
        if args[0] == "audit":  # its subject line names the inputs given
            said = said.replace(str(run), str(ds))
        assert said == from_dataset[1] and len(from_dataset[1]) > 500, args
    exported = []
    for name, path in (("a", run), ("b", ds)):
        out = tmp_path / f"{name}.json.gz"
        assert rlperf(capsys, "export", str(path), "-o", str(out), "-q")[0] == 0
        exported.append(gzip.decompress(out.read_bytes()))
    assert exported[0] == exported[1]
    status, out, _ = rlperf(capsys, "compare", str(ds), str(multi), "-f", "json", "-q")
    assert status == 0 and json.loads(out)


# --- reports byte-identical, and kept --------------------------------------------------------


@pytest.mark.parametrize("fmt", ["text", "json", "md"])
def test_reports_are_byte_identical_first_from_cache_from_dataset(
    tmp_path: Path, capsys, fmt: str
) -> None:
    run = copied(tmp_path, 2)
    ds = tmp_path / "ds"
    rlperf(capsys, "ingest", str(run), "-o", str(ds), "-q")
    outs = {}
    for name, args in (
        ("first", (str(run), "--no-cache")),
        ("fills cache", (str(run),)),
        ("from cache", (str(run),)),
        ("from dataset", (str(ds),)),
        ("kept", (str(ds),)),
    ):
        out = tmp_path / f"{name}.{fmt}"
        assert rlperf(capsys, "analyze", *args, "-f", fmt, "-o", str(out), "-q")[0] == 0
        outs[name] = out.read_bytes()
    assert len(outs["first"]) > 1000
    assert all(data == outs["first"] for data in outs.values()), [
        n for n, d in outs.items() if d != outs["first"]
    ]
    assert len(products.reports(ds)) == 1


def test_a_kept_report_is_what_the_same_analysis_writes_again(tmp_path: Path, capsys) -> None:
    """Read back, not computed: a changed kept report comes out; other options compute anew,
    and --no-cache computes anyway."""
    ds = tmp_path / "ds"
    rlperf(capsys, "ingest", str(copied(tmp_path, 2)), "-o", str(ds), "-q")
    out = tmp_path / "r.json"
    rlperf(capsys, "analyze", str(ds), "-f", "json", "-o", str(out), "-q")
    (kept,) = products.reports(ds)
    computed = out.read_bytes()
    (kept / "report").write_bytes(computed.replace(b"{\n", b"{\t", 1))
    rlperf(capsys, "analyze", str(ds), "-f", "json", "-o", str(out), "-q")
    assert out.read_bytes() == computed.replace(b"{\n", b"{\t", 1)
    rlperf(capsys, "analyze", str(ds), "-f", "json", "-o", str(out), "-q", "--no-cache")
    assert out.read_bytes() == computed
    rlperf(capsys, "analyze", str(ds), "-f", "json", "-o", str(out), "-q", "--ranks", "0")
    assert out.read_bytes() != computed and json.loads(out.read_bytes())
    assert len(products.reports(ds)) == 2


def test_a_kept_report_says_its_warnings_again(tmp_path: Path, capsys) -> None:
    ds = tmp_path / "ds"
    rlperf(capsys, "ingest", str(copied(tmp_path, 2)), "-o", str(ds), "-q")
    out = tmp_path / "r.txt"
    asked = ("analyze", str(ds), "-o", str(out), "-q", "--ranks", "0-5")
    first = rlperf(capsys, *asked)
    again = rlperf(capsys, *asked)
    assert "rlperf: warning: --ranks: ranks 2-5 are not in the run" in first[2]
    assert again[2] == first[2] and again[0] == first[0] == 0


def test_a_stale_dataset_keeps_no_report(tmp_path: Path, capsys) -> None:
    run = copied(tmp_path, 2)
    ds = tmp_path / "ds"
    rlperf(capsys, "ingest", str(run), "-o", str(ds), "-q")
    path = sorted(run.iterdir())[0]
    path.write_bytes(path.read_bytes() + b"\0")
    rlperf(capsys, "analyze", str(ds), "-f", "json", "-o", str(tmp_path / "r.json"), "-q")
    assert not (ds / products.PRODUCTS).exists()


# --- written by the parsing workers ------------------------------------------------------------


def dataset_files(root: Path) -> dict[str, object]:
    """Every file of a dataset by its path in it: tables as frames, JSON as values (kept
    reports left out)."""
    out: dict[str, object] = {}
    for f in sorted(root.rglob("*")):
        name = f.relative_to(root).as_posix()
        if f.is_dir() or name.startswith("products/"):
            continue
        out[name] = pl.read_parquet(f) if f.suffix == ".parquet" else json.loads(f.read_text())
    return out


def assert_same_dataset(got: Path, want: Path) -> None:
    """Table by table, record by record, the manifest whole: the same files holding the same
    rows (dtypes included) and the same JSON."""
    a, b = dataset_files(got), dataset_files(want)
    assert sorted(a) == sorted(b)
    for name, value in b.items():
        if isinstance(value, pl.DataFrame):
            other = a[name]
            assert isinstance(other, pl.DataFrame)
            assert other.schema == value.schema and other.equals(value), name
        else:
            assert a[name] == value, name


def with_a_copy(tmp_path: Path) -> Path:
    """The 8-rank sample plus a copy of rank 3 that sorts before it (read once: the original
    is left out, so every later source is renumbered)."""
    folder = copied(tmp_path, 8)
    shutil.copy2(folder / "rank-3.synthetic.pt.trace.json.gz",
                 folder / "rank-3.again.synthetic.pt.trace.json.gz")
    return folder


def written_at_once(run: Path, out: Path, choice: str | None = None) -> Path:
    """The dataset of ``run`` as writing the chosen run's parsed sources at once writes it."""
    from analyzer.assemble.runs import choose
    from analyzer.dataset import write_dataset

    found = ingest_module.ingest([run], use_cache=False)
    sources, chosen = choose(found.sources, choice, [run])
    ranks = sorted({int(r) for s in sources for r in s.events["rank"].unique() if r >= 0})
    formats = sorted({s.format for s in sources})
    record = {"choice": choice, "sources": len(sources), "ranks": ranks, "formats": formats}
    write_dataset(sources, out, notes=[*found.notes, *chosen], unknown=found.unknown, run=record)
    return out


def test_workers_write_the_dataset_of_the_chosen_run(tmp_path: Path, capsys) -> None:
    """``rlperf ingest`` (each source written by the worker that parsed it, copies dropped and
    sources renumbered afterwards) writes the very files that writing the chosen run's parsed
    sources at once writes."""
    run = with_a_copy(tmp_path)
    assert rlperf(capsys, "ingest", str(run), "-o", str(tmp_path / "ds"), "-q")[0] == 0
    assert_same_dataset(tmp_path / "ds", written_at_once(run, tmp_path / "want"))
    manifest = json.loads((tmp_path / "ds" / MANIFEST).read_text())
    assert len(manifest["sources"]) == 8 and manifest["run"]["ranks"] == list(range(8))
    assert [Path(r["path"]).name.split(".")[0] for r in manifest["sources"]] == [
        f"rank-{r}" for r in range(8)
    ]
    copy = json.loads((tmp_path / "ds" / "sources" / "part-00003.json").read_text())
    assert copy["index"] == 3 and "rank-3.again" in copy["path"]
    assert any("a copy of" in w for w in copy["warnings"]), copy["warnings"]
    assert pl.read_parquet(tmp_path / "ds" / "events" / "rank=7" / "part-00007.parquet")[
        "source"].unique().to_list() == [7]
    first = cli("analyze", str(run), "-f", "json", "--no-cache")
    again = cli("analyze", str(tmp_path / "ds"), "-f", "json")
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)


def test_a_run_chosen_with_run_keeps_only_its_sources(tmp_path: Path, capsys) -> None:
    """Two runs (the 8-rank traces and a verl run's traces and log): without ``--run`` nothing
    is written; with it, the other run's files are removed from the folder and the kept ones
    renumbered from 0, as writing the chosen run at once does."""
    both = tmp_path / "both"
    shutil.copytree(MULTI, both / "a")
    shutil.copytree(MIXED, both / "b")
    status, _, err = rlperf(capsys, "ingest", str(both), "-o", str(tmp_path / "ds"), "-q")
    assert status == 2 and "separate runs found" in err
    assert not (tmp_path / "ds").exists() and [p.name for p in tmp_path.iterdir()] == ["both"]
    for k in ("1", "2"):
        out = tmp_path / f"run{k}"
        assert rlperf(capsys, "ingest", str(both), "--run", k, "-o", str(out), "-q")[0] == 0
        assert_same_dataset(out, written_at_once(both, tmp_path / f"want{k}", k))
        manifest = json.loads((out / MANIFEST).read_text())
        folders = {Path(r["path"]).relative_to(both).parts[0] for r in manifest["sources"]}
        assert len(folders) == 1 and manifest["run"]["choice"] == k, folders


# --- many ranks: the process pool's path -------------------------------------------------------


def test_ranks_past_nine_keep_their_partitions_and_row_order(tmp_path: Path) -> None:
    """``rank=10`` sorts before ``rank=2`` as text: a source of ranks 1, 2, 10, 11 is read back
    in the parser's row order with the manifest's partitions in rank order."""
    from analyzer.dataset import read_manifest, read_sources, write_dataset
    from parsers import ParsedSource
    from parsers.events import conform

    ranks = [10, 2, 11, 1, 2, 10, 11, 1, 10]
    events = conform({"kind": ["kernel"] * 9, "name": list("abcdefghi"), "rank": ranks,
                      "start_ns": list(range(9, 0, -1)), "end_ns": list(range(10, 1, -1))})
    (tmp_path / "x.json").write_text("{}")
    write_dataset([ParsedSource(tmp_path / "x.json", "kineto", events=events)], tmp_path / "ds",
                  hashed=False)
    manifest = read_manifest(tmp_path / "ds")
    assert manifest["sources"][0]["events"] == {"1": 2, "2": 2, "10": 3, "11": 2}
    (back,) = read_sources(tmp_path / "ds", manifest)
    assert back.events.equals(events) and back.events["name"].to_list() == list("abcdefghi")


@pytest.fixture(scope="module")
def twelve(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated 12-rank disaggregated run (ranks 10 and 11 sort between 1 and 2 by name)."""
    from sample_traces.synth import generate, preset

    run = tmp_path_factory.mktemp("twelve") / "run"
    generate(preset("disaggregated", 12, steps=1, seed=1), run, jobs=1)
    return run


def test_a_run_of_twelve_ranks_written_by_pool_workers_reports_as_its_files(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, twelve: Path
) -> None:
    """The process pool's path (every source parsed and written by a worker process, as a
    run of more than ``PARALLEL_MIN_BYTES`` is): the dataset, the per-file cache it fills and
    the cache read back each give the report the files give, every key included."""
    from analyzer.engines import local

    pools: list[int] = []

    class Pool(local.ProcessPoolExecutor):
        def __init__(self, *args, **kwargs) -> None:
            pools.append(kwargs["max_workers"])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(local, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(local, "ProcessPoolExecutor", Pool)
    ds = tmp_path / "ds"
    assert rlperf(capsys, "ingest", str(twelve), "-o", str(ds), "-q", "--jobs", "2")[0] == 0
    manifest = json.loads((ds / MANIFEST).read_text())
    assert manifest["run"]["ranks"] == list(range(12))
    assert [Path(r["path"]).name for r in manifest["sources"]] == sorted(
        p.name for p in twelve.glob("rank-*"))
    assert len(list(cache_dir("parsed").iterdir())) >= 12
    reports = {}
    for name, args in (("files", (str(twelve), "--no-cache")), ("cache", (str(twelve),)),
                       ("dataset", (str(ds), "--no-cache"))):
        out = tmp_path / f"{name}.json"
        status, _, err = rlperf(capsys, "analyze", *args, "-f", "json", "-o", str(out), "-q",
                                "--jobs", "2")
        assert status == 0, err
        reports[name] = json.loads(out.read_text())
    assert len(reports["files"]["sources"]) == 12 and pools == [2, 2]  # ingest, --no-cache
    assert reports["cache"] == reports["files"]
    assert reports["dataset"] == reports["files"]


REVERSED_CODES = """
import sys
from pathlib import Path
import pyarrow.parquet as pq
import polars as pl
words = set()
for f in Path(sys.argv[1]).glob("events/rank=*/*.parquet"):
    for column in pq.read_table(f, columns=["host", "name", "pg", "pg_desc"]).columns:
        words.update(w for w in column.to_pylist() if w is not None)
interned = pl.Series(sorted(words, reverse=True), dtype=pl.Categorical)
sys.argv = ["rlperf", *sys.argv[2:]]
from analyzer.cli import main
main()
"""
"""A fresh interpreter whose categorical codes run against the strings' order (polars' codes are
global, in the order strings are first seen: a pool's results arrive as workers finish)."""


def test_a_report_does_not_depend_on_the_order_names_got_their_codes(
    tmp_path: Path, capsys, multi: Path
) -> None:
    """The dataset read with every name's categorical code in reverse order of the names gives
    the report its files give, every key included."""
    import subprocess

    files, again = tmp_path / "files.json", tmp_path / "again.json"
    args = ("-f", "json", "--no-cache", "-q")
    assert rlperf(capsys, "analyze", str(MULTI), *args, "-o", str(files))[0] == 0
    done = subprocess.run(
        [sys.executable, "-c", REVERSED_CODES, str(multi), "analyze", str(multi), *args, "-o",
         str(again)], capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    first, second = json.loads(files.read_text()), json.loads(again.read_text())
    assert first["sources"] and second == first


RL_INSIGHT = REPO.parent / "shared" / "corpus" / "rl-insight"
"""Real verl profiler folders of two roles (a rollout replica and the actor), joined into one
run by their roles: the run's choice says so in a note."""


def test_a_note_is_said_once_from_a_dataset_and_from_its_copy(tmp_path: Path, capsys) -> None:
    """The roles note was said twice from the dataset (its manifest keeps it and choosing the
    run says it again), and each copy of the dataset kept one more."""
    direct = [n for n in analyzer.load([RL_INSIGHT]).notes if "profiling windows" in n]
    assert len(direct) == 1
    assert "Tied by their role file-name prefixes in one profiler folder" in direct[0]
    first, copy = tmp_path / "ds", tmp_path / "copy"
    assert rlperf(capsys, "ingest", str(RL_INSIGHT), "-o", str(first), "-q")[0] == 0
    assert rlperf(capsys, "ingest", str(first), "-o", str(copy), "-q")[0] == 0
    for ds in (first, copy):
        assert json.loads((ds / MANIFEST).read_text())["notes"].count(direct[0]) == 1, ds
        assert analyzer.load([ds]).notes.count(direct[0]) == 1, ds


def test_ingest_strict_judges_the_sources_and_analyze_strict_the_run(
    tmp_path: Path, capsys
) -> None:
    """rl-insight's log-prob trace of rank 0 parses without a warning; its run's assembly
    warns that distributedInfo's world size (2) is not its default group's (4 ranks): ingest
    --strict writes the dataset, analyze --strict of it refuses (docs/errors.md, --strict)."""
    trace = RL_INSIGHT / "actor_compute_log_prob__prof_rank-0_031847.json.gz"
    ds = tmp_path / "ds"
    status, _, err = rlperf(capsys, "ingest", str(trace), "-o", str(ds), "-q", "--strict")
    assert (status, err) == (0, f"rlperf: wrote the dataset of 1 source (rank 0) to {ds}\n")
    status, _, err = rlperf(capsys, "analyze", str(ds), "-q", "--strict")
    assert status == 2
    assert err.startswith("rlperf: error: --strict: warning treated as an error: ")
    assert "world_size 2, default group 'default_pg' has 4 ranks (0,1,2,3)" in err
