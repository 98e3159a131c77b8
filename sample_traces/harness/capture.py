"""Runs that need an outside launcher: the job under Nsight Systems, and TRL under torchrun.

Every external command is bounded (``timeout`` plus a kill of its whole process group), so no
``nsys`` agent or torchrun worker outlives the capture.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import truth
from .driver import free_port
from .scenarios import Scenario

REPO = Path(__file__).resolve().parents[2]
QDSTRM_IMPORTER = Path("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter")
NSYS_FLAGS = ("-t", "nvtx,osrt", "-s", "none", "--cpuctxsw", "none",
              "--osrt-threshold=100000", "--osrt-backtrace-threshold=1000000000")
"""The brief's capture (NVTX and OS runtime, no sampling, no context switches), with OS-runtime
calls under 100 µs and all backtraces left out so the report stays small."""
ISOLATE_SCRIPT = (
    'mkdir -p /tmp/nvidia && mount -t tmpfs none /tmp/nvidia && mount -t tmpfs none /dev/shm '
    '&& mount --bind "$1" "$2" && cd "$2" && shift 2 && exec "$@"'
)
"""Run in a PID and mount namespace of its own: nsys sees only the job's processes, its session
files (``/tmp/nvidia``, ``/dev/shm``) cannot meet another nsys session on the host, and the
repository appears under a neutral temporary path (``$1`` bound on ``$2``)."""


def bounded(cmd: list[str], limit_s: int, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own process group; on return or timeout, end whatever it left."""
    proc = subprocess.Popen(cmd, start_new_session=True, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, **kw)
    try:
        out, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        raise RuntimeError(
            f"{cmd[0]} ran past {limit_s} s and was stopped:\n{out[-4000:]}"
        ) from None
    finally:
        _kill_group(proc.pid)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}… failed ({proc.returncode}):\n{out[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def capture_nsys(sc: Scenario, out: Path) -> None:
    """The whole job (controller and workers) under ``nsys profile``; report plus SQLite export.

    A report records the command line, the environment of every process nsys can see, and the
    process list. So nsys runs in its own PID namespace (it sees only the job), with a minimal
    environment and through a neutral temporary path to the repository: no variable of this
    machine and no path of this checkout ends up in a committed file (checked on the export).
    """
    missing = [tool for tool in ("nsys", "unshare", "timeout") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        raise SystemExit(f"{sc.name}: the nsys capture needs {', '.join(missing) or 'root'} "
                         "(Debian nsight-systems, util-linux; run as root for the namespace)")
    with tempfile.TemporaryDirectory(prefix="rlperf-nsys-") as tmp:
        t = Path(tmp)
        (t / "repo").mkdir()
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(t), "LANG": "C.UTF-8"}
        python = _under(Path(sys.executable), t / "repo")
        inner = [python, "-m", "sample_traces.harness.run", "--inner", "--only", sc.name,
                 "--out", _under(out.parent.resolve(), t / "repo")]
        bounded(["timeout", "-k", "10", "280", "unshare", "--pid", "--fork", "--mount-proc",
                 "sh", "-c", ISOLATE_SCRIPT, "isolate", str(REPO), str(t / "repo"),
                 "nsys", "profile", *NSYS_FLAGS, "--force-overwrite", "true",
                 "-o", str(t / "report"), *inner], 300, cwd=t, env=env)
        if not (t / "report.nsys-rep").exists() and (t / "report.qdstrm").exists():
            bounded(
                ["timeout", "-k", "10", "280", str(QDSTRM_IMPORTER), "-i", "report.qdstrm"],
                300,
                cwd=t,
                env=env,
            )
        bounded(["timeout", "-k", "10", "280", "nsys", "export", "--type", "sqlite", "-o",
                 "report.sqlite", "report.nsys-rep"], 300, cwd=t, env=env)
        check_clean(t / "report.sqlite", set(env))
        dest = out / "nsys"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("report.nsys-rep", "report.sqlite"):
            shutil.copyfile(t / name, dest / name)
    doc = json.loads((out / "truth.json").read_text())
    attach_nsys(doc, Path("nsys/report.nsys-rep"), dest / "report.sqlite")
    truth.write(out / "truth.json", doc)


ENV_KEYS_ALLOWED = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "PWD", "OLDPWD", "SHLVL", "_",
                              "TRACE_START_IMMEDIATELY", "USE_AGENT_API"})
ENV_PREFIXES_ALLOWED = ("NSYS_", "QUADD_", "NVTX_", "__GL_")
"""Variables nsys injects into the minimal environment the capture starts it with."""


def check_clean(sqlite: Path, given: set[str]) -> None:
    """Refuse an export that names this checkout or holds a variable the capture did not set."""
    con = sqlite3.connect(sqlite)
    try:
        strings = [v for (v,) in con.execute("SELECT value FROM StringIds")]
    finally:
        con.close()
    if any(str(REPO) in v for v in strings):
        raise RuntimeError(f"{sqlite.name}: the capture recorded the checkout's path")
    values = [v for v in strings if "\x00" in v and "=" in v]
    keys = {item.split("=", 1)[0] for v in values for item in v.split("\x00") if "=" in item}
    extra = sorted(k for k in keys - given - ENV_KEYS_ALLOWED
                   if k.isidentifier() and k.isupper() and not k.startswith(ENV_PREFIXES_ALLOWED))
    if extra:
        raise RuntimeError(
            f"{sqlite.name}: the capture recorded outside environment variables {extra}"
        )


def _under(path: Path, link: Path) -> str:
    """``path`` spelled through ``link`` (the temporary name of the repository) when inside it."""
    try:
        return str(link / path.relative_to(REPO))
    except ValueError:
        return str(path)


def nvtx_ranges(sqlite: Path) -> dict[int, list[tuple[str, int, int]]]:
    """NVTX push/pop ranges per process id, in epoch ns (session start + relative time)."""
    con = sqlite3.connect(sqlite)
    try:
        (base,) = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        rows = con.execute(
            "SELECT COALESCE(e.text, s.value), e.start, e.end, e.globalTid FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 AND e.end IS NOT NULL"
        ).fetchall()
    finally:
        con.close()
    out: dict[int, list[tuple[str, int, int]]] = {}
    for name, start, end, gtid in rows:
        out.setdefault((gtid >> 24) & 0xFFFFFF, []).append((name, base + start, base + end))
    return out


def attach_nsys(doc: dict[str, Any], rep: Path, sqlite: Path) -> None:
    by_pid = nvtx_ranges(sqlite)
    export = str(rep.with_suffix(".sqlite"))
    for entry in doc["ranks"]:
        entry["trace"], entry["export"] = str(rep), export
        rows = by_pid.get(entry["pid"], [])
        mine = [s for s in [*doc["stages"], *doc["spans"]] if s["rank"] == entry["rank"]]
        window = (min(r[1] for r in rows), max(r[2] for r in rows)) if rows else (0, 0)
        entry["profile_window_ns"] = list(window)
        doc["clock"]["per_rank"][str(entry["rank"])] = truth.match_clock(
            mine, rows, window, f"{doc['scenario']} rank {entry['rank']}")
    doc["clock"]["note"] = truth.NSYS_CLOCK_NOTE


TRL_SCENARIO = "trl_grpo"


def capture_trl(out: Path) -> None:
    """TRL's GRPOTrainer on two ranks; its block timers become the truth."""
    from . import trl_run

    out.mkdir(parents=True, exist_ok=True)
    result = bounded(["timeout", "-k", "10", "500", sys.executable, "-m", "torch.distributed.run",
                      "--nproc-per-node", "2", "--master-port", str(free_port()),
                      "-m", "sample_traces.harness.trl_run", str(out)], 520, cwd=REPO)
    (out / "logs").mkdir(exist_ok=True)
    (out / "logs" / "torchrun.log").write_text(_console(result.stdout), encoding="utf-8")
    ranks = []
    for path in sorted(out.glob("timers_rank*.json")):
        ranks.append(json.loads(path.read_text()))
        path.unlink()
    doc = trl_truth(ranks, trl_run)
    measure = {e["rank"]: e for e in doc["ranks"]}
    for entry in measure.values():
        _rows, window = truth.kineto_ranges(out / entry["trace"])
        entry["profile_window_ns"] = list(window)
    truth.write(out / "truth.json", doc)


def _console(text: str) -> str:
    """The launcher's console as a user would keep it, less profiler-internal USDT probe lines
    and with this checkout's path made relative."""
    lines = (line for line in text.splitlines(keepends=True) if not line.startswith("USDT:"))
    return "".join(lines).replace(f"{REPO}/", "")


TRL_STAGE = {
    "GRPOTrainer.transformers.generate": ("rollout", "rollout"),
    "GRPOTrainer._calculate_rewards": ("reward", "reward"),
    "GRPOTrainer.compute_loss": ("actor_update", "actor"),
    "Trainer._save_checkpoint": ("checkpoint", "actor"),
}
LOGPS = "GRPOTrainer._get_per_token_logps_and_entropies"


def trl_truth(ranks: list[dict[str, Any]], trl_run: Any) -> dict[str, Any]:
    stages, spans = [], []
    for r in ranks:
        starts = sorted((s["start_ns"], s["step"]) for s in r["steps"])
        for rec in r["records"]:
            step = max((k for t, k in starts if t <= rec["start_ns"]), default=1)
            row = {"rank": r["rank"], "step": step, "name": rec["name"],
                   "start_ns": rec["start_ns"], "end_ns": rec["end_ns"]}
            if rec["name"] in TRL_STAGE:
                stage, role = TRL_STAGE[rec["name"]]
            elif rec["name"] == LOGPS and "GRPOTrainer.compute_loss" not in rec["parents"]:
                stage, role = (
                    ("ref_logprob", "ref") if rec["model"] == "ref" else ("old_logprob", "actor")
                )
            else:
                spans.append({**row, "covers": [], "parents": rec["parents"]})
                continue
            stages.append({**row, "stage": stage, "role": role})
        spans += [{"rank": r["rank"], "step": s["step"], "name": "trainer_step", "covers": [],
                   "start_ns": s["start_ns"], "end_ns": s["end_ns"]} for s in r["steps"]]
    world = len(ranks)
    active = list(range(trl_run.PROFILE_WAIT + trl_run.PROFILE_WARMUP + 1,
                        trl_run.PROFILE_WAIT + trl_run.PROFILE_WARMUP + trl_run.PROFILE_ACTIVE + 1))
    return {
        "format": truth.FORMAT,
        "synthetic": False,
        "generator": "sample_traces/harness",
        "scenario": TRL_SCENARIO,
        "config": {
            "algorithm": "grpo",
            "style": "trl",
            "placement": "colocated",
            "execution": "sync",
            "world_size": world,
            "pools": {"rollout": list(range(world)), "train": list(range(world))},
            "group_size": trl_run.GROUP,
            "prompts_per_step": trl_run.PROMPTS_PER_RANK * world,
            "max_new_tokens": trl_run.MAX_NEW,
            "steps": trl_run.MAX_STEPS,
            "profiled_steps": active,
            "checkpoint_every": trl_run.SAVE_EVERY,
            "seed": trl_run.SEED,
            "checkpoint_steps": sorted(
                {
                    *range(trl_run.SAVE_EVERY, trl_run.MAX_STEPS + 1, trl_run.SAVE_EVERY),
                    trl_run.MAX_STEPS,
                }
            ),
            "model": {
                "type": "LlamaForCausalLM",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 128,
            },
            "profiler": "torch",
            "annotated": False,
            "versions": trl_run.TRL_PINS,
        },
        "ranks": [
            {
                "rank": r["rank"],
                "pool": "shared",
                "pid": r["pid"],
                "host": r["host"],
                "trace": r["trace"],
            }
            for r in ranks
        ],
        "clock": {"source": "time.time_ns", "note": truth.TRL_CLOCK_NOTE},
        "logs": ["logs/torchrun.log", "logs/trainer_state.json"],
        "stages": sorted(stages, key=lambda s: (s["start_ns"], s["rank"])),
        "spans": sorted(spans, key=lambda s: (s["start_ns"], s["rank"])),
        "waits": [],
        "collectives": truth.paired_collectives(ranks),
        "responses": [
            {"step": x["step"], "rank": r["rank"], "lengths": x["lengths"]}
            for r in ranks
            for x in r["lengths"]
        ],
        "log_history": next(r["log_history"] for r in ranks if r["rank"] == 0),
    }
