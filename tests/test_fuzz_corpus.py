"""The seeded mutation fuzzer over the real corpus, at CI size (tests/fuzz/, docs/testing.md).

Over 12,000 damaged inputs cut from the corpus and the bundled samples go through every parser
in two worker processes (3 GB address space each, a time limit per case); a sample of those
that parse is analysed and rendered as the JSON report. Every case must end as a result or as
the contract's one-line refusal: no other exception, no hang, no memory exhaustion, no broken
invariant. The counts per parser and outcome are printed at the end of the test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest
from fuzz import invariants, long_run, mutators, runner, seeds

import analyzer
import parsers
from analyzer.report import json as json_report
from analyzer.report import sections as sections_module

CI_CASES = 12_240
"""A third of ``make test``'s time at 20,400 (330 s of one test process on 2 cores, where
the whole suite has about 10 minutes); ``make fuzz`` runs the long campaign."""
SEED = int(os.environ.get("RLPERF_FUZZ_SEED", "0"))
TRL_LOGS = seeds.SAMPLES / "runs" / "trl_grpo" / "logs"


@pytest.fixture(scope="module")
def bank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeds.build(tmp_path_factory.mktemp("fuzz"))


def test_fuzz_corpus_mutations_end_in_a_result_or_one_refusal(
    bank: Path, request: pytest.FixtureRequest
) -> None:
    settings = runner.Settings(seed=SEED, workers=2, case_timeout_s=20.0, analyze_every=150)
    summary = runner.run(long_run.plan(CI_CASES), settings, bank)
    _report(request, f"fuzz, seed {SEED}:\n{summary.table()}")
    assert summary.total() >= 12_000
    assert set(summary.counts) == set(long_run.WEIGHTS)
    assert all(summary.counts[f]["ok"] > 0 for f in summary.counts), summary.table()
    assert summary.analysed >= 50
    assert summary.failures() == 0, summary.table()


def _report(request: pytest.FixtureRequest, text: str) -> None:
    """Shown whether or not pytest captures output."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        print(text)
        return
    reporter.write_line("")
    for line in text.splitlines():
        reporter.write_line(line)


def test_the_same_seed_makes_the_same_cases(bank: Path) -> None:
    loaded = seeds.load(bank)
    for family in mutators.FAMILIES:
        first = [mutators.make_case(loaded, family, i, 7) for i in range(20)]
        again = [mutators.make_case(loaded, family, i, 7) for i in range(20)]
        other = [mutators.make_case(loaded, family, i, 8) for i in range(20)]
        assert [(c.data, c.mutations) for c in first] == [(c.data, c.mutations) for c in again], (
            family
        )
        assert [c.data for c in first] != [c.data for c in other], family


def test_the_bank_holds_every_parser_and_only_small_bases(bank: Path) -> None:
    loaded = seeds.load(bank)
    assert set(loaded) == set(mutators.FAMILIES) - {"gzip"}
    assert len(loaded["kineto"]) >= 60
    assert {b.origin.split("/")[0] for b in loaded["kineto"]} >= {
        "HolisticTraceAnalysis",
        "TraceLens",
        "rl-insight",
    }
    assert max(len(b.data) for b in loaded["kineto"]) < 200_000
    assert max(len(b.data) for b in loaded["nsys-sqlite"]) < 1_000_000


def test_a_crash_and_a_hang_are_counted_not_fatal(bank: Path, tmp_path: Path, monkeypatch) -> None:
    case = mutators.Case("kineto", 0, "test", "rank0.json", b'{"traceEvents": []}')

    def boom(path, analyse, fmt):
        raise ZeroDivisionError("inside a parser")

    monkeypatch.setattr(runner, "_parse_and_check", boom)
    crashed = runner.run_case(case, tmp_path, 5.0, False)
    assert (crashed["outcome"], crashed["kind"]) == ("crash", "ZeroDivisionError")

    def slow(path, analyse, fmt):
        while True:
            pass

    monkeypatch.setattr(runner, "_parse_and_check", slow)
    assert runner.run_case(case, tmp_path, 0.2, False)["outcome"] == "hang"


def test_invariants_hold_on_a_clean_sample_and_catch_a_broken_one() -> None:
    run = analyzer.load([seeds.SAMPLES / "synthetic" / "disaggregated"], use_cache=False)
    text = json_report.render(run)
    sections = sections_module.sections(run)
    assert invariants.report(run, text, sections) == []
    assert run.bubbles.height and invariants.bubbles(run.bubbles) == []
    gpu = run.gpu_time.filter(pl.col("gpu_window_ns").is_not_null())
    assert gpu.height == 8 and (gpu["busy_ns"] + gpu["idle_ns"] == gpu["gpu_window_ns"]).all()
    broken = run.gpu_time.with_columns(pl.col("idle_ns") + 1)
    assert invariants._gpu_time(broken)
    assert invariants._finite('{"a": NaN}') == ["JSON report holds ['NaN']"]
    assert invariants._durations(
        pl.DataFrame({"idle_ns": [5, -1], "offset_ns": [-3, -4]}), "f"
    ) == ["f.idle_ns: 1 negative value(s)"]


def test_log_stages_do_not_depend_on_the_order_the_logs_are_given_in() -> None:
    """The TRL sample's console log rounds the step time that trainer_state.json keeps whole; the
    last file given used to win, so the stage times changed with the command line."""
    files = [TRL_LOGS / "torchrun.log", TRL_LOGS / "trainer_state.json"]
    forward = analyzer.load(files, use_cache=False)
    backward = analyzer.load(files[::-1], use_cache=False)
    for name in (
        "log_stages",
        "log_steps",
        "log_stats",
        "log_stage_summary",
        "log_long_tail",
        "log_long_tail_summary",
    ):
        assert forward.product(name).equals(backward.product(name)), name
    state = json.loads(files[1].read_text())["log_history"]
    first = forward.log_steps.filter(pl.col("step") == 1).row(0, named=True)
    assert first["total_s"] == pytest.approx(state[0]["step_time"], abs=1e-9)


def _normalised(run) -> dict:
    """The JSON report with each table's rows as a set and the source list left out (both list
    the files in the order given)."""
    document = json.loads(json_report.render(run))
    document.pop("sources", None)
    return {
        k: sorted(json.dumps(r, sort_keys=True) for r in v) if isinstance(v, list) else v
        for k, v in document.items()
    }


@pytest.mark.parametrize("folder", ["synthetic/disaggregated", *(f"runs/{r}/logs" for r in (
    "trl_grpo", "openrlhf_ppo_disaggregated", "verl_grpo_colocated"))])
def test_the_report_does_not_depend_on_the_order_of_the_files(folder: str) -> None:
    files = sorted(p for p in (seeds.SAMPLES / folder).iterdir() if p.name != "truth.json")
    assert len(files) >= 1
    forward = _normalised(analyzer.load(files, use_cache=False))
    backward = _normalised(analyzer.load(files[::-1], use_cache=False))
    assert [k for k in forward if forward[k] != backward.get(k)] == []


def test_a_span_event_with_invalid_utf8_is_dropped_and_counted(tmp_path: Path) -> None:
    """Found by the fuzzer (a bit flip inside a name of a NeMo-RL trace): the decoder's UTF-8
    error escaped the parser as a traceback."""
    good = b'{"name": "step", "ph": "X", "ts": 1700000000000000, "dur": 5, "pid": 1, "tid": 1}'
    path = tmp_path / "trace.json"
    path.write_bytes(
        b'[{"name": "tracer_name", "ph": "M", "pid": 1}, '
        + good
        + b", "
        + good.replace(b"step", b"st\xffp")
        + b"]"
    )
    source = parsers.parse_file(path, "framework-spans")
    assert source.events.filter(pl.col("kind") == "annotation")["name"].cast(
        pl.String
    ).to_list() == ["step"]
    assert source.meta["quality"]["dropped_unreadable_event"] == 1


def test_a_log_dict_naming_an_unknown_constant_is_not_a_literal() -> None:
    """Found by the fuzzer (openrlhf-log, a metrics dict with nan and `Infinity`): the name reached
    eval and escaped as a NameError."""
    from parsers.logs.values import python_literal

    assert python_literal("{'a': nan, 'b': 1}")["b"] == 1
    with pytest.raises(ValueError, match="not a literal"):
        python_literal("{'a': nan, 'b': Infinity}")
