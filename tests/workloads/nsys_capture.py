"""Profile a command with the real ``nsys`` CLI and return the ``.nsys-rep``, leaving nothing
running.

``nsys profile -t nvtx,osrt -s none --cpuctxsw none`` runs in its own session under a timeout;
when nsys leaves only a ``.qdstrm`` (its importer missing, as with Debian's 2022.4 package), the
stream is turned into a report with ``QdstrmImporter``. After every call the session is killed
whole and checked empty, and so is the ``nsys --start-agent`` daemon the profile started (it
leaves the session with ``setsid``; a stuck one has been seen to spin a core for good).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

PROFILE_TIMEOUT_S = 240
IMPORT_TIMEOUT_S = 120
STARTED: list[int] = []
"""Process ids (= session ids) of every command this module ran, for leak checks."""


def importer() -> Path | None:
    """``QdstrmImporter`` from PATH or beside the nsys installation."""
    found = shutil.which("QdstrmImporter")
    if found:
        return Path(found)
    nsys = shutil.which("nsys")
    roots = [Path("/usr/lib/nsight-systems"), Path("/usr/lib/x86_64-linux-gnu/nsight-systems")]
    if nsys:
        roots.append(Path(os.path.realpath(nsys)).parent.parent)
    for root in roots:
        candidate = root / "host-linux-x64" / "QdstrmImporter"
        if candidate.is_file():
            return candidate
    return None


def session_alive(sid: int) -> list[str]:
    """Live (non-zombie) processes still in session ``sid``, as ``pid comm``."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            comm = text[text.index("(") + 1 : text.rindex(")")]
            fields = text[text.rindex(")") + 2 :].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                alive.append(f"{stat.parent.name} {comm}")
    return alive


def agents_of(pid: int) -> list[int]:
    """Live ``nsys --start-agent`` daemons started by the ``nsys profile`` process ``pid``."""
    mine = re.compile(rf"--session-name=profile-.*-{pid}(\s|$)")
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            args = cmdline.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if "--start-agent" in args and mine.search(args) and state != "Z":
                found.append(int(cmdline.parent.name))
    return found


def reap_agents(pid: int, grace_s: float = 10.0) -> list[str]:
    """Wait for the profile's agent daemons to exit, kill those that do not, and name those
    still alive after the kill. An agent slow to exit on a loaded machine (seen past 10 s
    while the fuzz test held both cores) is killed and gone: nothing is left running."""
    deadline = time.monotonic() + grace_s
    while (agents := agents_of(pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for agent in agents:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(agent, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while (agents := agents_of(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [f"{a} nsys --start-agent" for a in agents]


def run_session(argv: list[str], timeout: float, cwd: Path) -> tuple[int | None, str, list[str]]:
    """(exit status or None on timeout, output, processes left alive after the group kill:
    the session's own and any nsys agent daemon the command started)."""
    proc = subprocess.Popen(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )
    STARTED.append(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        rc, out = None, b""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5.0  # SIGKILL is delivered at once, acted on when scheduled
    while session_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = session_alive(proc.pid) + reap_agents(proc.pid)
    return rc, out.decode("utf-8", "replace"), left


def profile(command: list[str], out_dir: Path, name: str = "capture") -> Path:
    """Profile ``command`` (NVTX + OS runtime, no sampling) into ``out_dir/name.nsys-rep``."""
    base = out_dir / name
    report = base.with_suffix(".nsys-rep")
    stream = base.with_suffix(".qdstrm")
    report.unlink(missing_ok=True)
    stream.unlink(missing_ok=True)
    argv = [
        "nsys", "profile", "-t", "nvtx,osrt", "-s", "none", "--cpuctxsw", "none",
        "--force-overwrite", "true", "-o", str(base), *command,
    ]
    rc, output, alive = run_session(argv, PROFILE_TIMEOUT_S, out_dir)
    if alive:
        raise RuntimeError(f"nsys profile left processes behind: {alive}")
    if rc is None:
        raise RuntimeError(f"nsys profile did not finish within {PROFILE_TIMEOUT_S} s")
    if not report.is_file() and stream.is_file():
        exe = importer()
        if exe is None:
            raise RuntimeError("nsys left a .qdstrm and no QdstrmImporter was found")
        rc, imported, alive = run_session([str(exe), "-i", str(stream)], IMPORT_TIMEOUT_S, out_dir)
        if alive or rc != 0:
            raise RuntimeError(
                f"QdstrmImporter failed (status {rc}, left {alive}): {imported[-500:]}"
            )
    if not report.is_file():
        raise RuntimeError(f"nsys profile produced no report (status {rc}): {output[-800:]}")
    return report
