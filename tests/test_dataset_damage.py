"""A dataset whose sources moved or changed, or whose files were edited by hand, and inputs whose
runs or bytes are not what their names say: each states what is wrong in one line (or compares
like with like) instead of a false difference, a scratch path or a silent number."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest
from report_truth import cli

from analyzer.commands.compare import load_input
from analyzer.dataset import read_manifest, read_sources, write_dataset
from analyzer.progress import Steps
from parsers import InputError, parse_file

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
HTA = CORPUS / "HolisticTraceAnalysis"
PAIR = ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz")
SEVERAL = ("event_sync_trace.json.gz", "inference_rank_1.json.gz", *PAIR,
           "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
"""Four runs by their time windows: inference_rank_1, the sampled pair, event_sync_trace, mi250."""
DAMAGED = "the dataset is damaged (run rlperf ingest again)"


def copied(folder: Path, names: tuple[str, ...]) -> Path:
    folder.mkdir()
    for name in names:
        shutil.copyfile(HTA / name, folder / name)
    return folder


def ingested(tmp_path: Path) -> Path:
    """The sampled pair copied to ``run/`` and ingested, as given relatively, into ``ds``."""
    copied(tmp_path / "run", PAIR)
    done = cli("ingest", "run", "-o", "ds", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return tmp_path / "ds"


def crosscheck(cwd: Path, *args: str):
    return cli("crosscheck", "ds", "--format", "json", "--quiet", *args, cwd=cwd,
               env={"HTA_DISABLE_NS_ROUNDING": "0"})


# --- crosscheck: the two sides read the same contents -------------------------------------------


def test_crosscheck_leaves_out_a_source_changed_since_ingest(tmp_path):
    """Was: rlperf read the ingested tables, HTA the halved file, every rank-0 metric DIFFERS
    (GPU window 1.23 s against 571 µs)."""
    ingested(tmp_path)
    trace = tmp_path / "run" / PAIR[0]
    document = json.loads(gzip.decompress(trace.read_bytes()))
    document["traceEvents"] = document["traceEvents"][: len(document["traceEvents"]) // 2]
    trace.write_bytes(gzip.compress(json.dumps(document).encode()))
    done = crosscheck(tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    line = (f"{PAIR[0]} changed since it was ingested into ds: not cross-checked (HTA would read "
            "the file as it is now, rlperf the tables of then); run rlperf ingest again")
    assert result["problems"] == [line]
    assert f"rlperf: warning: {line}\n" in done.stderr
    assert {row["rank"] for row in result["metrics"]} == {1}
    assert [row["verdict"] for row in result["metrics"]] == ["agree"] * 5
    window = next(r for r in result["metrics"] if r["metric"] == "window_us")
    assert window["rlperf"] == pytest.approx(window["hta"], rel=1e-9)
    assert window["hta"] == pytest.approx(1.23e6, rel=0.01)
    strict = crosscheck(tmp_path, "--strict")
    assert strict.returncode == 2
    assert strict.stderr.startswith("rlperf: error: --strict: warning treated as an error: ")


def test_crosscheck_names_a_source_no_longer_there(tmp_path):
    """Was: ``HTA could not analyse it (FileNotFoundError: … '/tmp/rlperf-hta-…/x.json.gz')``."""
    ingested(tmp_path)
    (tmp_path / "run").rename(tmp_path / "moved")
    done = crosscheck(tmp_path)
    where = (tmp_path / "run").resolve()
    lines = [f"{name} (a source of ds) is no longer at {where / name}: not cross-checked"
             for name in PAIR]
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == (  # was exit 0 with an empty table: nothing checked, nothing said
        f"rlperf: error: crosscheck: {lines[0].removesuffix(': not cross-checked')} (and 1 other "
        "trace alike): nothing is left to cross-check (HTA reads the trace files themselves)\n"
    )
    assert "rlperf-hta-" not in done.stdout + done.stderr
    assert "Error" not in done.stdout + done.stderr
    strict = crosscheck(tmp_path, "--strict")
    assert strict.returncode == 2
    assert strict.stderr == (f"rlperf: error: --strict: warning treated as an error: {lines[0]} "
                             "(2 sources not cross-checked)\n")


# --- compare --run: per input of several runs ---------------------------------------------------


@pytest.fixture(scope="module")
def several(tmp_path_factory) -> Path:
    return copied(tmp_path_factory.mktemp("runs") / "several", SEVERAL)


def names(path: Path, choice: str | None) -> list[str]:
    run = load_input(path, Steps(quiet=True), choice, jobs=1)
    return sorted(s.path.name for s in run.sources)


def test_compare_run_chooses_only_where_an_input_holds_several(several):
    """Was: ``--run 4`` refused the one-run input (``no run 4 (the input holds 1: 1-1)``)."""
    single = several / "event_sync_trace.json.gz"
    assert names(single, "4") == ["event_sync_trace.json.gz"]
    assert names(single, str(several / "mi250")) == ["event_sync_trace.json.gz"]
    assert names(several, "4") == ["mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
    assert names(several, "2") == list(PAIR)  # several runs each: --run chooses in each
    done = cli("compare", str(single), str(several), "--run", "4", "--format", "json", "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["runs"] == ["event_sync_trace.json.gz", "several"]


def test_compare_run_an_input_lacks_names_that_input(several):
    done = cli("compare", str(several / PAIR[0]), str(several), "--run", "5", "--quiet")
    assert done.returncode == 2
    assert done.stderr == (
        f"rlperf: error: {several}: holds 4 runs (1-4), none of them --run 5: choose one of "
        "them with --run (its number as rlperf analyze lists them, or a path or file-name "
        "prefix of its files)\n"
    )


# --- a hand-edited dataset ----------------------------------------------------------------------


@pytest.fixture
def pair(tmp_path) -> Path:
    """The sampled pair written as a dataset in process (no CLI: the reader is under test)."""
    sources = [parse_file(HTA / name, "kineto", source=i) for i, name in enumerate(PAIR)]
    root = tmp_path / "ds"
    write_dataset(sources, root)
    return root


def edited(root: Path, change) -> None:
    manifest = json.loads((root / "manifest.json").read_text())
    change(manifest)
    (root / "manifest.json").write_text(json.dumps(manifest))


def damage(root: Path) -> str:
    with pytest.raises(InputError) as caught:
        read_sources(root, read_manifest(root))
    return str(caught.value)


def test_an_edited_format_is_named(pair):
    """Was: 'ingested by another version of the nsys-sqlite parser' and dp_imbalance 13.1% ->
    12.2%."""
    edited(pair, lambda m: m["sources"][0].update(format="nsys-sqlite"))
    said = (f"{pair / 'manifest.json'}: says {PAIR[0]} is nsys-sqlite, but its tables were "
            "written by the kineto parser: the manifest is damaged (run rlperf ingest again)")
    assert damage(pair) == said
    record = pair / "sources" / "part-00000.json"  # the source's own record edited too
    record.write_text(record.read_text().replace('"format": "kineto"', '"format": "nsys-sqlite"'))
    assert '"nsys-sqlite"' in record.read_text()
    assert damage(pair) == said  # its parser version is still the kineto parser's
    done = cli("analyze", str(pair), "--quiet")
    assert (done.returncode, done.stderr) == (2, f"rlperf: error: {said}\n")


def test_a_format_rlperf_does_not_read_is_named(pair):
    edited(pair, lambda m: m["sources"][1].update(format="bogus"))
    assert damage(pair) == (f"{pair / 'manifest.json'}: says {PAIR[1]} is 'bogus', not a format "
                            "rlperf reads: the manifest is damaged (run rlperf ingest again)")


def test_a_partition_no_record_lists_is_damage(pair):
    """Was: the last record deleted from the manifest gave a one-rank report in silence."""
    edited(pair, lambda m: m["sources"].pop())
    assert damage(pair) == (f"{pair / 'events' / 'rank=1' / 'part-00001.parquet'}: is a "
                            f"partition no source of the manifest lists: {DAMAGED}")
    for part in ("events/rank=1/part-00001.parquet", "metrics/part-00001.parquet"):
        os.unlink(pair / part)
    assert damage(pair) == (f"{pair / 'sources' / 'part-00001.json'}: is a partition no source "
                            f"of the manifest lists: {DAMAGED}")
    os.unlink(pair / "sources" / "part-00001.json")
    (only,) = read_sources(pair, read_manifest(pair))
    assert only.events.height == 4810


def test_a_partition_of_another_dtype_is_damage(pair):
    """Was: an internal error (exit 3) in parsers.events when the partitions were stacked."""
    part = pair / "events" / "rank=0" / "part-00000.parquet"
    table = pl.read_parquet(part)
    table.with_columns(pl.col("end_ns").cast(pl.Float64)).write_parquet(part)
    assert damage(pair) == (f"{part}: has column 'end_ns' as Float64 where the event table has "
                            f"Int64: {DAMAGED}")


def test_values_are_not_checked(pair):
    """docs/dataset.md: partitions are checked by row count, schema and rank, not by value."""
    part = pair / "events" / "rank=0" / "part-00000.parquet"
    before = read_sources(pair, read_manifest(pair))[0].events["end_ns"].sum()
    table = pl.read_parquet(part)
    table.with_columns(pl.col("end_ns") * 2).write_parquet(part)
    after = read_sources(pair, read_manifest(pair))[0].events["end_ns"].sum()
    assert after == 2 * before


# --- a name that promises gzip ------------------------------------------------------------------


def test_random_bytes_named_gz_are_not_gzip(tmp_path):
    """Was: 'not JSON (does not start with '{')' for a file that is not gzip either."""
    fake = tmp_path / "fake.json.gz"
    fake.write_bytes(bytes(range(7, 256)) * 20)
    done = cli("analyze", str(fake), "--quiet")
    assert (done.returncode, done.stderr) == (
        2, f"rlperf: error: {fake}: not gzip data (the name ends .gz), nor JSON\n"
    )
    plain = tmp_path / "plain.json.gz"  # plain JSON misnamed .gz is read as before
    plain.write_bytes(gzip.decompress((HTA / "event_sync_trace.json.gz").read_bytes()))
    assert parse_file(plain, "kineto").events.height == parse_file(
        HTA / "event_sync_trace.json.gz", "kineto"
    ).events.height
