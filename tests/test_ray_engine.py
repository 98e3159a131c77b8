"""``--engine ray``: a Ray cluster on 127.0.0.1 (started here with 2 CPUs, stopped after) parses
multi-rank runs, and the JSON report (every number, every text) equals the local engine's; the
parse really ran in Ray's workers; a bad address, a missing ray and an address without
``--engine ray`` are each one line and exit status 2, within a bounded time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from shutil import rmtree

import pytest

from analyzer import engines
from analyzer.assemble.ingest import ingest
from analyzer.engines import on_ray
from parsers import InputError

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SAMPLES = ["sample_traces/synthetic/disaggregated", "sample_traces/runs/verl_ppo_disaggregated"]
"""Multi-rank runs (8 ranks of synthetic traces; a real verl run's traces and logs), named
relative to the repository as a user names them from their working directory."""
START_TIMEOUT_S = 240
"""Ray's own limit for a node to come up is 30 s; a busy 2-core machine gets two tries."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TOKEN = {name: os.environ[name] for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
"""The test cluster's authentication, in this process's environment from its start
(tests/conftest.py says why), given to the cluster and to every driver."""
FAST_IMPORT = {"PYTHONPATH": os.pathsep.join(
    [str(REPO / "tests" / "ray_env"), *filter(None, [os.environ.get("PYTHONPATH")])]
)}
"""Ray's processes and drivers start without the grammar jsonschema builds at import
(tests/ray_env/rfc3987_syntax.py says why)."""


def start_head(temp: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, **TOKEN, **FAST_IMPORT, "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_enable_worker_prestart": "0"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen(
        [
            str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
            "--port", str(port), "--num-cpus", "2", "--include-dashboard", "false",
            "--disable-usage-stats", "--temp-dir", str(temp),
        ],
        stdout=(temp / "start.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
    )


def stop(proc: subprocess.Popen) -> None:
    """The whole process group (the head and every process Ray started under it)."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue


def started(proc: subprocess.Popen, log: Path, until: float) -> bool:
    while time.monotonic() < until and proc.poll() is None:
        if "Ray runtime started" in log.read_text(errors="replace"):
            return True
        time.sleep(0.5)
    return False


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A Ray head on 127.0.0.1 for this module; its address."""
    # Ray's socket paths must stay short: a folder directly in the temporary directory.
    temp = Path(tempfile.mkdtemp(prefix="rlperf-ray-"))
    until = time.monotonic() + START_TIMEOUT_S
    proc = None
    try:
        while time.monotonic() < until:
            port = free_port()
            proc = start_head(temp, port)
            if started(proc, temp / "start.log", until):
                break
            stop(proc)
        else:
            tail = (temp / "start.log").read_text(errors="replace")[-2000:]
            pytest.fail(f"no Ray head within {START_TIMEOUT_S} s:\n{tail}")
        yield f"127.0.0.1:{port}"
    finally:
        if proc is not None:
            stop(proc)
        rmtree(temp, ignore_errors=True)


def rlperf(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run(
        [str(BIN / "rlperf"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**clean, **TOKEN, **FAST_IMPORT, **(env or {})},
    )


def report(sample: str, *engine: str) -> dict:
    done = rlperf("analyze", sample, "--format", "json", "--no-cache", "--quiet", *engine)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rlperf: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("sample", "jobs"), [(SAMPLES[0], []), (SAMPLES[1], ["--jobs", "2"])])
def test_the_ray_engines_report_equals_the_local_engines(cluster: str, sample: str, jobs: list):
    """Every task at once, and at most two in flight (``--jobs``): the same report."""
    local = report(sample)
    on_ray_report = report(sample, "--engine", "ray", "--ray-address", cluster, *jobs)
    assert on_ray_report == local
    assert json.dumps(on_ray_report, sort_keys=True) == json.dumps(local, sort_keys=True)


def test_the_samples_are_multi_rank_runs():
    """What the comparison above stands on: runs of several ranks and several sources."""
    for sample in SAMPLES:
        found = ingest([REPO / sample], use_cache=False)
        ranks = {s.meta.get("rank") for s in found.sources} - {None}
        assert len(found.sources) >= 3 and len(ranks) >= 2, (sample, ranks)


def test_the_parse_runs_in_rays_workers(cluster: str, monkeypatch: pytest.MonkeyPatch):
    """The driver's parser digest made to differ: only a task in another process (a Ray
    worker, with the real digest) can notice, and it names the node and the file."""
    path = REPO / SAMPLES[0] / "rank-1.synthetic.pt.trace.json.gz"
    monkeypatch.setattr(on_ray, "parsers_digest", lambda: "another-rlperf")
    with engines.using("ray", cluster), pytest.raises(InputError) as caught:
        ingest([path], use_cache=False)
    assert caught.value.path == str(path)
    assert "runs another rlperf" in caught.value.problem
    assert socket.gethostname() in caught.value.problem


def test_a_bad_address_is_one_line_within_the_probe_time():
    port = free_port()  # nothing listens there once the probe socket is closed
    start = time.monotonic()
    line = one_line_error(
        rlperf("analyze", SAMPLES[0], "--engine", "ray", "--ray-address", f"127.0.0.1:{port}"),
        "--ray-address", f"no Ray cluster at 127.0.0.1:{port}",
    )
    assert time.monotonic() - start < 60, line


@pytest.mark.parametrize("token", [{"RAY_AUTH_TOKEN": "0" * 64}, {"RAY_AUTH_MODE": "disabled"}])
def test_a_refused_token_is_one_line_that_says_so(cluster: str, token: dict[str, str]):
    """Another token, or none, against the cluster's: Ray's core logs a warning a second while it
    retries (the budget cut to 2 s here); what the user sees is the one line naming the token."""
    done = rlperf("analyze", SAMPLES[0], "--engine", "ray", "--ray-address", cluster,
                  env={**token, "RAY_gcs_server_port_wait_time_s": "2"})
    assert one_line_error(done) == (
        f"rlperf: error: --ray-address: the Ray cluster at {cluster} refused this process's "
        "authentication token: set RAY_AUTH_TOKEN to the cluster's (`ray get-auth-token` on its "
        "head node prints it)"
    )


def test_an_unanswering_host_is_bounded_by_the_timeout():
    """A host that never answers (a reserved documentation address) fails after
    ``RLPERF_RAY_TIMEOUT``, not after Ray's own minutes of retries."""
    start = time.monotonic()
    one_line_error(
        rlperf(
            "analyze", SAMPLES[0], "--engine", "ray", "--ray-address", "ray://192.0.2.254:10001",
            env={"RLPERF_RAY_TIMEOUT": "2"},
        ),
        "no Ray cluster at ray://192.0.2.254:10001",
    )
    assert time.monotonic() - start < 45


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--engine", "ray", "--ray-address", "nonsense"], "is not auto, local, HOST:PORT"),
        (["--ray-address", "127.0.0.1:6379"], "--ray-address: is for --engine ray"),
    ],
)
def test_a_malformed_or_misplaced_address_is_one_line(args: list[str], needle: str):
    one_line_error(rlperf("analyze", SAMPLES[0], *args), needle)


def test_without_ray_installed_the_line_says_how_to_install_it():
    code = (
        "import sys; sys.modules['ray'] = None; sys.argv = ['rlperf', *sys.argv[1:]]; "
        "from analyzer.cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "analyze", SAMPLES[0], "--engine", "ray"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    one_line_error(done, "--engine: ray is not installed: pip install 'rlperf[ray]'")


def test_the_local_engine_does_not_import_ray():
    code = (
        "import sys, analyzer; from analyzer.cli import app; "
        f"analyzer.load([{str(REPO / SAMPLES[0])!r}]); print('ray' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# --- the dataset written by Ray tasks ----------------------------------------------------------


def in_process(*args: str) -> int:
    """``rlperf ARGS`` in this process (so the driver's functions can be watched)."""
    from analyzer.cli import main

    argv, sys.argv = sys.argv, ["rlperf", *args]
    try:
        main()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        sys.argv = argv
    return 0


def test_ray_tasks_write_the_dataset(cluster: str, tmp_path: Path, monkeypatch):
    """Each task writes its source's tables; the driver receives no table (a parse's tables
    coming back through the object store fail the test), and the dataset equals the local
    engine's file by file, a copy dropped and the sources after it renumbered, and analysing
    it gives the local engine's report."""
    from tests.test_dataset import assert_same_dataset, with_a_copy

    run = with_a_copy(tmp_path)
    local = rlperf("ingest", str(run), "-o", str(tmp_path / "local"), "--no-cache", "-q")
    assert local.returncode == 0, local.stderr

    def no_tables(self, path):
        raise AssertionError(f"the tables of {path} came to the driver")

    monkeypatch.setattr(on_ray.Wire, "parsed", no_tables)
    status = in_process("ingest", str(run), "-o", str(tmp_path / "ray"), "--no-cache", "-q",
                        "--engine", "ray", "--ray-address", cluster)
    assert status == 0
    assert_same_dataset(tmp_path / "ray", tmp_path / "local")
    assert len(list((tmp_path / "ray" / "sources").iterdir())) == 8
    first = report(str(run))
    assert json.loads(rlperf("analyze", str(tmp_path / "ray"), "-f", "json").stdout) == first


def test_a_node_that_cannot_see_the_dataset_folder_is_one_line(cluster: str, tmp_path: Path):
    """The output named through a path only the driver's process has (its own open folder,
    ``/proc/self/fd/N``): the tasks cannot see it, as a node without the shared mount would
    not; one line naming the output, exit status 2, nothing left behind."""
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    high = os.dup2(fd, 250)
    try:
        out = f"/proc/self/fd/{high}/ds"
        done = subprocess.run(
            [str(BIN / "rlperf"), "ingest", SAMPLES[0], "-o", out, "--no-cache", "-q",
             "--engine", "ray", "--ray-address", cluster],
            cwd=REPO, capture_output=True, text=True, timeout=300, pass_fds=(high,),
            env={**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **TOKEN,
                 **FAST_IMPORT},
        )
    finally:
        os.close(high)
        os.close(fd)
    line = one_line_error(done, out, "not found on the Ray node",
                          "the dataset must be written on a path every node sees")
    assert socket.gethostname() in line
    assert list(tmp_path.iterdir()) == []
