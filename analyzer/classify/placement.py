"""Placement and execution mode of a run, inferred from which devices run which stages when
(docs/assembly.md, "Placement and execution mode"), each decision with the evidence that made it.

Placement:

* ``disaggregated`` — some ranks only generate (rollout pool) and others only train;
* ``split`` — models grouped onto device subsets: the actor and the critic (or the forward-only
  models) update on disjoint ranks, or rollout-only ranks sit beside ranks that do everything;
* ``colocated`` — every rank runs every stage in turn;
* ``rollout_only`` — no rank runs anything but generation (and weight sync): an inference
  engine's trace (vLLM, SGLang) analysed on its own, or a trace that recorded only the rollout.
  It has no execution mode (nothing trains to overlap with).

Execution mode:

* ``sync`` — generation and training never overlap;
* ``one_step_off`` — the rollout pool generates the next batch while the train pool trains
  (overlap above :data:`OVERLAP_MIN` of the training time), weights moving once per step;
* ``async`` — as above, but weight updates land while generation runs;
* ``stage_fused`` — colocated ranks start forward-only stages while other ranks of the same
  step still generate (inter-stage fusion, RLHFuse-style).

The module also gives the report its run summary: framework and version, ranks and hosts,
placement and execution mode, steps, and how well the clocks could be aligned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from taxonomy.vocab import PREPARATION_STAGES, TRAINER_STAGES

from ..model import intervals
from ..model.products import provides
from ..model.units import spans

if TYPE_CHECKING:
    pass

OVERLAP_MIN = 0.10
"""Generation overlapping at least this share of the train pool's training time is asynchrony."""
FUSED_MIN = 0.05
"""Forward-only stages overlapping others' generation for this share of their time is fusion."""


def _ranks_text(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"`` for the evidence sentences."""
    return spans(ranks) or "none"


def _length(frame: pl.DataFrame) -> int:
    return int(intervals.union_length(frame)["length_ns"][0]) if frame.height else 0


def infer_placement(pools: pl.DataFrame, ranges: pl.DataFrame) -> dict[str, Any]:
    """Placement and execution mode from the pools and the workers' stage ranges."""
    evidence: list[str] = []
    workers = ranges.filter(pl.col("rank") >= 0).with_columns(pl.col("stage").cast(pl.String))
    by_pool = {
        p: sorted(pools.filter(pl.col("pool") == p)["rank"].to_list())
        for p in ("rollout", "train", "shared")
    }
    if not workers.height:
        return {
            "placement": None,
            "execution": None,
            "evidence": ["no stage ranges on any rank: placement needs stages"],
            "pools": by_pool,
        }

    def ranks_of(stage: str) -> set[int]:
        return set(workers.filter(pl.col("stage") == stage)["rank"].unique().to_list())

    actor, critic = ranks_of("actor_update"), ranks_of("critic_update")
    if not ranks_of("rollout"):
        return {
            "placement": None,
            "execution": None,
            "pools": by_pool,
            "evidence": [
                "no rank generates (no rollout stage): placement needs the rollout in the trace"
            ],
        }
    others = set(workers["stage"].unique().to_list()) - {"rollout", *ROLLOUT_SIDE}
    if not others:
        return {
            "placement": "rollout_only",
            "execution": None,
            "pools": by_pool,
            "evidence": [_rollout_only_reason(workers)],
        }
    if by_pool["rollout"] and by_pool["train"]:
        placement = "disaggregated"
        evidence.append(
            f"ranks {_ranks_text(by_pool['rollout'])} only generate and ranks "
            f"{_ranks_text(by_pool['train'])} "
            "only run training models: separate rollout and train pools"
        )
    elif by_pool["rollout"] and by_pool["shared"]:
        placement = "split"
        evidence.append(f"ranks {_ranks_text(by_pool['rollout'])} only generate while ranks "
                        f"{_ranks_text(by_pool['shared'])} generate and train")
    elif actor and critic and not actor & critic:
        placement = "split"
        evidence.append(
            f"actor updates on ranks {_ranks_text(sorted(actor))}, critic updates on ranks "
            f"{_ranks_text(sorted(critic))}: models on disjoint device sets"
        )
    else:
        placement = "colocated"
        evidence.append(
            f"every rank ({_ranks_text(by_pool['shared'])}) "
            "runs both generation and training stages"
        )
    execution = _execution(placement, by_pool, workers, evidence)
    return {"placement": placement, "execution": execution, "evidence": evidence, "pools": by_pool}


ROLLOUT_SIDE = ("weight_sync", "other")
"""Stages a rollout-only run may hold besides generation: weights landing in the engine, and
unclaimed time."""


def _rollout_only_reason(workers: pl.DataFrame) -> str:
    found = sorted(workers["rank"].unique().to_list())
    ranks = _ranks_text(found)
    return (
        f"every stage range on rank{'s' if len(found) > 1 else ''} {ranks} is generation "
        "(rollout) and no rank trains: a "
        "rollout-only run (an inference engine's trace on its own), no execution mode"
    )


def _execution(
    placement: str, by_pool: dict[str, list[int]], workers: pl.DataFrame, evidence: list[str]
) -> str:
    if placement == "disaggregated":
        gen = workers.filter(
            pl.col("rank").is_in(by_pool["rollout"]) & (pl.col("stage") == "rollout")
        )
        train = workers.filter(
            pl.col("rank").is_in(by_pool["train"]) & pl.col("stage").is_in(list(TRAINER_STAGES))
        )
        train_ns = _length(train)
        overlap = (
            int(intervals.length(intervals.intersection(gen, train))["length_ns"][0])
            if gen.height and train.height
            else 0
        )
        share = overlap / train_ns if train_ns else 0.0
        if share < OVERLAP_MIN:
            evidence.append(
                f"generation overlaps {share:.0%} of the train "
                "pool's training time: the pools take turns (sync)"
            )
            return "sync"
        sync = workers.filter(
            pl.col("rank").is_in(by_pool["rollout"]) & (pl.col("stage") == "weight_sync")
        )
        mid = (
            int(intervals.length(intervals.intersection(gen, sync, by=["rank"]))["length_ns"].sum())
            if sync.height
            else 0
        )
        if mid > 0:
            evidence.append(
                f"generation overlaps {share:.0%} of training and weights land during generation "
                f"({mid / 1e6:.1f} ms): fully asynchronous"
            )
            return "async"
        evidence.append(
            f"generation of the next batch overlaps {share:.0%} of the train pool's training time, "
            "weights move between generations: one step off-policy"
        )
        return "one_step_off"
    prep = workers.filter(pl.col("stage").is_in(list(PREPARATION_STAGES)))
    gen = workers.filter(pl.col("stage") == "rollout")
    if prep.height and gen.height:
        cross = prep.join(
            gen.select(
                "step",
                pl.col("rank").alias("_gr"),
                pl.col("start_ns").alias("_gs"),
                pl.col("end_ns").alias("_ge"),
            ),
            on="step",
        ).filter(
            (pl.col("_gr") != pl.col("rank"))
            & (pl.col("_gs") < pl.col("end_ns"))
            & (pl.col("_ge") > pl.col("start_ns"))
        )
        fused = (
            intervals.intersection(
                cross.select("rank", "start_ns", "end_ns"),
                cross.select(
                    "rank", pl.col("_gs").alias("start_ns"), pl.col("_ge").alias("end_ns")
                ),
                by=["rank"],
            )
            if cross.height
            else cross
        )
        fused_ns = int(intervals.length(fused)["length_ns"].sum()) if fused.height else 0
        prep_ns = int(intervals.union_length(prep, by=["rank"])["length_ns"].sum())
        share = fused_ns / max(prep_ns, 1)
        if share >= FUSED_MIN:
            evidence.append(
                f"forward-only stages run {share:.0%} of their "
                "time while other ranks of the same step "
                "still generate: stages fused"
            )
            return "stage_fused"
    evidence.append(
        "forward-only and training stages start after every rank's generation has ended (sync)"
    )
    return "sync"


@provides("placement")
def placement(pools: pl.DataFrame, stage_ranges: pl.DataFrame) -> dict[str, Any]:
    return infer_placement(pools, stage_ranges)


# --- report section: the run summary ----------------------------------------------------------


