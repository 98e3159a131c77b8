"""``rlperf audit`` under the error contract (docs/errors.md, docs/ci.md): exit 1 only for a
broken budget, 3 for an internal error (a check on a failed section is an error, not a failure),
relative limits without a baseline pass with a note, GitHub annotations escaped as the runner
unescapes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lxml import etree
from test_error_contract import HTA, RUN, SECTION, rlperf

from analyzer.ops import audit

XSD = Path(__file__).with_name("junit.xsd")


def budget(tmp_path: Path, *checks: str) -> Path:
    path = tmp_path / "budget.toml"
    path.write_text("\n".join(f"[[check]]\n{c}\n" for c in checks))
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("audit_contract") / "report.json"
    done = rlperf("analyze", str(RUN), "--format", "json", "-o", str(path), "--quiet")
    assert done.returncode == 0, done.stderr
    return path


def overview(report: Path, name: str) -> float:
    return next(
        r["value"] for r in json.loads(report.read_text())["overview"] if r["metric"] == name
    )


# --- no baseline yet -----------------------------------------------------------------------


def test_a_relative_limit_without_a_baseline_is_skipped_with_a_note(report, tmp_path):
    """Nothing was checked: SKIP (and a skipped JUnit case), not PASS."""
    path = budget(
        tmp_path, 'name = "step time"\nmetric = "overview.step_time_ns"\nmax_increase = 0.10'
    )
    junit = tmp_path / "audit.xml"
    done = rlperf("audit", str(report), "--budget", str(path), "--width", "1000",
                  "--junit", str(junit))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split()[0] == "SKIP" and lines[1].endswith(f"<- {audit.NO_BASELINE}")
    assert 'skipped="1"' in junit.read_text()


def test_without_a_baseline_the_absolute_limits_of_the_check_still_hold(report, tmp_path):
    ranks = overview(report, "ranks")
    path = budget(tmp_path, f'metric = "overview.ranks"\nmax = {ranks - 1}\nmax_increase = 0.1')
    done = rlperf("audit", str(report), "--budget", str(path), "--width", "1000")
    assert done.returncode == 1
    line = done.stdout.splitlines()[1]
    assert line.split()[0] == "FAIL" and line.endswith(
        f"<- above the max {int(ranks - 1)}; {audit.NO_BASELINE}"
    )


def test_with_a_baseline_the_relative_limit_is_checked(report):
    document = json.loads(report.read_text())
    worse = json.loads(report.read_text())
    for row in worse["overview"]:
        if row["metric"] == "step_time_ns":
            row["value"] *= 1.5
    check = audit.Check(
        "step", audit.parse_path("overview.step_time_ns", "t"), {"max_increase": 0.1}
    )
    assert audit.audit(worse, [check], None).passed
    judged = audit.audit(worse, [check], document)
    assert not judged.passed and "up 50.0% from the baseline" in judged.outcomes[0].message


# --- internal errors are exit 3, never a failed budget ---------------------------------------


def test_an_internal_error_is_exit_3_and_its_checks_are_errors(tmp_path):
    path = budget(tmp_path, 'name = "bubbles"\nmetric = "max:bubbles.idle_ns"\nmax = 1e18',
                  'name = "ranks"\nmetric = "overview.ranks"\nmin = 1')
    junit = tmp_path / "junit.xml"
    done = rlperf(
        "audit", str(RUN), "--budget", str(path), "--junit", str(junit), "--quiet",
        "--width", "1000", fail=SECTION
    )
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(
        "rlperf audit INCOMPLETE: 2 checks, 0 failed, 1 not evaluated (internal error)"
    )
    assert lines[1].split()[:2] == ["ERROR", "bubbles"]
    assert (
        "section bubbles failed: internal error in "
        "analyzer.report.sections.bubbles: TypeError: boom in "
        "section" in lines[1]
    )
    assert lines[2].split()[:2] == ["PASS", "ranks"]
    assert [line for line in done.stderr.splitlines() if "internal error" in line] == [
        "rlperf: internal error in section bubbles "
        "(analyzer.report.sections.bubbles): TypeError: boom in "
        "section; "
        "rerun with --debug for the traceback"
    ]
    document = etree.parse(str(junit))
    etree.XMLSchema(etree.parse(str(XSD))).assertValid(document)
    suite = document.getroot()[0]
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "0", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["bubbles"].find("error") is not None and cases["ranks"].find("error") is None


def test_an_internal_error_outside_the_sections_is_exit_3(tmp_path):
    path = budget(tmp_path, 'metric = "overview.ranks"\nmin = 1')
    done = rlperf(
        "audit", str(RUN), "--budget", str(path), "--quiet", fail="analyzer.assemble.assign_ranks"
    )
    assert done.returncode == 3
    assert done.stderr.strip().splitlines() == [
        "rlperf: internal error in analyzer.assemble: TypeError: boom in assign_ranks; rerun with "
        "--debug for the traceback"
    ]


def test_a_report_that_lists_failures_audits_as_exit_3(tmp_path):
    written = tmp_path / "failed.json"
    made = rlperf(
        "analyze", str(RUN), "--format", "json", "-o", str(written), "--quiet", fail=SECTION
    )
    assert made.returncode == 3
    path = budget(tmp_path, 'metric = "overview.ranks"\nmin = 1')
    done = rlperf("audit", str(written), "--budget", str(path), "--width", "1000")
    assert done.returncode == 3
    assert done.stdout.startswith("rlperf audit passed: 1 check, 0 failed")
    assert done.stderr.strip().splitlines() == [
        "rlperf: internal error in section bubbles "
        "(analyzer.report.sections.bubbles): TypeError: boom in "
        "section; "
        "rerun with --debug for the traceback"
    ]


def test_the_corpus_trace_that_crashed_audits_normally(tmp_path):
    path = budget(
        tmp_path,
        'metric = "overview.ranks"\nmin = 1',
        'metric = "overview.guideline_errors"\nmax = 1000',
    )
    done = rlperf(
        "audit", str(HTA / "test.json.gz"), "--budget", str(path), "--quiet", "--width", "1000"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("rlperf audit passed: 2 checks, 0 failed")


# --- GitHub annotations --------------------------------------------------------------------


def unescape_data(text: str) -> str:
    """What GitHub's runner does to a workflow command's message."""
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def unescape_property(text: str) -> str:
    return unescape_data(text.replace("%3A", ":").replace("%2C", ","))


def test_annotations_escape_titles_and_messages_as_the_runner_expects():
    name = "idle, train: ≤ 20% \r\nper step"
    check = audit.Check(name, audit.parse_path("overview.x", "t"), {"max": 0.2})
    outcome = audit.Outcome(check, "fail", value=0.5, message="above 20%\nsee: a, b")
    (line,) = audit.github_annotations(audit.Result("run", [outcome]))
    head, _, message = line.removeprefix("::error title=").partition("::")
    assert head == "rlperf audit%3A idle%2C train%3A ≤ 20%25 %0D%0Aper step"
    assert unescape_property(head) == f"rlperf audit: {name}"
    assert unescape_data(message) == audit._shown(outcome)
    assert ":" in message and "," in message  # a message keeps them: only properties end at them


def test_annotations_from_the_cli_name_the_check_escaped(report, tmp_path):
    ranks = overview(report, "ranks")
    path = budget(
        tmp_path,
        f'name = "ranks, at most {int(ranks) - 1}: '
        f'100%"\nmetric = "overview.ranks"\nmax = {ranks - 1}',
    )
    done = rlperf("audit", str(report), "--budget", str(path), env={"GITHUB_ACTIONS": "true"})
    assert done.returncode == 1
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("::error")]
    assert line.startswith(
        f"::error title=rlperf audit%3A ranks%2C at most {int(ranks) - 1}%3A 100%25::"
    )
