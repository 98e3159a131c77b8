"""Collectives by parallelism dimension, weight sync and stragglers."""

from __future__ import annotations

from ...model.run import Run
from ..section import Column, Section, gated


def section(run: Run) -> Section | None:
    title = "Collectives by parallelism dimension"
    table = gated(run, title, "collectives_by_dim", "no collectives in these sources")
    if isinstance(table, Section):
        return table
    notes = []
    for r in run.weight_sync.iter_rows(named=True):
        bw = f", {r['bandwidth_gbps']:.3g} GB/s" if r["bandwidth_gbps"] else ""
        notes.append(
            f"step {r['step']}: weight sync {r['time_ns'] / 1e6:.3g} "
            f"ms ({100 * r['share']:.1f}% of the step){bw}"
        )
    top = run.stragglers.head(3)
    if top.height:
        notes.append(
            "stragglers (wait caused by arriving last): "
            + ", ".join(
                f"rank {r['rank']} {r['caused_wait_ns'] / 1e6:.3g} ms"
                for r in top.iter_rows(named=True)
            )
        )
    return Section(
        title,
        table,
        columns=[
            Column("dim", "dim"),
            Column("coll", "collective"),
            Column("count", "count", "number"),
            Column("bytes", "bytes", "bytes"),
            Column("time_ns", "time", "duration"),
            Column("exposed_ns", "exposed", "duration"),
            Column("wait_ns", "wait", "duration"),
            Column("transfer_ns", "transfer", "duration"),
            Column("busbw_gbps", "bus bw", "bandwidth"),
        ],
        note="; ".join(notes),
    )
