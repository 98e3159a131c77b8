"""Mutation score per source file from mutmut's results, for ``make mutate`` (docs/mutation.md).

mutmut prints one total; the habit needs a score per module, with the mutants shown equivalent
in docs/mutation.md left out of the denominator (they cannot be killed by any test), and the
survivors listed so the next test has a target.

Usage: ``python tests/mutation_score.py MUTANTS_DIR EQUIVALENT_DOC [NAME_GLOB ...]``
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections import Counter
from pathlib import Path

KILLED = {1, 3}
TIMEOUT = {24, -24, 152, 255, 36}
NO_TESTS = {5, 33}
WIDTHS = (7, 6, 7, 8, 5, 5, 6)
MUTANT = re.compile(r"`([\w.ǁ]+__mutmut_\d+)`")


def equivalent(doc: Path) -> set[str]:
    """Mutant names listed in the doc's equivalent-mutant table (first column, in backticks)."""
    if not doc.is_file():
        return set()
    rows = (line for line in doc.read_text(encoding="utf-8").splitlines() if line.startswith("|"))
    return {m.group(1) for line in rows if (m := MUTANT.search(line.split("|")[1]))}


def status(code: int | None) -> str:
    if code is None:
        return "not checked"
    if code in KILLED:
        return "killed"
    if code in TIMEOUT:
        return "timeout"
    if code in NO_TESTS:
        return "no tests"
    return "survived" if code == 0 else "other"


def results(mutants: Path, globs: list[str]) -> dict[str, dict[str, str]]:
    """Per source file, each mutant's status (only mutants matching one of ``globs``)."""
    out: dict[str, dict[str, str]] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        chosen = {
            k: status(v)
            for k, v in codes.items()
            if not globs or any(fnmatch.fnmatch(k, g) for g in globs)
        }
        if chosen:
            out[str(meta.relative_to(mutants))[: -len(".meta")]] = chosen
    return out


def main(argv: list[str]) -> int:
    mutants, doc, globs = Path(argv[0]), Path(argv[1]), argv[2:]
    equiv = equivalent(doc)
    survivors: list[str] = []
    total = Counter()
    heads = ("mutants", "killed", "timeout", "survived", "equiv", "unrun", "score")
    print(f"{'module':42} " + " ".join(f"{h:>{w}}" for h, w in zip(heads, WIDTHS, strict=True)))
    for path, statuses in results(mutants, globs).items():
        count = Counter(
            "equivalent" if k in equiv and s != "killed" else s for k, s in statuses.items()
        )
        survivors += sorted(
            k
            for k, s in statuses.items()
            if s in ("survived", "no tests", "other") and k not in equiv
        )
        total += count
        print(row(path, count))
    print(row("all", total))
    if survivors:
        print("\nsurviving (not shown equivalent):")
        print("\n".join(f"  {k}" for k in survivors))
    return 0


def row(name: str, count: Counter) -> str:
    """One table line; a timeout counts as killed (mutmut's convention) but is shown apart, since
    on a loaded machine a slow clean run can pass for one."""
    killed = count["killed"] + count["timeout"]
    alive = count["survived"] + count["no tests"] + count["other"]
    score = f"{100 * killed / (killed + alive):5.1f}%" if killed + alive else "-"
    cells = (sum(count.values()), count["killed"], count["timeout"], alive, count["equivalent"],
             count["not checked"])
    return f"{name:42} " + " ".join(f"{c:{w}d}" for c, w in zip(cells, WIDTHS, strict=False)) + f" {score:>6}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
