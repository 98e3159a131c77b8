"""What a new user saw wrong in the layout and wording of the reports (issue 13, items 6–8 and
the smaller list): each problem measured on the run where it was seen, through the code that
prints it."""

from __future__ import annotations

import subprocess
import sys

from report_truth import REPO, RUNS

CORPUS = REPO.parent / "shared" / "corpus"


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, cwd=REPO
    )


# --- item 7: a Markdown report loads no chart library -------------------------------------------


AFTER_MAIN = (
    "import sys\nfrom analyzer.cli import main\n"
    "try:\n    main()\nfinally:\n    print('altair loaded:', 'altair' in sys.modules)\n"
)


def test_a_markdown_report_never_imports_altair(tmp_path):
    """md shows each figure as its table: the seconds of altair's import were spent on charts it
    never drew (11–15 s against 3.4 s for text)."""
    out = tmp_path / "r.md"
    done = _python(AFTER_MAIN, "analyze", str(RUNS / "verl_ppo_disaggregated"), "-f", "md",
                   "--quiet", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "altair loaded: False" in done.stdout
    assert "## Stage share per step" in out.read_text()


def test_an_html_report_still_draws_its_charts(tmp_path):
    out = tmp_path / "r.html"
    done = _python(AFTER_MAIN, "analyze", str(RUNS / "verl_ppo_disaggregated"), "-f", "html",
                   "--quiet", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "altair loaded: True" in done.stdout
    assert out.read_text().count('class="chart"') >= 4


def test_png_without_output_is_refused_before_reading_anything(tmp_path):
    """The usage error comes before any parsing: a missing input is not even looked at, and
    neither altair nor the trace parsers' work is paid for."""
    done = _python(AFTER_MAIN, "analyze", str(tmp_path / "no-such-run"), "-f", "png", "--quiet")
    assert done.returncode == 2
    assert "--format png: writes image files" in done.stderr
    assert "no-such-run" not in done.stderr
    assert "altair loaded: False" in done.stdout
