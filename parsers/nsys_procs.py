"""Who ran where in an Nsight Systems export: hosts per VM, and the rank of each process.

nsys does not record ranks. A rank is taken, per process, from the first of:

1. the captured environment (``RANK``, ``SLURM_PROCID``, ``PMI_RANK``, ``OMPI_COMM_WORLD_RANK``)
   — the launched command's (``META_DATA_CAPTURE``) or the nsys CLI's own
   (``TARGET_INFO_SYSTEM_ENV.DeviceEnvironment``) — only when one process did all the work,
   since a launcher's children (torchrun) get their own ranks;
2. an NVTX thread name such as ``MPI Rank 3`` (MPI tools name their threads so);
3. the file name (``…rank-3…``, ``…rank_3…``), again only for a single process;
4. a single-node ``torchrun`` whose workers each drove one distinct GPU: rank = the order of
   that GPU among the workers' GPUs (the LOCAL_RANK → device convention), with a warning.

Otherwise the rank stays -1 and the run assembler decides. A stated rank or world size outside
0…2³¹-1 is no evidence (a warning says so), never a wrapped number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from .nsys_db import Db
from .source import RANK_IN_NAME

RANK_VARS: tuple[str, ...] = ("RANK", "SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK")
WORLD_VARS: tuple[str, ...] = ("WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
THREAD_RANK = re.compile(r"\brank\s*[#:=]?\s*(\d+)\b", re.IGNORECASE)
_ENV_ITEM = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)="?(.*?)"?$', re.DOTALL)
_ARGUMENT = re.compile(r"^PROCESS_0:ARGUMENT_(\d+)$")
MAX_RANK = 2**31 - 1


def vm_of(expr: pl.Expr) -> pl.Expr:
    return (expr // (1 << 48)) % 256


def pid_of(expr: pl.Expr) -> pl.Expr:
    return (expr // (1 << 24)) % (1 << 24)


def tid_of(expr: pl.Expr) -> pl.Expr:
    return expr % (1 << 24)


@dataclass
class Ranks:
    by_pid: dict[int, int] = field(default_factory=dict)
    source: dict[int, str] = field(default_factory=dict)
    world_size: int | None = None
    warnings: list[str] = field(default_factory=list)


def hosts_by_vm(db: Db) -> dict[int, str]:
    """VM id (bits 48–55 of globalPid/globalTid) → host name."""
    if not db.has("TARGET_INFO_SYSTEM_ENV"):
        return {}
    rows = db.frame(
        "TARGET_INFO_SYSTEM_ENV",
        {"globalVid": pl.Int64(), "value": pl.String()},
        where="WHERE name = 'Hostname'",
    ).filter(pl.col("globalVid").is_not_null() & (pl.col("value").str.len_bytes() > 0))
    return dict(rows.select(vm_of(pl.col("globalVid")), "value").iter_rows())


def captured_env(db: Db) -> dict[str, str]:
    """Environment variables the capture recorded; the launched command's win over nsys' own."""
    env: dict[str, str] = {}
    if db.has("TARGET_INFO_SYSTEM_ENV"):
        for (value,) in db.con.execute(
            "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'"
        ):
            for item in str(value or "").split("\x00"):
                key, sep, val = item.partition("=")
                if sep:
                    env[key] = val
    if db.has("META_DATA_CAPTURE"):
        for (value,) in db.con.execute(
            "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'"
        ):
            m = _ENV_ITEM.match(str(value or ""))
            if m:
                env[m.group(1)] = m.group(2)
    return env


def launch_command(db: Db) -> list[str]:
    """The command nsys launched, as words (empty when not recorded, e.g. 2022 exports)."""
    if not db.has("META_DATA_CAPTURE"):
        return []
    frame = db.frame(
        "META_DATA_CAPTURE",
        {"name": pl.String(), "value": pl.String()},
        where="WHERE name = 'PROCESS_0:COMMAND' OR name LIKE 'PROCESS_0:ARGUMENT_%'",
    )
    rows = {k: v for k, v in frame.iter_rows() if k is not None}
    words = [rows.pop("PROCESS_0:COMMAND", "")]
    args = sorted((int(m.group(1)), v) for k, v in rows.items() if (m := _ARGUMENT.match(k)))
    return [w for w in words + [v for _, v in args] if w]


def single_node_torchrun(command: list[str]) -> bool:
    if not command:
        return False
    text = " ".join(command)
    launcher = Path(command[0]).name == "torchrun" or "torch.distributed.run" in text
    nnodes = re.search(r"--nnodes[= ](\S+)", text)
    return launcher and (nnodes is None or nnodes.group(1) in ("1", "1:1"))


def _int(value: str | None) -> int | None:
    """A rank or size as the capture states it; None when it is no number in 0…2³¹-1."""
    text = str(value).strip() if value is not None else ""
    number = int(text) if text.isdigit() and len(text) <= 10 else None
    return number if number is not None and number <= MAX_RANK else None


def assign_ranks(
    path: Path,
    pids: list[int],
    env: dict[str, str],
    thread_names: pl.DataFrame,
    devices: dict[int, list[int]],
    command: list[str],
) -> Ranks:
    """Rank per process (see the module docstring for the order of evidence)."""
    out = Ranks(
        world_size=next(
            (_int(env.get(v)) for v in WORLD_VARS if _int(env.get(v)) is not None), None
        )
    )
    single = len(pids) == 1
    env_rank = next(((v, n) for v in RANK_VARS if (n := _int(env.get(v))) is not None), None)
    if single and env_rank:
        out.by_pid[pids[0]] = env_rank[1]
        out.source[pids[0]] = f"environment variable {env_rank[0]}"
        return out
    stated = [
        v for v in RANK_VARS + WORLD_VARS if env.get(v) not in (None, "") and _int(env[v]) is None
    ]
    if stated:
        out.warnings.append(
            f"{', '.join(stated)} in the captured environment is not a number in 0…{MAX_RANK}; "
            f"ignored"
        )
    for gtid, name in zip(thread_names["globalTid"], thread_names["name"], strict=True):
        m = THREAD_RANK.search(name or "")
        pid = (int(gtid) >> 24) & 0xFFFFFF
        if m and pid in pids and pid not in out.by_pid and _int(m.group(1)) is not None:
            out.by_pid[pid] = int(m.group(1))
            out.source[pid] = f"NVTX thread name {name!r}"
    if len(out.by_pid) == len(pids):
        return out
    m = RANK_IN_NAME.search(path.name)
    if single and m and _int(m.group(1)) is not None:
        out.by_pid[pids[0]] = int(m.group(1))
        out.source[pids[0]] = "file name"
        return out
    gpu_pids = [p for p in pids if len(devices.get(p, [])) == 1]
    owned = [devices[p][0] for p in gpu_pids]
    if (
        len(gpu_pids) > 1
        and len(set(owned)) == len(owned)
        and single_node_torchrun(command)
        and not out.by_pid
    ):
        order = sorted(owned)
        for pid, dev in zip(gpu_pids, owned, strict=True):
            out.by_pid[pid] = order.index(dev)
            out.source[pid] = "single-node torchrun: order of the process's GPU"
        out.warnings.append(
            "ranks inferred from each torchrun worker's GPU (LOCAL_RANK = device convention): "
            + ", ".join(f"pid {p} → rank {out.by_pid[p]}" for p in gpu_pids)
        )
    return out
