"""The layering of ``parsers/``, ``taxonomy/`` and ``analyzer/`` (issue 11): no violation at all.

The rules (checked by :mod:`tests.layering`, which reads every import from the source, those
inside functions and under ``TYPE_CHECKING`` included): imports go only leftward along
``parsers → taxonomy → analyzer.model → analyzer.assemble → analyzer.classify →
analyzer.analyses → analyzer.report → analyzer.ops → analyzer.cli`` (modules are placed in
``tests.layering.PLACEMENT``), no import cycle, no ``from x import _private`` across modules,
no ``importlib`` import whose target only a string names, and no function-local import without
a comment saying why it is not at module level (it defers a heavy dependency).
``.venv/bin/python -m tests.layering`` prints the summary and every violation.
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


def test_there_is_no_layering_violation(graph: layering.Graph) -> None:
    found = layering.violations(graph)
    assert found == [], "layering violations (.venv/bin/python -m tests.layering):\n" + "\n".join(
        found
    )


def test_every_function_local_import_says_why(graph: layering.Graph) -> None:
    assert layering.unexplained_locals(graph) == []


def test_a_new_violation_in_the_real_tree_is_found(graph: layering.Graph) -> None:
    """The zero above is not vacuous: one more import, rightward and closing a cycle, shows."""
    late = layering.Import("analyzer.model.run", "analyzer.cli", 1, "local", ("main",))
    g = layering.Graph(graph.files, [*graph.imports, late], graph.dynamic)
    found = layering.violations(g)
    assert "rightward analyzer.model.run (analyzer.model) -> analyzer.cli (analyzer.cli)" in found
    assert "cycle analyzer.model.run -> analyzer.cli" in found
    assert layering.unexplained_locals(g) == ["analyzer.model.run:1 -> analyzer.cli"]


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


def test_a_function_local_import_closing_a_loop_is_a_cycle(tmp_path: Path) -> None:
    write(tmp_path, {"low/__init__.py": "", "low/a.py": "from low import b\n",
                     "low/b.py": "def f():\n    from low.a import x  # deferred: heavy\n"})
    g = layering.graph(tmp_path, ("low",))
    assert layering.violations(g, {"low": "low"}, ("low",)) == [
        "cycle low.a -> low.b", "cycle low.b -> low.a"
    ]
    assert layering.unexplained_locals(g) == []


def test_a_local_import_without_a_comment_is_named(tmp_path: Path) -> None:
    write(tmp_path, TOY)
    g = layering.graph(tmp_path, ("low", "high"))
    assert layering.unexplained_locals(g) == ["high.c:6 -> high.d", "low.up:2 -> high.c"]
