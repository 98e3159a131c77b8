"""docs/architecture.md's product graph is the one the declarations give today."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def generator():
    spec = importlib.util.spec_from_file_location(
        "product_graph", REPO / "docs" / "product_graph.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_holds_the_generated_graph() -> None:
    graph = generator()
    page = graph.PAGE.read_text(encoding="utf-8")
    assert graph.page_with_graph(page) == page, "stale: run .venv/bin/python docs/product_graph.py"


def test_the_graph_has_every_product_and_edge() -> None:
    from analyzer.model.products import providers

    text = generator().generated()
    for name, provider in providers().items():
        assert f"| `{name}` | `{provider.module}.{provider.fn.__name__}` |" in text
        for read in provider.params:
            if read != "lazy":
                assert f"  {read} --> {name}\n" in text
    assert "  bubbles -.-> violations\n" in text
