"""The pool of every rank (product ``pools``): rollout / train / shared, from the stages it runs.
"""

from __future__ import annotations

import polars as pl

from parsers.events import GPU_ACTIVITY_KINDS
from taxonomy.vocab import TRAINER_STAGES

from ..model import frames
from ..model.products import provides


@provides("pools", schema=frames.POOLS)
def pools(aligned: pl.DataFrame, stage_ranges: pl.DataFrame) -> pl.DataFrame:
    """Pool of every rank (docs/analyses.md §1): rollout only → rollout, training models only →
    train, both (or neither) → shared."""
    ev = aligned.filter(pl.col("rank") >= 0)
    ranks = ev.group_by("rank").agg(
        pl.col("host").cast(pl.String).drop_nulls().first().alias("host"),
        pl.col("device")
        .filter(pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)) & (pl.col("device") >= 0))
        .first()
        .alias("device"),
    )
    stages = stage_ranges.filter(pl.col("rank") >= 0).group_by("rank").agg(
        (pl.col("stage") == "rollout").any().alias("gen"),
        pl.col("stage").cast(pl.String).is_in(list(TRAINER_STAGES)).any().alias("train"),
    )
    out = ranks.join(stages, on="rank", how="left").with_columns(
        pl.when(pl.col("gen") & ~pl.col("train")).then(pl.lit("rollout"))
        .when(pl.col("train") & ~pl.col("gen")).then(pl.lit("train"))
        .otherwise(pl.lit("shared")).alias("pool"),
        pl.col("device").fill_null(-1),
    )
    return out.select(list(frames.POOLS)).cast(frames.POOLS).sort("rank")
