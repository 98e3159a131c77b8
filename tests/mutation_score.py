"""Mutation score per source file from mutmut's results, for ``make mutate`` (docs/mutation.md).

mutmut prints one total; the habit needs a score per module, with the mutants shown equivalent
in docs/mutation.md left out of the denominator (they cannot be killed by any test), and the
survivors listed so the next test has a target. Every mutant of every module is about a day of
this project's machines, so ``sample`` draws a uniform random sample of mutant names (seeded, so
a sample can be rerun) and the score of a sample comes with its 95% Wilson interval.

Usage (in build/mutate, mutmut's working folder):

- ``python tests/mutation_score.py MUTANTS_DIR EQUIVALENT_DOC [--codes JSON ...]
  [NAME_GLOB ... | --names FILE]``: ``--codes`` files of saved exit codes by mutant name (later
  ones win) stand in for the stored results, so a sample's "before" survives the full reset
  mutmut makes when the test selection changes.
- ``python tests/mutation_score.py sample N SEED FILE``: generate the mutants (mutmut's first
  step), then write N names drawn from all of them to FILE, one a line.
"""

from __future__ import annotations

import fnmatch
import json
import math
import random
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

KILLED = {1, 3}
TIMEOUT = {24, -24, 152, 255, 36}
NO_TESTS = {5, 33}
WIDTHS = (7, 6, 7, 8, 5, 5, 6)
MUTANT = re.compile(r"`([\w.ǁ]+__mutmut_\d+)`")
Z95 = 1.959963984540054


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


def metas(mutants: Path) -> Iterator[tuple[str, dict[str, int | None]]]:
    """(source file, exit code by mutant name) of each mutated file whose source still exists:
    a module moved away leaves its old .meta behind, whose mutants no longer exist."""
    for meta in sorted(mutants.rglob("*.py.meta")):
        source = str(meta.relative_to(mutants))[: -len(".meta")]
        if (mutants.parent / source).is_file():
            yield source, json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]


def results(
    mutants: Path,
    globs: list[str],
    names: set[str] | None = None,
    saved: dict[str, int | None] | None = None,
) -> dict[str, dict[str, str]]:
    """Per source file, each mutant's status (only mutants matching one of ``globs``, or only
    those in ``names``); ``saved`` exit codes stand in for the stored ones of their mutants."""
    out: dict[str, dict[str, str]] = {}
    for source, codes in metas(mutants):
        chosen = {
            k: status((saved or {}).get(k, v))
            for k, v in codes.items()
            if (k in names if names is not None else not globs)
            or any(fnmatch.fnmatch(k, g) for g in globs)
        }
        if chosen:
            out[source] = chosen
    return out


def draw(names: list[str], n: int, seed: int) -> list[str]:
    """``n`` of ``names`` uniformly at random without replacement, the same for the same seed and
    set of names whatever order they come in; sorted, so the file diffs cleanly."""
    pool = sorted(set(names))
    return sorted(random.Random(seed).sample(pool, min(n, len(pool))))


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n: unlike k/n ± z·se it stays inside [0, 1] and
    is honest at 100% (a sample of 50 all killed is not a certain 100%)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def generate() -> None:
    """mutmut's own first step (copy the sources, write each changed file's mutants and its
    .meta), so the names exist before a sample is drawn from them."""
    from mutmut.__main__ import copy_also_copy_files, copy_src_dir, create_mutants
    from mutmut.mutation.trampoline import set_mutant_under_test

    set_mutant_under_test("mutant_generation")
    Path("mutants").mkdir(exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    create_mutants(2)


def sample(argv: list[str]) -> int:
    n, seed, out = int(argv[0]), int(argv[1]), Path(argv[2])
    generate()
    names = [k for _, codes in metas(Path("mutants")) for k in codes]
    chosen = draw(names, n, seed)
    out.write_text("".join(f"{k}\n" for k in chosen), encoding="utf-8")
    print(f"{len(chosen)} of {len(names)} mutants drawn with seed {seed} into {out}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["sample"]:
        return sample(argv[1:])
    mutants, doc, globs = Path(argv[0]), Path(argv[1]), argv[2:]
    saved: dict[str, int | None] = {}
    while globs[:1] == ["--codes"]:
        saved.update(json.loads(Path(globs[1]).read_text(encoding="utf-8")))
        globs = globs[2:]
    sampled = globs[:1] == ["--names"]
    names = set(Path(globs[1]).read_text(encoding="utf-8").split()) if sampled else None
    if sampled:
        globs = []
    equiv = equivalent(doc)
    survivors: list[str] = []
    total: Counter[str] = Counter()
    heads = ("mutants", "killed", "timeout", "survived", "equiv", "unrun", "score")
    print(
        f"{'module':42} "
        + " ".join(f"{h:>{w}}" for h, w in zip(heads, WIDTHS, strict=True))
        + ("  95% interval" if sampled else "")
    )
    for path, statuses in results(mutants, globs, names, saved).items():
        count = Counter(
            "equivalent" if k in equiv and s != "killed" else s for k, s in statuses.items()
        )
        survivors += sorted(
            k
            for k, s in statuses.items()
            if s in ("survived", "no tests", "other") and k not in equiv
        )
        total += count
        print(row(path, count, sampled))
    print(row("all", total, sampled))
    if survivors:
        print("\nsurviving (not shown equivalent):")
        print("\n".join(f"  {k}" for k in survivors))
    return 0


def row(name: str, count: Counter[str], sampled: bool = False) -> str:
    """One table line; a timeout counts as killed (mutmut's convention) but is shown apart, since
    on a loaded machine a slow clean run can pass for one. A sample's line adds the 95% interval
    of the score of all the module's mutants it estimates."""
    killed = count["killed"] + count["timeout"]
    alive = count["survived"] + count["no tests"] + count["other"]
    score = f"{100 * killed / (killed + alive):5.1f}%" if killed + alive else "-"
    cells = (sum(count.values()), count["killed"], count["timeout"], alive, count["equivalent"],
             count["not checked"])
    line = f"{name:42} " + " ".join(f"{c:{w}d}" for c, w in zip(cells, WIDTHS, strict=False))
    line += f" {score:>6}"
    if sampled and killed + alive:
        low, high = wilson(killed, killed + alive)
        line += f"  {100 * low:5.1f}–{100 * high:5.1f}%"
    return line


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
