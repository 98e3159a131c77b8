"""Every annotation range on the aligned clock with its class (product ``ranges``: stage, role,
relation), plus the ranges :mod:`analyzer.classify.infer` infers on ranks without stage
annotations.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from taxonomy import profiles as tp
from taxonomy.vocab import ROLE, STAGE

from ..model.products import provides
from .infer import infer_ranges
from .steps import is_staged, name_classes

RANGE_KINDS = ("annotation",)
RANGES_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "source": pl.UInt32(),
        "pid": pl.Int64(),
        "tid": pl.Int64(),
        "name": pl.String(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "stage": STAGE,
        "role": ROLE,
        "relation": tp.RELATION,
        "composite": pl.Boolean(),
        "weak": pl.Boolean(),
        "inferred": pl.Boolean(),
        "confidence": pl.Float32(),
    }
)


@provides("ranges")
def all_ranges(aligned: pl.DataFrame, profile: dict[str, Any]) -> pl.DataFrame:
    """Annotation ranges with their class; inferred ranges for ranks without stage annotations."""
    ev = aligned.filter(
        pl.col("kind").is_in(list(RANGE_KINDS)) & (pl.col("end_ns") > pl.col("start_ns"))
    )
    ranges = with_classes(
        profile, ev.select("rank", "source", "pid", "tid", "name", "start_ns", "end_ns")
    )
    named = ranges.filter(is_staged() & ~pl.col("weak"))
    workers = set(aligned.filter(pl.col("rank") >= 0)["rank"].unique().to_list())
    needs = sorted(workers - set(named["rank"].unique().to_list()))
    if needs:
        inferred = infer_ranges(aligned.filter(pl.col("rank").is_in(needs)))
        if inferred.height:
            inferred = inferred.with_columns(
                pl.lit(None, pl.UInt32).alias("source"),
                pl.lit(-1, pl.Int64).alias("pid"),
                pl.lit(-1, pl.Int64).alias("tid"),
                pl.lit("stage").alias("relation"),
                pl.lit(False).alias("composite"),
                pl.lit(False).alias("weak"),
                pl.lit(True).alias("inferred"),
            )
            ranges = pl.concat(
                [
                    ranges.cast(RANGES_SCHEMA),
                    inferred.select(list(RANGES_SCHEMA)).cast(RANGES_SCHEMA),
                ]
            )
    return ranges.select(list(RANGES_SCHEMA)).cast(RANGES_SCHEMA)


def with_classes(profile: dict[str, Any], ev: pl.DataFrame) -> pl.DataFrame:
    """Named rows with the class of their name: stage, role, relation, ``composite`` (one timer
    over several stages), ``weak`` (named by the generic fallback only), not inferred."""
    classes = name_classes(profile, ev["name"].cast(pl.String).unique(), "trace").select(
        "name",
        "stage",
        "role",
        "relation",
        "rule",
        (pl.col("covers").list.len().fill_null(0) > 1).alias("composite"),
    )
    return (
        ev.with_columns(pl.col("name").cast(pl.String))
        .join(classes, on="name", how="left")
        .with_columns(
            pl.col("rule").fill_null("").str.starts_with(tp.GENERIC + ":").alias("weak"),
            pl.lit(False).alias("inferred"),
            pl.lit(1.0, pl.Float32).alias("confidence"),
        )
        .drop("rule")
    )
