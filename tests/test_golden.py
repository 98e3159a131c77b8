"""Every report rlperf writes of the bundled samples and the real corpus stays byte-identical
(issue 11: the architecture move must not change a single byte of any report).

What is compared: the text, JSON and Markdown report of every bundled sample run
(``sample_traces/runs/*``, ``sample_traces/synthetic/*``, each folder one run) and of every
corpus file (``../shared/corpus/**``) analysed on its own, through the real command line
(``rlperf analyze PATH --format F -o FILE``). Corpus files that rlperf refuses (exit 2: the
PROVENANCE notes, an ``.nsys-rep`` the installed nsys is too old for) are listed in the manifest
with their first error line and not compared; files above ``CORPUS_MAX_BYTES`` (2.5 MB, two of
them) are left out to keep ``make test`` within its time budget.

What is stored (``tests/golden/``): every compared report in full, gzipped with no timestamp
(about 0.8 MB in all, so a failure shows the lines that changed, not only that something did),
and ``manifest.json`` with each report's SHA-256 and line count (a regeneration's diff there says
which reports changed).

The only normalisation: the absolute paths of the checkout and of the corpus become ``<repo>``
and ``<corpus>`` (a report names its inputs). Nothing else varies legitimately; anything that
differs between two runs of the same input is a bug to fix, not to normalise.

Regenerate (after a change that is meant to alter reports, reviewing the diff):
``.venv/bin/python -m tests.golden.make``, or ``RLPERF_UPDATE_GOLDEN=1 .venv/bin/python -m
pytest -q tests/test_golden.py``. ``python -m tests.golden.make --check`` prints the differences
without pytest.
"""

from __future__ import annotations

import difflib
import os
from functools import cache

import pytest

from tests.golden import make

CONTEXT_LINES = 3
SHOWN_LINES = 40
UPDATE = os.environ.get("RLPERF_UPDATE_GOLDEN", "") not in ("", "0")


@cache
def rendered() -> dict[str, dict[str, make.Report]]:
    """Every input of the manifest rendered once (two worker processes), or, when updating, every
    input there is, written to ``tests/golden/`` first."""
    if UPDATE:
        done = make.render_all(make.inputs())
        make.write(done)
        return done
    return make.render_all(make.expected_inputs())


def manifest_inputs() -> list[str]:
    return sorted(make.read_manifest()["inputs"]) if make.MANIFEST.is_file() else []


def difference(name: str, fmt: str, got: make.Report) -> str | None:
    """None when ``got`` is the stored report, else the first differing lines with context."""
    if got.status != 0:
        return f"{name} ({fmt}): exit status {got.status}, stored exit 0: {got.body.strip()[:500]}"
    want = make.read_report(name, fmt)
    if got.body == want:
        return None
    diff = list(
        difflib.unified_diff(
            want.splitlines(),
            got.body.splitlines(),
            f"stored {name}.{fmt}",
            f"now {name}.{fmt}",
            n=CONTEXT_LINES,
            lineterm="",
        )
    )
    more = f"\n… {len(diff) - SHOWN_LINES} more diff lines" if len(diff) > SHOWN_LINES else ""
    if not diff:
        return f"{name} ({fmt}): differs only in line endings or a final newline"
    return "\n".join(diff[:SHOWN_LINES]) + more


def differences(done: dict[str, dict[str, make.Report]]) -> list[str]:
    expected = make.read_manifest()["inputs"]
    out = [f"{n}: stored but not rendered (input gone?)" for n in sorted(set(expected) - set(done))]
    for name in sorted(set(expected) & set(done)):
        out += [d for fmt in make.FORMATS if (d := difference(name, fmt, done[name][fmt]))]
    return out


def test_the_manifest_covers_every_input() -> None:
    """A new sample or corpus file needs the golden files regenerated; a stored one must exist."""
    manifest = make.read_manifest()
    accounted = {*manifest["inputs"], *manifest["refused"]}
    assert sorted(set(make.inputs()) - accounted) == []
    assert sorted(set(manifest["inputs"]) - set(make.inputs())) == []
    assert manifest["left_out"] == make.corpus_left_out()
    assert all(n.startswith("samples/") for n in make.sample_inputs())
    assert {n for n in manifest["inputs"] if n.startswith("samples/")} == set(make.sample_inputs())
    for name, formats in manifest["inputs"].items():
        for fmt, entry in formats.items():
            text = make.read_report(name, fmt)
            assert (make.digest(text), text.count("\n")) == (entry["sha256"], entry["lines"]), (
                name,
                fmt,
            )


@pytest.mark.parametrize("name", manifest_inputs())
def test_reports_are_byte_identical(name: str) -> None:
    if name.endswith(".nsys-rep") and make.nsys_version() != make.read_manifest()["nsys"]:
        pytest.skip(
            f"stored with {make.read_manifest()['nsys']}, nsys on PATH is {make.nsys_version()}"
        )
    done = rendered()[name]
    found = [d for fmt in make.FORMATS if (d := difference(name, fmt, done[fmt]))]
    assert found == [], "\n\n".join(found)


def test_normalising_touches_only_the_two_roots() -> None:
    text = f"{make.REPO}/sample_traces/x and {make.CORPUS}/a.json, /elsewhere/{make.REPO.name}"
    assert (
        make.normalise(text)
        == f"<repo>/sample_traces/x and <corpus>/a.json, /elsewhere/{make.REPO.name}"
    )
