"""Bubbles: every device's step window split into productive busy time and idle time by cause.

Definitions are docs/analyses.md §4. Per device (rank) and step, on the step window:
busy = union of the rank's activity; sync wait from ``collective_waits``; productive = busy −
sync wait; every other time point gets the first cause of :data:`RULES` that matches. The rules
are interval sets per (rank, step); one labelled sweep (``intervals.labelled_sweep``) applies
their precedence, so the causes tile the window exactly:
productive + Σ idle = |W_s| per device and step.

Products: ``device_states`` (the tiling itself), ``bubbles`` (per step × rank × cause) and
``largest_bubbles`` (the longest runs of one cause on one device).
"""

from __future__ import annotations

import polars as pl

from parsers.events import GPU_ACTIVITY_KINDS
from taxonomy.vocab import IDLE_CAUSE, IDLE_CAUSES, IDLE_RULE_ORDER

from ..model import frames, intervals
from ..model.products import provides

RULES: tuple[str, ...] = IDLE_RULE_ORDER
"""The idle causes in precedence order (docs/analyses.md §4: first matching rule wins), as the
vocabulary declares them; ``compute_states`` holds one interval set per cause."""

ROLLOUT_POOLS = ("rollout", "shared")
SPLIT_POOLS = {"rollout": "train", "train": "rollout"}
LARGEST = 20
"""How many of the longest bubbles ``largest_bubbles`` keeps."""

DEVICE = ["rank", "step"]
SPAN = ["rank", "step", "start_ns", "end_ns"]


def compute_states(
    steps: pl.DataFrame,
    pools: pl.DataFrame,
    stage_ranges: pl.DataFrame,
    activity: pl.DataFrame,
    waits: pl.DataFrame,
) -> pl.DataFrame:
    """DEVICE_STATES: each device's step windows tiled by productive runs and idle causes."""
    ranks = (
        pl.concat(
            [pools.select("rank"), activity.select("rank"), stage_ranges.select("rank")],
            how="vertical_relaxed",
        )
        .select(pl.col("rank").cast(pl.Int32))
        .unique()
        .filter(pl.col("rank") >= 0)
    )
    if ranks.height == 0 or steps.height == 0:
        return frames.empty(frames.DEVICE_STATES)
    windows = ranks.join(
        steps.select(pl.col("step").cast(pl.Int32), "start_ns", "end_ns"), how="cross"
    ).select(SPAN)
    tagged = _tagged(windows, pools, stage_ranges, activity, waits)
    tiled = intervals.labelled_sweep(tagged, DEVICE, len(RULES) + 1)
    return tiled.select(
        pl.col("rank").cast(pl.Int32),
        pl.col("step").cast(pl.Int32),
        _cause_of(pl.col("label")),
        "start_ns",
        "end_ns",
    ).sort(["rank", "step", "start_ns"])


def _tagged(
    windows: pl.DataFrame,
    pools: pl.DataFrame,
    stage_ranges: pl.DataFrame,
    activity: pl.DataFrame,
    waits: pl.DataFrame,
) -> pl.DataFrame:
    """The productive runs (label 0) and every rule's intervals (label: its place in
    :data:`RULES` + 1), per rank and step; a function of its own so that its intermediate
    interval sets are freed before the sweep."""
    span = pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32), "start_ns", "end_ns"

    def within(frame: pl.DataFrame) -> pl.DataFrame:
        """Intervals cut to the window of their own rank and step."""
        return intervals.clip_to_windows(frame, windows.select(SPAN), on=["rank"]).select(SPAN)

    def of_step(frame: pl.DataFrame) -> pl.DataFrame:
        """Ranges already tagged with a step, cut to that step's window."""
        return (
            frame.join(windows.rename({"start_ns": "_ws", "end_ns": "_we"}), on=DEVICE)
            .with_columns(
                pl.max_horizontal("start_ns", "_ws").alias("start_ns"),
                pl.min_horizontal("end_ns", "_we").alias("end_ns"),
            )
            .filter(pl.col("end_ns") > pl.col("start_ns"))
            .select(SPAN)
        )

    compute = activity.filter(~pl.col("is_collective")).select("rank", "start_ns", "end_ns")
    waiting_raw = waits.select(
        "rank",
        "start_ns",
        pl.max_horizontal("start_ns", pl.min_horizontal("end_ns", "arrival_ns")).alias("end_ns"),
    )
    waiting = within(intervals.difference(waiting_raw, compute, ["rank"]))
    busy = within(activity.select("rank", "start_ns", "end_ns"))
    productive = intervals.difference(busy, waiting, DEVICE)

    ranged = stage_ranges.filter((pl.col("stage") != "other") & (pl.col("rank") >= 0)).with_columns(
        pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32)
    )
    staged = ranged.filter(pl.col("step").is_not_null())
    mine = within(ranged.select("rank", "start_ns", "end_ns"))
    rules = {
        "weight_sync": within(
            ranged.filter(pl.col("stage") == "weight_sync").select("rank", "start_ns", "end_ns")
        ),
        "rollout_tail": _rollout_tail(staged, pools, windows),
        "pool_wait": intervals.difference(within(_other_pool_working(ranged, pools)), mine, DEVICE),
        "sync_wait": waiting,
        "host_bound": mine,
        "stage_gap": staged.select(SPAN)
        .group_by(DEVICE)
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .select(SPAN),
        "other": windows,
    }
    return pl.concat(
        [productive.select(*span).with_columns(pl.lit(0, pl.Int8).alias("label"))]
        + [
            of_step(rules[c].select(*span)).with_columns(pl.lit(i + 1, pl.Int8).alias("label"))
            for i, c in enumerate(RULES)
        ]
    )


def _cause_of(label: pl.Expr) -> pl.Expr:
    """Label 0 (productive) → null; label k → the k-th rule's cause."""
    causes = pl.Series("causes", list(RULES), dtype=IDLE_CAUSE)
    return (
        pl.when(label > 0)
        .then(pl.lit(causes).get(label.cast(pl.Int64) - 1))
        .cast(IDLE_CAUSE)
        .alias("cause")
    )


def _rollout_tail(staged: pl.DataFrame, pools: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Rule 2: after the rank's own last rollout range of the step, while any rollout range of
    the step still runs (the rank's own have all ended, so "another rank's" is any rank's)."""
    rollout = staged.filter(pl.col("stage") == "rollout")
    running = intervals.union(rollout.select("step", "start_ns", "end_ns"), ["step"])
    eligible = pools.filter(pl.col("pool").cast(pl.String).is_in(ROLLOUT_POOLS)).select(
        pl.col("rank").cast(pl.Int32)
    )
    own_end = (
        rollout.join(eligible, on="rank", how="semi")
        .group_by(DEVICE)
        .agg(pl.col("end_ns").max().alias("_own"))
    )
    return (
        own_end.join(windows.select([*DEVICE, "end_ns"]).rename({"end_ns": "_we"}), on=DEVICE)
        .join(running, on="step")
        .with_columns(
            pl.max_horizontal("start_ns", "_own").alias("start_ns"),
            pl.min_horizontal("end_ns", "_we").alias("end_ns"),
        )
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .select(SPAN)
    )


def _other_pool_working(ranged: pl.DataFrame, pools: pl.DataFrame) -> pl.DataFrame:
    """Rule 3's condition per rank of a split pool: when some rank of the other pool is inside
    one of its stage ranges (of any step: one-step-off trains step s while step s+1 generates)."""
    pool_of = pools.select(pl.col("rank").cast(pl.Int32), pl.col("pool").cast(pl.String))
    working = intervals.union(
        ranged.join(pool_of, on="rank").select("pool", "start_ns", "end_ns"), ["pool"]
    )
    waiting_for = pool_of.filter(pl.col("pool").is_in(list(SPLIT_POOLS))).with_columns(
        pl.col("pool").replace_strict(SPLIT_POOLS).alias("pool")
    )
    return waiting_for.join(working, on="pool").select("rank", "start_ns", "end_ns")


def compute_bubbles(
    states: pl.DataFrame, activity: pl.DataFrame, steps: pl.DataFrame
) -> pl.DataFrame:
    """BUBBLES: per step × rank × cause, idle time, with window, busy and productive time."""
    if states.height == 0:
        return frames.empty(frames.BUBBLES)
    windows = steps.select(
        pl.col("step").cast(pl.Int32), (pl.col("end_ns") - pl.col("start_ns")).alias("window_ns")
    )
    devices = states.select(DEVICE).unique()
    busy_windows = devices.join(
        steps.select(pl.col("step").cast(pl.Int32), "start_ns", "end_ns"), on="step"
    )
    busy = intervals.clip_to_windows(
        activity.select("rank", "start_ns", "end_ns"), busy_windows, on=["rank"]
    )
    busy_ns = intervals.union_length(busy, DEVICE, "busy_ns").with_columns(
        pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32)
    )
    dur = (pl.col("end_ns") - pl.col("start_ns")).sum()
    productive = (
        states.filter(pl.col("cause").is_null()).group_by(DEVICE).agg(dur.alias("productive_ns"))
    )
    idle = (
        states.filter(pl.col("cause").is_not_null())
        .group_by([*DEVICE, "cause"])
        .agg(dur.alias("idle_ns"))
    )
    causes = pl.DataFrame({"cause": pl.Series(list(IDLE_CAUSES), dtype=IDLE_CAUSE)})
    return (
        devices.join(causes, how="cross")
        .join(windows, on="step")
        .join(busy_ns, on=DEVICE, how="left")
        .join(productive, on=DEVICE, how="left")
        .join(idle, on=[*DEVICE, "cause"], how="left")
        .with_columns(pl.col("busy_ns", "productive_ns", "idle_ns").fill_null(0))
        .select(pl.col(name).cast(dtype) for name, dtype in frames.BUBBLES.items())
        .sort(["step", "rank", "cause"])
    )


def compute_largest(states: pl.DataFrame, top: int = LARGEST) -> pl.DataFrame:
    """LARGEST_BUBBLES: the ``top`` longest idle runs of one cause on one device."""
    return (
        states.filter(pl.col("cause").is_not_null())
        .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("_len"))
        .sort(["_len", "rank", "start_ns"], descending=[True, False, False])
        .head(top)
        .select(pl.col(name).cast(dtype) for name, dtype in frames.LARGEST_BUBBLES.items())
    )


def without_devices(
    activity: pl.DataFrame, stage_ranges: pl.DataFrame, ranks: list[int]
) -> list[int]:
    """Ranks that get no idle analysis: no device activity (a CPU-only capture) and no stage
    ranges, so their host work (docs/analyses.md §1) stands for no step structure and every
    idle cause would be a guess."""
    on_device = (
        activity.filter(pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS)))["rank"].unique().to_list()
    )
    staged = stage_ranges.filter(pl.col("stage") != "other")["rank"].unique().to_list()
    return sorted(set(ranks) - set(on_device) - set(staged))


def host_only(activity: pl.DataFrame) -> list[int]:
    """Ranks whose activity is host work (no kernel, copy or memset): no GPU idle for them."""
    device = pl.col("kind").is_in(list(GPU_ACTIVITY_KINDS))
    return sorted(
        activity.group_by("rank")
        .agg(device.any().alias("_d"))
        .filter(~pl.col("_d"))["rank"]
        .to_list()
    )


@provides("device_states")
def device_states(
    activity: pl.DataFrame,
    stage_ranges: pl.DataFrame,
    ranks: list[int],
    steps: pl.DataFrame,
    pools: pl.DataFrame,
    collective_waits: pl.DataFrame,
) -> pl.DataFrame:
    skip = without_devices(activity, stage_ranges, ranks)
    if skip:
        keep = ~pl.col("rank").is_in(skip)
        return compute_states(steps, pools.filter(keep), stage_ranges.filter(keep),
                              activity.filter(keep), collective_waits.filter(keep))
    return compute_states(steps, pools, stage_ranges, activity, collective_waits)


@provides("bubbles")
def bubbles(
    device_states: pl.DataFrame, activity: pl.DataFrame, steps: pl.DataFrame
) -> pl.DataFrame:
    return compute_bubbles(device_states, activity, steps)


@provides("largest_bubbles")
def largest_bubbles(device_states: pl.DataFrame) -> pl.DataFrame:
    return compute_largest(device_states)


