"""How ``rlperf compare`` is laid out and worded: a table that fits (a 1,400 px page with four
runs, 80 terminal columns with no header cut), a list of wins that reads one way, and a run
compared with itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from report_truth import RUNS, cli
from rich.console import Console

import analyzer
from analyzer.commands.compare import render_text
from analyzer.ops.compare import compare, default_labels
from analyzer.report import browser
from analyzer.report.html import render_comparison

FOUR = [RUNS / n for n in ("verl_grpo_colocated", "verl_ppo_disaggregated",
                           "verl_grpo_one_step_off", "openrlhf_ppo_disaggregated")]
"""The demo's comparison: four runs with long folder names."""


@pytest.fixture(scope="module")
def four():
    runs = [analyzer.load([p]) for p in FOUR]
    return compare(runs, default_labels(FOUR))


PROBE = (
    "<script>addEventListener('load',()=>{const t=document.querySelector('table');"
    "const r=t.getBoundingClientRect();const h=[...t.querySelectorAll('th')].map(x=>"
    "x.getBoundingClientRect().right);document.body.setAttribute('data-probe',"
    "Math.round(r.right)+'/'+Math.round(Math.max(...h))+'/'+innerWidth);});</script></body>"
)


@pytest.mark.skipif(browser.chromium() is None, reason="needs Chromium")
def test_the_html_table_of_four_runs_fits_1400_px_with_its_winner_column(four, tmp_path: Path):
    """Measured in Chromium: the table's right edge and its last header (winner) lie within a
    1,400 px window (they were at 2,685 px)."""
    page = tmp_path / "compare.html"
    page.write_text(render_comparison(four).replace("</body>", PROBE))
    drawn = browser.render(page, width=1400)
    found = re.search(r'data-probe="(\d+)/(\d+)/(\d+)"', drawn.dom)
    assert found, "the probe did not run"
    right, last_header, window = map(int, found.groups())
    assert window == 1400 and 0 < last_header <= right <= window
    assert "<th>winner</th>" in drawn.dom.replace(' class="text"', "")


def test_the_terminal_table_fits_80_columns_with_every_header_whole(four):
    console = Console(width=80, record=True, color_system=None)
    render_text(four, console)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    headers = [line for line in lines if line.startswith(" metric ")]
    assert len(headers) >= 2, "four runs need more than one stacked table at 80 columns"
    named = " ".join(headers)
    for header in [*four.labels, "better", "winner"]:
        assert re.search(rf"(^|\s){re.escape(header)}(\s|$)", named), header
    assert "…" not in text
    step = [line for line in lines if line.startswith(" step time (median) ")]
    assert len(step) == len(headers)


def test_two_runs_at_80_columns_are_at_most_two_tables(four):
    two = compare([analyzer.load([p]) for p in FOUR[:2]], default_labels(FOUR[:2]))
    console = Console(width=80, record=True, color_system=None)
    render_text(two, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text.count("rlperf compare — changes against verl_grpo_colocated") <= 2


def test_wins_name_each_metric_with_its_scope(four):
    """'wins 10: idle, all devices, idle, train pool' read two ways; each item is one metric."""
    titles = set(four.table["title"].to_list())
    assert {"idle (all devices)", "idle (train pool)", "idle (rollout pool)",
            "stage time (rollout)", "idle (pool_wait)", "exposed comm (DP group)",
            "guideline violations (warn)"} <= titles
    assert not any(", " in t or ": " in t for t in titles)
    console = Console(width=400, record=True, color_system=None)
    render_text(four, console)
    lines = [line for line in console.export_text().splitlines() if " wins " in line]
    assert len(lines) == 4
    for line, (label, won) in zip(lines, four.wins().items(), strict=True):
        head, listed = line.split(": ", 1)
        assert head == f"{label} wins {len(won)}"
        assert listed.split(", ") == (won or ["–"])


def test_a_run_compared_with_itself_gets_two_labels_and_ties(tmp_path: Path):
    path = str(RUNS / "trl_grpo")
    done = cli("compare", path, path, "--format", "json", "--quiet")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["runs"] == ["trl_grpo", "trl_grpo #2"]
    winners = {m["winner"] for m in document["metrics"]}
    assert winners <= {"tie", None} and "tie" in winners
    assert "label" not in done.stderr


def test_a_label_given_twice_is_named_in_one_line():
    a, b = str(RUNS / "trl_grpo"), str(RUNS / "verl_grpo_colocated")
    done = cli("compare", a, b, "-l", "x", "-l", "x", "--quiet")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "rlperf: error: --label: 'x' is given twice: each run needs its own label"]


@pytest.mark.parametrize("width", [60, 120])
def test_width_sets_the_terminal_tables_width(width: int, tmp_path: Path):
    """As analyze and audit take it: every line within --width, in a file too."""
    from rich.cells import cell_len

    hta = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "HolisticTraceAnalysis"
    runs = [str(hta / "nccl_data.json.gz"), str(hta / "test.json.gz")]
    done = cli("compare", *runs, "--width", str(width), "-q")
    assert done.returncode == 0, done.stderr
    assert max(cell_len(line) for line in done.stdout.splitlines()) == width
    out = tmp_path / "cmp.txt"
    assert cli("compare", *runs, "--width", str(width), "-q", "-o", str(out)).returncode == 0
    assert out.read_text() == done.stdout
