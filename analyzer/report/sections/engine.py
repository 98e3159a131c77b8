"""The inference-engine section (vLLM, SGLang runs only): the engine, that the run is
rollout-only, the prefill/decode split of its engine steps, graph replays and a graph-capture
flag (docs/profiles.md, "Inference engines")."""

from __future__ import annotations

import polars as pl

from ...analyses.engine import engine_steps, phase_split
from ...classify.engine import is_engine
from ...model.run import Run
from ...model.units import plural
from ..section import Column, Section


def _graphs(run: Run) -> list[str]:
    lines = []
    for s in run.sources:
        replay, capture = s.meta.get("graph_replay"), s.meta.get("graph_capture")
        if replay:
            by_time = replay["linked_by_time"]
            lines.append(
                f"{s.path.name}: {plural(replay['launches'], 'graph launch')} replayed "
                f"{plural(replay['kernels'], 'GPU row')}, each attributed to its launch"
                + (f" ({by_time} by time: no correlation id of their own)" if by_time else "")
            )
        if capture:
            lines.append(
                f"{s.path.name}: GRAPH CAPTURE trace — "
                f"{plural(capture['captured_launches'], 'launch')} were captured into a graph, "
                "not executed; its device time is not execution time"
            )
    return lines


def graph_facts(run: Run) -> pl.DataFrame:
    """Per trace source: graph launches, the GPU rows they replayed (and how many of those were
    linked by time), whether it was recorded during capture and the launches captured."""
    rows = [
        {
            "file": s.path.name,
            "graph_launches": (s.meta.get("graph_replay") or {}).get("launches", 0),
            "replayed": (s.meta.get("graph_replay") or {}).get("kernels", 0),
            "linked_by_time": (s.meta.get("graph_replay") or {}).get("linked_by_time", 0),
            "graph_capture": bool(s.meta.get("graph_capture")),
            "captured_launches": (s.meta.get("graph_capture") or {}).get("captured_launches", 0),
        }
        for s in run.sources
        if s.meta.get("graph_replay") or s.meta.get("graph_capture")
    ]
    schema = {"file": pl.String, "graph_launches": pl.Int64, "replayed": pl.Int64,
              "linked_by_time": pl.Int64, "graph_capture": pl.Boolean,
              "captured_launches": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


def section(run: Run) -> Section | None:
    profile = run.profile
    if not is_engine(profile):
        return None
    per_step = engine_steps(run.ranges, run.steps)
    placement = run.placement
    note = "; ".join([
        f"{profile['title']}: placement {placement['placement'] or 'unknown'}, "
        + "; ".join(placement["evidence"][:1]),
        f"{plural(per_step.height, 'engine step')}; phase per step from the batch names the engine "
        "records (execute_…_context_P…_generation_D…, SGLang step[MODE bs=…], capture_N_MODE); "
        "a mixed step's time is not divided",
        *_graphs(run),
    ])
    return Section(
        "Inference engine: prefill and decode",
        phase_split(per_step) if per_step.height else None,
        columns=[
            Column("phase", "phase"),
            Column("steps", "steps", "number"),
            Column("captured", "captured", "number"),
            Column("time_ns", "step time", "duration"),
            Column("share", "share", "percent"),
            Column("prefill_requests", "prefill requests", "number"),
            Column("prefill_tokens", "prefill tokens", "number"),
            Column("decode_requests", "decode requests", "number"),
            Column("decode_tokens", "decode tokens", "number"),
        ],
        note=note,
        details={"engine_steps": per_step, "engine_graphs": graph_facts(run)},
    )
