"""Stages of traces without stage annotations (TRL, hand-written torch loops, most vLLM
captures), inferred from operator signatures and marked ``inferred`` with a confidence.

Every rank's outermost host ops (``cpu_op`` at depth 0, any thread) are marked by name
(:data:`SIGNATURES`), then:

* **rollout** — a decode loop: sampling ops (``aten::multinomial``, …) or inference-engine ops
  (``vllm::``, ``sglang::``) close together, at least :data:`MIN_DECODE_STEPS` of them; the span
  starts at the prefill's embedding lookup (the forward before the first sample) and ends with
  the last of them;
* **log-prob** — a forward pass (from its embedding lookup) that ends in a log-prob op
  (``log_softmax``, ``logsumexp``, TRL's ``ChunkedLogProbFunction``) and is not followed by a
  backward pass; with two such passes in a step the first is ``old_logprob`` and the second
  ``ref_logprob`` (verl's order; TRL computes only the reference pass), a lone pass is
  ``ref_logprob``;
* **update** — from the forward pass whose loss is back-propagated to the end of the optimizer
  step after it (backward and optimizer ops mark it);
* **weight sync** — a broadcast after an update ends and before the next
  rollout starts (the trainer pushing weights to the engine; on ranks that also generate).

Confidence says how sure the signature is: decode loops with many steps and backward passes
are unmistakable; which model a forward-only pass ran is a guess.
"""

from __future__ import annotations

import polars as pl

SIGNATURES: tuple[tuple[str, str], ...] = (
    ("sample", r"^aten::multinomial$|^vllm::.*sampl|^sglang::.*sampl|^aten::_sample"),
    ("engine", r"^(vllm|sglang|flashinfer|_vllm_C|_C)::"),
    ("logprob", r"^aten::_?log_softmax$|^aten::logsumexp$|LogProb|selective_log_softmax"),
    ("backward", r"^autograd::engine::evaluate_function|^aten::\w+_backward$"),
    (
        "optimizer",
        r"^Optimizer\.step#|^aten::_fused_adamw?_$|^aten::_fused_sgd_$|^aten::_foreach_(addcdiv|addcmul|lerp)_$",
    ),
    ("embed", r"^aten::embedding$|^aten::embedding_bag$"),
    ("sync", r"^(c10d::|nccl:|gloo:)?broadcast"),
    (
        "forward",
        r"^aten::(linear|mm|addmm|matmul|bmm|_flash_attention_forward|_efficient_attention_forward|scaled_dot_product_attention)$",
    ),
)
"""Operator name (regex) → the signature it marks; first match wins."""

SYNC_COLLECTIVES: tuple[str, ...] = ("broadcast",)
"""Collectives that move weights from the trainer to the engine (whatever their op's name): a
broadcast from the trainer; all-gathers also gather rollouts and FSDP parameters, so they are no
sign of it."""
BOUNDARIES: tuple[str, ...] = ("sample", "engine", "logprob", "backward", "optimizer")
"""Marks that end a pass: the next forward pass starts with the first forward op after one."""
EARLIEST = -(2**62)
MIN_DECODE_STEPS = 3
"""A decode loop has at least this many sampling ops."""
DECODE_GAP_FACTOR = 10.0
"""Sampling ops further apart than this many median decode steps start a new loop."""
CONFIDENCE = {"rollout": 0.9, "update": 0.9, "logprob": 0.6, "weight_sync": 0.4}
SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(), "name": pl.String(), "start_ns": pl.Int64(), "end_ns": pl.Int64(),
    "stage": pl.String(), "role": pl.String(), "confidence": pl.Float32(),
}


def marks(events: pl.DataFrame) -> pl.DataFrame:
    """Outermost host ops (and optimizer ranges) of every rank with the signature they carry."""
    ops = events.filter(
        ((pl.col("kind") == "cpu_op") & (pl.col("depth") == 0))
        | (
            (pl.col("kind") == "annotation")
            & pl.col("name").cast(pl.String).str.starts_with("Optimizer.step#")
        )
    ).select(
        "rank", pl.col("name").cast(pl.String), "start_ns", "end_ns", pl.col("coll").cast(pl.String)
    )
    names = ops.select("name").unique()
    mark = pl.lit(None, dtype=pl.String)
    for label, pattern in reversed(SIGNATURES):
        mark = pl.when(pl.col("name").str.contains(pattern)).then(pl.lit(label)).otherwise(mark)
    names = names.with_columns(mark.alias("_by_name"))
    by_coll = pl.when(pl.col("coll").is_in(list(SYNC_COLLECTIVES))).then(pl.lit("sync"))
    return (
        ops.join(names, on="name", how="left")
        .with_columns(pl.coalesce(by_coll, "_by_name").alias("mark"))
        .filter(pl.col("mark").is_not_null()).drop("_by_name", "coll").sort("rank", "start_ns")
    )


def _rollouts(m: pl.DataFrame) -> pl.DataFrame:
    samples = m.filter(pl.col("mark").is_in(["sample", "engine"]))
    if samples.height == 0:
        return pl.DataFrame(
            schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64, "n": pl.UInt32}
        )
    gap = (pl.col("start_ns") - pl.col("start_ns").shift(1)).over("rank")
    samples = samples.with_columns(gap.alias("gap"))
    typical = samples.group_by("rank").agg(pl.col("gap").median().alias("typical"))
    loops = (
        samples.join(typical, on="rank")
        .with_columns(
            (pl.col("gap").is_null() | (pl.col("gap") > DECODE_GAP_FACTOR * pl.col("typical")))
            .cum_sum()
            .over("rank")
            .alias("loop")
        )
        .group_by("rank", "loop")
        .agg(
            pl.col("start_ns").min().alias("first"),
            pl.col("end_ns").max().alias("end_ns"),
            pl.len().alias("n"),
        )
        .filter(pl.col("n") >= MIN_DECODE_STEPS)
    )
    start = _forward_start(m, loops.select("rank", pl.col("first").alias("t")))
    return loops.with_columns(start).select("rank", "start_ns", "end_ns", "n")


def _forward_start(m: pl.DataFrame, probes: pl.DataFrame) -> pl.Series:
    """For probes (rank, t: a sampling or log-prob op), where their forward pass began: the
    first embedding or forward op after the last op that ended a pass, else t itself."""
    boundary = m.filter(pl.col("mark").is_in(list(BOUNDARIES))).select(
        "rank", pl.col("end_ns").alias("t"), pl.col("end_ns").alias("_prev")
    )
    forward = m.filter(pl.col("mark").is_in(["forward", "embed"])).select(
        "rank", pl.col("start_ns").alias("_after"), pl.col("start_ns").alias("_fwd")
    )
    keyed = probes.with_row_index("_row").sort("t").join_asof(
        boundary.sort("t"), on="t", by="rank", strategy="backward", check_sortedness=False)
    keyed = keyed.with_columns(pl.col("_prev").fill_null(EARLIEST).alias("_after")).sort("_after")
    keyed = keyed.join_asof(
        forward.sort("_after"), on="_after", by="rank", strategy="forward", check_sortedness=False
    )
    start = (
        pl.when(pl.col("_fwd").is_not_null() & (pl.col("_fwd") <= pl.col("t")))
        .then(pl.col("_fwd"))
        .otherwise(pl.col("t"))
    )
    return keyed.sort("_row").select(start.alias("start_ns"))["start_ns"]


def _passes(m: pl.DataFrame, rollouts: pl.DataFrame) -> pl.DataFrame:
    """Forward passes ending in a log-prob op outside rollouts: start (:func:`_forward_start`),
    end, and whether a backward pass follows before the next forward (the next embedding lookup
    or log-prob op)."""
    lp = m.filter(pl.col("mark") == "logprob").select("rank", "start_ns", "end_ns")
    if lp.height == 0:
        return lp.with_columns(
            pl.lit(None, pl.Int64).alias("fwd_start"), pl.lit(False).alias("trained")
        )
    if rollouts.height:
        inside = lp.join_where(
            rollouts.select(
                "rank", pl.col("start_ns").alias("_rs"), pl.col("end_ns").alias("_re")
            ).rename({"rank": "_r"}),
            pl.col("rank") == pl.col("_r"),
            pl.col("start_ns") >= pl.col("_rs"),
            pl.col("end_ns") <= pl.col("_re"),
        )
        lp = lp.join(
            inside.select("rank", "start_ns").unique(), on=["rank", "start_ns"], how="anti"
        )
    embeds = m.filter(pl.col("mark") == "embed").select("rank", pl.col("start_ns").alias("t"))
    backward = m.filter(pl.col("mark") == "backward").select(
        "rank", pl.col("start_ns").alias("t"), pl.col("start_ns").alias("next_bwd")
    )
    keyed = lp.sort("rank", "start_ns")
    keyed = keyed.with_columns(
        _forward_start(m, keyed.select("rank", pl.col("start_ns").alias("t"))).alias("fwd_start")
    )
    after = lp.select("rank", "start_ns", pl.col("end_ns").alias("t")).sort("t")
    after = after.join_asof(
        embeds.with_columns(pl.col("t").alias("next_fwd")).sort("t"),
        on="t",
        by="rank",
        strategy="forward",
        check_sortedness=False,
    )
    next_lp = lp.select("rank", pl.col("start_ns").alias("t"), pl.col("start_ns").alias("next_lp"))
    after = after.join_asof(
        next_lp.sort("t"),
        on="t",
        by="rank",
        strategy="forward",
        check_sortedness=False,
        allow_exact_matches=False,
    )
    after = after.with_columns(pl.min_horizontal("next_fwd", "next_lp").alias("next_fwd"))
    after = after.join_asof(
        backward.sort("t"), on="t", by="rank", strategy="forward", check_sortedness=False
    )
    trained = pl.col("next_bwd").is_not_null() & (
        pl.col("next_fwd").is_null() | (pl.col("next_bwd") < pl.col("next_fwd"))
    )
    return (
        keyed.join(
            after.select("rank", "start_ns", trained.alias("trained")), on=["rank", "start_ns"]
        )
        .select("rank", "fwd_start", "start_ns", "end_ns", "trained")
        .sort("rank", "start_ns")
    )


def _updates(m: pl.DataFrame, passes: pl.DataFrame) -> pl.DataFrame:
    """From each back-propagated forward (or, without one, each backward burst) to the end of
    the optimizer step that follows."""
    backward = m.filter(pl.col("mark") == "backward")
    if backward.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64})
    trained = passes.filter(pl.col("trained")).select(
        "rank", pl.col("fwd_start").alias("start_ns"), pl.col("end_ns").alias("t")
    )
    firsts = backward.select("rank", pl.col("start_ns"), pl.col("start_ns").alias("t"))
    starts = pl.concat([trained, firsts])
    optim = m.filter(pl.col("mark") == "optimizer").select(
        "rank", pl.col("start_ns").alias("t"), pl.col("end_ns").alias("opt_end")
    )
    last_bwd = backward.select(
        "rank", pl.col("start_ns").alias("t"), pl.col("end_ns").alias("bwd_end")
    )
    spans = starts.sort("t").join_asof(
        optim.sort("t"), on="t", by="rank", strategy="forward", check_sortedness=False
    )
    spans = spans.sort("t").join_asof(
        last_bwd.sort("t"), on="t", by="rank", strategy="backward", check_sortedness=False
    )
    spans = spans.select(
        "rank", "start_ns", pl.coalesce("opt_end", "bwd_end").alias("end_ns")
    ).filter(pl.col("end_ns") > pl.col("start_ns"))
    ordered = spans.sort("rank", "start_ns")
    piece = (
        (pl.col("start_ns") > pl.col("end_ns").cum_max().shift(1).over("rank"))
        .fill_null(True)
        .cum_sum()
        .over("rank")
    )
    return (
        ordered.with_columns(piece.alias("_p"))
        .group_by("rank", "_p")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_p")
    )


def _logprobs(passes: pl.DataFrame, rollouts: pl.DataFrame) -> pl.DataFrame:
    """Forward-only passes, named by their order between two rollouts (old, then reference)."""
    fwd = passes.filter(~pl.col("trained")).select(
        "rank", pl.col("fwd_start").alias("start_ns"), "end_ns"
    )
    if fwd.height == 0:
        return fwd.with_columns(pl.lit(None, pl.String).alias("stage"))
    if rollouts.height:
        epochs = rollouts.select(
            "rank",
            pl.col("start_ns").alias("t"),
            pl.int_range(pl.len()).over("rank").alias("epoch"),
        )
        fwd = (
            fwd.with_columns(pl.col("start_ns").alias("t"))
            .sort("t")
            .join_asof(
                epochs.sort("t"), on="t", by="rank", strategy="backward", check_sortedness=False
            )
        )
    else:
        fwd = fwd.with_columns(pl.lit(0).alias("epoch"))
    position = pl.int_range(pl.len()).over("rank", "epoch")
    count = pl.len().over("rank", "epoch")
    stage = (
        pl.when((count > 1) & (position < count - 1))
        .then(pl.lit("old_logprob"))
        .otherwise(pl.lit("ref_logprob"))
    )
    return (
        fwd.sort("rank", "start_ns")
        .with_columns(stage.alias("stage"))
        .select("rank", "start_ns", "end_ns", "stage")
    )


def _weight_syncs(m: pl.DataFrame, updates: pl.DataFrame, rollouts: pl.DataFrame) -> pl.DataFrame:
    sync = m.filter(pl.col("mark") == "sync").select("rank", "start_ns", "end_ns")
    if sync.height == 0 or updates.height == 0 or rollouts.height == 0:
        return sync.head(0)
    last_update = updates.select(
        "rank", pl.col("end_ns").alias("t"), pl.col("end_ns").alias("upd_end")
    )
    next_rollout = rollouts.select(
        "rank", pl.col("start_ns").alias("t"), pl.col("start_ns").alias("ro_start")
    )
    keyed = sync.with_columns(pl.col("start_ns").alias("t")).sort("t")
    keyed = keyed.join_asof(
        last_update.sort("t"), on="t", by="rank", strategy="backward", check_sortedness=False
    )
    keyed = keyed.join_asof(
        next_rollout.sort("t"), on="t", by="rank", strategy="forward", check_sortedness=False
    )
    last_rollout = rollouts.select(
        "rank", pl.col("start_ns").alias("t"), pl.col("start_ns").alias("prev_ro")
    )
    keyed = keyed.join_asof(
        last_rollout.sort("t"), on="t", by="rank", strategy="backward", check_sortedness=False
    )
    between = (
        pl.col("upd_end").is_not_null() & (pl.col("start_ns") >= pl.col("upd_end"))
        & (pl.col("prev_ro").is_null() | (pl.col("prev_ro") < pl.col("upd_end")))
    )
    return keyed.filter(between).select("rank", "start_ns", "end_ns")


def infer_ranges(events: pl.DataFrame) -> pl.DataFrame:
    """Inferred stage ranges of the ranks in ``events`` (:data:`SCHEMA`: rank, name ``inferred
    <stage>``, start, end, stage, role, confidence)."""
    m = marks(events)
    if m.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    rollouts = _rollouts(m)
    passes = _passes(m, rollouts)
    updates = _updates(m, passes)
    logprobs = _logprobs(passes, rollouts)
    syncs = _weight_syncs(m, updates, rollouts)
    parts = [
        rollouts.select(
            "rank",
            "start_ns",
            "end_ns",
            pl.lit("rollout").alias("stage"),
            pl.lit("rollout").alias("role"),
        ),
        logprobs.select(
            "rank",
            "start_ns",
            "end_ns",
            "stage",
            pl.when(pl.col("stage") == "ref_logprob")
            .then(pl.lit("ref"))
            .otherwise(pl.lit("actor"))
            .alias("role"),
        ),
        updates.select(
            "rank",
            "start_ns",
            "end_ns",
            pl.lit("actor_update").alias("stage"),
            pl.lit("actor").alias("role"),
        ),
        syncs.select(
            "rank",
            "start_ns",
            "end_ns",
            pl.lit("weight_sync").alias("stage"),
            pl.lit("actor").alias("role"),
        ),
    ]
    out = pl.concat(
        [
            p.cast(
                {
                    "rank": pl.Int32,
                    "start_ns": pl.Int64,
                    "end_ns": pl.Int64,
                    "stage": pl.String,
                    "role": pl.String,
                }
            )
            for p in parts
        ]
    )
    family = (
        pl.when(pl.col("stage").str.ends_with("logprob"))
        .then(pl.lit("logprob"))
        .when(pl.col("stage") == "actor_update")
        .then(pl.lit("update"))
        .otherwise(pl.col("stage"))
    )
    conf = family.replace_strict(CONFIDENCE, default=0.5, return_dtype=pl.Float32)
    return out.with_columns(
        (pl.lit("inferred ") + pl.col("stage")).alias("name"), conf.alias("confidence"),
    ).select(list(SCHEMA)).sort("rank", "start_ns")
