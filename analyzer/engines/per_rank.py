"""Rank-local products of a run read from a dataset, computed from each rank's partition.

A run analysed from a dataset (``rlperf ingest``) gets :class:`DatasetShards`: the first time
a rank-local product (``@provides(..., per_rank=True)``, :mod:`analyzer.model.sharded`) is
read, one call per rank partition (``events/rank=R/``) reads only that partition's files from
the dataset folder, assembles them as the run did (the run's source numbers, the
communication families marked) and computes every rank-local product then at hand; the
driver keeps only the per-rank results and concatenates them in rank order. The local engine
makes the calls in this process one after the other; the Ray engine makes each a Ray task, on
a node that must see the dataset folder (docs/ray.md).

This holds only while the dataset's partitions are the run's ranks: a source whose rank the
assembly assigned (from its file name, by input order, a process of an Nsight report) has its
rows in partition ``rank=-1`` under another rank in the run; such a run, and a run of part of
a dataset's sources, computes its rank-local products over the whole event table as before.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from parsers import InputError
from parsers.events import concat
from taxonomy.collectives import load_families

from .. import dataset
from ..assemble.collectives import mark_communication
from ..dataset.store import ROW, rank_partition
from ..model.options import Selection
from ..model.products import Provider, providers
from ..model.run import Run
from ..model.sharded import Broadcast, PerRank, gathered, over_ranks
from . import selected
from .base import Engine
from .local import LocalEngine

Partition = tuple[int, tuple[tuple[int, int], ...]]
"""A rank and the sources with rows in its partition: each source's number and row count
there (what the manifest states), in source order."""


def partitions(run: Run, manifest: dict) -> list[Partition] | None:
    """The dataset's rank partitions, when they hold exactly the run's ranks: every source of
    the dataset in the run, each with as many rows of each rank as its partitions hold."""
    records = manifest["sources"]
    if len(records) != len(run.sources):
        return None
    try:
        stated = {(int(r["index"]), int(rank)): n
                  for r in records for rank, n in r["events"].items() if n}
    except ValueError:
        return None
    counts = run.events.group_by("source", "rank").len()
    held = {(int(s), int(k)): n for s, k, n in counts.iter_rows() if k is not None}
    if held != stated or counts["rank"].null_count():
        return None
    ranks: dict[int, list[tuple[int, int]]] = {}
    for source, rank in sorted(stated):
        ranks.setdefault(rank, []).append((source, stated[source, rank]))
    return [(rank, tuple(ranks[rank])) for rank in sorted(ranks)]


def rank_events(
    root: Path, rank: int, sources: tuple[tuple[int, int], ...], rules: str | None
) -> pl.DataFrame:
    """One rank partition's events as the run holds them (its rows, in its order), each part
    checked as reading the whole dataset checks it."""
    tables = [
        rank_partition(root, rank, index, rows).drop(ROW)
        .with_columns(pl.lit(index, pl.UInt32).alias("source"))
        for index, rows in sources
    ]
    return mark_communication(concat(tables), load_families(rules))


HOME = Path(__file__).resolve().parents[2]
"""Where rlperf's packages are (the checkout or site-packages)."""
ALWAYS = ("analyzer/model", "analyzer/assemble/collectives.py", "analyzer/engines/per_rank.py",
          "parsers/events.py", "taxonomy")
"""What every per-rank call runs besides its providers' modules."""


def code(names: Sequence[str]) -> tuple[str, ...]:
    """The files (relative to :data:`HOME`) whose code computes the products ``names``."""
    files = {Path(str(sys.modules[providers()[n].module].__file__)) for n in names}
    for part in ALWAYS:
        where = HOME / part
        files |= set(where.rglob("*")) if where.is_dir() else {where}
    return tuple(sorted(
        f.resolve().relative_to(HOME).as_posix() for f in files
        if f.suffix in (".py", ".toml") and "__pycache__" not in f.parts
    ))


def digest(files: Sequence[str]) -> str:
    """A hash of ``files``: a node whose copy differs would compute other numbers."""
    h = hashlib.sha1()
    for f in files:
        h.update(f.encode())
        h.update((HOME / f).read_bytes() if (HOME / f).is_file() else b"")
    return h.hexdigest()[:16]


def rank_products(
    root: str, rank: int, sources: tuple[tuple[int, int], ...], names: tuple[str, ...],
    broadcast: Broadcast, rules: str | None, files: tuple[str, ...], sha: str | None,
    ranks: Selection | None = None,
) -> tuple[int, PerRank] | InputError:
    """Where the call ran (its process) and the rank-local products ``names`` of one rank
    partition of the dataset ``root`` (of the ``ranks`` selected), computed by code whose
    ``files`` hash to ``sha`` (None: the driver's own process, nothing to check)."""
    folder = Path(root)
    if sha is not None and digest(files) != sha:
        return InputError(folder, f"the node {socket.gethostname()} runs another rlperf (its "
                          "code differs from this machine's): install the same rlperf on every "
                          "node")
    if not folder.is_dir():
        return InputError(folder, f"not found on the node {socket.gethostname()}: the dataset "
                          "must be on a path every node sees (docs/ray.md)")
    chosen = [providers()[n] for n in names]
    try:
        events = rank_events(folder, rank, sources, rules)
    except InputError as exc:
        return exc
    return os.getpid(), over_ranks(chosen, events, broadcast, ranks)


@dataclass
class DatasetShards:
    """A run's rank partitions in the dataset folder ``root``, computed by ``engine``."""

    root: Path
    partitions: list[Partition]
    engine: Engine
    rules: str | None = None
    """``--collective-rules``: the communication families the assembly marked with."""
    workers: int | None = None
    """``--jobs``: at most this many calls at once (None: the engine's default)."""
    ran: list[int] = field(default_factory=list)
    """The process of each call made so far (a Ray task's is its worker's)."""

    def evaluate(
        self, providers: Sequence[Provider], broadcast: Broadcast, ranks: Selection | None = None
    ) -> dict[str, pl.DataFrame]:
        names = tuple(p.name for p in providers)
        files = code(names)
        sha = None if isinstance(self.engine, LocalEngine) else digest(files)
        calls = [(str(self.root), rank, sources, names, broadcast, self.rules, files, sha, ranks)
                 for rank, sources in self.partitions]
        per_rank: PerRank = []
        for result in self.engine.each(rank_products, calls, self.workers):
            if isinstance(result, InputError):
                raise result
            pid, values = result
            self.ran.append(pid)
            per_rank.extend(values)
        return gathered(providers, per_rank, broadcast)


def sharded(
    run: Run, paths: Sequence[Path], engine: Engine | None = None, *, jobs: int | None = None
) -> Run:
    """``run`` with :class:`DatasetShards` (computed by ``engine``, at most ``jobs`` calls at
    once) when it is the whole dataset that ``paths`` name and the dataset's partitions are its
    ranks; else as it was.

    Without ``engine``, only an engine chosen that runs elsewhere (Ray) gets them: while the
    driver holds the whole event table, the local engine's calls one after the other save
    nothing and cost time (each rank pays polars' per-query overhead: 4.8 s against 1.3 s on
    64 ranks, ``benchmarks/per_rank.py``)."""
    if len(paths) != 1 or not dataset.is_dataset(paths[0]):
        return run
    chosen = engine or selected()
    if engine is None and isinstance(chosen, LocalEngine):
        return run
    root = paths[0]
    found = partitions(run, dataset.read_manifest(root))
    if found is not None:
        run.shards = DatasetShards(
            root.absolute(), found, chosen, run.options.collective_rules, jobs
        )
    return run
