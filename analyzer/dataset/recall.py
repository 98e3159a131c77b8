"""A report kept in a dataset, found again by the words of the command that asked for it before
the command-line library is even imported: reading Typer's options costs a re-analysis more
than everything else together (0.2 of its 0.25 s), and issue 14 asks a re-analysis 50× faster
than the first.

``rlperf analyze DATASET … -o FILE`` that kept or read back a report (:mod:`.products`, under
the key of its parsed options) also writes a *line*: the command's words with the output's
replaced, ``COLUMNS``, the manifest's hash and rlperf's code name the kept report, its format,
the sources' size and time at ingest and the warnings to repeat. The same words again are
answered here by :func:`recall`, which imports only ``os`` and ``hashlib``. Whatever it cannot
be sure of — another spelling of the output, an output it would have to check or create, a
source changed since ingest, an option naming a file — goes the long way, which checks and says
everything (and writes the line for next time).
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys

MANIFEST = "manifest.json"
PRODUCTS = "products"
"""The folder of a dataset that keeps its reports (analyzer/dataset/products.py)."""
LINES = "lines"
"""The folder under it of the words that find them."""
HEADER = "rlperf-kept-line 1"
OUTPUT_FLAGS = ("-o", "--output")
CODE_ROOTS = ("parsers", "taxonomy", "analyzer")
"""The packages whose code and data shape a report."""
CODE_SUFFIXES = (".py", ".toml", ".json", ".css", ".js", ".html")
HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ARGV: list[str] | None = None
"""The words of the command being run, set by the console entry point (analyzer/cli.py): a
command run in process (tests, benchmarks) writes no line."""

_code: str | None = None


def code_version(fresh: bool = False) -> str:
    """A hash of every file of rlperf's code and data by name, size and modification time (an
    edit changes the time; reading them all would cost more than reusing a report saves): a
    report kept by other code is not reused (the version number does not change while code is
    edited). Computed once per process unless ``fresh``."""
    global _code
    if _code is None or fresh:
        digest = hashlib.sha1()
        for rel, st in sorted(_code_files()):
            digest.update(f"{rel}|{st.st_size}|{st.st_mtime_ns}".encode())
        _code = digest.hexdigest()
    return _code


def _code_files() -> list[tuple[str, os.stat_result]]:
    found = []
    for root in CODE_ROOTS:
        for folder, dirs, files in os.walk(os.path.join(HERE, root)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            rel = os.path.relpath(folder, HERE)
            for name in files:
                if name.endswith(CODE_SUFFIXES):
                    found.append((f"{rel}/{name}", os.stat(os.path.join(folder, name))))
    return found


def words(argv: list[str]) -> tuple[str, str, list[str]] | None:
    """``(dataset, output, words)`` of ``rlperf analyze`` words naming exactly one dataset
    folder and one output (``-o FILE``, ``--output FILE`` or ``--output=FILE``), the output's
    word replaced by its suffix (which says the report's format where ``-f`` does not); None
    for anything else."""
    if not argv or argv[0] != "analyze":
        return None
    shown = list(argv)
    outputs = []
    for i, word in enumerate(argv):
        if word in OUTPUT_FLAGS and i + 1 < len(argv):
            outputs.append(argv[i + 1])
            shown[i + 1] = _output_word(argv[i + 1])
        elif word.startswith("--output="):
            outputs.append(word.partition("=")[2])
            shown[i] = "--output=" + _output_word(outputs[-1])
    clustered = any(w.startswith("-") and not w.startswith("--") and "o" in w and w != "-o"
                    for w in argv)  # -oFILE, -qo FILE: an output this count would miss
    if len(outputs) != 1 or clustered:
        return None
    roots = [w for w in shown[1:] if "\0" not in w and os.path.isfile(os.path.join(w, MANIFEST))]
    return (roots[0], outputs[0], shown) if len(roots) == 1 else None


def _output_word(output: str) -> str:
    """What of an output's name a kept report depends on: its suffix, as the long way reads it
    (``-o r.json`` writes JSON, ``-o r.txt`` text)."""
    return "\0output" + os.path.splitext(output)[1].lower()


def _key(manifest: bytes, shown: list[str]) -> str:
    ident = [HEADER, hashlib.sha1(manifest).hexdigest(), code_version(),
             os.environ.get("COLUMNS", "\0unset"), *shown]
    return hashlib.sha1("\0".join(ident).encode("utf-8", "surrogateescape")).hexdigest()


def remember(
    root: str, manifest: bytes, report: str, fmt: str, size: int,
    sources: list[tuple[str, int, int]], warnings: list[str],
) -> None:
    """Write the line of the command being run (:data:`ARGV`) for the report ``report`` of
    dataset ``root`` (its manifest's bytes; ``fmt``, ``size`` bytes; the sources' resolved path,
    size and time at ingest; ``warnings`` as printed). Keeping it is an optimisation, never an
    error."""
    found = words(ARGV) if ARGV is not None else None
    if found is None or os.path.abspath(found[0]) != os.path.abspath(root):
        return
    fields = [report, fmt, str(size), str(len(sources))]
    fields += [f"{path}\t{size}\t{mtime}" for path, size, mtime in sources]
    if any("\n" in f or "\r" in f for f in fields) or not all(w.isprintable() for w in warnings):
        return
    key = _key(manifest, found[2])
    try:
        folder = os.path.join(root, PRODUCTS, LINES)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{key}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write("\n".join([HEADER, *fields, *warnings]) + "\n")
        os.replace(tmp, os.path.join(folder, key))
    except OSError:
        return


def recall(argv: list[str]) -> bool:
    """Answer ``rlperf ARGV`` from its line, if it has one and nothing changed: the kept report
    written to the output as the long way writes it, its lines said; False when not answered
    (nothing was written)."""
    found = words(argv)
    if found is None or "--no-cache" in argv:
        return False
    root, output, shown = found
    try:
        with open(os.path.join(root, MANIFEST), "rb") as fh:
            key = _key(fh.read(), shown)
        with open(os.path.join(root, PRODUCTS, LINES, key), encoding="utf-8",
                  errors="surrogateescape") as fh:
            lines = fh.read().split("\n")[:-1]
        header, report, fmt, size, count, *rest = lines
        n = int(count)
        sources, warnings = rest[:n], rest[n:]
        if header != HEADER or len(sources) != n or not all(map(_unchanged, sources)):
            return False
        if not _plain_output(output):
            return False
        with open(os.path.join(root, PRODUCTS, report, "report"), "rb") as fh:
            data = fh.read()
        if len(data) != int(size):
            return False
        _write(output, data)
    except (OSError, ValueError):
        return False
    said = f"rlperf: wrote the {fmt} report to {output}"
    sys.stderr.write("".join(f"{line}\n" for line in [said, *warnings]))
    return True


def unchanged(path: str, size: int, mtime_ns: int) -> bool:
    """The source has the size and modification time it was ingested with, or is gone (a
    dataset outlives its sources)."""
    try:
        st = os.stat(path)
    except OSError:
        return True
    return (st.st_size, st.st_mtime_ns) == (size, mtime_ns)


def _unchanged(record: str) -> bool:
    path, size, mtime = record.split("\t")
    return unchanged(path, int(size), int(mtime))


def _plain_output(output: str) -> bool:
    """An output the long way would write without a word: printed as given (pathlib would not
    respell it), an existing regular file or a new one in an existing folder, and no folder
    above it a dataset (those the long way refuses, or creates)."""
    if (
        not output
        or not output.isprintable()
        or output in (".", "..")
        or "//" in output
        or "/./" in output
        or output.startswith("./")
        or output.endswith("/")
        or {".", ".."} & set(output.split("/"))
    ):
        return False
    try:
        st = os.lstat(output)
        if not stat.S_ISREG(st.st_mode):
            return False
    except FileNotFoundError:
        if not os.path.isdir(os.path.dirname(output) or "."):
            return False
    folder = os.path.dirname(os.path.abspath(output))
    while True:
        if os.path.exists(os.path.join(folder, MANIFEST)):
            return False
        parent = os.path.dirname(folder)
        if parent == folder:
            return True
        folder = parent


def _write(output: str, data: bytes) -> None:
    """``data`` at ``output`` whole (a file beside it renamed into place), with the replaced
    file's permissions or those the umask gives a new one."""
    try:
        mode = os.stat(output).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~umask()
    folder, name = os.path.split(output)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, output)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def umask() -> int:
    """The process's umask (reading it means setting it: set back at once)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask
