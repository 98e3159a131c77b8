"""Every repository file that the repository's own text cites exists.

A user reads ``docs/``, docstrings and comments with nothing but this checkout, so a file they
are sent to must be in it. The scan reads every tracked text file (``git ls-files``: ``.py``,
``.md``, ``.toml``, ``.txt``, ``.sh``, ``.cfg``, ``.yml`` and files without a suffix such as the
Makefile) line by line and checks four kinds of reference:

1. A path whose first part is a top-level folder of the repository (``docs/taxonomy.md``,
   ``parsers/kineto.py``, ``sample_traces/runs/``): it must exist, read from the root.
2. A path into ``design/``: the maintainers' notes are not in the repository, so citing them is
   an error wherever the path starts (what users need from them belongs in ``docs/``).
3. A Markdown link or image target (``[text](target)``, ``[label]: target``) in a ``.md`` file:
   it must exist relative to that file.
4. A bare notes name in capitals (``README.md``, ``TAXONOMY.md``): it must exist at the root or
   beside the citing file, unless :data:`EXTERNAL_NOTES` says whose file it is.

What is not a reference, by rule: URLs (removed from the line first); a path with a placeholder
(``<run>``, ``{name}``, ``...`` or ``…``: an example a reader fills in); a path starting with
``./`` or ``../`` outside a Markdown link (relative to a folder the text names, such as the
corpus beside the checkout); a path whose first part is no tracked top-level folder (``runs/x/``,
``build/``, ``.venv/``: a user's or a generated folder); a bare lowercase name (``report.md``: an
output file). A glob (``tests/test_mutants_*.py``) must match at least one file. Trailing
sentence punctuation is no part of a path. This file is not scanned: its cases are broken
references on purpose.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TEXT_SUFFIXES = frozenset({".py", ".md", ".toml", ".txt", ".sh", ".cfg", ".yml", ".yaml", ""})

EXTERNAL_NOTES: dict[str, str] = {
    "PROVENANCE.md": "the provenance note of each corpus folder (../shared/corpus/*/)",
    "PERFORMANCE.md": "nccl-tests' documentation of its bandwidth figures",
}
"""Capitalised notes names that are other projects' files, with whose."""

ALLOWED_MISSING: dict[str, str] = {}
"""Repository paths that may be cited before they exist, each with why."""

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
_TOKEN = re.compile(r"(?<![\w./~$@%-])((?:\.\.?/)*[\w*?<>{}…-][\w.*?<>{}…-]*(?:/[\w.*?<>{}…-]*)*)")
_MD_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|^\s*\[[^\]]+\]:\s*(\S+)")
_NOTES_NAME = re.compile(r"[A-Z][A-Z0-9_-]*\.md")
_PLACEHOLDER = re.compile(r"[<>{}…]|\.\.\.")
_GLOB = re.compile(r"[*?]")
_TRAILING = ".,;:!?'\""


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode().split("\0")
    paths = (ROOT / name for name in listed if name and Path(name).suffix in TEXT_SUFFIXES)
    return [p for p in paths if p != Path(__file__).resolve()]


def top_folders() -> frozenset[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, check=True)
    return frozenset(n.split("/")[0] for n in listed.stdout.decode().splitlines() if "/" in n)


def _exists(path: str, base: Path) -> bool:
    if _GLOB.search(path):
        return next(base.glob(path.rstrip("/")), None) is not None
    return (base / path).exists()


def _problem(token: str, source: Path, tops: frozenset[str]) -> str | None:
    """Why ``token`` (one path-like word of a line of ``source``) is a broken reference."""
    if _PLACEHOLDER.search(token):
        return None
    path = token.rstrip(_TRAILING)
    if re.search(r"(?:^|/)design/", path):
        return f"{path}: the design notes are not in the repository; cite the docs/ page instead"
    if path.startswith("."):
        return None
    if "/" in path:
        if path.split("/")[0] not in tops or path in ALLOWED_MISSING:
            return None
        return None if _exists(path, ROOT) else f"{path}: no such file in the repository"
    notes = _NOTES_NAME.fullmatch(path) and path not in EXTERNAL_NOTES
    if notes and not (_exists(path, ROOT) or _exists(path, source.parent)):
        return f"{path}: no such file at the root or beside {source.relative_to(ROOT)}"
    return None


def _link_problem(target: str, source: Path) -> str | None:
    """Why a Markdown link target of ``source`` is broken."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
        return None
    path = target.split("#")[0]
    if not path or _PLACEHOLDER.search(path):
        return None
    where = (source.parent / path).resolve()
    if where.is_relative_to(ROOT) and str(where.relative_to(ROOT)) in ALLOWED_MISSING:
        return None
    return None if where.exists() else f"{target}: the link leads to no file"


def broken_references(files: list[Path], tops: frozenset[str]) -> Iterator[str]:
    """``file:line: problem`` for each broken reference in ``files``."""
    for source in files:
        try:
            text = source.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{source.relative_to(ROOT)}:{number}"
            yield from (f"{where}: {p}" for p in line_problems(source, line, tops))


def line_problems(source: Path, line: str, tops: frozenset[str]) -> list[str]:
    """The broken references of one line of ``source``, sorted."""
    bare = _URL.sub(" ", line)
    problems = {_problem(m.group(1), source, tops) for m in _TOKEN.finditer(bare)}
    if source.suffix == ".md":
        targets = (m.group(1) or m.group(2) for m in _MD_LINK.finditer(line))
        problems |= {_link_problem(t, source) for t in targets}
    return sorted(p for p in problems if p)


@pytest.fixture(scope="module")
def tops() -> frozenset[str]:
    return top_folders()


def test_every_cited_repository_file_exists(tops: frozenset[str]) -> None:
    broken = list(broken_references(tracked_text_files(), tops))
    assert broken == [], "references to files the repository lacks:\n" + "\n".join(broken)


def test_the_allowed_missing_files_are_still_missing() -> None:
    """An entry of :data:`ALLOWED_MISSING` whose file now exists is stale: remove it."""
    stale = [p for p in ALLOWED_MISSING if (ROOT / p).exists()]
    assert stale == []


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("see docs/nowhere.md for more", ["docs/nowhere.md: no such file in the repository"]),
        ("ids follow design/TAXONOMY.md §2", ["design/TAXONOMY.md: the design notes are not"]),
        ("as ARCHITECTURE.md explains.", ["ARCHITECTURE.md: no such file at the root"]),
        ("the schema in parsers/events.py.", []),
        ("a new tests/test_mutants_*.py goes here", []),
        ("no tests/test_nothing_*.py matches", ["tests/test_nothing_*.py: no such file"]),
        ("written to sample_traces/synthetic/<scenario>/", []),
        ("https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md", []),
        ("read ../shared/corpus/pipit/PROVENANCE.md and runs/my_run/", []),
        ("tmp_path / 'report.md'", []),
    ],
)
def test_the_rules_on_single_lines(tops: frozenset[str], line: str, found: list[str]) -> None:
    """Each rule of the module docstring on one line of a Python file (``found``: the start of
    each problem)."""
    source = ROOT / "tests" / "__doc_references_case__.py"
    problems = line_problems(source, line, tops)
    assert len(problems) == len(found), problems
    assert all(p.startswith(f) for p, f in zip(problems, found, strict=True)), problems


def test_markdown_links_resolve_from_their_file(tops: frozenset[str]) -> None:
    source = ROOT / "docs" / "__case__.md"
    line = "[taxonomy](taxonomy.md), [top](../README.md#use), [gone](gone.md), [web](https://x.org)"
    problems = line_problems(source, line, tops)
    assert problems == ["gone.md: the link leads to no file"]

