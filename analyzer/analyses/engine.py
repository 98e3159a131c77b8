"""Inference-engine steps (vLLM, SGLang): what each engine step did — prefill, decode or both —
from the names the engines record, and the run's time split by phase (docs/profiles.md,
"Inference engines").

The rule, per step (one engine forward, ``steps``), from the first of these names inside it:

1. ``execute_<tokens>_context_<P>(sq<a>sk<b>…)_generation_<D>(sq<c>sk<d>…)`` (both engines'
   batch annotation): ``P`` prefill requests of ``a`` query tokens, ``D`` decode requests of
   ``c`` tokens;
2. SGLang's ``step[<MODE> bs=<n> toks=<t>]``: ``EXTEND``/``PREFILL`` are ``n`` prefill
   requests of ``t`` tokens, ``DECODE`` ``n`` decode requests of one token each, ``MIXED``
   both (counts not split);
3. a graph capture ``capture_<n>_<MODE>``: the batch shape captured (``DECODE`` and vLLM's
   ``FULL`` graphs are decode batches of ``n`` requests, ``PIECEWISE`` mixed, ``EXTEND``
   prefill); the step is marked ``captured``, its kernels were not executed.

A step is ``prefill`` with prefill requests only, ``decode`` with decode requests only,
``mixed`` with both, ``unknown`` when no name says. A mixed step's time is not divided: its
kernels serve both kinds of request at once.
"""

from __future__ import annotations

import polars as pl

EXECUTE = (
    r"^execute_(\d+)_context_(\d+)\(sq(\d+)sk(\d+)[^)]*\)_generation_(\d+)\(sq(\d+)sk(\d+)"
)
SGLANG_STEP = r"^step\[([A-Z_]+)(?: bs=(\d+))?(?: toks=(\d+))?\]$"
CAPTURE = r"^capture_(\d+)_([A-Z_]+)$"
PHASES = ("prefill", "decode", "mixed", "unknown")

ENGINE_STEPS = pl.Schema({
    "step": pl.Int32(), "phase": pl.String(), "captured": pl.Boolean(),
    "prefill_requests": pl.Int64(), "prefill_tokens": pl.Int64(),
    "decode_requests": pl.Int64(), "decode_tokens": pl.Int64(),
    "step_ns": pl.Int64(), "name": pl.String(),
})

_PREFILL_MODES = ("EXTEND", "PREFILL", "DRAFT_EXTEND")
_DECODE_MODES = ("DECODE", "FULL", "TARGET_VERIFY")


def _int(text: pl.Expr) -> pl.Expr:
    return text.cast(pl.Int64, strict=False)


def batch_of(names: pl.Series) -> pl.DataFrame:
    """Per name: ``rank_of_rule`` (1 execute, 2 SGLang step, 3 capture, null: says nothing),
    ``captured`` and the requests and tokens of each phase (null where the name is silent)."""
    name = pl.col("name")
    ex = name.str.extract_groups(EXECUTE)
    sg = name.str.extract_groups(SGLANG_STEP)
    cap = name.str.extract_groups(CAPTURE)
    sg_mode, sg_bs, sg_toks = sg.struct[0], _int(sg.struct[1]), _int(sg.struct[2])
    cap_n, cap_mode = _int(cap.struct[0]), cap.struct[1]

    def pick(execute: pl.Expr, sglang: pl.Expr, capture: pl.Expr) -> pl.Expr:
        return (
            pl.when(ex.struct[0].is_not_null()).then(execute)
            .when(sg_mode.is_not_null()).then(sglang)
            .when(cap_mode.is_not_null()).then(capture)
        )

    frame = pl.DataFrame({"name": names.cast(pl.String).unique()})
    return frame.with_columns(
        pick(pl.lit(1), pl.lit(2), pl.lit(3)).alias("rule"),
        pick(pl.lit(False), pl.lit(False), pl.lit(True)).alias("captured"),
        pick(
            _int(ex.struct[1]),
            pl.when(sg_mode.is_in(_PREFILL_MODES)).then(sg_bs).otherwise(0),
            pl.when(cap_mode.is_in(_PREFILL_MODES)).then(cap_n).otherwise(0),
        ).alias("prefill_requests"),
        pick(
            _int(ex.struct[2]),
            pl.when(sg_mode.is_in(_PREFILL_MODES)).then(sg_toks).otherwise(0),
            pl.when(cap_mode.is_in(_PREFILL_MODES)).then(None).otherwise(0),
        ).alias("prefill_tokens"),
        pick(
            _int(ex.struct[4]),
            pl.when(sg_mode.is_in(_DECODE_MODES)).then(sg_bs).otherwise(0),
            pl.when(cap_mode.is_in(_DECODE_MODES)).then(cap_n).otherwise(0),
        ).alias("decode_requests"),
        pick(
            _int(ex.struct[5]),
            pl.when(sg_mode.is_in(_DECODE_MODES)).then(sg_bs).otherwise(0),
            pl.when(cap_mode.is_in(_DECODE_MODES)).then(cap_n).otherwise(0),
        ).alias("decode_tokens"),
        pick(pl.lit(None), (sg_mode == "MIXED"), (cap_mode == "PIECEWISE")).alias("_mixed"),
    ).filter(pl.col("rule").is_not_null())


def _phase() -> pl.Expr:
    pre = pl.col("prefill_requests").fill_null(0) > 0
    dec = pl.col("decode_requests").fill_null(0) > 0
    return (
        pl.when(pl.col("_mixed").fill_null(False) | (pre & dec)).then(pl.lit("mixed"))
        .when(pre).then(pl.lit("prefill"))
        .when(dec).then(pl.lit("decode"))
        .otherwise(pl.lit("unknown"))
    )


def engine_steps(ranges: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """ENGINE_STEPS: per step its phase, requests and tokens, from the first name of the rule
    (module docstring) that a range starting inside the step's window carries."""
    if steps.height == 0:
        return pl.DataFrame(schema=ENGINE_STEPS)
    named = ranges.select("name", "start_ns").join(
        batch_of(ranges["name"]), on="name"
    )
    windows = steps.select(
        pl.col("step").cast(pl.Int32), pl.col("start_ns").alias("_from"),
        pl.col("end_ns").alias("_to"),
    )
    inside = (
        named.join(windows, how="cross")
        .filter((pl.col("start_ns") >= pl.col("_from")) & (pl.col("start_ns") < pl.col("_to")))
        .sort("step", "rule", "start_ns")
        .unique("step", keep="first", maintain_order=True)
    )
    out = windows.join(inside.drop("_from", "_to"), on="step", how="left").with_columns(
        _phase().alias("phase"),
        pl.col("captured").fill_null(False),
        (pl.col("_to") - pl.col("_from")).alias("step_ns"),
    )
    return out.select(list(ENGINE_STEPS)).cast(ENGINE_STEPS).sort("step")


def phase_split(per_step: pl.DataFrame) -> pl.DataFrame:
    """Per phase (prefill, decode, mixed, unknown; those with steps): steps, their time and its
    share of all step time, requests and tokens of each kind."""
    total = int(per_step["step_ns"].sum() or 0)
    split = per_step.group_by("phase").agg(
        pl.len().cast(pl.Int64).alias("steps"),
        pl.col("captured").sum().cast(pl.Int64).alias("captured"),
        pl.col("step_ns").sum().alias("time_ns"),
        *(pl.col(c).sum().alias(c) for c in (
            "prefill_requests", "prefill_tokens", "decode_requests", "decode_tokens",
        )),
    )
    order = pl.DataFrame({"phase": list(PHASES), "_o": list(range(len(PHASES)))})
    return (
        split.join(order, on="phase").sort("_o").drop("_o")
        .with_columns((pl.col("time_ns") / max(total, 1)).alias("share"))
    )
