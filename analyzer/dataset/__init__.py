"""The rlperf dataset: a run's parsed tables kept as Parquet, partitioned by rank, with a
manifest naming every source (its identity and parser version) and the run
(docs/architecture.md, "The dataset", is the contract).

``rlperf ingest PATH... -o DIR`` writes one; every command reads one in place of its sources;
the per-file parse cache keeps each file as a dataset of one source. Parsing engines write a
source with :func:`write_source` (one call per parsed file, from any worker) and finish with
:func:`write_manifest`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without importing it (analyzer/dataset/recall.py)
if TYPE_CHECKING:
    from typing import Any

    from .store import (
        FORMAT,
        MANIFEST,
        VERSION,
        is_dataset,
        parser_version,
        read_manifest,
        read_sources,
        remove_source,
        renumber,
        stale,
        write_dataset,
        write_manifest,
        write_source,
    )

__all__ = [
    "FORMAT", "MANIFEST", "VERSION", "is_dataset", "parser_version", "read_manifest",
    "read_sources", "remove_source", "renumber", "stale", "write_dataset", "write_manifest",
    "write_source",
]


def __getattr__(name: str) -> Any:
    """The store's names, imported on first use: it imports polars, which reading back a kept
    report (:mod:`analyzer.dataset.products`) does without."""
    if name not in __all__:
        raise AttributeError(f"module 'analyzer.dataset' has no attribute {name!r}")
    from . import store  # deferred: polars

    return getattr(store, name)
