"""Nsight Systems reports (``.nsys-rep``, formerly ``.qdrep``) through the ``nsys`` CLI.

The report format is proprietary; only ``nsys export`` reads it. With ``nsys`` on PATH the
report is exported once to SQLite in rlperf's cache directory (never beside the report), keyed
by the report's path, size and mtime, and parsed by :mod:`parsers.nsys`; later runs reuse the
export. Every ``nsys`` call runs under a timeout in its own process group, killed whole when it
overruns. Without ``nsys``, or with an ``nsys`` older than the report, the error says how to
export by hand.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from . import nsys
from .cachedir import cache_dir
from .errors import InputError
from .source import ParsedSource

FORMAT = "nsys-rep"
TRAITS = nsys.TRAITS
EXTENSIONS: tuple[str, ...] = (".nsys-rep", ".qdrep")

REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
REPORT_VERSION = re.compile(rb"^NVIDIA Tegra Profiler Report (\d+)@(\d+)@(\d+)@(\d+)")
LEGACY_FORMAT = re.compile(rb"^NVIDIA Tegra Profiler Report (\d+)\.?\n")
"""Reports before 2022.4 state a format number, not the writer's version (``Report 1.``)."""
WRITER = re.compile(rb"(20\d\d\.\d+\.\d+\.\d+)-[0-9a-f]{7}")
"""The writer's ``nsys --version`` build string (``2022.1.3.3-1c7b5f7``) in the report's body."""
WRITER_PATH = re.compile(rb"nsight-systems/(20\d\d\.\d+\.\d+)/")
UNSUPPORTED_DRIVER = re.compile(
    rb"Installed CUDA driver version \((\d+(?:\.\d+)*)\) is not supported by this build"
)
HEADER_SCAN_BYTES = 4 << 20
"""How much of a report's start and end is searched for the writer's version and diagnostics
(the whole of a report up to twice this)."""
EXPORT_TIMEOUT_S = 600.0
"""Default bound on one ``nsys export``; ``$RLPERF_NSYS_TIMEOUT`` (seconds) overrides it."""
VERSION_TIMEOUT_S = 60.0

HAND_EXPORT = "nsys export --type sqlite -o {stem}.sqlite {name}"


def sniff(head: bytes, path: Path) -> int:
    return 95 if head.startswith(REPORT_MAGIC) else 0


def report_version(head: bytes) -> str | None:
    """``2025.1.1.110`` from the report header, when it has one."""
    m = REPORT_VERSION.match(head)
    return ".".join(g.decode() for g in m.groups()) if m else None


def legacy_format(head: bytes) -> str | None:
    """``1`` from an older report's header (``NVIDIA Tegra Profiler Report 1.``)."""
    m = LEGACY_FORMAT.match(head)
    return m.group(1).decode() if m else None


def writer_version(data: bytes) -> str | None:
    """The Nsight Systems version that wrote a report, from its body (older headers lack it)."""
    m = WRITER.search(data) or WRITER_PATH.search(data)
    return m.group(1).decode() if m else None


def scanned(path: Path) -> bytes:
    """The report's first and last :data:`HEADER_SCAN_BYTES` (all of a small one)."""
    with path.open("rb") as fh:
        head = fh.read(HEADER_SCAN_BYTES)
        size = path.stat().st_size
        if size <= 2 * HEADER_SCAN_BYTES:
            return head + fh.read()
        fh.seek(size - HEADER_SCAN_BYTES)
        return head + fh.read()


def describe(path: Path) -> dict[str, str]:
    """What a report says of itself: its format (header) and the nsys that wrote it."""
    data = scanned(path)
    version = report_version(data[:128])
    facts = {"report_written_by": version or writer_version(data)}
    if version is None:
        facts["report_format"] = legacy_format(data[:128])
    if (driver := UNSUPPORTED_DRIVER.search(data)) is not None:
        facts["unsupported_cuda_driver"] = driver.group(1).decode()
    return {k: v for k, v in facts.items() if v}


def parse(path: Path, source: int = 0) -> ParsedSource:
    path = Path(path)
    if path.stat().st_size == 0:
        raise InputError(path, "empty file (0 bytes), not an Nsight Systems report")
    exported = export_sqlite(path)
    parsed = nsys.parse(exported, source=source)
    parsed.path = path
    parsed.format = FORMAT
    parsed.warnings = [w.replace(exported.name, path.name) for w in parsed.warnings]
    parsed.meta["sqlite_export"] = str(exported)
    facts = describe(path)
    parsed.meta.update(facts)
    if "unsupported_cuda_driver" in facts:
        parsed.warn(
            f"the report records that its Nsight Systems "
            f"({facts.get('report_written_by', 'version unknown')}) did not support the CUDA "
            f"driver ({facts['unsupported_cuda_driver']}): CUDA kernels may be missing from it"
        )
    return parsed


def export_sqlite(path: Path) -> Path:
    """The cached SQLite export of ``path``, made with ``nsys export`` when missing."""
    target = cache_dir("nsys") / f"{_cache_key(path)}.sqlite"
    if target.is_file():
        return target
    exe = shutil.which("nsys")
    hand = HAND_EXPORT.format(stem=path.stem, name=path.name)
    if exe is None:
        raise InputError(
            path,
            "an Nsight Systems report needs the nsys CLI, which is not on PATH: "
            f"export it by hand (`{hand}`) and pass the .sqlite",
        )
    partial = target.with_name(f"{target.stem}.part-{os.getpid()}.sqlite")
    try:
        rc, output = run_bounded(
            [
                exe,
                "export",
                "--type",
                "sqlite",
                "--force-overwrite",
                "true",
                "-o",
                str(partial),
                str(path),
            ],
            timeout=export_timeout(),
        )
        if rc is None:
            raise InputError(
                path,
                f"nsys export did not finish within the time limit: export it by hand (`{hand}`)",
            )
        if rc != 0 or not partial.is_file():
            raise InputError(path, _export_problem(path, exe, output, hand))
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def export_timeout() -> float:
    """``$RLPERF_NSYS_TIMEOUT`` when it is a positive number of seconds, else the default."""
    try:
        value = float(os.environ.get("RLPERF_NSYS_TIMEOUT", "") or EXPORT_TIMEOUT_S)
    except ValueError:
        return EXPORT_TIMEOUT_S
    return value if 0 < value < float("inf") else EXPORT_TIMEOUT_S


def run_bounded(argv: list[str], timeout: float) -> tuple[int | None, str]:
    """Run ``argv`` in its own process group; (exit status or None on timeout, stdout+stderr).

    On timeout the whole group is killed, so no helper process (nsys starts several) outlives it.
    """
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return None, ""
    finally:
        _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _cache_key(path: Path) -> str:
    stat = path.stat()
    ident = f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def _export_problem(path: Path, exe: str, output: str, hand: str) -> str:
    lines = [ln.strip() for ln in re.split(r"[\r\n]+", output) if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()] or lines or ["no output"]
    if any("Version number is invalid" in ln for ln in errors):
        facts = describe(path)
        wrote = facts.get("report_written_by")
        if wrote is None:
            return (
                "nsys export failed: the report header names no version (a damaged or cut report)"
            )
        if "report_format" in facts:
            wrote += f" (report format {facts['report_format']})"
        have = nsys_version(exe) or "an older release"
        return (
            f"written by Nsight Systems {wrote}, which the nsys on PATH ({have}) cannot read: "
            f"export it with nsys {facts['report_written_by']} or newer (`{hand}`) and pass the "
            ".sqlite"
        )
    return f"nsys export failed: {errors[-1]}"


def nsys_version(exe: str = "nsys") -> str | None:
    """``2022.4.2.1`` from ``nsys --version``, or None."""
    rc, out = run_bounded([exe, "--version"], timeout=VERSION_TIMEOUT_S)
    m = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", out) if rc == 0 else None
    return m.group(1) if m else None
