"""The ground truth of a synthetic run, computed from the true timeline by docs/analyses.md.

Everything here reads the generator's own intervals (true clock, before any skew) and applies
the definitions literally: busy and sync wait (§4), the seven idle causes in their order, stage
durations and the critical path (§3), collectives per dimension (§5). It shares no code with
``analyzer/``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import intervals as iv
from .config import Config, Groups
from .kernels import DTYPE_BYTES
from .schedule import RANGE_NAMES, ROLES, STAGES

CAUSES: tuple[str, ...] = (
    "weight_sync", "rollout_tail", "pool_wait", "sync_wait", "host_bound", "stage_gap", "other",
)
"""Idle causes in rule order (docs/analyses.md §4)."""

CRITICAL_SLACK_NS = 100_000


def compute(cfg: Config, groups: Groups, data: dict[str, dict[str, np.ndarray]],
            windows: list[tuple[int, int, int]]) -> dict[str, Any]:
    ops, insts, stages = data["ops"], data["insts"], data["stages"]
    coll_rows = ops["inst"] >= 0
    max_start = np.full(len(insts["pg"]), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(max_start, ops["inst"][coll_rows], ops["start"][coll_rows])
    wait_end = np.where(
        coll_rows, np.minimum(ops["end"], max_start[np.maximum(ops["inst"], 0)]), ops["start"]
    )
    wait_end = np.maximum(wait_end, ops["start"])
    row_wait = np.zeros(len(ops["start"]), dtype=np.int64)

    by_rank_step = _index(ops["rank"], ops["step"])
    stage_index = _index(stages["rank"], stages["step"])
    pool = np.array([cfg.pool_of(r) for r in range(cfg.ranks)])
    rollout_code = STAGES.index("rollout")
    sync_code = STAGES.index("weight_sync")

    devices: list[dict[str, Any]] = []
    for step, w0, w1 in windows:
        window: iv.Span = (np.array([w0]), np.array([w1]))
        in_step = stages["step"] == step
        ro = in_step & (stages["stage"] == rollout_code)
        pools_busy = {p: iv.span(stages["start"][in_step & (pool[stages["rank"]] == p)],
                                 stages["end"][in_step & (pool[stages["rank"]] == p)])
                      for p in ("rollout", "train")}
        for rank in range(cfg.ranks):
            rows = by_rank_step.get((rank, step), np.zeros(0, dtype=np.int64))
            s, e = ops["start"][rows], ops["end"][rows]
            busy = iv.intersect(iv.span(s, e), window)
            coll = coll_rows[rows]
            compute_set = iv.span(s[~coll], e[~coll])
            cr = rows[coll]
            row_wait[cr] = (wait_end[cr] - ops["start"][cr]) - iv.overlap_each(
                ops["start"][cr], wait_end[cr], compute_set
            )
            waiting = iv.subtract(iv.span(ops["start"][cr], wait_end[cr]), compute_set)
            productive = iv.subtract(busy, waiting)

            mine = stage_index.get((rank, step), np.zeros(0, dtype=np.int64))
            ms, me, mc = stages["start"][mine], stages["end"][mine], stages["stage"][mine]
            ranged = iv.span(ms, me)
            rules: list[iv.Span] = [iv.span(ms[mc == sync_code], me[mc == sync_code])]
            own_ro = mc == rollout_code
            if pool[rank] in ("rollout", "shared") and own_ro.any():
                others = ro & (stages["rank"] != rank)
                after = (np.array([me[own_ro].max()]), np.array([w1]))
                rules.append(
                    iv.intersect(iv.span(stages["start"][others], stages["end"][others]), after)
                )
            else:
                rules.append(iv.EMPTY)
            if pool[rank] in ("rollout", "train"):
                other_pool = "train" if pool[rank] == "rollout" else "rollout"
                rules.append(iv.subtract(pools_busy[other_pool], ranged))
            else:
                rules.append(iv.EMPTY)
            rules.append(waiting)
            rules.append(ranged)
            rules.append((np.array([ms.min()]), np.array([me.max()])) if mine.size else iv.EMPTY)
            rules.append(window)
            remaining = iv.subtract(window, productive)
            idle = {}
            for cause, rule in zip(CAUSES, rules, strict=True):
                idle[cause] = iv.measure(iv.intersect(remaining, rule))
                remaining = iv.subtract(remaining, rule)
            devices.append({
                "rank": rank, "step": step, "window_ns": w1 - w0, "busy_ns": iv.measure(busy),
                "productive_busy_ns": iv.measure(productive), "idle_ns": idle,
            })

    return {
        "stages": _stages(cfg, stages),
        "step_windows": [{"step": s, "start_ns": a, "end_ns": b} for s, a, b in windows],
        "devices": devices,
        "stage_durations": _durations(stages),
        "collectives_by_dim": _collectives(groups, ops, insts, row_wait),
        "critical_path": [_critical(stages, step) for step, _, _ in windows],
    }


def _index(rank: np.ndarray, step: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """(rank, step) → row numbers, in one sort."""
    if rank.size == 0:
        return {}
    order = np.lexsort((step, rank))
    keys = np.stack([rank[order], step[order]], axis=1)
    cut = np.flatnonzero(np.any(np.diff(keys, axis=0) != 0, axis=1)) + 1
    return {
        (int(k[0]), int(k[1])): part
        for k, part in zip(keys[np.r_[0, cut]], np.split(order, cut), strict=True)
    }


def _stages(cfg: Config, stages: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    order = np.lexsort((stages["start"], stages["rank"], stages["step"]))
    out = []
    for i in order:
        stage = STAGES[stages["stage"][i]]
        driver, worker = RANGE_NAMES[stage]
        row = {"rank": int(stages["rank"][i]), "step": int(stages["step"][i]), "stage": stage,
               "name": driver, "role": ROLES[stages["role"][i]],
               "start_ns": int(stages["start"][i]), "end_ns": int(stages["end"][i])}
        if worker:
            row["worker_name"] = worker
            row["worker_start_ns"] = int(stages["inner_start"][i])
            row["worker_end_ns"] = int(stages["inner_end"][i])
        out.append(row)
    return out


def _durations(stages: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    out = []
    for (rank, step), rows in sorted(
        _index(stages["rank"], stages["step"]).items(), key=lambda kv: (kv[0][1], kv[0][0])
    ):
        s, e, c = stages["start"][rows], stages["end"][rows], stages["stage"][rows]
        total = 0
        for code in np.unique(c):
            d = int((e[c == code] - s[c == code]).sum())
            total += d
            out.append({"rank": rank, "step": step, "stage": STAGES[code], "duration_ns": d})
        out.append(
            {
                "rank": rank,
                "step": step,
                "stage": "other",
                "duration_ns": int(e.max() - s.min()) - total,
            }
        )
    return out


def _collectives(groups: Groups, ops: dict[str, np.ndarray], insts: dict[str, np.ndarray],
                 row_wait: np.ndarray) -> list[dict[str, Any]]:
    rows = np.flatnonzero(ops["inst"] >= 0)
    inst = ops["inst"][rows]
    dims = np.array([g.dim for g in groups.all])[insts["pg"][inst]]
    nbytes = np.maximum(insts["in_nelems"][inst], insts["out_nelems"][inst]) * DTYPE_BYTES
    dur = ops["end"][rows] - ops["start"][rows]
    out = []
    for dim in sorted(set(dims.tolist())):
        m = dims == dim
        out.append({"dim": dim, "count": int(m.sum()), "bytes": int(nbytes[m].sum()),
                    "time_ns": int(dur[m].sum()), "wait_ns": int(row_wait[rows][m].sum())})
    return out


def _critical(stages: dict[str, np.ndarray], step: int) -> dict[str, Any]:
    """docs/analyses.md §3: walk back from the stage interval that ends last."""
    m = stages["step"] == step
    s, e, r, c = stages["start"][m], stages["end"][m], stages["rank"][m], stages["stage"][m]
    order = np.lexsort((r, -e))
    cur = int(order[0])
    chain = [cur]
    while True:
        cand = (e <= s[cur] + CRITICAL_SLACK_NS) & (s < s[cur])
        if not cand.any():
            break
        idx = np.flatnonzero(cand)
        best = idx[np.lexsort((r[idx], -e[idx]))[0]]
        cur = int(best)
        chain.append(cur)
    chain.reverse()
    dur = e[chain] - s[chain]
    per_rank: dict[int, int] = {}
    per_stage: dict[str, int] = {}
    for i, d in zip(chain, dur, strict=True):
        per_rank[int(r[i])] = per_rank.get(int(r[i]), 0) + int(d)
        per_stage[STAGES[c[i]]] = per_stage.get(STAGES[c[i]], 0) + int(d)
    rank = min(per_rank, key=lambda k: (-per_rank[k], k))
    stage = min(per_stage, key=lambda k: (-per_stage[k], STAGES.index(k)))
    return {
        "step": step,
        "rank": rank,
        "stage": stage,
        "length_ns": int(e[chain[-1]] - s[chain[0]]),
        "chain": [
            {"rank": int(r[i]), "stage": STAGES[c[i]], "start_ns": int(s[i]), "end_ns": int(e[i])}
            for i in chain
        ],
    }
