"""The data-quality section (analyzer/analyses/quality.py), CPU-only captures, and steps a trace
does not cover (cut files, unclosed steps).

Traces are built here event by event, so every count is known: the checks must find exactly the
negative-duration kernels, overlapping kernels, crossing ranges, disordered and duplicated rows
planted in them, a cut file must lose the step its cut falls in (and no other), and the section
must appear, early, in the text, JSON, Markdown and HTML reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from rich.console import Console

import analyzer
from analyzer.analyses.quality import TOTAL, parser_title
from analyzer.assemble import build
from analyzer.classify.steps import incomplete_steps
from analyzer.model import frames
from analyzer.model.run import Run
from analyzer.report import html, markdown, text
from analyzer.report import json as json_report
from analyzer.report.sections import sections
from parsers import ParsedSource
from parsers.events import conform

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
CPU_ONLY = CORPUS / "HolisticTraceAnalysis" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
SAMPLE = REPO / "sample_traces" / "runs" / "verl_grpo_colocated"
BASE_NS = 1_700_000_000_000_000_000
STEP_US = 1_000


def x(
    cat: str, name: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1, **args: Any
) -> dict[str, Any]:
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return {**event, "args": args} if args else event


def step_events(step: int, corr: int) -> list[dict[str, Any]]:
    """One clean step: the step range, an operator, two launches and their kernels on stream 7."""
    t = (step - 1) * STEP_US
    return [
        x("user_annotation", f"ProfilerStep#{step}", t, STEP_US - 10),
        x("cpu_op", "aten::mm", t + 10, 100),
        x("cuda_runtime", "cudaLaunchKernel", t + 20, 5, correlation=corr),
        x("cuda_runtime", "cudaLaunchKernel", t + 40, 5, correlation=corr + 1),
        x(
            "kernel",
            f"gemm_{step}",
            t + 30,
            200,
            pid=0,
            tid=7,
            correlation=corr,
            stream=7,
            device=0,
        ),
        x(
            "kernel",
            f"gemm_{step}",
            t + 240,
            300,
            pid=0,
            tid=7,
            correlation=corr + 1,
            stream=7,
            device=0,
        ),
    ]


def clean_events(steps: int = 3) -> list[dict[str, Any]]:
    return [e for s in range(1, steps + 1) for e in step_events(s, 100 * s)]


def write(
    path: Path,
    events: list[dict[str, Any]],
    rank: int = 0,
    world: int = 1,
    window: tuple[int, int] | None = None,
) -> Path:
    """A Kineto trace with ``traceEvents`` last, as torch writes it (so a cut keeps the header)."""
    if window is not None:
        events = [
            *events,
            x(
                "Trace",
                "PyTorch Profiler (0)",
                window[0],
                window[1] - window[0],
                pid="Spans",
                tid="PyTorch Profiler",
            ),
        ]
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": events,
    }
    path.write_text(json.dumps(doc, indent=1))
    return path


def problem_events() -> list[dict[str, Any]]:
    """Three clean steps plus, in step 1 and 2, exactly: 2 negative-duration kernels, 3 kernels
    overlapping on stream 9, 1 operator crossing its parent, 1 kernel starting 20 µs before its
    launch, 1 kernel running after a later launch on stream 8, 1 duplicated operator, 1 operator
    after the profiler's window."""
    bad = [
        x("kernel", "neg_a", 300, -5, pid=0, tid=7, stream=7, device=0),
        x("kernel", "neg_b", 310, -7, pid=0, tid=7, stream=7, device=0),
        x("kernel", "ov_a", 100, 100, pid=0, tid=9, stream=9, device=0),
        x("kernel", "ov_b", 150, 100, pid=0, tid=9, stream=9, device=0),
        x("kernel", "ov_c", 240, 60, pid=0, tid=9, stream=9, device=0),
        x("kernel", "alone", 400, 50, pid=0, tid=9, stream=9, device=0),
        x("cpu_op", "outer", 1200, 200),
        x("cpu_op", "crossing", 1300, 200),
        x("cuda_runtime", "cudaLaunchKernel", 1600, 5, correlation=900),
        x("kernel", "early", 1580, 10, pid=0, tid=8, correlation=900, stream=8, device=0),
        x("cuda_runtime", "cudaLaunchKernel", 1650, 5, correlation=901),
        x("cuda_runtime", "cudaLaunchKernel", 1655, 5, correlation=902),
        x("kernel", "second", 1700, 10, pid=0, tid=8, correlation=902, stream=8, device=0),
        x("kernel", "first", 1720, 10, pid=0, tid=8, correlation=901, stream=8, device=0),
        x("cpu_op", "aten::copy_", 1800, 20),
        x("cpu_op", "aten::copy_", 1800, 20),
        x("cpu_op", "late", 3100, 10),
    ]
    return [*clean_events(), *bad]


def counts(run: Run, file: str | None = None) -> dict[str, int]:
    found = run.data_quality.filter(pl.col("file") == (file or run.sources[0].path.name))
    return dict(found.select("check", "count").iter_rows())


@pytest.fixture(scope="module")
def problem_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    path = write(tmp_path_factory.mktemp("bad") / "rank0.json", problem_events(), window=(0, 3000))
    return analyzer.load([path], use_cache=False)


def test_planted_problems_are_counted_exactly(problem_run: Run):
    got = counts(problem_run)
    assert got["zero_duration"] == 2
    assert got["overlap_stream"] == 3
    assert got["overlap_thread"] == 1
    assert got["started_before_launch"] == 1
    assert got["stream_order"] == 1
    assert got["duplicate"] == 1
    assert got["outside_window"] == 1
    assert "negative_duration" not in got  # the parser leaves no end before its start
    frames.check(problem_run.data_quality, frames.DATA_QUALITY, "data_quality")


def test_totals_sum_the_files(tmp_path: Path):
    a = write(tmp_path / "rank0.json", problem_events(), rank=0, world=2)
    b = write(
        tmp_path / "rank1.json",
        [*clean_events(), x("kernel", "neg", 300, -1, pid=0, tid=7, stream=7, device=0)],
        rank=1,
        world=2,
    )
    run = analyzer.load([a, b], use_cache=False)
    assert (
        counts(run, "rank0.json")["zero_duration"] == 2
        and counts(run, "rank1.json")["zero_duration"] == 1
    )
    total = counts(run, TOTAL)
    assert total["zero_duration"] == 3 and total["overlap_stream"] == 3
    per_file = (
        run.data_quality.filter(pl.col("file") != TOTAL)
        .group_by("check")
        .agg(pl.col("count").sum())
    )
    assert dict(per_file.iter_rows()) == {
        k: v for k, v in total.items() if k in dict(per_file.iter_rows())
    }


def test_a_clean_trace_says_no_problems_found(tmp_path: Path):
    run = analyzer.load(
        [write(tmp_path / "rank0.json", clean_events(), window=(0, 3000))], use_cache=False
    )
    assert run.data_quality.height == 0
    section = next(s for s in sections(run) if s.key == "data_quality")
    assert section.frame is None and section.note.startswith("No problems found in 1 file:")
    assert section.details["data_quality_files"].row(0, named=True)["problems"] == 0
    assert run.incomplete_steps.height == 0 and run.steps["step"].to_list() == [1, 2, 3]


def test_parser_tallies_render_under_any_key(tmp_path: Path):
    events = conform({"kind": ["cpu_op"], "name": ["op"], "start_ns": [0], "end_ns": [10]}, rank=0)
    parsed = ParsedSource(tmp_path / "rank0.json", "kineto", events=events)
    parsed.tally("clamped_ts", 4)
    parsed.tally("some_new_kind", 2)
    parsed.tally("clamped_ts", 1)
    got = build([parsed]).data_quality
    rows = {r["check"]: r for r in got.filter(pl.col("file") == "rank0.json").iter_rows(named=True)}
    assert rows["parser:clamped_ts"]["count"] == 5 and rows["parser:clamped_ts"][
        "title"
    ] == parser_title("clamped_ts")
    assert (
        rows["parser:some_new_kind"]["count"] == 2
        and rows["parser:some_new_kind"]["title"] == "some new kind"
    )
    assert parser_title("dropped_time_out_of_range") == "dropped: time out of range"


def test_unmapped_log_timers_are_listed(tmp_path: Path):
    log = tmp_path / "verl_console.log"
    log.write_text(
        "".join(
            f"step:{s} - timing_s/gen:1.5 - timing_s/update_actor:2.0 "
            "- timing_s/frobnicate:0.25 - timing_s/step:4.0\n"
            for s in (1, 2)
        )
    )
    run = analyzer.load([log], use_cache=False)
    row = run.data_quality.filter(
        (pl.col("check") == "unmapped_timers") & (pl.col("file") == log.name)
    ).row(0, named=True)
    assert row["count"] == 1 and "frobnicate" in row["detail"]


def _text(run: Run) -> str:
    console = Console(width=200, record=True, color_system=None)
    text.render(run, console)
    return console.export_text()


def test_the_section_is_in_every_format_and_early(problem_run: Run):
    plain = _text(problem_run)
    assert (
        plain.index("Headline numbers")
        < plain.index("Data quality")
        < plain.index("GPU time per rank")
    )
    assert "GPU activity overlapping on one stream" in plain
    document = json.loads(json_report.render(problem_run))
    rows = {(r["file"], r["check"]): r["count"] for r in document["data_quality"]}
    assert rows[("rank0.json", "overlap_stream")] == 3 and rows[(TOTAL, "zero_duration")] == 2
    assert document["data_quality_files"][0]["file"] == "rank0.json"
    md = markdown.render(problem_run)
    assert "## Data quality" in md and md.index("## Data quality") < md.index("## Guidelines")
    assert "| rank0.json | GPU activity overlapping on one stream | 3 |" in md
    page = html.render(problem_run)
    assert "<h2>Data quality</h2>" in page and page.index("<h2>Data quality</h2>") < page.index(
        "<h2>Guidelines</h2>"
    )
    assert "GPU activity overlapping on one stream" in page


# --- cut files and incomplete steps
# ----------------------------------------------------------------


def cut_inside_step(path: Path, step: int) -> Path:
    """``path`` cut short right after the first kernel of ``step``."""
    raw = path.read_text()
    kernel = raw.index(f'"gemm_{step}"')
    end = raw.index("}", raw.index("}", kernel) + 1) + 1
    path.write_text(raw[: end + 8])
    return path


def test_a_cut_file_loses_the_step_its_cut_falls_in(tmp_path: Path):
    path = cut_inside_step(write(tmp_path / "rank0.json", clean_events()), 3)
    run = analyzer.load([path], use_cache=False)
    assert run.sources[0].meta.get("salvaged")
    assert run.incomplete_steps.select("step", "reason").rows() == [(3, "cut")]
    assert run.steps["step"].to_list() == [1, 2]
    assert set(run.bubbles["step"].to_list()) == {1, 2}
    assert (
        3 not in run.breakdown["step"].to_list()
        and 3 not in run.activity["step"].drop_nulls().to_list()
    )
    assert any("step 3 excluded from the per-step analyses" in w for w in run.warnings)
    rows = {
        r["check"]: r
        for r in run.data_quality.filter(pl.col("file") == path.name).iter_rows(named=True)
    }
    assert "inside step 3, which is excluded" in rows["salvaged"]["detail"]
    assert rows["salvaged"]["count"] == run.events.height
    assert rows["excluded_steps"]["count"] == 1
    document = json.loads(json_report.render(run))
    assert any("step 3 excluded" in w for w in document["warnings"])


def test_a_cut_in_a_later_write_run_still_finds_its_step(tmp_path: Path):
    """Torch writes one thread's operators, then the GPU work: a cut in the kernels of step 2
    keeps every host row of all three steps, but steps 2 and 3 lost their kernels."""
    events = clean_events()
    gpu = [e for e in events if e["cat"] == "kernel"]
    path = cut_inside_step(
        write(tmp_path / "rank0.json", [e for e in events if e["cat"] != "kernel"] + gpu), 2
    )
    run = analyzer.load([path], use_cache=False)
    assert run.events.filter(pl.col("kind") == "annotation").height == 3
    assert sorted(set(run.incomplete_steps["step"].to_list())) == [2, 3]
    assert run.steps["step"].to_list() == [1]


def test_a_rank_cut_short_excludes_every_step_it_leaves(tmp_path: Path):
    full = write(tmp_path / "rank0.json", clean_events(), rank=0, world=2)
    cut = cut_inside_step(write(tmp_path / "rank1.json", clean_events(), rank=1, world=2), 2)
    run = analyzer.load([full, cut], use_cache=False)
    assert sorted(set(run.incomplete_steps["step"].to_list())) == [2, 3]
    assert run.incomplete_steps["rank"].unique().to_list() == [1]
    assert run.steps["step"].to_list() == [1]
    assert counts(run, TOTAL)["excluded_steps"] == 2


def test_a_step_a_trace_never_closed_is_excluded(tmp_path: Path):
    full = write(tmp_path / "rank0.json", clean_events(), rank=0, world=2)
    # rank 1 stops recording inside step 3: its step-3 operator is there, its ProfilerStep#3 is not
    short = [*clean_events(2), x("cpu_op", "aten::mm", 2 * STEP_US + 10, 100)]
    run = analyzer.load(
        [full, write(tmp_path / "rank1.json", short, rank=1, world=2)], use_cache=False
    )
    assert run.incomplete_steps.select("step", "rank", "reason").rows() == [(3, 1, "unclosed")]
    assert run.steps["step"].to_list() == [1, 2]


def test_a_rank_finishing_early_is_not_an_incomplete_step():
    steps = pl.DataFrame({"step": [1, 2], "start_ns": [0, 100], "end_ns": [100, 200]},
                         schema={"step": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64})
    ends = pl.DataFrame(
        {"source": [0, 1], "rank": [0, 1], "cut": [False, False], "trace_end_ns": [200, 180]},
        schema={"source": pl.UInt32, "rank": pl.Int32, "cut": pl.Boolean, "trace_end_ns": pl.Int64},
    )
    closed = pl.DataFrame(
        {"rank": [0, 0, 1, 1], "step": [1, 2, 1, 2]}, schema={"rank": pl.Int32, "step": pl.Int32}
    )
    assert incomplete_steps(steps, ends, closed).height == 0
    assert incomplete_steps(steps, ends, closed.head(3)).select("step", "rank").rows() == [(2, 1)]
    cut = ends.with_columns(pl.Series("cut", [False, True]))
    assert incomplete_steps(steps, cut, closed).select("step", "reason").rows() == [(2, "cut")]


def test_the_last_step_where_the_profiler_stopped_is_left_out():
    """mi250_minitoy: ProfilerStep#1 lasts 9.288 ms, #2 (opened by the last prof.step(), closed
    by stop()) 49 µs, and the trace ends 268 µs after #2 begins (raw JSON). Step 2 halved every
    per-step figure (a 'median' step of 4.67 ms no step took); it is a stub, left out."""
    run = analyzer.load([CORPUS / "HolisticTraceAnalysis" /
                         "mi250_minitoy_train_ROCm6_2_kineto.json.gz"], use_cache=False)
    assert run.incomplete_steps.select("step", "reason").rows() == [(2, "stub")]
    assert run.steps["step"].to_list() == [1]
    assert (run.steps["end_ns"] - run.steps["start_ns"]).to_list() == [9_288_291]
    (said,) = [w for w in run.warnings if "stub" in w]
    assert said == ("mi250_minitoy_train_ROCm6_2_kineto.json.gz: the trace's last step 2 is a "
                    "stub, under 10% of the median of its other steps (where the profiler "
                    "stopped, not a step of the run); step 2 excluded from the per-step analyses")


def test_a_short_last_step_is_a_stub_only_under_the_share():
    schema = {"step": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64}
    ends = pl.DataFrame({"source": [0], "rank": [0], "cut": [False], "trace_end_ns": [10_000]},
                        schema={"source": pl.UInt32, "rank": pl.Int32, "cut": pl.Boolean,
                                "trace_end_ns": pl.Int64})
    closed = pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int32})
    for last, stub in ((99, True), (100, False), (1000, False)):
        steps = pl.DataFrame({"step": [1, 2, 3], "start_ns": [0, 1000, 2000],
                              "end_ns": [1000, 2000, 2000 + last]}, schema=schema)
        got = incomplete_steps(steps, ends, closed, 0.1)
        assert got.select("step", "reason").rows() == ([(3, "stub")] if stub else []), last
    one = pl.DataFrame({"step": [1], "start_ns": [0], "end_ns": [5]}, schema=schema)
    assert incomplete_steps(one, ends, closed, 0.1).height == 0


def test_the_cpu_harness_sample_keeps_every_step():
    run = analyzer.load([SAMPLE])
    assert run.incomplete_steps.height == 0
    assert run.steps.height == 2


# --- CPU-only captures
# ------------------------------------------------------------------------------


def test_a_cpu_only_capture_needs_gpu_activity():
    run = analyzer.load([CPU_ONLY], use_cache=False)
    found = {s.key: s for s in sections(run)}
    assert run.steps.height == 1 and run.bubbles.height == 0
    assert found["bubbles"].frame is None and found["bubbles"].note.startswith(
        "needs GPU activity: rank 34"
    )
    assert found["gpu_time"].frame is None and found["gpu_time"].note.startswith(
        "needs GPU activity"
    )
    overview = dict(run.overview.select("metric", "value").iter_rows())
    assert overview["idle_fraction"] is None and overview["gpu_idle_fraction"] is None
    assert "100" not in found["bubbles"].note


def test_the_cpu_harness_keeps_idle_by_cause_but_no_gpu_idle():
    run = analyzer.load([SAMPLE])
    section = next(s for s in sections(run) if s.key == "bubbles")
    assert section.frame is not None and section.frame["rank"].to_list() == [0, 1]
    assert section.frame["gpu_idle_fraction"].null_count() == 2
    assert section.frame["idle_fraction"].is_between(0, 1).all()
    assert "host work" in section.note and "GPU idle % needs GPU activity" in section.note


def test_gpu_ranks_keep_their_gpu_idle(problem_run: Run):
    section = next(s for s in sections(problem_run) if s.key == "bubbles")
    assert section.frame is not None and section.frame["gpu_idle_fraction"].null_count() == 0


def test_a_cut_file_that_kept_no_event_is_listed_with_none_kept(tmp_path: Path):
    """A salvaged file whose complete events are all of unknown kinds has no row in the run: its
    kept count was null and reached int() (TypeError, the section failed)."""
    full = write(tmp_path / "rank0.json", clean_events(), rank=0, world=2)
    unknown = [x("mystery", f"thing_{i}", 10 * i, 5) for i in range(3)]
    raw = write(tmp_path / "rank1.json", unknown, rank=1, world=2).read_text()
    cut = tmp_path / "rank1.json"
    cut.write_text(raw[: raw.index("thing_2")])
    run = analyzer.load([full, cut], use_cache=False)
    assert run.sources[1].meta.get("salvaged")
    rows = {
        r["check"]: r
        for r in run.data_quality.filter(pl.col("file") == cut.name).iter_rows(named=True)
    }
    assert rows["salvaged"]["count"] == 0
    assert rows["salvaged"]["detail"].startswith("the last ")


def test_thread_depth_is_the_sweeps_depth_and_finds_the_crossing():
    """Two threads, their rows interleaved (µs): on thread 1, [0,100) holds two identical
    [10,40) (the earlier row outer), [40,60) starts as they end (depth 1, not 3), and [50,120)
    starts inside [40,60), its parent, and outlives it by 60 µs; on thread 2, [5,8) and [8,9)
    touch (both depth 0). ``thread_depth`` counts what ``nesting_depth``'s sweep counts; only
    [50,120) is a crossing."""
    from analyzer.analyses.quality import thread_crossings, thread_depth
    from parsers.events import nesting_depth

    us = 1_000
    rows = [(1, 0, 100), (2, 5, 8), (1, 10, 40), (1, 10, 40), (2, 8, 9), (1, 40, 60),
            (1, 50, 120)]
    frame = pl.DataFrame(
        {"rank": [0] * len(rows), "source": [0] * len(rows), "pid": [7] * len(rows),
         "tid": [t for t, _, _ in rows], "kind": ["cpu_op"] * len(rows),
         "start_ns": [s * us for _, s, _ in rows], "end_ns": [e * us for _, _, e in rows]},
        schema_overrides={"source": pl.UInt32, "rank": pl.Int32},
    )
    keys = ["source", "pid", "tid"]
    ordered = frame.sort([*keys, "start_ns", "end_ns"], descending=[False] * 4 + [True],
                         maintain_order=True).with_columns(
        pl.struct(keys).rle_id().cast(pl.Int64).alias("_g")).with_row_index("_order")
    assert thread_depth(ordered).to_list() == [0, 1, 2, 1, 2, 0, 0]
    swept = nesting_depth(ordered, keys).to_list()
    assert thread_depth(ordered).to_list() == swept
    assert thread_crossings(frame).height == 1


def test_a_runs_files_of_one_folder_and_process_are_classified_once(monkeypatch):
    """Three copies of verl's actor_update stub (its process names old_logprob: a role
    contradiction) and one whose process is another: each copy gets its row, the profiles
    classify the shared (folder, process) names once, not once per file (64 ranks took 1.7 s)."""
    from dataclasses import replace
    from types import SimpleNamespace

    from analyzer.analyses import quality

    stub = Path("../shared/corpus/rl-insight/actor_update__prof_rank-0_031904.json.gz")
    run = analyzer.load([stub])
    first = run.sources[0]
    other = {**first.meta, "process_names": ["ray::WorkerDict.actor_update"]}
    sources = [replace(first, index=i, path=first.path.with_name(f"actor_update__r{i}.json"))
               for i in range(3)]
    sources.append(replace(first, index=3, path=first.path.with_name("actor_update__r3.json"),
                           meta=other))
    calls = []
    stages = quality._stages
    monkeypatch.setattr(quality, "_stages", lambda n, p: calls.append(n) or stages(n, p))
    found = quality.role_mismatch(SimpleNamespace(sources=sources, profile=run.profile))
    assert found["source"].to_list() == [0, 1, 2]
    assert len(calls) == 2
