"""The declared products (analyzer/model/products.py): every provider reads only declared products
or run inputs, the typed attributes name exactly the provided products, the graph has no cycle,
and a missing provider, a cycle or an undeclared lazy read is an error naming the products."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import analyzer
from analyzer.model import products
from analyzer.model.products import INPUTS, Lazy, ProductError, providers, provides
from analyzer.model.run import Run
from parsers.events import empty_events


def test_typed_attributes_name_exactly_the_provided_products() -> None:
    assert set(products.declared()) == set(providers())


def test_every_parameter_is_a_product_or_an_input() -> None:
    unknown = {
        (p.name, r)
        for p in providers().values()
        for r in p.reads
        if r not in providers() and r not in INPUTS
    }
    assert unknown == set()


def test_the_graph_has_no_cycle_and_orders_every_product() -> None:
    order = products.order()
    assert sorted(order) == sorted(providers())
    position = {name: i for i, name in enumerate(order)}
    late = [
        (p.name, r)
        for p in providers().values()
        for r in p.reads
        if r in position and position[r] > position[p.name]
    ]
    assert late == []
    chain = [
        "clock",
        "aligned",
        "ranges",
        "stepping",
        "stage_ranges",
        "activity",
        "device_states",
        "bubbles",
    ]
    assert [position[n] for n in chain] == sorted(position[n] for n in chain)


def test_providers_read_what_the_pipeline_says() -> None:
    assert providers()["bubbles"].reads == ("device_states", "activity", "steps")
    assert providers()["steps"].reads == ("step_table", "options", "incomplete_steps")
    assert set(providers()["violations"].lazy) >= {"steps", "bubbles", "collectives", "metrics"}


def bare_run() -> Run:
    return Run(sources=[], events=empty_events(), metrics=pl.DataFrame())


def test_a_product_nobody_provides_is_named() -> None:
    with pytest.raises(ProductError, match="no provider of product 'nothing'"):
        bare_run().product("nothing")


def test_a_cycle_names_its_products(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = dict(products._PROVIDERS)
    monkeypatch.setattr(products, "_PROVIDERS", registry)
    provides("_a")(lambda _b: 1)
    provides("_b")(lambda _a: 2)
    with pytest.raises(ProductError, match="cycle: _a → _b → _a"):
        bare_run().product("_a")


def test_two_providers_of_one_product_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(products, "_PROVIDERS", dict(products._PROVIDERS))

    def other(events: pl.DataFrame) -> pl.DataFrame:
        return events

    with pytest.raises(
        ProductError, match=r"'bubbles' provided by both analyzer\.analyses\.bubbles\.bubbles"
    ):
        provides("bubbles")(other)


def test_a_lazy_read_outside_the_declaration_is_refused() -> None:
    lazy = Lazy(bare_run(), ("steps",), "violations")
    with pytest.raises(ProductError, match="violations reads 'bubbles', which it does not declare"):
        lazy["bubbles"]


def test_products_are_computed_once_and_injected_ones_are_read() -> None:
    sample = [Path(__file__).resolve().parents[1] / "sample_traces" / "synthetic" / "colocated"]
    assert analyzer.load(sample).bubbles["step"].unique().sort().to_list() == [1, 2]
    run = analyzer.load(sample)
    steps = analyzer.load(sample).steps.filter(pl.col("step") == 2)
    run.inject(steps=steps)
    assert run.steps is steps and run.product("steps") is steps
    assert run.bubbles is run.bubbles
    assert {"bubbles", "device_states", "activity"} <= run.computed()
    assert run.bubbles["step"].unique().to_list() == [2]
