"""``rlperf ingest``: a run's sources parsed once into a dataset every command reads; and the
reuse of the reports kept in a dataset (:class:`Reuse`, for ``rlperf analyze``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parsers.discover import (
    DATASET_ENTRIES,
    DATASET_MANIFEST,
    is_dataset_folder,
    looks_like_dataset,
    refuse_dataset_part,
)
from parsers.errors import InputError, printable

from ..dataset import products, recall
from ..model.units import plural, spans
from ..progress import Steps, files_to_read, shown
from ..report.files import emit_text, say_written, write_bytes

if TYPE_CHECKING:
    from ..model.run import Run
from .shared import (
    CONTRACT,
    Debug,
    EngineChoice,
    EngineName,
    Jobs,
    NoCache,
    Paths,
    Quiet,
    RayAddress,
    SourcesStrict,
    refuse_warnings,
    say,
    say_warnings,
)

EXAMPLES = (
    "rlperf ingest runs/job-42/ -o job-42.rlperf",
    "rlperf analyze job-42.rlperf --format html -o report.html",
    "rlperf compare before.rlperf after.rlperf",
    "rlperf ingest runs/ --run 2 -o run-2.rlperf --jobs 8",
)
"""Shown under ``rlperf ingest --help`` (analyzer/cli.py)."""

DatasetDir = Annotated[
    Path,
    typer.Option(
        "--output", "-o",
        metavar="DIR",
        help="The dataset folder to write. A dataset there is replaced (its manifest, events, "
             "metrics, sources and kept reports); a folder holding anything else is refused.",
        show_default=False,
    ),
]
RunChoice = Annotated[
    str | None,
    typer.Option(
        "--run",
        help="When the inputs hold several separate runs (rlperf lists them and stops), ingest "
             "this one: its number as listed, or a path or file-name prefix of its files.",
    ),
]


def ingest(
    paths: Paths,
    output: DatasetDir,
    jobs: Jobs = None,
    no_cache: NoCache = False,
    engine: EngineChoice = EngineName.local,
    ray_address: RayAddress = None,
    quiet: Quiet = False,
    run_choice: RunChoice = None,
    strict: SourcesStrict = False,
    debug: Debug = False,
) -> None:
    """Parse a run's sources once into a dataset that every command reads in their place.

    The dataset is a folder: each source's tables as Parquet, partitioned by rank
    (events/rank=R/part-NNNNN.parquet), and a manifest naming every source (path, size,
    modification time, content hash, parser version) and the run. analyze, compare, audit,
    export and crosscheck take the folder as their PATH; a source changed since, or a newer
    parser, is a warning. analyze keeps each report it writes with -o in the dataset and
    reads it back when asked again with the same options.
    """
    from ..assemble.ingest import writing  # deferred: assembly imports polars
    from ..dataset import is_dataset  # deferred: the dataset's tables are polars

    _check_target(output, list(paths))
    steps = Steps(quiet)
    total = files_to_read(list(paths)) if steps.enabled else None
    with (
        writing([output]),
        steps.step("Reading sources", total=total if total and total > 1 else None) as advance,
    ):
        shown_progress = lambda p: advance(what=shown(p.name))  # noqa: E731
        if any(is_dataset(Path(p)) for p in paths):
            write = _from_dataset(paths, run_choice, jobs, no_cache, shown_progress)
        else:
            write = _staged(paths, output, run_choice, jobs, no_cache, shown_progress)
        done = _write_whole(output, write)
    ranks = done["run"]["ranks"]
    say_warnings(done["warnings"], done["names"])
    held = f"rank{'s' if len(ranks) > 1 else ''} {spans(ranks)}" if ranks else "no rank stated"
    if not ranks and not done["unranked"]:
        held = "logs only: a log has no rank"
    if done["unranked"]:
        n = done["unranked"]
        of = "its" if n == 1 else "their"
        traces = plural(n, "trace")
        held = (f"{held}, and {traces} stating none: analyze decides {of} ranks" if ranks
                else f"no rank stated: analyze decides the ranks of {traces}")
    sources = plural(done["run"]["sources"], "source")
    steps.say(f"rlperf: wrote the dataset of {sources} ({held}) to {printable(output)}")


Writer = Callable[[Path], dict[str, Any]]
"""Writes the dataset into a fresh folder; returns the run's record and its warnings."""


def _staged(
    paths: list[Path], output: Path, run_choice: str | None, jobs: int | None, no_cache: bool,
    progress: Callable[[Path], None],
) -> Writer:
    """The engine's workers (processes here, Ray tasks on any node) parse and write each
    source into the fresh folder; this process then chooses the run from their records,
    renumbers what the choice keeps, and writes the manifest, holding no source's events."""
    from ..assemble.ingest import write_into as write_sources  # deferred: polars
    from ..assemble.runs import choose  # deferred: polars
    from ..dataset import remove_source, renumber, write_manifest  # deferred: polars
    from ..engines import OutputError  # deferred: the engines import the parsers

    def write(root: Path) -> dict[str, Any]:
        try:
            staged = write_sources(
                paths, root, jobs=jobs, use_cache=not no_cache, progress=progress
            )
        except OutputError as exc:
            raise InputError(output, exc.problem) from None
        stubs = {i: w.source(staged.paths[i]) for i, w in staged.written.items()}
        order = sorted(stubs)
        picked, chosen = choose(
            [stubs[i] for i in order], run_choice, paths, [staged.written[i].said for i in order]
        )
        number = {stubs[i].path: i for i in order}
        kept = [number[s.path] for s in picked]
        warnings = [w for s in picked for w in s.warnings]
        refuse_warnings(warnings)
        for i in set(order) - set(kept):
            remove_source(root, staged.written[i].record)
        records = [
            renumber(root, staged.written[i].record, k, stubs[i].warnings)
            for k, i in enumerate(kept)
        ]
        run = _run_record(run_choice, records)
        write_manifest(root, records, run=run, notes=[*staged.notes, *chosen],
                       unknown=staged.unknown)
        return {"run": run, "warnings": warnings, "unranked": _unranked(records),
                "names": [Path(r["path"]).name for r in records]}

    return write


def _from_dataset(
    paths: list[Path], run_choice: str | None, jobs: int | None, no_cache: bool,
    progress: Callable[[Path], None],
) -> Writer:
    """A dataset ingested again (into another folder): its tables are read, not parsed."""
    from ..assemble.ingest import ingest as read_sources  # deferred: polars
    from ..assemble.runs import choose  # deferred: polars
    from ..dataset import write_manifest, write_source  # deferred: polars
    found = read_sources(paths, jobs=jobs, use_cache=not no_cache, progress=progress,
                         copying=True)
    sources, chosen = choose(found.sources, run_choice, paths)
    warnings = [w for s in sources for w in s.warnings]
    refuse_warnings(warnings)

    def write(root: Path) -> dict[str, Any]:
        records = [write_source(s, root, i) for i, s in enumerate(sources)]
        run = _run_record(found.run.get("choice") or run_choice, records)  # as its notes
        write_manifest(root, records, run=run, notes=[*found.notes, *chosen],
                       unknown=found.unknown)
        return {"run": run, "warnings": warnings, "unranked": _unranked(records),
                "names": [Path(r["path"]).name for r in records]}

    return write


def _unranked(records: list[dict[str, Any]]) -> int:
    """Traces whose events state no rank: the dataset holds the ranks the files state, and
    analyze decides theirs (docs/assembly.md), so the message must not leave them out."""
    return sum(
        1 for rec in records
        if not rec["format"].endswith("-log") and all(int(r) < 0 for r in rec["events"])
    )


def _run_record(run_choice: str | None, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest's run: the choice, the ranks the sources' partitions hold, their formats."""
    ranks = sorted({int(r) for rec in records for r in rec["events"] if int(r) >= 0})
    return {"choice": run_choice, "sources": len(records), "ranks": ranks,
            "formats": sorted({rec["format"] for rec in records})}


SHOWN_FOREIGN = 3
"""How many files the refusal of a folder holding other files names."""


def _check_target(output: Path, paths: list[Path]) -> None:
    """A dataset is a folder of its own, replaced whole: an existing file, a folder holding
    anything but a dataset, a dataset folder holding anything the dataset did not write (notes,
    traces, a report written there), or one holding an input of this ingest is refused, since
    replacing the dataset would delete it."""
    from ..dataset import is_dataset  # deferred: the dataset's tables are polars

    if output.exists() and not output.is_dir():
        raise InputError(output, "is a file: name a folder for the dataset (-o DIR)")
    if not output.is_dir():
        return
    entries = sorted(output.iterdir())
    foreign = [e.name for e in entries if e.name not in DATASET_ENTRIES]
    if entries and not (is_dataset(output) or looks_like_dataset(output)):
        raise InputError(
            output, "is a folder that holds other files, not a dataset: name a new or empty folder"
        )
    if foreign:
        more = len(foreign) - SHOWN_FOREIGN
        named = ", ".join(foreign[:SHOWN_FOREIGN]) + (f" and {more} more" if more > 0 else "")
        raise InputError(
            output, f"holds files that are not part of the dataset: {named}; move them or "
            "choose another folder"
        )
    target = output.resolve()
    for path in paths:
        if target in path.resolve().parents:
            refuse_dataset_part(path)
            raise InputError(
                output, f"holds {path}, an input of this ingest: move it or choose another folder"
            )


def _write_whole(output: Path, write: Writer) -> dict[str, Any]:
    """Written beside ``output`` and renamed into place, so a failed write leaves the old
    dataset (or none) rather than half of one; only the dataset's own entries are replaced
    (:func:`_check_target` refused anything else)."""
    tmp = _fresh_folder(output)
    old = tmp.with_name(f"{tmp.name}.old")
    try:
        done = write(tmp)
        if output.exists():
            output.rename(old)
        try:
            tmp.rename(output)
        except OSError:
            if old.exists() and not output.exists():
                old.rename(output)
            raise
    except OSError as exc:
        raise InputError(output, f"cannot write: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return done


def _fresh_folder(output: Path) -> Path:
    """An empty folder beside ``output`` to write the dataset into, with the permissions the
    umask gives any new folder (mkdtemp makes it 0700: a dataset on shared storage must be as
    readable as its sub-folders, by other users and by Ray workers running as another user).
    A parent that cannot take it is named with the real cause."""
    parent = output.absolute().parent
    if not _nearest(output).is_dir():
        raise InputError(output, f"cannot create the folder: {_nearest(output)} is a file")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=parent))
    except OSError as exc:
        raise InputError(
            output, f"cannot create the folder: {_nearest(output)} is not writable "
            f"({exc.strerror or exc})"
        ) from None
    tmp.chmod(0o777 & ~recall.umask())
    return tmp


def _nearest(output: Path) -> Path:
    """The nearest folder above ``output`` that exists (as the user spelled it)."""
    return next(p for p in [output.parent, *output.parent.parents] if p.exists())


# --- reports kept in a dataset -----------------------------------------------------------------

REUSED_FORMATS = ("text", "json", "md", "html")
"""Reports that are one file (png writes a folder of images)."""
NOT_SHAPING = frozenset(
    {"paths", "output", "jobs", "quiet", "no_cache", "debug", "strict", "engine", "ray_address"}
)
"""Options of ``analyze`` that do not change the report's bytes (an engine gives the same numbers
as the local one); every other option does, so an option added later is part of the key
without being listed here."""


@dataclass
class Reuse:
    """A report of a dataset written with ``-o``: read back when kept (same dataset, code and
    options), else kept once written. Off with ``--no-cache``, for a stale dataset, and for
    anything but a single dataset. Reading one back imports neither the pipeline nor polars: a
    re-analysis costs about a Python start."""

    root: Path | None = None
    name: str = ""
    output: Path | None = None
    fmt: str = ""
    kept: tuple[bytes, list[str]] | None = None
    """The kept report and the warnings its run had, when there is one to write."""
    manifest: bytes = b""
    """The dataset's manifest as read once: the keys hash it, the sources' identities are in it."""
    by_words: bool = False
    """The report may also be found by the command's words (:mod:`analyzer.dataset.recall`):
    no option names a file, whose content the key holds and the words do not."""

    @classmethod
    def of(
        cls, paths: list[Path], output: Path | None, no_cache: bool, params: dict[str, Any]
    ) -> Reuse:
        """``params``: the command's arguments by name (all of them, so that an option added
        later is part of the key unless :data:`NOT_SHAPING` lists it)."""
        if no_cache or output is None or len(paths) != 1:
            return cls()
        root = paths[0]
        fmt = _plain(params.get("fmt"))
        if fmt not in REUSED_FORMATS or not is_dataset_folder(root):
            return cls()
        shaping = {k: v for k, v in sorted(params.items()) if k not in NOT_SHAPING}
        options = {k: _plain(v) for k, v in shaping.items()}
        options["COLUMNS"] = os.environ.get("COLUMNS")  # the width of a text report in a file
        try:
            manifest = (root / DATASET_MANIFEST).read_bytes()
        except OSError:
            return cls()  # reading the dataset says what is wrong with it
        reuse = cls(root, products.key(manifest, options), output, str(fmt), manifest=manifest)
        reuse.by_words = not any(isinstance(v, Path) for v in shaping.values())
        reuse.kept = products.stored(root, reuse.name)
        if reuse.kept is not None and _as_ingested(manifest):
            return reuse
        return reuse if _fresh(root) else cls()

    def replay(self, steps: Steps) -> bool:
        """Write the kept report to ``-o`` and say what its run said; False when none is kept
        (or ``--strict`` must judge warnings: the run is then computed and judged)."""
        if self.kept is None or self.output is None or (CONTRACT.strict and self.kept[1]):
            return False
        data, warnings = self.kept
        if self.fmt == "text":
            write_bytes(self.output, data)
            say_written(steps, "text report", self.output)
        else:
            emit_text(data.decode("utf-8"), self.output, steps, f"{self.fmt} report")
        for warning in warnings:
            say(f"rlperf: warning: {warning}")
        self._remember(len(data), warnings)
        return True

    def keep(self, run: Run) -> None:
        """Keep the report just written (not one whose run had an internal error)."""
        if self.root is None or self.output is None or run.failures:
            return
        try:
            data = self.output.read_bytes()
        except OSError:
            return
        products.keep(self.root, self.name, data, list(run.warnings))
        self._remember(len(data), list(run.warnings))

    def _remember(self, size: int, warnings: list[str]) -> None:
        """Let the same words read this report back before Typer is imported (not where
        ``--strict`` must judge the warnings)."""
        if self.root is None or not self.by_words or (CONTRACT.strict and warnings):
            return
        sources = _ingested(self.manifest)
        if sources is not None:
            lines = [printable(f"rlperf: warning: {w}") for w in warnings]
            recall.remember(str(self.root), self.manifest, self.name, self.fmt, size, sources,
                            lines)


def _fresh(root: Path) -> bool:
    """The dataset's tables say what its sources and this rlperf's parsers would (not stale)."""
    from ..dataset import read_manifest, stale  # deferred: the parser versions import polars

    try:
        return not stale(root, read_manifest(root))
    except (InputError, OSError):
        return False  # reading the dataset says what is wrong with it


def _ingested(manifest: bytes) -> list[tuple[str, int, int]] | None:
    """Each source's resolved path, size and modification time as the manifest has them."""
    try:
        records = json.loads(manifest)["sources"]
        return [(str(r["resolved"]), int(r["size"]), int(r["mtime_ns"])) for r in records]
    except (ValueError, TypeError, KeyError):
        return None


def _as_ingested(manifest: bytes) -> bool:
    """Every source the manifest names has the size and modification time it was ingested with
    (or is gone): with a report kept under the key, the dataset is then not stale, which
    :func:`_fresh` would otherwise import every parser to find. The key holds the manifest and
    rlperf's code, so the parser versions are those the report was kept with, when the dataset
    was not stale; an unchanged size and time is the stale test's own "not changed"."""
    sources = _ingested(manifest)
    return sources is not None and all(recall.unchanged(*source) for source in sources)


def _plain(value: Any) -> Any:
    """An option's value as the key sees it: a file it names by its content."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        try:
            return {"file": str(value), "sha1": hashlib.sha1(value.read_bytes()).hexdigest()}
        except OSError:
            return {"file": str(value), "sha1": None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
