"""Progress on stderr (rich) for the commands' long steps; ``--quiet`` turns it off for CI logs.

A bar (or a spinner when the amount of work is not known ahead) appears only while a step runs
and is cleared when it ends, so reports written to stdout stay clean. Off when ``quiet`` or when
stderr is not a terminal (CI logs get no control characters). Reading a run of several files
shows how many are done of how many (``3/8``): the files are counted first, only when the
display is on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from parsers import discover
from parsers.errors import InputError, printable

from . import load as load_run
from .report.files import check_output

if TYPE_CHECKING:
    from .model.options import Options


class Steps:
    """The progress display of one command."""

    def __init__(self, quiet: bool = False) -> None:
        from rich.console import Console  # deferred: rlperf --help does without rich

        self.console = Console(stderr=True)
        self.enabled = not quiet and self.console.is_terminal

    @contextmanager
    def step(self, description: str, total: int | None = None) -> Iterator[Callable[..., None]]:
        """Show ``description`` while the block runs; the block calls the yielded function to
        advance (optionally with ``what=`` to name the item just done)."""
        if not self.enabled:
            yield lambda *a, **k: None
            return
        from rich.progress import (  # deferred: only a terminal shows it
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        columns = [SpinnerColumn(), TextColumn("{task.description}")]
        if total is not None:
            columns += [BarColumn(), MofNCompleteColumn()]
        columns += [TimeElapsedColumn(), TextColumn("[dim]{task.fields[what]}")]
        with Progress(*columns, console=self.console, transient=True) as bar:
            task = bar.add_task(description, total=total, what="")

            def advance(amount: int = 1, what: str = "") -> None:
                bar.update(task, advance=amount, what=what)

            yield advance

    def say(self, message: str) -> None:
        """A line for the user on stderr (kept even when quiet: it says where output went)."""
        self.console.print(printable(message), markup=False, highlight=False, soft_wrap=True)


def load(
    paths: Iterable[Path],
    steps: Steps,
    *,
    jobs: int | None = None,
    no_cache: bool = False,
    label: str = "",
    run: str | None = None,
    writes: Iterable[Path | None] = (),
    folder: bool = False,
    options: Options | None = None,
):
    """:func:`analyzer.load` with a progress display per parsed file; ``run`` chooses one of
    several runs.

    ``writes`` are the files the command will write (``-o``; a folder of charts when ``folder``):
    a path that cannot take them, or that is one of the inputs, stops the command before parsing."""
    from .assemble.ingest import writing  # deferred: assembly imports polars

    writes = [w for w in writes if w is not None]
    for output in writes:
        check_output(output, folder=folder)
    paths = list(paths)
    total = files_to_read(paths) if steps.enabled else None
    with (
        writing(writes),
        steps.step(
            f"Reading {label}".strip() if label else "Reading sources",
            total=total if total and total > 1 else None,
        ) as advance,
    ):
        return load_run(
            paths,
            jobs=jobs,
            use_cache=not no_cache,
            progress=lambda p: advance(what=shown(p.name)),
            run=run,
            options=options,
        )


def files_to_read(paths: list[Path]) -> int | None:
    """How many sources ``paths`` hold, for the count beside the bar; None when discovery
    fails (reading then says why, in its one line)."""
    try:
        return len(discover(paths).sources)
    except (InputError, OSError):
        return None


def shown(name: object) -> str:
    """An input-derived name for a rich display: control characters escaped, markup inert."""
    from rich.markup import escape  # deferred: rlperf --help does without rich

    return escape(printable(name))
