"""Collective names: PyTorch's ``Collective name`` strings and NCCL kernel names → ``coll``.

Shared by every parser that meets collectives (Kineto, nsys). Both NCCL kernel-name styles are
understood: ``ncclKernel_<Coll>_<ALGO>_<PROTO>_<RedOp>_<type>(…)`` (before NCCL ~2.19) and
``ncclDevKernel_<Coll>[_<RedOp>_<type>]_<ALGO>_<PROTO>(…)`` (after).
"""

from __future__ import annotations

import re

import polars as pl

_COLL_ALIASES: dict[str, str] = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "allreducecoalesced": "all_reduce",
    "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "allgather": "all_gather",
    "_allgather_base": "all_gather",
    "allgather_base": "all_gather",
    "all_gather": "all_gather",
    "all_gather_base": "all_gather",
    "_all_gather_base": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "allgather_coalesced": "all_gather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "alltoallv": "all_to_all",
    "broadcast": "broadcast",
    "_broadcast_oop": "broadcast",
    "broadcast_coalesced": "broadcast",
    "reduce": "reduce",
    "_reduce_oop": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "send": "send",
    "recv": "recv",
    "recv_any_source": "recv",
    "sendrecv": "send_recv",
    "send_recv": "send_recv",
    "batch_isend_irecv": "send_recv",
    "barrier": "barrier",
    "monitoredbarrier": "barrier",
}

_KERNEL_COLL: dict[str, str] = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
    "SendRecv": "send_recv",
    "Send": "send",
    "Recv": "recv",
    "AllToAll": "all_to_all",
    "Gather": "gather",
    "Scatter": "scatter",
}

NCCL_KERNEL = re.compile(r"^(?:void )?nccl(?:Dev)?Kernel_([A-Za-z]+)")
"""Group 1 is the collective in both naming styles (``AllReduce``, ``SendRecv``, …)."""
NCCL_KERNEL_PATTERN = r"^(?:void )?nccl(?:Dev)?Kernel_"

DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "f32": 4, "int": 4, "int32": 4, "i32": 4, "uint32": 4,
    "double": 8, "float64": 8, "f64": 8, "long": 8, "int64": 8, "i64": 8, "uint64": 8,
    "bfloat16": 2, "bf16": 2, "half": 2, "float16": 2, "f16": 2, "short": 2, "int16": 2,
    "byte": 1, "char": 1, "bool": 1, "int8": 1, "uint8": 1, "i8": 1, "u8": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "complexfloat": 8, "complexdouble": 16, "complexhalf": 4,
}


def canonical_coll(name: str | None) -> str | None:
    """``Collective name`` as PyTorch writes it (``allreduce``, ``_allgather_base``, …) →
    ``coll``."""
    if not name:
        return None
    key = name.strip().lower()
    for prefix in ("nccl:", "gloo:", "c10d::", "mpi:", "ucc:", "xccl:"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    key = key.rstrip("_")
    if key in _COLL_ALIASES:
        return _COLL_ALIASES[key]
    stripped = key.lstrip("_")
    return _COLL_ALIASES.get(stripped, "other")


def kernel_coll(name: str) -> str | None:
    """NCCL kernel name (either style) → ``coll``; None when it is not an NCCL kernel."""
    m = NCCL_KERNEL.match(name)
    if not m:
        return None
    word = m.group(1)
    return _KERNEL_COLL.get(word, "other")


def kernel_coll_expr(name: pl.Expr) -> pl.Expr:
    """Vectorised :func:`kernel_coll` over a string column (null for non-NCCL kernels)."""
    word = name.str.extract(NCCL_KERNEL.pattern, 1)
    return (
        pl.when(word.is_not_null())
        .then(word.replace_strict(_KERNEL_COLL, default="other", return_dtype=pl.String))
        .otherwise(None)
    )


HOST_COLL = r"^(?:(?:nccl|gloo|ucc|mpi|xccl):|c10d::)(\w+)"
"""A host collective range's name (``nccl:all_to_all``, ``nccl:all_to_all, op_id = 7`` as
PyTorch's NVTX writes it, ``c10d::allreduce_``): its kind is the word after the prefix."""


def op_coll_expr(name: pl.Expr) -> pl.Expr:
    """The kind a host collective range's name states (null for other names)."""
    word = name.str.extract(HOST_COLL, 1)
    return word.map_elements(canonical_coll, return_dtype=pl.String, skip_nulls=True)


def with_range_kinds(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each ``annotation`` row's ``coll`` the kind its name states, where it has
    none. The one rule for every Nsight Systems path (the SQLite export, which a ``.nsys-rep``
    is read through, and ``nsys stats`` CSV), so they cannot drift apart: PyTorch's NVTX names
    its ranges ``nccl:all_to_all, op_id = N``, and the analyzer's ``host_kinds`` gives the
    kernels launched inside one its kind (all_to_all runs as ``ncclDevKernel_SendRecv``).
    Worked out once per distinct name (each op_id makes a name of its own, but only the names
    with a collective prefix reach Python)."""
    if "kind" not in frame.columns or "name" not in frame.columns:
        return frame
    ranges = pl.col("kind").cast(pl.String) == "annotation"
    names = frame.filter(ranges).select(pl.col("name").cast(pl.String).unique())
    stated = names.with_columns(coll=op_coll_expr(pl.col("name"))).drop_nulls("coll")
    if stated.height == 0:
        return frame
    mapping = dict(zip(stated["name"].to_list(), stated["coll"].to_list(), strict=True))
    by_name = pl.col("name").cast(pl.String).replace_strict(
        mapping, default=None, return_dtype=pl.String
    )
    current = (
        pl.col("coll").cast(pl.String) if "coll" in frame.columns else pl.lit(None, pl.String)
    )
    return frame.with_columns(
        pl.when(ranges).then(pl.coalesce(current, by_name)).otherwise(current).alias("coll")
    )


def dtype_bytes(dtype: str | None) -> int | None:
    if not dtype:
        return None
    return DTYPE_BYTES.get(dtype.strip().lower().replace("torch.", "").replace("c10::", ""))


RANK_MAX = 2**31 - 1
"""The largest rank a member list may name (the event table's i32 ``rank``)."""


def canonical_ranks(ranks: object) -> str | None:
    """``"[0, 1, 2]"``, ``[0, 1, 2]`` or ``"0,1,2"`` → ``"0,1,2"``; None when any member is no
    rank (a string, a float, a list, a negative or huge number): a damaged list is unknown."""
    if ranks is None:
        return None
    if isinstance(ranks, (list, tuple)):
        members = [r if type(r) is int else None for r in ranks]
    else:
        members = [int(d) if len(d) <= 10 else None for d in re.findall(r"-?\d+", str(ranks))]
    if not members or any(r is None or not 0 <= r <= RANK_MAX for r in members):
        return None
    return ",".join(map(str, members))
