"""The run section: what ran (framework, version, ranks, driver, placement, execution mode, steps,
clock alignment)."""

from __future__ import annotations

from typing import Any

import polars as pl

from ...analyses.sync import of_ranks
from ...model.run import Run
from ...model.scalars import as_int
from ...model.units import duration, plural, spans
from ..section import Column, Section


def number_ranges(numbers: list[int], noun: str = "step") -> str:
    """``[1, 2, 3, 7, 9, 10]`` → ``"1–3, 7, 9–10 (6 steps)"``: step lists stay one line. The
    count, with its noun, is left out only where the numbers count themselves (``1``, ``1–2``):
    a lone ``134`` read as 134 steps, and a bare ``134 (1)`` did not say what the 1 counts."""
    distinct = sorted(set(numbers))
    count = len(distinct)
    counts_itself = count <= 2 and distinct == list(range(1, count + 1))
    return spans(numbers, ", ", "–") + ("" if counts_itself else f" ({plural(count, noun)})")


def _hosts(hosts: list[str]) -> str:
    """``on 2 hosts: a, b`` (the first four named); a trace that records no host says so."""
    if not hosts:
        return "host not recorded in the traces"
    more = " …" if len(hosts) > 4 else ""
    return f"on {plural(len(hosts), 'host')}: {', '.join(hosts[:4])}{more}"


def _placement(facts: dict[str, Any], run: Run) -> tuple[str, str]:
    """(value, detail): the trace's placement, else the one a log's config states (verl's
    hybrid_engine, OpenRLHF's and DeepSpeed-Chat's colocation flags), which the guidelines read
    too (G8, G18, G25), so the run section and they say the same; ``–`` when neither says."""
    inferred = "; ".join(facts["evidence"][:1])
    if facts["placement"]:
        return facts["placement"], inferred
    stated = next((s.meta["placement"] for s in run.sources if (s.meta or {}).get("placement")),
                  None)
    if stated is None:
        return "–", inferred
    return f"{stated} (config)", f"stated by the log's config; {inferred}"


def summary(run: Run) -> pl.DataFrame:
    """Facts about the run as (fact, value, detail) rows."""
    rows: list[tuple[str, str, str]] = []
    profile = run.profile
    rows.append(("framework", profile["name"], profile["title"]))
    rows.append(("version assumed", profile["version"] or "any", profile["reason"]))
    pools = of_ranks(run.pools, run.selected_ranks)
    hosts = sorted({h for h in pools["host"].to_list() if h})
    if pools.height:
        rows.append(
            (
                "ranks",
                str(pools.height),
                _hosts(hosts),
            )
        )
    else:
        rows.append(("ranks", "–", "no device traces: logs only"))
    roles = {s.meta.get("role") for s in run.sources}
    if "driver" in roles:
        rows.append(
            ("driver", "yes", "the single controller's timers frame the steps; it is not a device")
        )
    facts = run.placement
    rows.append(("placement", *_placement(facts, run)))
    rows.append(("execution mode", facts["execution"] or "–", "; ".join(facts["evidence"][1:])))
    steps = run.steps
    if steps.height:
        lengths = steps["end_ns"] - steps["start_ns"]
        src = steps["source"][0]
        numbering = run.stepping["note"]
        rows.append(
            (
                "steps",
                number_ranges(steps["step"].to_list()),
                f"from {src}; median {duration(lengths.median())}"
                + (f"; {numbering}" if numbering else ""),
            )
        )
    else:
        rows.append(("steps", "none", "no ProfilerStep, step range, rollout or log step found"))
    clock = run.clock
    aligned = clock.filter(pl.col("aligned"))
    if clock.height:
        shifted = clock.filter(pl.col("offset_ns") != 0)
        worst = as_int(aligned["uncertainty_ns"].max() or 0) if aligned.height else 0
        if not aligned.height:
            detail = "no matched collectives: clocks taken as recorded"
        elif shifted.height:
            detail = (
                f"{plural(shifted.height, 'rank')} shifted, largest offset "
                f"{as_int(shifted['offset_ns'].abs().max()) / 1e3:.0f} µs; "
                f"residual uncertainty up to {worst / 1e3:.0f} µs"
            )
        else:
            detail = f"no offset beyond its uncertainty; clocks agree within {worst / 1e3:.0f} µs"
        rows.append(("clock alignment", f"{aligned.height}/{clock.height} ranks aligned", detail))
    return pl.DataFrame(
        rows, schema={"fact": pl.String, "value": pl.String, "detail": pl.String}, orient="row"
    )


def section(run: Run) -> Section | None:
    return Section(
        "Run",
        summary(run),
        columns=[Column("fact", "fact"), Column("value", "value"), Column("detail", "detail")],
        note="Framework from the profile matching the most names; placement and execution mode "
             "from which ranks run which stages when.",
    )
