"""Follow-ups of issue 10: every stderr line escaped, atomic chart and trace writes, bounded
selections, no NaN or infinity and no share over 100% in any report, deterministic reports,
Markdown documents never taken for logs."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import pytest
from report_truth import union_ns

from parsers.errors import _UNPRINTABLE, InputError

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
SAMPLE = ROOT / "sample_traces" / "runs" / "verl_ppo_colocated_nsys"
RAW = {chr(c) for c in _UNPRINTABLE if c != 0x0A}
"""Characters no stderr line may hold unescaped (a newline only ends a line)."""


def rlperf(*args: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """``rlperf ARGS`` in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", "from analyzer.cli import main; main()", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env={**os.environ, "RLPERF_NO_CACHE": "1", "COLUMNS": "200"},
    )


def assert_escaped(stderr: str) -> list[str]:
    """Each stderr line free of raw control and bidi characters; returns the lines."""
    lines = stderr.rstrip("\n").split("\n")
    for line in lines:
        assert not RAW & set(line), repr(line)
    return lines


# --- 1. every stderr line of the CLI through printable() ---------------------------------------

RULES_NAME = "rules\n\x1b[31mred\u202e.toml"


@pytest.fixture
def bad_rules(tmp_path: Path) -> Path:
    """A user rules file with a newline, an ANSI escape and a bidi override in its name, and a
    rule that misses its relation (a ProfileError)."""
    path = tmp_path / RULES_NAME
    path.write_text('[[rules]]\nmatch = "a"\nstage = "rollout"\n')
    return path


def test_a_profile_error_is_one_escaped_line(bad_rules: Path):
    done = rlperf("taxonomy", "--rules", str(bad_rules))
    assert done.returncode == 2
    lines = assert_escaped(done.stderr)
    assert lines == [
        f"rlperf: error: {bad_rules.parent}/rules\\n\\x1b[31mred\\u202e.toml: "
        "rule 1: 'relation' is required"
    ]


def test_the_debug_traceback_is_escaped_too(bad_rules: Path):
    done = rlperf("taxonomy", "--rules", str(bad_rules), "--debug")
    assert done.returncode == 2
    lines = assert_escaped(done.stderr)
    assert lines[0].startswith("Traceback") and lines[-1].startswith("rlperf: error: ")
    assert lines[-2] == lines[-1].replace("rlperf: error: ", "taxonomy.profiles.ProfileError: ")


def test_failures_read_from_a_json_report_are_escaped(tmp_path: Path):
    report = tmp_path / "report.json"
    done = rlperf("analyze", str(SAMPLE), "-f", "json", "-o", str(report), "-q")
    assert done.returncode == 0, done.stderr
    document = json.loads(report.read_text())
    document["failures"] = [{"failed": "section \x1b[2Jbubbles", "module": "analyzer.x\u2066",
                             "error": "KeyError: 'a\nb'"}]
    report.write_text(json.dumps(document))
    budget = tmp_path / "budget.toml"
    budget.write_text('[[check]]\nmetric = "overview.step_time_ns"\nmax = 1e30\n')
    done = rlperf("audit", str(report), "--budget", str(budget))
    assert done.returncode == 3
    lines = assert_escaped(done.stderr)
    assert lines == [
        "rlperf: internal error in section \\x1b[2Jbubbles (analyzer.x\\u2066): KeyError: 'a\\nb'; "
        "rerun with --debug for the traceback"
    ]


def test_a_usage_error_keeps_clicks_text_and_status_with_the_name_escaped():
    done = rlperf("analyze", "--no-such\u202eoption")
    assert done.returncode == 2
    lines = assert_escaped(done.stderr)
    assert lines[0].startswith("Usage: ") and " analyze [OPTIONS]" in lines[0]
    assert lines[-1] == "Error: No such option: --no-such\\u202eoption"
    assert rlperf("--help").returncode == 0
    assert rlperf().returncode == 2


# --- 2. charts and Perfetto traces written atomically ------------------------------------------


@contextmanager
def file_size_cap(limit: int) -> Iterator[None]:
    """Writes past ``limit`` bytes fail with EFBIG, as on a full disk (RLIMIT_FSIZE)."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


@pytest.fixture(scope="module")
def sample_run():
    import analyzer

    return analyzer.load([SAMPLE], use_cache=False)


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz"])
def test_a_failed_trace_export_leaves_the_old_file_and_nothing_else(
    sample_run, tmp_path: Path, name: str
):
    from analyzer.ops.perfetto import export

    target = tmp_path / name
    target.write_bytes(b"the last good export")
    with file_size_cap(512), pytest.raises(InputError) as failed:
        export(sample_run, target)
    assert str(failed.value) == f"{target}: cannot write: File too large"
    assert target.read_bytes() == b"the last good export"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_failed_chart_write_leaves_no_half_png(sample_run, tmp_path: Path):
    from analyzer.report import png

    folder = tmp_path / "charts"
    with file_size_cap(1024), pytest.raises(InputError) as failed:
        png.render(sample_run, folder / "report.png")
    assert str(failed.value) == f"{folder}/report-timeline.png: cannot write: File too large"
    assert list(folder.iterdir()) == []


def test_a_gzipped_export_still_names_its_trace_and_reads_back(tmp_path: Path):
    import gzip

    target = tmp_path / "trace.json.gz"
    assert rlperf("export", str(SAMPLE), "--perfetto", str(target), "-q").returncode == 0
    raw = target.read_bytes()
    assert raw[3] & 0x08 and raw[10:20] == b"trace.json"
    assert json.loads(gzip.decompress(raw))["traceName"] == "rlperf export"


# --- 3. selections as ranges -------------------------------------------------------------------


def test_a_selection_is_ranges_merged_and_sorted():
    from analyzer.model.options import parse_selection

    merged = parse_selection("8, 1-3 ,2..5,7,-2--1,0")
    assert merged.spans == ((-2, 5), (7, 8)) and str(merged) == "-2-5,7-8"
    assert (4 in merged, 6 in merged, 9 in merged) == (True, False, False)
    assert merged.within([6, 0, 8, 9, 8]) == [0, 8]
    assert merged.without([0, 7, 8, 9]).spans == ((-2, -1), (1, 5))
    assert parse_selection("5-2").spans == ((2, 5),) and merged.count() == 10
    with pytest.raises(ValueError, match="bad selection"):
        parse_selection("1" * 40)


def test_a_selection_filters_a_frame_even_past_int64():
    import polars as pl

    from analyzer.model.options import parse_selection

    frame = pl.DataFrame({"step": [-3, 0, 2, 6, 2**31 - 1]}, schema={"step": pl.Int32})
    pick = parse_selection("-99999999999999999999-0,2,6-99999999999999999999")
    assert frame.filter(pick.expr("step"))["step"].to_list() == [-3, 0, 2, 6, 2**31 - 1]
    assert frame.filter(parse_selection("1-5").expr("step"))["step"].to_list() == [2]


@pytest.mark.parametrize(
    ("option", "value", "warning"),
    [
        (
            "--steps",
            "0-10000000000",
            "--steps: steps 0,4-10000000000 are not in the "
            "run (the run has steps 1-3); analysing steps 1-3",
        ),
        (
            "--ranks",
            "0-99999999999",
            "--ranks: ranks 2-99999999999 are not in the "
            "run (the run has ranks 0-1); analysing ranks 0-1",
        ),
    ],
)
def test_a_huge_selection_runs_in_bounded_memory(
    tmp_path: Path, option: str, value: str, warning: str
):
    """Under a 2 GiB address-space limit (a list of every number took all memory)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))

    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from analyzer.cli import main; main()",
            "analyze",
            str(SAMPLE),
            option,
            value,
            "-f",
            "json",
            "-o",
            str(report),
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        preexec_fn=cap,
        env={**os.environ, "RLPERF_NO_CACHE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[1:] == [f"rlperf: warning: {warning}"]
    assert warning in json.loads(report.read_text())["warnings"]


# --- 4. no NaN or infinity from a zero denominator ---------------------------------------------


def test_ratio_over_a_zero_denominator_is_no_value():
    import polars as pl

    from analyzer.analyses.guideline_evidence import ratio

    whole = pl.DataFrame({"step": [1, 2, 3, 4], "den": [4.0, 0.0, 0.0, -1.0]})
    part = pl.DataFrame({"step": [1, 2, 3, 4], "num": [1.0, 0.0, 5.0, 1.0]})
    assert ratio(whole, part)["value"].to_list() == [0.25, None, None, None]


def test_run_value_leaves_out_non_finite_values_and_zero_shares():
    import polars as pl

    from analyzer.analyses.guideline_evidence import run_value
    from taxonomy.guidelines import Check

    frame = pl.DataFrame({"value": [0.5, float("nan"), float("inf"), None, 0.25],
                          "num": [1.0, 0.0, 5.0, 0.0, 1.0], "den": [2.0, 0.0, 0.0, 0.0, 4.0]})
    check = Check(
        metric="m",
        formula="",
        unit="fraction",
        direction="above",
        thresholds={"warn": 0.1},
        heuristic=False,
        aggregate="mean",
        evaluated_from=("trace",),
        needs="",
    )

    def value(aggregate: str, of: pl.DataFrame = frame) -> float | None:
        return run_value(of, dataclasses.replace(check, aggregate=aggregate))

    assert [value(a) for a in ("mean", "median", "max", "last")] == [0.375, 0.375, 0.5, 0.25]
    assert value("share") == 2 / 6
    assert value("share", frame.with_columns(pl.lit(0.0).alias("den"))) is None
    assert value("max", frame.filter(pl.col("den") == 0)) is None


def test_a_zero_length_step_gives_no_infinite_weight_sync_share():
    import polars as pl
    from test_guidelines import MS, make_run, row, steps

    from analyzer.model import frames

    sync = pl.DataFrame(
        [(1, 6 * MS, 0, None, None), (2, 3 * MS, 0, None, None)],
        schema=frames.WEIGHT_SYNC,
        orient="row",
    )
    got = row(make_run(steps=steps((0, 100), (100, 100)), weight_sync=sync), "G5")
    assert (got["status"], got["value"], got["step"]) == ("violated", 0.06, 1)
    only_empty = make_run(steps=steps((100, 100)), weight_sync=sync.filter(pl.col("step") == 1))
    got = row(only_empty, "G5")
    assert (got["status"], got["value"]) == ("not_evaluated", None)
    assert "a step where it can be measured" in got["evidence"]


# --- 6. documents are not logs -----------------------------------------------------------------

LOGS: dict[str, str] = {
    "tests/fixtures/logs/areal_stats.log": "areal-log",
    "tests/fixtures/logs/deepspeed_chat_now.log": "deepspeed-chat-log",
    "tests/fixtures/logs/nemo_rl_grpo_async.log": "nemo-rl-log",
    "tests/fixtures/logs/nemo_rl_grpo_sync.log": "nemo-rl-log",
    "tests/fixtures/logs/openrlhf_async.log": "openrlhf-log",
    "tests/fixtures/logs/openrlhf_v0.10_sync.log": "openrlhf-log",
    "tests/fixtures/logs/openrlhf_v0.5_episode.log": "openrlhf-log",
    "tests/fixtures/logs/roll_rlvr.log": "roll-log",
    "tests/fixtures/logs/slime_perf.log": "slime-log",
    "tests/fixtures/logs/trl_grpo_console.log": "trl-log",
    "tests/fixtures/logs/trl_grpo_trainer_state.json": "trl-log",
    "sample_traces/runs/openrlhf_ppo_disaggregated/logs/openrlhf.log": "openrlhf-log",
    "sample_traces/runs/trl_grpo/logs/torchrun.log": "trl-log",
    "sample_traces/runs/trl_grpo/logs/trainer_state.json": "trl-log",
    "sample_traces/runs/verl_grpo_colocated/logs/verl_console.log": "verl-log",
    "sample_traces/runs/verl_grpo_one_step_off/logs/verl_console.log": "verl-log",
    "sample_traces/runs/verl_ppo_colocated_nsys/logs/verl_console.log": "verl-log",
    "sample_traces/runs/verl_ppo_multiprocess_nsys/logs/verl_console.log": "verl-log",
    "sample_traces/runs/verl_ppo_disaggregated/logs/verl_console.log": "verl-log",
    "../shared/corpus/VERL-Maze/verl_demo.log": "verl-log",
    "../shared/corpus/logs/deepspeed-chat/"
    "step3_actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log": "deepspeed-chat-log",
    "../shared/corpus/logs/verl/dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log": "verl-log",
    "../shared/corpus/logs/verl-tpu/chrisytz-verl_ppo_xla-tpu_verl_demo.log": "verl-log",
}
"""Every framework log of the fixtures, the samples and the corpus, with the format it is read
as."""


def log_files() -> list[Path]:
    roots = [
        ROOT / "tests" / "fixtures",
        ROOT / "sample_traces",
        CORPUS / "logs",
        CORPUS / "VERL-Maze",
    ]
    return sorted(
        p for r in roots for p in r.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )


def test_every_real_log_is_still_read_as_its_framework():
    from parsers import sniff

    found = {}
    for path in log_files():
        fmt = sniff(path)
        if fmt and fmt.endswith("-log") and path.name != "truth.json":
            found[os.path.relpath(path, ROOT)] = fmt
    assert found == LOGS


@pytest.mark.parametrize(
    "name", ["docs/logs.md", "docs/samples.md", "docs/analyses.md", "README.md"]
)
def test_a_markdown_document_quoting_log_lines_is_no_log(name: str, tmp_path: Path):
    from parsers import sniff
    from parsers.discover import parser_modules, read_head

    path = ROOT / name
    head = read_head(path)
    assert [
        m.FORMAT for m in parser_modules() if m.FORMAT.endswith("-log") and m.sniff(head, path)
    ] == []
    assert sniff(path) is None
    renamed = tmp_path / "notes.txt"
    renamed.write_bytes(path.read_bytes())
    assert sniff(renamed) is None


def test_the_corpus_notes_are_no_logs():
    from parsers import sniff

    notes = sorted(
        p for p in CORPUS.rglob("*") if p.is_file() and p.suffix.lower() in (".md", ".txt", "")
    )
    assert len(notes) >= 10
    assert {str(p.relative_to(CORPUS)): sniff(p) for p in notes if sniff(p)} == {}


def test_only_a_document_opening_with_a_heading_and_more_markup_is_refused():
    from parsers.logs.lines import is_document

    log = Path("run.log")
    assert is_document(b"# Run notes\n\nsome text\n\n```\nstep:1 - a:1\n```\n", log)
    assert is_document(b"---\ntitle: x\n---\n## Steps\n```\nstep:1 - a:1\n```\n", log)
    assert is_document(b"print('step:1 - a:1')\n", Path("harness/logs.py"))
    assert is_document(b"step:1 - a:1\n", Path("PROVENANCE.md"))
    assert not is_document(b"# config comment\nstep:1 - actor/loss:0.1\n", log)
    assert not is_document(
        b"step:1 - completions: ```python\n# a heading in a completion\n```\n", log
    )
    assert not is_document(b"step:1 - a:1\n## not first\n```\n", log)


# --- 7. an annotation's share is of the wall time it covers ------------------------------------

HTA_RANK34 = CORPUS / "HolisticTraceAnalysis" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def test_overlapping_top_level_annotations_on_two_threads_count_once():
    from analyzer.analyses.annotations import compute
    from parsers.events import conform

    rows = [  # (tid, name, start, end)
        (1, "sync", 0, 60), (2, "sync", 40, 100), (1, "inner", 10, 20),
        (1, "load", 100, 110), (2, "load", 100, 110), (3, "io", 150, 200),
    ]
    events = conform({
        "tid": [r[0] for r in rows], "name": [r[1] for r in rows], "start_ns": [r[2] for r in rows],
        "end_ns": [r[3] for r in rows], "kind": ["annotation"] * len(rows),
    }, source=0, rank=0, pid=7)
    got = compute(events).select("name", "count", "time_ns", "share").rows()
    assert got == [("sync", 2, 100, 0.5), ("io", 1, 50, 0.25), ("load", 2, 10, 0.05)]


def test_the_hta_trace_annotation_share_is_its_union_over_the_window():
    import gzip
    from decimal import Decimal

    import polars as pl

    import analyzer

    trace = json.loads(gzip.decompress(HTA_RANK34.read_bytes()), parse_float=Decimal)
    spans = [(int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)) for e in trace["traceEvents"]
             if e.get("name") == "gloo:all_reduce" and e.get("cat") == "user_annotation"]
    assert len(spans) == 10
    run = analyzer.load([HTA_RANK34], use_cache=False)
    (row,) = run.annotations.filter(pl.col("name") == "gloo:all_reduce").rows(named=True)
    window = int(run.events["end_ns"].max() - run.events["start_ns"].min())
    assert row["count"] == 10
    assert row["time_ns"] == union_ns(spans) == 1_102_980_645
    assert sum(b - a for a, b in spans) == 2_135_455_918
    assert row["share"] == row["time_ns"] / window and 0.85 < row["share"] < 0.87


# --- 4, 5 and 7 over every report: bounded numbers, the same report whatever the file order ------

SAMPLES = sorted(
    p
    for base in ("runs", "synthetic")
    for p in (ROOT / "sample_traces" / base).iterdir()
    if p.is_dir()
)
BOUNDED = re.compile(r"(?:share|fraction)$")


def _no_constant(token: str) -> float:
    raise AssertionError(f"{token} in a JSON report")


def assert_bounded(text: str) -> dict:
    """A JSON report without NaN or Infinity, whose every ``…share`` / ``…fraction`` number lies
    in [0, 1]; returns the report."""
    report = json.loads(text, parse_constant=_no_constant)
    outside = []

    def walk(value: object, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                number = isinstance(item, (int, float)) and not isinstance(item, bool)
                if BOUNDED.search(str(key)) and number and not 0 <= item <= 1:
                    outside.append(f"{where}.{key} = {item}")
                walk(item, f"{where}.{key}")
        elif isinstance(value, list):
            for item in value:
                walk(item, f"{where}[]")

    walk(report, "")
    assert outside == []
    return report


def analyse(files: list[str], seed: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from analyzer.cli import main; main()",
            "analyze",
            *files,
            "-f",
            "json",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "RLPERF_NO_CACHE": "1", "PYTHONHASHSEED": str(seed)},
    )


@cache
def sample_reports() -> dict[Path, list[subprocess.CompletedProcess]]:
    """Each sample's files analysed in name order, again under another hash seed, and in
    reverse order (fresh interpreters: set and dict orders differ between them)."""

    def three(sample: Path) -> list[subprocess.CompletedProcess]:
        files = sorted(os.path.relpath(p, ROOT) for p in sample.rglob("*")
                       if p.is_file() and p.suffix != ".md" and p.name != "truth.json")
        assert len(files) >= 2
        return [analyse(files, 1), analyse(files, 2), analyse(files[::-1], 3)]

    with ThreadPoolExecutor(3) as pool:
        return dict(zip(SAMPLES, pool.map(three, SAMPLES), strict=True))


def test_quality_details_are_listed_by_source_and_rank():
    import polars as pl

    from analyzer.analyses.quality import _details

    facts = pl.DataFrame({"source": [1, 0, 1, 1], "rank": [10, 3, 2, None]})
    got = _details(facts, lambda r: f"rank {r['rank']}").sort("source").rows()
    assert got == [(0, 1, "rank 3"), (1, 3, "rank None; rank 2; rank 10")]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_sample_report_is_the_same_twice_and_whatever_the_file_order(sample: Path):
    first, again, backwards = sample_reports()[sample]
    assert first.returncode == 0, first.stderr
    assert again.stdout == first.stdout
    assert backwards.stdout == first.stdout


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_sample_report_holds_nan_or_a_share_outside_0_1(sample: Path):
    report = assert_bounded(sample_reports()[sample][0].stdout)
    assert report["schema"].startswith("rlperf-report/")
