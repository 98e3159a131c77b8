"""Pipeline phases from chunk annotations (DualPipe ``attn(F)``, ``mlp(B)``, ``mlp(W)``, …): per
rank and step, the time in each phase and the bubble, equal to the generator's truth; the rules
of what is a chunk, a window and the bubble, each on a hand-made timeline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import analyzer
from analyzer.analyses.pipeline import PIPELINE_PHASES, compute
from sample_traces.synth import dualpipe
from taxonomy.pipeline_phases import PhaseRulesError, load_rules, phase_of

TRUTH_COLUMNS = ["rank", "step", "window_ns", "forward_ns", "backward_input_ns",
                 "backward_weight_ns", "busy_ns", "bubble_ns", "chunks"]


@pytest.fixture(scope="module", params=[(4, 6, 2, 7), (2, 3, 1, 11), (8, 8, 1, 3)],
                ids=lambda p: f"pp{p[0]}-m{p[1]}-steps{p[2]}")
def generated(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    pp, micro, steps, seed = request.param
    out = tmp_path_factory.mktemp(f"dualpipe-pp{pp}")
    return out, dualpipe.generate(out, pp=pp, micro_batches=micro, steps=steps, seed=seed)


def test_phase_times_and_bubble_equal_the_truth(generated) -> None:
    out, truth = generated
    found = analyzer.load([out]).pipeline_phases
    expected = pl.DataFrame(truth["pipeline_phases"]).sort("rank", "step")
    assert found.height == expected.height == truth["config"]["pp"] * truth["config"]["steps"]
    got = found.select(TRUTH_COLUMNS).sort("rank", "step")
    assert got.to_dicts() == expected.select(TRUTH_COLUMNS).cast(got.schema).to_dicts()
    assert (found["bubble_ns"] > 0).all()
    assert (found["overlap_ns"] == 0).all()
    share = found["bubble_ns"] / found["window_ns"]
    assert (found["bubble_share"] - share).abs().max() < 1e-12


def test_bubble_grows_with_pipeline_depth_as_1f1b_predicts(tmp_path: Path) -> None:
    """1F1B's bubble share is about (pp−1)/(m+pp−1): deeper pipelines, same micro-batches,
    more bubble (a check that the measured bubble is the schedule's, not noise)."""
    shares = []
    for pp in (2, 4, 8):
        dualpipe.generate(tmp_path / str(pp), pp=pp, micro_batches=8, steps=1, seed=5)
        found = analyzer.load([tmp_path / str(pp)]).pipeline_phases
        share = found["bubble_ns"].sum() / found["window_ns"].sum()
        assert abs(share - (pp - 1) / (8 + pp - 1)) < 0.08, (pp, share)
        shares.append(share)
    assert shares == sorted(shares)


def test_every_report_format_shows_the_section(tmp_path: Path) -> None:
    out = tmp_path / "run"
    truth = dualpipe.generate(out, pp=4, micro_batches=4, steps=1, seed=2)
    env = {"RLPERF_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    texts = {}
    for fmt in ("json", "text", "md", "html"):
        target = tmp_path / f"report.{fmt}"
        done = subprocess.run(
            [sys.executable, "-c", "from analyzer.cli import main; main()", "analyze", str(out),
             "-q", "-f", fmt, "-o", str(target)],
            capture_output=True, text=True, timeout=300, env=env,
        )
        assert done.returncode == 0, done.stderr
        texts[fmt] = target.read_text()
    rows = json.loads(texts["json"])["pipeline_phases"]
    ordered = sorted(truth["pipeline_phases"], key=lambda r: (r["rank"], r["step"]))
    assert [r["bubble_ns"] for r in rows] == [r["bubble_ns"] for r in ordered]
    bubble = sum(r["bubble_ns"] for r in rows)
    window = sum(r["window_ns"] for r in rows)
    for fmt in ("text", "md", "html"):
        assert "Pipeline phases" in texts[fmt], fmt
        assert f"({bubble / window:.1%})" in texts[fmt], fmt


def test_chunk_names_are_not_reported_as_unmapped(generated) -> None:
    out, _ = generated
    quality = analyzer.load([out]).data_quality
    assert quality.filter(pl.col("check") == "unmapped_names").height == 0


# --- the mapping ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, phase",
    [("attn(F)", "forward"), ("mlp(F)", "forward"), ("dispatch(F)", "forward"),
     ("combine(F)", "forward"), ("attn(B)", "backward_input"), ("mlp(B)", "backward_input"),
     ("dispatch(B)", "backward_input"), ("combine(B)", "backward_input"),
     ("attn(W)", "backward_weight"), ("mlp(W)", "backward_weight"), ("1F1B", "schedule"),
     ("forward-compute", "forward"), ("backward-compute", "backward_input"),
     ("forward", "forward"), ("backward", "backward_input"), ("dispatch(W)", None),
     ("ProfilerStep#1", None), ("aten::mm", None), ("forward_pass_of_something", None)],
)
def test_names_map_to_phases(name: str, phase: str | None) -> None:
    assert phase_of(pl.Series([name]))["phase"].to_list() == [phase]


def test_a_rule_with_an_unknown_phase_or_bad_regex_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "phases.toml"
    bad.write_text('[[phase]]\nmatch = "^x$"\nphase = "sideways"\n')
    with pytest.raises(PhaseRulesError, match=r"phases\.toml.*'sideways'"):
        load_rules(bad)
    bad.write_text('[[phase]]\nmatch = "(?<=x)y"\nphase = "forward"\n')
    with pytest.raises(PhaseRulesError, match=r"phases\.toml.*not a valid regex"):
        load_rules(bad)


# --- the rules, on hand-made timelines -----------------------------------------------------------


def ranges(*rows: tuple[int, int, str, int, int]) -> pl.DataFrame:
    """Host ranges (rank, tid, name, start, end) as the aligned event table holds them."""
    return pl.DataFrame(
        [(r, r, 100 + r, tid, "annotation", name, s, e) for r, tid, name, s, e in rows],
        schema={"rank": pl.Int32, "source": pl.UInt32, "pid": pl.Int64, "tid": pl.Int64,
                "kind": pl.String, "name": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    )


NO_STEPS = pl.DataFrame(schema={"step": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                "source": pl.String})


def test_a_late_first_chunk_is_bubble_from_the_common_window_start() -> None:
    found = compute(
        ranges((0, 1, "attn(F)", 0, 100), (0, 1, "attn(B)", 300, 400),
               (1, 1, "attn(F)", 150, 250), (1, 1, "attn(B)", 260, 290)),
        NO_STEPS,
    )
    assert found.schema == PIPELINE_PHASES
    rows = {r["rank"]: r for r in found.to_dicts()}
    assert rows[0]["window_ns"] == rows[1]["window_ns"] == 400
    assert (rows[0]["bubble_ns"], rows[1]["bubble_ns"]) == (200, 270)
    assert (rows[1]["forward_ns"], rows[1]["backward_input_ns"]) == (100, 30)
    assert rows[0]["step"] is None


def test_a_chunk_enclosing_chunks_gives_its_time_to_them() -> None:
    found = compute(
        ranges((0, 1, "1F1B", 0, 1000), (0, 1, "backward", 100, 900),
               (0, 1, "mlp(B)", 100, 300), (0, 1, "mlp(W)", 400, 500)),
        NO_STEPS,
    ).row(0, named=True)
    assert (found["backward_input_ns"], found["backward_weight_ns"]) == (200, 100)
    assert (found["window_ns"], found["bubble_ns"], found["chunks"]) == (1000, 700, 2)


def test_common_names_count_only_inside_a_schedule_range() -> None:
    outside = compute(ranges((0, 1, "forward", 0, 100), (0, 1, "backward", 100, 300)), NO_STEPS)
    assert outside.height == 0
    inside = compute(
        ranges((0, 1, "1F1B", 0, 400), (0, 1, "forward", 0, 100), (0, 1, "backward", 100, 300),
               (0, 1, "forward", 500, 600)),
        NO_STEPS,
    ).row(0, named=True)
    assert (inside["forward_ns"], inside["backward_input_ns"], inside["window_ns"]) == (
        100, 200, 400)


def test_phases_on_two_threads_at_once_are_overlap_not_extra_busy() -> None:
    found = compute(
        ranges((0, 1, "attn(F)", 0, 100), (0, 2, "combine(B)", 50, 150)), NO_STEPS
    ).row(0, named=True)
    assert (found["forward_ns"], found["backward_input_ns"]) == (100, 100)
    assert (found["busy_ns"], found["overlap_ns"], found["bubble_ns"]) == (150, 50, 0)


def test_chunks_take_the_step_whose_window_holds_their_start() -> None:
    steps = pl.DataFrame({"step": [3, 4], "start_ns": [0, 1000], "end_ns": [1000, 2000],
                          "source": ["ProfilerStep"] * 2},
                         schema={"step": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                 "source": pl.String})
    found = compute(
        ranges((0, 1, "mlp(F)", 100, 300), (0, 1, "mlp(B)", 900, 1100),
               (0, 1, "mlp(F)", 1500, 1600)),
        steps,
    )
    rows = {r["step"]: r for r in found.to_dicts()}
    assert rows[3]["window_ns"] == 1000 and rows[3]["backward_input_ns"] == 200
    assert rows[4]["window_ns"] == 100 and rows[4]["bubble_ns"] == 0
