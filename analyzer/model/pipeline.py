"""How the providers get declared without the model importing the pipeline above it.

The pipeline's modules declare every product on import (``@provides``); the ``analyzer`` package
registers here the function that imports them (:func:`declare_with`), and
:func:`analyzer.model.products.providers` runs it before answering (:func:`declare_all`). So a
run can compute any product wherever it was built, while importing ``analyzer`` (``rlperf
--help``, a report kept in a dataset) imports none of the pipeline and none of polars.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without importing it (analyzer/__init__.py)
if TYPE_CHECKING:
    from collections.abc import Callable

_PENDING: list[Callable[[], object]] = []


def declare_with(load: Callable[[], object]) -> None:
    """Run ``load`` (it imports modules that declare providers) before providers are read."""
    _PENDING.append(load)


def declare_all() -> None:
    """Run every pending ``load`` once (one that fails stays pending and its error propagates)."""
    while _PENDING:
        load = _PENDING.pop(0)
        try:
            load()
        except BaseException:
            _PENDING.insert(0, load)
            raise
