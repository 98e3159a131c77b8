"""The layering of ``parsers/``, ``taxonomy/`` and ``analyzer/`` (issue 11) as a ratchet.

The rules (checked by :mod:`tests.layering`, which reads every import from the source, those
inside functions and under ``TYPE_CHECKING`` included): imports go only leftward along
``parsers → taxonomy → analyzer.model → analyzer.assemble → analyzer.classify →
analyzer.analyses → analyzer.report → analyzer.ops → analyzer.cli`` (today's modules are placed
in ``tests.layering.PLACEMENT``), no import cycle, no ``from x import _private`` across modules,
no ``importlib`` import whose target only a string names.

The code breaks these rules today. ``tests/layering_baseline.txt`` lists each violation that
exists, one per line; the test fails when a violation not on the list appears, and also when a
listed one is gone, so the list is always exact and can only shrink. After removing some:
``.venv/bin/python -m tests.layering --baseline`` rewrites it (review the diff: lines may only
disappear).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import layering


@pytest.fixture(scope="module")
def graph() -> layering.Graph:
    return layering.graph()


def test_every_placement_names_modules_that_exist(graph: layering.Graph) -> None:
    assert set(layering.PLACEMENT.values()) <= set(layering.LAYERS)
    stale = [
        p
        for p in layering.PLACEMENT
        if not any(m == p or m.startswith(p + ".") for m in graph.files)
    ]
    assert stale == []


def test_the_violations_are_exactly_the_baseline(graph: layering.Graph) -> None:
    found = layering.violations(graph)
    listed = layering.read_baseline()
    assert listed == sorted(set(listed)), "the baseline must be sorted, one violation per line"
    new = sorted(set(found) - set(listed))
    gone = sorted(set(listed) - set(found))
    assert new == [], (
        "new layering violations (fix them; the baseline may only shrink):\n" + "\n".join(new)
    )
    assert gone == [], ("fixed, so remove from tests/layering_baseline.txt "
                        "(.venv/bin/python -m tests.layering --baseline):\n" + "\n".join(gone))


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


TOY = {
    "low/__init__.py": "",
    "low/a.py": "_hidden = 1\nvisible = 2\n",
    "low/b.py": "from . import a\nfrom .a import _hidden, visible\n",
    "high/__init__.py": "",
    "high/c.py": (
        "from typing import TYPE_CHECKING\n"
        "import low.a\n"
        "if TYPE_CHECKING:\n    from high import d\n"
        "def f():\n    from .d import g\n    return g\n"
    ),
    "high/d.py": "import importlib\nNAMES = ('high.c',)\ndef g():\n    return "
        "importlib.import_module(NAMES[0])\n",
    "low/up.py": "def late():\n    from high.c import f\n    return f\n",
}
TOY_PLACEMENT = {"low": "low", "high": "high"}


def test_the_checker_reads_every_kind_of_import(tmp_path: Path) -> None:
    write(tmp_path, TOY)
    g = layering.graph(tmp_path, ("low", "high"))
    seen = {(i.source, i.target, i.where, i.names) for i in g.imports}
    assert seen == {
        ("low.b", "low.a", "top", ()),
        ("low.b", "low.a", "top", ("_hidden", "visible")),
        ("high.c", "low.a", "top", ()),
        ("high.c", "high.d", "type", ()),
        ("high.c", "high.d", "local", ("g",)),
        ("high.d", "high.c", "named", ()),
        ("low.up", "high.c", "local", ("f",)),
    }
    assert g.dynamic == {"high.d": [4]}


def test_the_checker_finds_each_kind_of_violation(tmp_path: Path) -> None:
    write(tmp_path, TOY)
    g = layering.graph(tmp_path, ("low", "high"))
    assert layering.violations(g, TOY_PLACEMENT, ("low", "high")) == [
        "cycle-via-registry high.c -> high.d",
        "cycle-via-registry high.d -> high.c",
        "dynamic high.d",
        "private low.b -> low.a._hidden",
        "rightward low.up (low) -> high.c (high)",
    ]
    assert layering.violations(g, {"low": "low"}, ("low",))[-1] == "unplaced high.d"


def test_cycles_are_the_strongly_connected_components() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert layering.cycles(edges) == [["a", "b", "c"], ["d", "e"]]
    assert layering.cycles({"a": {"b"}, "b": set()}) == []


def test_a_type_checking_import_is_rightward_but_no_cycle(tmp_path: Path) -> None:
    write(tmp_path, {"low/__init__.py": "", "low/a.py": "from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from high.b import X\n",
                     "high/__init__.py": "", "high/b.py": "from low import a\nX = 1\n"})
    g = layering.graph(tmp_path, ("low", "high"))
    assert layering.violations(g, TOY_PLACEMENT, ("low", "high")) == [
        "rightward-type low.a (low) -> high.b (high)"
    ]
