"""The sampler and score helper of ``make mutate SAMPLE=`` (tests/mutation_score.py): a sample
must be uniform and reproducible, and its interval the Wilson interval, or the score it reports
in docs/mutation.md is not the estimate it claims to be."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from mutation_score import draw, equivalent, results, row, wilson

NAMES = [f"m.x_f__mutmut_{i}" for i in range(1, 21)]


def test_a_sample_is_the_same_for_a_seed_whatever_order_the_names_come_in() -> None:
    first = draw(NAMES, 5, seed=1)
    assert draw(list(reversed(NAMES)) + NAMES[:3], 5, seed=1) == first
    assert len(set(first)) == 5 and set(first) <= set(NAMES) and first == sorted(first)
    assert draw(NAMES, 5, seed=2) != first
    assert draw(NAMES, 50, seed=1) == sorted(NAMES)


def test_every_mutant_is_equally_likely_to_be_drawn() -> None:
    """5 of 20 over 4000 seeds: each name is drawn with probability 1/4, standard deviation
    sqrt(1/4 · 3/4 / 4000) = 0.0068; every frequency must lie within 5 of them (0.034)."""
    seen = Counter(k for seed in range(4000) for k in draw(NAMES, 5, seed))
    assert set(seen) == set(NAMES)
    assert all(abs(c / 4000 - 0.25) < 0.034 for c in seen.values())


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # p = 1/2, n = 10: centre (0.5 + z²/20)/(1 + z²/10) = 0.5, half-width
        # z/(1 + z²/10)·sqrt(0.025 + z²/400) = 0.26340.
        (5, 10, 0.23659, 0.76341),
        # 0 of 10: the interval is [0, 2·(z²/20)/(1 + z²/10)] = [0, 0.27753], not the point 0.
        (0, 10, 0.0, 0.27753),
        (10, 10, 0.72247, 1.0),
    ],
)
def test_the_interval_is_wilsons(k: int, n: int, low: float, high: float) -> None:
    assert wilson(k, n) == pytest.approx((low, high), abs=1e-5)


def test_the_score_leaves_out_equivalents_and_unrun_mutants_and_shows_the_interval() -> None:
    """8 killed + 1 timeout of 9 + 1 alive = 90%; Wilson(9, 10) = 0.5958–0.9821."""
    count = Counter({"killed": 8, "timeout": 1, "survived": 1, "equivalent": 2, "not checked": 3})
    assert row("m.py", count, sampled=True).split() == [
        "m.py", "15", "8", "1", "1", "2", "3", "90.0%", "59.6–", "98.2%"
    ]
    assert row("m.py", count).split()[-1] == "90.0%"


def test_only_sampled_mutants_of_modules_that_still_exist_are_scored(tmp_path: Path) -> None:
    """A module moved away leaves its .meta behind; its mutants are no longer in the code."""
    (tmp_path / "mutants" / "pkg").mkdir(parents=True)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("", encoding="utf-8")
    codes = {"pkg.a.x_f__mutmut_1": 1, "pkg.a.x_f__mutmut_2": 0, "pkg.a.x_f__mutmut_3": None}
    for name, table in (("a", codes), ("gone", {"pkg.gone.x_g__mutmut_1": 0})):
        meta = tmp_path / "mutants" / "pkg" / f"{name}.py.meta"
        meta.write_text(json.dumps({"exit_code_by_key": table}), encoding="utf-8")
    got = results(tmp_path / "mutants", [], {"pkg.a.x_f__mutmut_2", "pkg.a.x_f__mutmut_3"})
    assert got == {
        "pkg/a.py": {"pkg.a.x_f__mutmut_2": "survived", "pkg.a.x_f__mutmut_3": "not checked"}
    }
    assert results(tmp_path / "mutants", []) == {
        "pkg/a.py": dict(zip(codes, ("killed", "survived", "not checked"), strict=True))
    }
    saved = {"pkg.a.x_f__mutmut_1": 0, "pkg.other.x_h__mutmut_1": 1}
    assert results(tmp_path / "mutants", ["pkg.a.x_f__mutmut_1"], None, saved) == {
        "pkg/a.py": {"pkg.a.x_f__mutmut_1": "survived"}
    }


def test_equivalents_are_read_from_the_first_column_of_the_docs_table(tmp_path: Path) -> None:
    doc = tmp_path / "mutation.md"
    doc.write_text(
        "| mutant | why |\n|---|---|\n| `a.x_f__mutmut_3` | same |\n| b | `a.x_g__mutmut_1` |\n",
        encoding="utf-8",
    )
    assert equivalent(doc) == {"a.x_f__mutmut_3"}
