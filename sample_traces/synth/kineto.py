"""Write one rank's part of the timeline as a PyTorch profiler (Kineto) trace, 2024+ style.

What a rank writes, all on its own (skewed) clock: ``ProfilerStep#N`` and the stage ranges as
``user_annotation`` on the main thread; per launch a ``cpu_op`` (``aten::mm``,
``record_param_comms`` with the collective's args, …) enclosing a ``cuda_runtime`` call
(``cudaLaunchKernel``, ``cudaGraphLaunch`` for a decode step's CUDA-graph replay,
``cudaMemcpyAsync``, ``cudaMemsetAsync``) with ``correlation`` and ``External id``, and an
``ac2g`` flow to the device row; ``kernel``/``gpu_memcpy``/``gpu_memset`` rows on the device
(pid = device, tid = stream); rule-reward host ops. ``ts`` is µs relative to
``baseTimeNanoseconds`` with 3 decimals (exact ns). Rows are formatted column-wise by polars:
no Python object per event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import pairwise
from typing import Any

import numpy as np
import polars as pl

from .config import Config, Groups
from .kernels import DTYPE
from .schedule import RANGE_NAMES, STAGES
from .timeline import KERNEL, MEMCPY, ROLE_RECV, ROLE_SEND

CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CALLS = ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaGraphLaunch")
CBID = (211, 41, 51, 311)
HOST_PID_BASE = 2_400_000
DEVICE_NAME = "NVIDIA H100 80GB HBM3"
PYTHON = "python3.11"


@dataclass
class RunData:
    """Everything a rank's writer reads (shared with worker processes by fork)."""

    cfg: Config
    groups: Groups
    names: list[str]
    ops: dict[str, np.ndarray]
    insts: dict[str, np.ndarray]
    stages: dict[str, np.ndarray]
    host_ops: dict[str, np.ndarray]
    windows: list[tuple[int, int, int]]
    offsets: np.ndarray
    rows_of: dict[int, np.ndarray]
    stage_rows_of: dict[int, np.ndarray]
    host_rows_of: dict[int, np.ndarray]

    def only(self, rank: int) -> RunData:
        """This run cut down to what ``rank``'s writer reads (collective instances renumbered)."""
        empty = np.zeros(0, dtype=np.int64)
        ops = {k: v[self.rows_of.get(rank, empty)] for k, v in self.ops.items()}
        used = np.unique(ops["inst"][ops["inst"] >= 0])
        ops["inst"] = np.where(ops["inst"] >= 0, np.searchsorted(used, ops["inst"]), -1)
        stages = {k: v[self.stage_rows_of.get(rank, empty)] for k, v in self.stages.items()}
        host_rows = self.host_rows_of.get(rank, empty)
        host = {k: v[host_rows] for k, v in self.host_ops.items()}
        return RunData(
            cfg=self.cfg,
            groups=self.groups,
            names=self.names,
            ops=ops,
            insts={k: v[used] for k, v in self.insts.items()},
            stages=stages,
            host_ops=host,
            windows=self.windows,
            offsets=self.offsets,
            rows_of={rank: np.arange(len(ops["start"]))},
            stage_rows_of={rank: np.arange(len(stages["start"]))},
            host_rows_of={rank: np.arange(len(host_rows))} if host_rows.size else {},
        )


def base_time_ns(epoch_ns: int) -> int:
    """Kineto's ``baseTimeNanoseconds``: the start of the calendar quarter (UTC)."""
    when = datetime.fromtimestamp(epoch_ns // 1_000_000_000, tz=timezone.utc)
    start = datetime(when.year, 3 * ((when.month - 1) // 3) + 1, 1, tzinfo=timezone.utc)
    return int(start.timestamp()) * 1_000_000_000


def device_of(cfg: Config, rank: int) -> int:
    return rank % cfg.gpus_per_node


def host_of(cfg: Config, rank: int) -> str:
    return f"synth-node-{rank // cfg.gpus_per_node:03d}"


def pid_of(cfg: Config, rank: int) -> int:
    return HOST_PID_BASE + 97 * rank + (cfg.seed % 89)


def fmt(template: str, *exprs: pl.Expr) -> pl.Expr:
    """``template`` with each ``{}`` replaced by an expression's text (JSON built column-wise)."""
    pieces = template.split("{}")
    if len(pieces) != len(exprs) + 1:
        raise ValueError("template and expressions disagree")
    parts: list[pl.Expr] = []
    for piece, expr in zip(pieces, [*exprs, None], strict=True):
        if piece:
            parts.append(pl.lit(piece))
        if expr is not None:
            parts.append(expr.cast(pl.String))
    return pl.concat_str(parts)


def us(col: str | pl.Expr) -> pl.Expr:
    """Integer ns → Kineto's µs with exactly three decimals."""
    x = pl.col(col) if isinstance(col, str) else col
    return pl.concat_str(
        [(x // 1000).cast(pl.String), pl.lit("."), (x % 1000).cast(pl.String).str.zfill(3)]
    )


def device_and_launches(run: RunData, rank: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rank's device rows and their host launches, on the rank's clock relative to
    ``baseTimeNanoseconds`` (shared by the Kineto and nsys writers so both say the same)."""
    cfg = run.cfg
    rng = np.random.default_rng([cfg.seed, rank, 11])
    shift = int(run.offsets[rank]) - base_time_ns(cfg.start_epoch_ns)
    rows = run.rows_of.get(rank, np.zeros(0, dtype=np.int64))
    ops = {k: v[rows] for k, v in run.ops.items()}
    dev = pl.DataFrame({
        "launch": ops["launch"], "kind": ops["kind"].astype(np.int32), "name": ops["name"],
        "op": ops["op"], "stream": ops["stream"], "start": ops["start"] + shift,
        "dur": ops["end"] - ops["start"], "inst": ops["inst"], "role": ops["role"].astype(np.int32),
        "bytes": ops["nbytes"],
    }).sort(["start", "stream", "launch"])
    launches = _launches(dev, rng)
    dev = dev.join(launches.select("launch", "corr", "ext"), on="launch", how="left").with_columns(
        first=pl.int_range(pl.len()).over("launch") == 0
    )
    return dev, launches


def rank_trace(run: RunData, rank: int) -> bytes:
    """The whole JSON document of one rank's trace."""
    cfg = run.cfg
    base = base_time_ns(cfg.start_epoch_ns)
    shift = int(run.offsets[rank]) - base
    pid = pid_of(cfg, rank)
    device = device_of(cfg, rank)
    names = pl.DataFrame({"name": np.arange(len(run.names), dtype=np.int32),
                          "qname": [json.dumps(n) for n in run.names]})
    dev, launches = device_and_launches(run, rank)
    ops = {"inst": dev["inst"].to_numpy(), "stream": dev["stream"].to_numpy()}
    colls = _collective_args(run, np.unique(ops["inst"][ops["inst"] >= 0]))
    blocks = [
        _device_rows(dev, names, colls, device),
        _launch_rows(launches, names, colls, pid),
        _annotations(run, rank, shift, pid),
        _host_ops(run, rank, shift, pid, names),
    ]
    body = pl.concat([b for b in blocks if b.height], how="vertical")["e"]
    meta = _metadata_events(run, rank, pid, device, sorted(set(ops["stream"].tolist())))
    header = _header(run, rank, device, base)
    events = ",\n".join([*meta, body.str.join(",\n").item()]) if body.len() else ",\n".join(meta)
    head = json.dumps(header, separators=(", ", ": "))[:-1]
    tail = {
        "traceName": f"synthetic rlperf trace: scenario {cfg.scenario}, rank {rank} "
            f"(sample_traces/synth)",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base,
    }
    tail_text = json.dumps(tail, separators=(", ", ": "))[1:]
    return (head + ', "traceEvents": [\n' + events + "\n], " + tail_text + "\n").encode()


def _launches(dev: pl.DataFrame, rng: np.random.Generator) -> pl.DataFrame:
    """One host launch per launch id, placed just before its first device row and never
    overlapping the previous launch on the thread (a reverse running minimum)."""
    first = dev.group_by("launch").agg(
        pl.col("start").min().alias("kstart"), pl.col("kind").first(), pl.col("op").first(),
        pl.len().alias("n"), pl.col("inst").first(), pl.col("role").first(),
    ).sort(["kstart", "launch"])
    n = first.height
    pre = rng.integers(1_500, 4_000, n)
    rt = rng.integers(2_500, 5_000, n)
    post = rng.integers(500, 2_000, n)
    lat = rng.integers(3_000, 9_000, n)
    envelope = pre + rt + post
    latest = first["kstart"].to_numpy() - lat - rt - pre
    suffix = np.cumsum(envelope[::-1])[::-1]
    z = np.minimum.accumulate((latest + suffix)[::-1])[::-1]
    x = z - suffix
    call = np.where(first["kind"].to_numpy() == KERNEL, np.where(first["n"].to_numpy() > 1, 3, 0),
                    np.where(first["kind"].to_numpy() == MEMCPY, 1, 2))
    return first.with_columns(
        op_start=pl.Series(x), op_dur=pl.Series(envelope), rt_start=pl.Series(x + pre),
        rt_dur=pl.Series(rt), call=pl.Series(call),
        corr=pl.int_range(pl.len(), dtype=pl.Int64) * 3 + 1001,
        ext=pl.int_range(pl.len(), dtype=pl.Int64) * 2 + 401,
    )


def _collective_args(run: RunData, needed: np.ndarray) -> pl.DataFrame:
    """Per collective instance and side, the args PyTorch puts on ``record_param_comms`` and
    copies onto the NCCL kernel."""
    frag = [
        f'"Process Group Name": {json.dumps(g.name)}, "Process Group Description": '
        f'{json.dumps(g.desc)}, '
        f'"Process Group Ranks": {json.dumps(_ranks_text(g.ranks))}, "Group size": {len(g.ranks)}, '
        f'"Global rank start": {g.ranks[0]}, "Global rank stride": {_stride(g.ranks)}'
        for g in run.groups.all
    ]
    ins = {k: v[needed] for k, v in run.insts.items()}
    frame = pl.DataFrame({
        "inst": needed.astype(np.int64), "coll": ins["coll"], "in": ins["in_nelems"],
        "out": ins["out_nelems"], "pg": ins["pg"], "seq": ins["seq"],
    }).with_columns(
        cname=pl.lit(pl.Series(run.names)).gather(pl.col("coll")),
        frag=pl.lit(pl.Series(frag)).gather(pl.col("pg")),
    )
    sides = []
    for role in (0, ROLE_SEND, ROLE_RECV):
        name = {0: pl.col("cname"), ROLE_SEND: pl.lit("send"), ROLE_RECV: pl.lit("recv")}[role]
        sides.append(
            frame.select(
                "inst",
                role=pl.lit(role, dtype=pl.Int32),
                cargs=fmt(
                    '"Collective name": "{}", "dtype": "' + DTYPE + '", "In msg nelems": {}, '
                    '"Out msg nelems": {}, "In split size": "[]", "Out split size": "[]", {}, '
                    '"Seq": {}',
                    name,
                    pl.col("in"),
                    pl.col("out"),
                    pl.col("frag"),
                    pl.col("seq"),
                ),
            )
        )
    return pl.concat(sides)


def _ranks_text(ranks: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(r) for r in ranks) + "]"


def _stride(ranks: tuple[int, ...]) -> int:
    steps = {b - a for a, b in pairwise(ranks)}
    return steps.pop() if len(steps) == 1 else 0


def _with_coll(frame: pl.DataFrame, colls: pl.DataFrame, args: str) -> pl.DataFrame:
    joined = frame.join(colls, on=["inst", "role"], how="left", maintain_order="left")
    return joined.with_columns(
        pl.when(pl.col("cargs").is_not_null())
        .then(pl.concat_str([pl.col(args), pl.lit(", "), pl.col("cargs")]))
        .otherwise(pl.col(args)).alias(args)
    )


def _device_rows(
    dev: pl.DataFrame, names: pl.DataFrame, colls: pl.DataFrame, device: int
) -> pl.DataFrame:
    kind = pl.col("kind")
    common = fmt(
        '"External id": {}, "device": '
        + str(device)
        + ', "context": 1, "stream": {}, "correlation": {}',
        pl.col("ext"),
        pl.col("stream"),
        pl.col("corr"),
    )
    frame = dev.join(names, on="name", how="left", maintain_order="left").with_columns(
        args=pl.when(kind == KERNEL)
        .then(
            pl.concat_str(
                [
                    common,
                    pl.lit(
                        ', "queued": 0, "registers per thread": 128, "shared memory": 0, '
                        '"grid": [132, 1, 1], "block": [256, 1, 1]'
                    ),
                ]
            )
        )
        .otherwise(
            pl.concat_str(
                [
                    common,
                    pl.lit(', "bytes": '),
                    pl.col("bytes").cast(pl.String),
                    pl.lit(', "memory bandwidth (GB/s)": '),
                    us(pl.col("bytes") * 1000 // pl.col("dur")),
                ]
            )
        ),
        cat=pl.lit(pl.Series(CATEGORIES)).gather(kind),
    )
    frame = _with_coll(frame, colls, "args")
    event = fmt(
        '{"ph": "X", "cat": "{}", "name": {}, "pid": ' + str(device) + ', "tid": {}, "ts": {}, '
        '"dur": {}, "args": {{}}}',
        pl.col("cat"),
        pl.col("qname"),
        pl.col("stream"),
        us("start"),
        us("dur"),
        pl.col("args"),
    )
    flows = frame.filter(pl.col("first")).select(
        e=fmt(
            '{"ph": "f", "id": {}, "pid": ' + str(device) + ', "tid": {}, "ts": {}, "cat": "ac2g", '
            '"name": "ac2g", "bp": "e"}',
            pl.col("corr"),
            pl.col("stream"),
            us("start"),
        )
    )
    return pl.concat([frame.select(e=event), flows])


def _launch_rows(
    launches: pl.DataFrame, names: pl.DataFrame, colls: pl.DataFrame, pid: int
) -> pl.DataFrame:
    frame = launches.join(names.rename({"name": "op", "qname": "qop"}), on="op", how="left",
                          maintain_order="left").with_columns(
        opargs=fmt('"External id": {}, "Record function id": 0, "Ev Idx": {}', pl.col("ext"),
                   pl.int_range(pl.len())),
        rt_name=pl.lit(pl.Series(RUNTIME_CALLS)).gather(pl.col("call")),
        cbid=pl.lit(pl.Series(CBID)).gather(pl.col("call")),
    )
    frame = _with_coll(frame, colls, "opargs")
    thread = f'"pid": {pid}, "tid": {pid}'
    cpu = fmt(
        '{"ph": "X", "cat": "cpu_op", "name": {}, '
        + thread
        + ', "ts": {}, "dur": {}, "args": {{}}}',
        pl.col("qop"),
        us("op_start"),
        us("op_dur"),
        pl.col("opargs"),
    )
    runtime = fmt(
        '{"ph": "X", "cat": "cuda_runtime", "name": "{}", ' + thread + ', "ts": {}, "dur": {}, '
        '"args": {"External id": {}, "cbid": {}, "correlation": {}}}',
        pl.col("rt_name"),
        us("rt_start"),
        us("rt_dur"),
        pl.col("ext"),
        pl.col("cbid"),
        pl.col("corr"),
    )
    flow = fmt('{"ph": "s", "id": {}, ' + thread + ', "ts": {}, "cat": "ac2g", "name": "ac2g"}',
               pl.col("corr"), us("rt_start"))
    return pl.concat([frame.select(e=cpu), frame.select(e=runtime), frame.select(e=flow)])


def _annotations(run: RunData, rank: int, shift: int, pid: int) -> pl.DataFrame:
    """``ProfilerStep#N`` and verl's ``step`` per step, then each stage's driver range with
    the worker range inside it."""
    frame = annotation_frame(run, rank, shift)
    return frame.select(
        e=fmt(
            '{"ph": "X", "cat": "user_annotation", "name": "{}", "pid": '
            + str(pid)
            + ', "tid": '
            + str(pid)
            + ', "ts": {}, "dur": {}, "args": {"External id": {}, "Record function id": 0, "Ev '
                'Idx": {}}}',
            pl.col("name"),
            us("start"),
            us(pl.col("end") - pl.col("start")),
            pl.int_range(pl.len()) * 2 + 2,
            pl.int_range(pl.len()),
        )
    )


def annotation_frame(run: RunData, rank: int, shift: int) -> pl.DataFrame:
    """name, start, end of every range the rank records, shifted by ``shift``, outer first."""
    names, starts, ends = [], [], []
    for step, a, b in run.windows:
        names += [f"ProfilerStep#{step}", "step"]
        starts += [a, a + 4_000]
        ends += [b, b - 3_000]
    rows = run.stage_rows_of.get(rank, np.zeros(0, dtype=np.int64))
    st = run.stages
    for i in rows:
        driver, worker = RANGE_NAMES[STAGES[st["stage"][i]]]
        names.append(driver)
        starts.append(int(st["start"][i]))
        ends.append(int(st["end"][i]))
        if worker:
            names.append(worker)
            starts.append(int(st["inner_start"][i]))
            ends.append(int(st["inner_end"][i]))
    return pl.DataFrame(
        {
            "name": names,
            "start": np.array(starts, np.int64) + shift,
            "end": np.array(ends, np.int64) + shift,
        }
    ).sort(["start", "end"], descending=[False, True])


def _host_ops(run: RunData, rank: int, shift: int, pid: int, names: pl.DataFrame) -> pl.DataFrame:
    rows = run.host_rows_of.get(rank)
    if rows is None or not run.host_ops:
        return pl.DataFrame(schema={"e": pl.String})
    h = run.host_ops
    frame = pl.DataFrame(
        {
            "name": h["name"][rows],
            "start": h["start"][rows] + shift,
            "dur": h["end"][rows] - h["start"][rows],
        }
    ).join(names, on="name", how="left")
    return frame.select(e=fmt(
        '{"ph": "X", "cat": "cpu_op", "name": {}, "pid": ' + str(pid) + ', "tid": ' + str(pid)
        + ', "ts": {}, "dur": {}, "args": {"External id": {}, "Record function id": 0}}',
        pl.col("qname"), us("start"), us("dur"), pl.int_range(pl.len()) * 2 + 1,
    ))


def _metadata_events(
    run: RunData, rank: int, pid: int, device: int, streams: list[int]
) -> list[str]:
    ts = 0.0
    out = []

    def m(name: str, p: int | str, tid: int, args: dict[str, Any]) -> None:
        out.append(
            json.dumps({"name": name, "ph": "M", "ts": ts, "pid": p, "tid": tid, "args": args})
        )

    m("process_name", pid, 0, {"name": PYTHON})
    m("process_labels", pid, 0, {"labels": "CPU"})
    m("process_sort_index", pid, 0, {"sort_index": pid})
    m("process_name", device, 0, {"name": PYTHON})
    m("process_labels", device, 0, {"labels": f"GPU {device}"})
    m("process_sort_index", device, 0, {"sort_index": 16777216 + device})
    m("thread_name", pid, pid, {"name": f"thread {pid} (python)"})
    for s in streams:
        m("thread_name", device, s, {"name": f"stream {s} "})
        m("thread_sort_index", device, s, {"sort_index": s})
    return out


def _header(run: RunData, rank: int, device: int, base: int) -> dict[str, Any]:
    cfg = run.cfg
    pgs = [g for g in run.groups.all if rank in g.ranks]
    return {
        "schemaVersion": 1,
        "rlperf_synthetic": True,
        "deviceProperties": [{
            "id": d, "name": DEVICE_NAME, "totalGlobalMem": 85029158912, "computeMajor": 9,
            "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
            "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
            "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,
            "sharedMemPerMultiprocessor": 233472,
        } for d in range(cfg.gpus_per_node)],
        "distributedInfo": {
            "backend": "nccl", "rank": rank, "world_size": cfg.ranks, "pg_count": len(pgs),
            "pg_config": [{"pg_name": g.name, "pg_desc": g.desc, "backend_config": "cuda:nccl",
                           "pg_size": len(g.ranks), "ranks": list(g.ranks)} for g in pgs],
            "nccl_version": "2.27.5",
        },
        "host_name": host_of(cfg, rank),
        "rlperf_scenario": cfg.scenario,
        "cuda_runtime_version": 12080, "cuda_driver_version": 12080, "cupti_version": 26,
        "with_stack": 0, "record_shapes": 0, "profile_memory": 0,
    }
