"""The headline counts the findings at error and warn severity beside the guideline verdicts.

HTA's df_index_resolver is a plain training loop: no RL guideline applies beyond three, and the
headline read "guideline violations: error 0" under two findings at error severity (GPUs idle
a third of the step between kernels, 20% of it in exposed communication), so an audit holding
``overview.guideline_errors`` to 0 passed it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from conftest import CORPUS

import analyzer
from analyzer.analyses import findings as findings_module
from analyzer.analyses import overview
from analyzer.ops.compare import compare
from analyzer.report import markdown
from analyzer.report.section import Section

DF = CORPUS / "HolisticTraceAnalysis" / "df_index_resolver.json.gz"
TRL = Path(__file__).resolve().parents[1] / "sample_traces" / "runs" / "trl_grpo"


def _values(run: analyzer.Run) -> dict[str, float | None]:
    return dict(run.overview.select("metric", "value").iter_rows())


def test_a_plain_loop_with_error_findings_says_so_in_the_headline() -> None:
    run = analyzer.load([DF])
    values = _values(run)
    severities = run.findings["severity"].to_list()
    assert values["guideline_errors"] == 0
    assert values["finding_errors"] == severities.count("error") == 2
    assert values["finding_warnings"] == severities.count("warn") == 3


def test_a_run_with_nothing_to_judge_has_no_finding_count_to_win_with() -> None:
    """verl on TPU stopped before step 1 (no step, no kernel): its 0 findings won compare's
    findings rows against a verl log of 335 steps. Now it has no count, and the counts, having
    no better direction, name no winner."""
    stopped, healthy = CORPUS / "logs" / "verl-tpu", CORPUS / "logs" / "verl"
    values = _values(analyzer.load([stopped]))
    assert values["finding_errors"] is None and values["finding_warnings"] is None
    result = compare([analyzer.load([p]) for p in (stopped, healthy)], ["tpu", "verl"])
    rows = result.table.filter(pl.col("metric").str.starts_with("overview.finding_"))
    assert rows["tpu"].to_list() == [None, None]
    assert rows["verl"].to_list() == [0.0, 2.0]
    assert rows["winner"].to_list() == [None, None]


def test_counts_are_of_the_findings_table_and_empty_without_one() -> None:
    found = pl.DataFrame({"severity": ["error", "info", "warn", "error", "warn", "warn"]})
    values = dict(overview.compute({"findings": found}).select("metric", "value").iter_rows())
    assert (values["finding_errors"], values["finding_warnings"]) == (2, 3)
    bare = dict(overview.compute({}).select("metric", "value").iter_rows())
    assert bare["finding_errors"] is None and bare["finding_warnings"] is None


def test_failed_findings_leave_their_counts_empty_and_the_rest_of_the_headline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object) -> pl.DataFrame:
        raise ZeroDivisionError("boom")

    whole = _values(analyzer.load([TRL]))
    monkeypatch.setattr(findings_module, "rank", broken)
    run = analyzer.load([TRL])
    values = _values(run)
    assert values["finding_errors"] is None and values["finding_warnings"] is None
    assert whole["finding_errors"] is not None
    counts = {"finding_errors", "finding_warnings"}
    assert {k: v for k, v in values.items() if k not in counts} == {
        k: v for k, v in whole.items() if k not in counts}
    assert run.failures["findings"].error == "ZeroDivisionError: boom"


def test_the_markdown_headline_never_folds_and_other_long_tables_still_do() -> None:
    rows = pl.DataFrame({"metric": [f"m{i}" for i in range(markdown.FOLD_ROWS + 2)]})
    headline = Section("Headline numbers", rows, fold=False)
    other = Section("Other", rows)
    assert not any("<details>" in line for line in markdown.section_lines(headline, "##"))
    folded = f"<details><summary>{rows.height} rows</summary>"
    assert markdown.section_lines(other, "##")[2] == folded
    report = markdown.render(analyzer.load([DF]))
    headline_text = report.split("## Headline numbers", 1)[1].split("\n## ", 1)[0]
    assert "<details>" not in headline_text and "| findings: error | 2 |" in headline_text


def test_a_run_of_logs_only_has_no_rank_count() -> None:
    """verl's log states 16 GPUs in its config and the headline said "ranks (devices) 0": no
    trace records any rank, so the count is empty and says what it needs, and compare of two such
    runs, which reads the count, has no rank row and still compares the rest."""
    stopped, healthy = CORPUS / "logs" / "verl-tpu", CORPUS / "logs" / "verl"
    runs = [analyzer.load([p]) for p in (stopped, healthy)]
    for run in runs:
        assert _values(run)["ranks"] is None
        headline = markdown.render(run).split("## Headline numbers", 1)[1]
        assert "| ranks (devices) | – needs a device trace (a log says what ran" in headline
    table = compare(runs, ["tpu", "verl"]).table
    assert "overview.ranks" not in table["metric"].to_list()
    assert table.filter(pl.col("metric") == "overview.steps")["verl"].to_list() == [335]
    warnings = table.filter(pl.col("metric") == "overview.guideline_warnings").row(0, named=True)
    # tpu's 1 (G8, from its config) against verl's 2 of guidelines tpu never got to judge
    assert (warnings["tpu"], warnings["verl"]) == (1, 2)
    assert warnings["winner"] == "not comparable (G15, G23 not judged for tpu)"
    with_trace = _values(analyzer.load([DF]))
    assert with_trace["ranks"] == 1
