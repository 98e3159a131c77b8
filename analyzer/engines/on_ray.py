"""The Ray engine: each source parsed by a Ray task, on a cluster the user names
(``--ray-address``) or on one started for the run.

A task reads its source from the path the driver was given (relative paths from the driver's
working directory), so sources must lie on storage every node sees; its tables come back to the
driver as Arrow IPC through Ray's object store, with every polars type, so the run is the one
the local engine builds. Ray is imported here only, when this engine is chosen.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import secrets
import signal
import socket
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl

import parsers
from parsers import InputError, ParsedSource

from .base import Job, OutputError, Parsed, Progress, Wrote, parse_one, write_one

INSTALL = "pip install 'rlperf[ray]'"
CONNECT_TIMEOUT_S = 60.0
"""How long connecting to (or starting) a cluster may take before it is an error;
``RLPERF_RAY_TIMEOUT`` (seconds) changes it."""
LOCAL_START_FACTOR = 3
"""Starting a Ray for the run may take this many times as long (half a minute on a busy
2-core machine)."""
PROBE_TIMEOUT_S = 10.0
"""How long a HOST:PORT address may take to accept a TCP connection at all."""
DRAIN_S = 10.0
"""How long a run that stopped early waits for the tasks it cancelled."""
REFUSED_TOKEN = "InvalidAuthToken"
"""What Ray's core logs while a cluster rejects the driver's token (absent or another one)."""
REFUSED = (
    "refused this process's authentication token: set RAY_AUTH_TOKEN to the cluster's "
    "(`ray get-auth-token` on its head node prints it)"
)
STARTING_LOCAL = "rlperf: starting a local Ray cluster (about a minute)…"


def ray_module() -> ModuleType:
    """Ray, or the one line that says how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError("--engine", f"ray is not installed: {INSTALL}") from None
    return ray


class RayEngine:
    def __init__(self, address: str | None, *, quiet: bool = False) -> None:
        self.address = address if address is not None else os.environ.get("RAY_ADDRESS") or "local"
        self.quiet = quiet

    def parse(self, jobs: list[Job], workers: int | None, progress: Progress) -> Iterator[Parsed]:
        for job, (index, wire) in self.tasks(parse_remote, (), jobs, workers, progress):
            yield index, wire if isinstance(wire, InputError) else wire.parsed(job[1])

    def write(
        self, jobs: list[Job], root: Path, workers: int | None, progress: Progress,
        *, keep: bool = False,
    ) -> Iterator[Wrote]:
        """Each task writes its source into ``root`` (which must be on a path every node sees)
        and returns its record; the nodes' own parse caches are not the driver's, so ``keep``
        is not used."""
        for _, result in self.tasks(write_remote, (str(root.absolute()),), jobs, workers,
                                    progress):
            yield result

    def each(
        self, work: Any, calls: list[tuple[Any, ...]], workers: int | None = None
    ) -> Iterator[Any]:
        """A Ray task per call (1 CPU each, at most ``workers`` in flight: all when None),
        results in order; a task Ray lost is an InputError naming the call's first argument
        (the dataset folder)."""
        if not calls:
            return
        with self.session(workers) as ray:
            task = ray.remote(num_cpus=1)(work)
            for call, ref in in_flight(task, calls, workers, ray):
                yield got(ray, ref, call[0])

    def tasks(
        self, work: Any, args: tuple, jobs: list[Job], workers: int | None, progress: Progress
    ) -> Iterator[tuple[Job, Any]]:
        """``work(job, *args, cwd, digest)`` as a Ray task per job, at most ``workers`` in
        flight, results in the order of ``jobs``."""
        with self.session(workers) as ray:
            task = ray.remote(num_cpus=1)(work)
            cwd, digest = os.getcwd(), parsers_digest()
            calls = [(job, *args, cwd, digest) for job in jobs]
            for call, ref in in_flight(task, calls, workers, ray):
                job = call[0]
                result = fetched(ray, job, ref)
                if progress:
                    progress(job[1])
                yield job, result

    @contextmanager
    def session(self, workers: int | None) -> Iterator[ModuleType]:
        """Ray, connected to this engine's cluster for the block (a local one of ``workers``
        CPUs started first when the address is ``local``)."""
        if self.address == "local":
            local_settings()
        ray = ray_module()
        with connected(ray, self.address, workers, quiet=self.quiet):
            yield ray


@contextmanager
def connected(
    ray: ModuleType, address: str, workers: int | None, *, quiet: bool = False
) -> Iterator[None]:
    """Connected to ``address`` (``local``: a Ray of ``workers`` CPUs started for the run, said
    on stderr unless ``quiet``: it takes about a minute of silence otherwise) within the
    timeout, or an InputError naming ``--ray-address``; disconnected after."""
    if ray.is_initialized():
        yield
        return
    timeout = connect_timeout()
    options: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address == "local":
        options |= {"num_cpus": workers or os.cpu_count() or 1, "include_dashboard": False}
        timeout *= LOCAL_START_FACTOR
        if not quiet:
            print(STARTING_LOCAL, file=sys.stderr, flush=True)
    elif address != "auto":
        probe(address, min(timeout, PROBE_TIMEOUT_S))
    failure = None
    with held_stderr() as held:
        try:
            with deadline(timeout):
                ray.init(address=address, **options)
        except TimeoutError:
            ray.shutdown()
            failure = f"no Ray cluster at {address} answered within {timeout:g} s"
        except Exception as exc:
            failure = f"cannot use Ray at {address}: {first_line(exc)}"
    if failure is None:
        sys.stderr.write(held.text)
    elif REFUSED_TOKEN in held.text:
        raise InputError("--ray-address", f"the Ray cluster at {address} {REFUSED}")
    else:
        raise InputError("--ray-address", failure)
    try:
        yield
    finally:
        quiet_shutdown(ray)


CORE_LOG = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+ [DIWEF] \d+ \d+\] \S+\.(cc|h):\d+:")
"""A line of Ray's C++ core log (``[2026-12-02 22:54:56,991 E 17871 17892] task_manager.cc:…``)."""


def quiet_shutdown(ray: ModuleType) -> None:
    """Disconnected, without the core's own log lines about the tasks it drops on the way."""
    with without_core_log():
        ray.shutdown()


@contextmanager
def without_core_log() -> Iterator[None]:
    """The block's writes to fd 2 passed on but for Ray's core log lines (``Failed to push
    error to driver`` for a task still running when the run stopped on an error): they would
    stand beside the one line that says why."""
    with held_stderr() as held:
        yield
    kept = [line for line in held.text.splitlines(keepends=True) if not CORE_LOG.match(line)]
    sys.stderr.write("".join(kept))


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """TimeoutError in the block after ``seconds`` (a timer signal: only the main thread can
    have one, and Ray must start in a thread that lives on, since the processes it starts die
    with the thread that started them). Elsewhere the block runs unbounded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError

    before = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def local_settings() -> None:
    """A Ray for the run reports no usage statistics and authenticates with a token of its own,
    passed to its processes in the environment (Ray would otherwise write one to
    ~/.ray/auth_token, which later clusters on the machine would pick up); settings the user
    made win, and so does Ray's own default once it is imported (it reads the mode then)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if "RAY_AUTH_MODE" not in os.environ and "ray" not in sys.modules:
        os.environ |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def connect_timeout() -> float:
    raw = os.environ.get("RLPERF_RAY_TIMEOUT", "")
    try:
        value = float(raw) if raw else CONNECT_TIMEOUT_S
    except ValueError:
        raise InputError("RLPERF_RAY_TIMEOUT", f"is not a number of seconds: {raw!r}") from None
    if value <= 0:
        raise InputError("RLPERF_RAY_TIMEOUT", f"must be more than 0 seconds, not {raw}")
    return value


def probe(address: str, timeout: float) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that nothing listens on fails here in at most
    ``timeout``, not after Ray's own minute of retries."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise InputError(
            "--ray-address", f"{address!r} is not auto, local, HOST:PORT or ray://HOST:PORT"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise InputError(
            "--ray-address", f"no Ray cluster at {address} ({why} within {timeout:g} s)"
        ) from None


@dataclass
class Held:
    text: str = ""


@contextmanager
def held_stderr() -> Iterator[Held]:
    """File descriptor 2 held in a temporary file for the block, its text in the ``Held`` after.
    Ray's core writes a warning line a second there while a cluster refuses to connect, which
    would bury the one line that says why; what a connection that succeeds wrote is the
    caller's to pass on."""
    held = Held()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as spool:
        os.dup2(spool.fileno(), 2)
        try:
            yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            spool.seek(0)
            held.text = spool.read().decode(errors="replace")


def in_flight(
    task: Any, calls: list[tuple[Any, ...]], window: int | None, ray: Any = None
) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Each call with the reference of its Ray task, in the order of ``calls``; a task is
    submitted only while fewer than ``window`` (None: all) of those handed out are unread, so
    ``--jobs`` bounds what the run takes of a shared cluster. A run that stops early (an error
    in one source) cancels the tasks still out and waits a moment for them, so none is left
    running on the user's cluster or failing after the driver has gone."""
    todo = deque(calls)
    running: deque[tuple[tuple[Any, ...], Any]] = deque()
    try:
        while todo or running:
            while todo and len(running) < (window or len(calls)):
                call = todo.popleft()
                running.append((call, task.remote(*call)))
            yield running.popleft()
    finally:
        if running and ray is not None:
            drained(ray, [ref for _, ref in running])


def drained(ray: Any, refs: list[Any]) -> None:
    """``refs`` cancelled and waited for (at most ``DRAIN_S``); a cancel or wait Ray refuses
    changes nothing for the run, which is stopping anyway."""
    with without_core_log():
        try:
            for ref in refs:
                ray.cancel(ref)
            ray.wait(refs, num_returns=len(refs), timeout=DRAIN_S)
        except Exception:
            pass


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def fetched(ray: ModuleType, job: Job, ref: Any) -> tuple[int, Any]:
    """A parse task's result on the driver; a task Ray lost is an error naming the file, as a
    parse error is."""
    result = got(ray, ref, job[1])
    return (job[0], result) if isinstance(result, InputError) else result


def got(ray: ModuleType, ref: Any, where: Any) -> Any:
    """A task's result; a task Ray lost (its node or worker died, out of memory) is an
    InputError naming ``where``, and an error raised in the task propagates."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError:
        raise
    except ray.exceptions.RayError as exc:
        return InputError(where, f"its Ray task failed: {first_line(exc)}")


@dataclass
class Wire:
    """A parsed source as it crosses the object store: its tables as Arrow IPC (lz4), which
    keeps every polars type (an Enum too) and arrives as the driver's own memory, where a
    zero-copy Arrow table would point into the object store and die with the connection."""

    format: str
    events: bytes
    metrics: bytes
    meta: dict[str, Any]
    warnings: list[str]

    @classmethod
    def of(cls, parsed: ParsedSource) -> Wire:
        return cls(
            parsed.format, ipc(parsed.events), ipc(parsed.metrics), parsed.meta, parsed.warnings
        )

    def parsed(self, path: Path) -> ParsedSource:
        """The source as the driver names it (the path it was given, not the node's)."""
        return ParsedSource(
            path=path,
            format=self.format,
            events=pl.read_ipc(io.BytesIO(self.events)),
            meta=self.meta,
            metrics=pl.read_ipc(io.BytesIO(self.metrics)),
            warnings=self.warnings,
        )


def ipc(frame: pl.DataFrame) -> bytes:
    out = io.BytesIO()
    frame.write_ipc(out, compression="lz4")
    return out.getvalue()


def parse_remote(job: Job, cwd: str, digest: str) -> tuple[int, Wire | InputError]:
    """On a Ray worker: the same parse as the local engine's, from the driver's working
    directory, after checking that this node runs the same parsers and sees the file."""
    with on_node(job, cwd, digest) as refused:
        if refused:
            return job[0], refused
        index, parsed = parse_one(job)
    return index, parsed if isinstance(parsed, InputError) else Wire.of(parsed)


def write_remote(job: Job, root: str, cwd: str, digest: str) -> Wrote:
    """On a Ray worker: the source parsed and written into the dataset folder ``root`` (the
    driver's staging folder), as the local engine's workers do; only its record comes back."""
    with on_node(job, cwd, digest) as refused:
        if refused:
            return job[0], refused
        folder = Path(root)
        if not folder.is_dir():
            return job[0], OutputError(
                folder,
                f"not found on the Ray node {socket.gethostname()}: the dataset must be written "
                "on a path every node sees (docs/ray.md)",
            )
        return write_one(job, folder, keep=False)


@contextmanager
def on_node(job: Job, cwd: str, digest: str) -> Iterator[InputError | None]:
    """In the driver's working directory, with the error that stops this job on this node (it
    runs another rlperf, or does not see the file), if any."""
    path = job[1]
    node = socket.gethostname()
    if parsers_digest() != digest:
        yield InputError(
            path,
            f"the Ray node {node} runs another rlperf (its parsers differ from this machine's): "
            "install the same rlperf on every node",
        )
        return
    with inside(Path(cwd)):
        if not path.exists():
            yield InputError(
                path,
                f"not found on the Ray node {node}: sources must be on a path every node sees "
                "(docs/ray.md)",
            )
            return
        yield None


@contextmanager
def inside(folder: Path) -> Iterator[None]:
    """In ``folder`` when this node has it (relative paths then mean what they meant to the
    driver); a task runs alone in its worker process, so changing directory is safe."""
    before = os.getcwd()
    try:
        os.chdir(folder)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.chdir(before)


@cache
def parsers_digest() -> str:
    """A hash of the parsers' code: a node whose rlperf differs would parse differently."""
    digest = hashlib.sha1()
    root = Path(parsers.__file__).parent
    for f in sorted(root.rglob("*.py")):
        digest.update(f.relative_to(root).as_posix().encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()[:16]
