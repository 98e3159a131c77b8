"""The vocabulary has one home (taxonomy/vocab.py, parsers/source.py): every idle cause has a
rule place and a colour, every stage a colour and declared groups, and the modules that use them
read those tables instead of keeping copies (docs/taxonomy.md, "Adding a stage or an idle
cause")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analyzer import assemble, classify
from analyzer.analyses import bubbles, guideline_metrics
from analyzer.classify import placement
from analyzer.report import charts
from parsers import source
from parsers.discover import format_traits, parser_modules
from taxonomy import vocab

DOCS = Path(__file__).resolve().parent.parent / "docs"
HEX = re.compile(r"^#[0-9a-f]{6}$")


def test_rule_places_are_one_to_n_and_the_rule_order_follows_them():
    places = sorted(c.rule for c in vocab.IDLE_CAUSE_TABLE)
    assert places == list(range(1, len(vocab.IDLE_CAUSES) + 1))
    assert sorted(vocab.IDLE_RULE_ORDER) == sorted(vocab.IDLE_CAUSES)
    assert vocab.IDLE_RULE_ORDER[0] == "weight_sync" and vocab.IDLE_RULE_ORDER[-1] == "other"


def test_every_idle_cause_and_stage_has_its_own_colour():
    for table in (vocab.CAUSE_COLORS, vocab.STAGE_COLORS):
        assert all(HEX.match(c) for c in table.values())
        assert len(set(table.values())) == len(table)
    assert tuple(vocab.CAUSE_COLORS) == vocab.IDLE_CAUSES
    assert tuple(vocab.STAGE_COLORS) == vocab.STAGE_NAMES


def test_bubbles_and_charts_read_the_vocabulary_instead_of_copies():
    assert bubbles.RULES is vocab.IDLE_RULE_ORDER
    assert charts.CAUSE_COLORS is vocab.CAUSE_COLORS
    assert charts.STAGE_COLORS is vocab.STAGE_COLORS


def test_the_rule_table_of_the_docs_lists_the_causes_in_rule_order():
    text = (DOCS / "analyses.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `([a-z_]+)` \|", text, flags=re.MULTILINE)
    assert [cause for _, cause in rows] == list(vocab.IDLE_RULE_ORDER)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1))


def test_the_taxonomy_page_lists_every_idle_cause_with_its_rule_place():
    text = (DOCS / "taxonomy.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z_]+)` \| (\d+) \|", text, flags=re.MULTILINE)
    declared = [(c.name, c.rule) for c in vocab.IDLE_CAUSE_TABLE]
    assert [(name, int(n)) for name, n in rows] == declared


def test_stage_groups_are_declared_and_derived_from_the_stages():
    used = set().union(*(s.groups for s in vocab.STAGES))
    assert used == set(vocab.STAGE_GROUPS)
    forward = ("reward", "old_logprob", "ref_logprob", "values")
    assert (*forward, "advantage") == vocab.PREPARATION_STAGES
    assert forward == vocab.FORWARD_STAGES
    assert vocab.TRAIN_STAGES == ("critic_update", "actor_update")
    assert (*forward[1:], *vocab.TRAIN_STAGES) == vocab.TRAINER_STAGES
    with pytest.raises(KeyError, match="no stage group 'updates'"):
        vocab.stages_in("updates")


def test_no_module_keeps_its_own_stage_grouping():
    copies = ((classify, "UPDATE_STAGES"), (placement, "TRAINING"), (guideline_metrics, "PREP"))
    for module, old in copies:
        assert not hasattr(module, old), f"{module.__name__}.{old} is back: read taxonomy.vocab"
    assert not hasattr(assemble, "RANK_IN_FILE")


@pytest.mark.parametrize(
    ("name", "parser", "assembler"),
    [
        ("job_rank-3.json", 3, 3),
        ("Rank12_trace.json", 12, 12),
        ("worker_rank_7.pt.trace.json", 7, 7),
        ("prank5.json", None, None),
        ("rank123456.json", 123456, None),
        ("rank1234567_rank3.json", 1234567, 3),
    ],
)
def test_the_two_rank_patterns_differ_only_on_long_digit_runs(
    name: str, parser: int | None, assembler: int | None
):
    """The parsers take any digit run (they range-check and count it); the assembler, which
    checks no range, takes at most five digits and tries a later ``rank``."""
    loose, bounded = source.RANK_IN_NAME.search(name), source.RANK_IN_NAME_BOUNDED.search(name)
    assert (int(loose.group(1)) if loose else None) == parser
    assert (int(bounded.group(1)) if bounded else None) == assembler


def test_formats_declare_their_traits_and_only_known_ones():
    declared = {m.FORMAT: frozenset(getattr(m, "TRAITS", ())) for m in parser_modules()}
    assert set().union(*declared.values()) <= set(source.FORMAT_TRAITS)
    per_process = {f for f, t in declared.items() if source.CORRELATION_PER_PROCESS in t}
    assert per_process == {"nsys-sqlite", "nsys-rep", "nsys-stats-csv"}
    assert {f for f, t in declared.items() if source.SESSION_CLOCK in t} == {"nsys-stats-csv"}
    assert format_traits("no-such-format") == frozenset()
    assert format_traits("kineto") == frozenset()
