"""Tests that kill surviving mutants of analyzer/analyses/guideline_metrics.py
(docs/mutation.md)."""

from __future__ import annotations

import polars as pl

from analyzer.analyses.guideline_evidence import Missing
from analyzer.analyses.guideline_metrics import _traced_bubble


def test_a_pipeline_of_unknown_depth_says_what_the_trace_lacks() -> None:
    """Two send/recv rows tagged PP with neither a group size nor members: the bubble guideline
    cannot be judged, and its reason counts the two collectives."""
    rows = pl.DataFrame(
        {"group_size": [None, None], "pg_ranks": [None, None]},
        schema={"group_size": pl.Int32, "pg_ranks": pl.String},
    )
    assert _traced_bubble(None, rows) == Missing(
        "the pipeline depth: 2 pipeline-parallel collectives in the trace name no process group "
        "size or members"
    )
