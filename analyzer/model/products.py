"""Declared run products: a provider is a function whose parameters name what it reads.

    @provides("bubbles", schema=frames.BUBBLES)
    def bubbles(device_states: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame: ...

``Run`` computes a product on first access by calling its provider with the products (or run
inputs, :data:`INPUTS`) its parameters name, each computed the same way, and keeps the result;
a frame with a schema is checked against it. The graph of who reads what is therefore the
declarations themselves (``docs/architecture.md`` is generated from them), a name nobody
provides and a cycle are errors that say which products are involved, and a provider cannot
read anything it has not declared.

A provider declared ``per_rank=True`` is *rank-local*: its product over the run is the
concatenation, in ascending rank order, of the provider called on each rank's events alone
(:data:`SHARDED`), every other parameter passed whole ("broadcast"); the events it gets are
those of the ``--ranks`` selection (the driver's and logs' too), given in one place
(:func:`analyzer.model.sharded.rank_input`) whichever way it is computed, except for the
products about the files (declared ``every_rank=True``). Every other product sees every rank (a rank
waits for partners not selected); those that report per rank keep the rows of
``selected_ranks`` (docs/cli.md). The declaration is data:
``Run`` may then compute it rank by rank, in another process or on another node
(:mod:`analyzer.model.sharded`); ``tests/test_per_rank.py`` checks every such declaration.

:class:`Products` lists every product with its type, so that ``run.bubbles`` is typed for mypy;
``tests/test_products.py`` checks that it and the providers name the same products.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

import polars as pl

from .frames import Stepping
from .pipeline import declare_all

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

INPUTS = ("sources", "events", "metrics", "options", "warnings", "failures")
"""What a run holds before any product: its sources, their events and metric rows, the user's
options, the warnings list (a provider that finds something to warn about appends to it) and
the failures recorded so far (``analyzer/model/failures.py``: one part of a product that failed with
an internal error, the rest still computed)."""
LAZY = "lazy"
"""The parameter through which a provider reads, on demand, only the products it declared as
``lazy=``: the guidelines read what each metric needs, so that one failing product fails only
the guidelines that read it."""
SHARDED = "events"
"""The input a rank-local (``per_rank``) provider reads one rank at a time."""
MUTABLE = ("warnings", "failures")
"""Inputs a provider appends to: a rank-local one, which may run in another process, reads
neither."""


class ProductError(RuntimeError):
    """A product nobody provides, or providers that read each other in a cycle: a bug in
    rlperf's declarations, never the user's input."""


@dataclass(frozen=True)
class Provider:
    name: str
    fn: Callable[..., Any]
    params: tuple[str, ...]
    """The parameters, each a product or an input (:data:`INPUTS`), or :data:`LAZY`."""
    lazy: tuple[str, ...]
    schema: Mapping[str, pl.DataType] | None
    per_rank: bool = False
    """Rank-local: the concatenation in rank order of the provider over each rank's events."""
    every_rank: bool = False
    """Rank-local and about the files rather than the analysis: it reads every rank's events
    whatever ``--ranks`` selects (the data-quality section covers every rank, docs/assembly.md)."""

    @property
    def module(self) -> str:
        return self.fn.__module__

    @property
    def reads(self) -> tuple[str, ...]:
        """Every product and input it may read, the lazy ones included."""
        return (*(p for p in self.params if p != LAZY), *self.lazy)


_PROVIDERS: dict[str, Provider] = {}


def provides(name: str, *, schema: Mapping[str, pl.DataType] | None = None,
             lazy: tuple[str, ...] = (), per_rank: bool = False,
             every_rank: bool = False) -> Callable[[F], F]:
    """Declare ``fn`` the provider of product ``name``; its parameter names are what it reads
    (with ``lazy``, a parameter named :data:`LAZY` reads those on demand; with ``per_rank``,
    it is rank-local: see the module's docstring; with ``every_rank`` too, it reads every rank
    whatever ``--ranks`` selects)."""

    def register(fn: F) -> F:
        params = tuple(inspect.signature(fn).parameters)
        if bool(lazy) != (LAZY in params):
            raise ProductError(
                f"{fn.__qualname__}: lazy products need a parameter {LAZY!r}, and it needs them"
            )
        if per_rank and (SHARDED not in params or lazy or set(params) & set(MUTABLE)):
            raise ProductError(
                f"{fn.__qualname__}: a per_rank provider reads {SHARDED!r} (one rank's), nothing "
                f"on demand, and none of {', '.join(MUTABLE)} (what it appended there in a "
                "worker would be lost)"
            )
        if every_rank and not per_rank:
            raise ProductError(f"{fn.__qualname__}: every_rank is for a per_rank provider")
        known = _PROVIDERS.get(name)
        if known is not None and known.fn.__qualname__ != fn.__qualname__:
            raise ProductError(f"{name!r} provided by both {known.module}.{known.fn.__qualname__} "
                               f"and {fn.__module__}.{fn.__qualname__}")
        _PROVIDERS[name] = Provider(name, fn, params, lazy, schema, per_rank, every_rank)
        return fn

    return register


class Lazy:
    """The products a provider declared ``lazy``, each computed when first read."""

    def __init__(self, source: Products, allowed: tuple[str, ...], reader: str) -> None:
        self._source, self._allowed, self._reader = source, frozenset(allowed), reader

    def __getitem__(self, name: str) -> Any:
        if name not in self._allowed:
            raise ProductError(f"{self._reader} reads {name!r}, which it does not declare")
        return self._source.read(name)


def providers() -> Mapping[str, Provider]:
    """Every declared provider by product name (the pipeline's modules declare them on import;
    the ``analyzer`` package has them imported first: :mod:`analyzer.model.pipeline`)."""
    declare_all()
    return MappingProxyType(_PROVIDERS)


def order() -> list[str]:
    """Every product in an order where each comes after what it reads."""
    declare_all()
    done: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen or name in INPUTS:
            return
        seen.add(name)
        for dep in _PROVIDERS[name].reads:
            visit(dep)
        done.append(name)

    for name in sorted(_PROVIDERS):
        visit(name)
    return done


class Product(Generic[T]):
    """A typed product attribute: ``run.<name>`` is the product, computed on first access."""

    name: str

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Product[T]: ...
    @overload
    def __get__(self, obj: Products, owner: type) -> T: ...
    def __get__(self, obj: Products | None, owner: type) -> Product[T] | T:
        if obj is None:
            return self
        value: T = obj.product(self.name)
        return value


Frame = pl.DataFrame


class Products:
    """Every product of a run, typed; what each holds is documented with its provider and, for
    frames, its schema in ``analyzer/model/frames.py``."""

    def product(self, name: str) -> Any:
        raise NotImplementedError

    def read(self, name: str) -> Any:
        """An input (:data:`INPUTS`) or a product, by name: what a provider's parameter names."""
        return getattr(self, name) if name in INPUTS else self.product(name)

    # assembly
    ranks = Product[list[int]]()
    selected_ranks = Product[list[int]]()
    rank_collective_calls = Product[Frame]()
    collective_calls = Product[Frame]()
    clock = Product[Frame]()
    aligned = Product[Frame]()
    # classification
    profile = Product[dict[str, Any]]()
    ranges = Product[Frame]()
    stepping = Product[Stepping]()
    step_table = Product[Frame]()
    steps = Product[Frame]()
    step_markers_closed = Product[Frame]()
    incomplete_steps = Product[Frame]()
    stage_ranges = Product[Frame]()
    segments = Product[Frame]()
    stage_timeline = Product[Frame]()
    pools = Product[Frame]()
    classified = Product[Frame]()
    collectives = Product[Frame]()
    activity = Product[Frame]()
    placement = Product[dict[str, Any]]()
    # analyses
    overview = Product[Frame]()
    event_checks = Product[Frame]()
    event_names = Product[Frame]()
    data_quality = Product[Frame]()
    log_result = Product[Any]()
    log_stages = Product[Frame]()
    log_steps = Product[Frame]()
    log_stats = Product[Frame]()
    log_stage_summary = Product[Frame]()
    log_dominant = Product[Frame]()
    log_weight_sync = Product[Frame]()
    log_long_tail = Product[Frame]()
    log_long_tail_summary = Product[Frame]()
    log_unclassified = Product[Frame]()
    log_needs_trace = Product[Frame]()
    log_notes = Product[list[str]]()
    gpu_time = Product[Frame]()
    annotations = Product[Frame]()
    pipeline_phases = Product[Frame]()
    breakdown = Product[Frame]()
    critical_path = Product[Frame]()
    device_states = Product[Frame]()
    bubbles = Product[Frame]()
    largest_bubbles = Product[Frame]()
    collective_waits = Product[Frame]()
    collectives_by_dim = Product[Frame]()
    exposed_intervals = Product[Frame]()
    exposed_comm = Product[Frame]()
    weight_sync = Product[Frame]()
    stragglers = Product[Frame]()
    gpu_findings = Product[Frame]()
    workdepth = Product[Frame]()
    violations = Product[Frame]()
    findings = Product[Frame]()
    step_outliers = Product[Frame]()
    outlier_findings = Product[Frame]()
    efficiency_steps = Product[Frame]()
    efficiency = Product[Frame]()
    efficiency_notes = Product[list[str]]()
    efficiency_findings = Product[Frame]()


def declared() -> dict[str, Product[Any]]:
    """The typed product attributes of :class:`Products` by name."""
    return {k: v for k, v in vars(Products).items() if isinstance(v, Product)}
