"""Writing what a command produces to ``-o`` or stdout, safely.

Where a report may go is checked before any input is parsed (:func:`check_output`), and a
report is written to a temporary file beside its target and renamed into place, so a failed
write (a full disk) never leaves half a report where the last good one was.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from parsers.discover import is_dataset_folder
from parsers.errors import InputError, printable
from parsers.reading import file_kind

from ..dataset.products import umask

if TYPE_CHECKING:
    from rich.console import Console


def title_of(run) -> str:
    """``rlperf: <the folder the sources share>``, as the user named it: a folder of links to
    the files is its own name, not that of the folder the links point into."""
    paths = [os.path.dirname(os.path.abspath(s.path)) for s in run.sources]
    if not paths:
        return "rlperf report"
    common = Path(os.path.commonpath(paths))
    return f"rlperf: {common.name or common}"


def sized(run) -> str:
    """``2 sources, 2 ranks``, and with ``--ranks`` the ranks the report is about."""
    from ..model.units import plural, spans  # deferred: with the report

    said = f"{plural(len(run.sources), 'source')}, {plural(len(run.ranks), 'rank')}"
    if run.options.rank_selection is None:
        return said
    kept = run.selected_ranks
    return f"{said} ({'rank' if len(kept) == 1 else 'ranks'} {spans(kept)} analysed)"


def check_output(output: Path | None, *, folder: bool = False) -> None:
    """Refuse an output path that cannot take the report, before the inputs are read: a
    directory (unless ``folder``: png charts), a device, a FIFO, a path under an existing file."""
    if output is None:
        return
    _outside_datasets(output)
    try:
        mode = output.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        _check_creatable(output)
        return
    except OSError as exc:
        raise InputError(output, f"cannot write there: {exc.strerror or exc}") from None
    kind = file_kind(mode)
    if kind == "a directory" and not folder:
        raise InputError(
            output, "is a directory: name the report file to write (-o FOLDER/report.EXT)"
        )
    if kind not in ("a regular file", "a directory"):
        raise InputError(output, f"is {kind}, not a regular file: rlperf writes reports to files "
                         "(leave -o out to write to stdout)")


def _outside_datasets(output: Path) -> None:
    """A dataset folder holds only what ``rlperf ingest`` writes there (the next ingest into it
    refuses anything else), and keeps its own reports (``products/``): none goes inside it."""
    for ancestor in output.absolute().parents:
        if is_dataset_folder(ancestor):
            raise InputError(
                output, f"is inside the dataset {ancestor}, which holds only what rlperf ingest "
                "writes (it keeps its own reports): write the report outside it"
            )


def _check_creatable(output: Path) -> None:
    """The nearest existing ancestor must be a folder: ``trace.json/report.md`` cannot be made."""
    for ancestor in output.absolute().parents:
        try:
            mode = ancestor.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise InputError(output, f"cannot write there: {exc.strerror or exc}") from None
        if file_kind(mode) != "a directory":
            raise InputError(
                output, f"cannot be created: {ancestor} is {file_kind(mode)}, not a folder"
            )
        return


@contextmanager
def atomic_open(output: Path) -> Iterator[TextIO]:
    """A text file that appears at ``output`` only once it is completely written; any failure is
    one :class:`InputError` naming ``output``, with the old file (if any) left as it was."""
    with atomic_binary(output) as raw, io.TextIOWrapper(raw, encoding="utf-8") as fh:
        yield fh


@contextmanager
def atomic_binary(output: Path) -> Iterator[BinaryIO]:
    """:func:`atomic_open` for bytes (PNG charts, gzipped traces)."""
    check_output(output)
    target = output.resolve() if output.is_symlink() else output
    tmp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.chmod(tmp, _file_mode(target))
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise InputError(output, f"cannot write: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _file_mode(target: Path) -> int:
    """The replaced file's permissions, else what a new file would get under the umask."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        return 0o666 & ~umask()


def write_text(output: Path, text: str) -> Path:
    """``text`` written atomically to ``output``."""
    with atomic_open(output) as fh:
        fh.write(text)
    return output


def write_bytes(output: Path, data: bytes) -> Path:
    """``data`` written atomically to ``output``."""
    with atomic_binary(output) as fh:
        fh.write(data)
    return output


@contextmanager
def console(output: Path | None, width: int) -> Iterator[Console]:
    """Where a command's rich tables go: the terminal, or ``output`` at a fixed width without
    colour codes."""
    from rich.console import Console  # deferred: rlperf --help does without rich

    if output is None:
        yield Console()
        return
    with atomic_open(output) as fh:
        yield Console(file=fh, width=width, color_system=None)


def emit_text(text: str, output: Path | None, steps, what: str) -> list[Path]:
    if output is None:
        sys.stdout.write(text)
        return []
    write_text(output, text)
    say_written(steps, what, output)
    return [output]


def say_written(steps, what: str, output: Path) -> None:
    """The line every command prints for a file it wrote (``what``: "json report", …)."""
    steps.say(f"rlperf: wrote the {what} to {printable(output)}")
