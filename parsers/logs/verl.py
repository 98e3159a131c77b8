"""verl training logs: the console ``step:N - key:value - …`` lines and the JSONL file logger.

Console grammar (``verl/utils/logger/aggregate_logger.py::LocalLogger``): one line per step
from the driver (``TaskRunner``, ``main_task`` before 2025), behind a Ray prefix and often ANSI
colours; `` - `` separated ``key:value`` pairs; numbers as ``.3f`` up to v0.4 and ``pprint``
(full precision, ``np.float64(…)``) from v0.5. The ``file`` logger (v0.6+) writes
``{"step": N, "data": {…}}`` per line. ``timing_s/*`` (``timing/*`` in v0.1) keys become
``log_stage`` rows; every other key is a per-step metric. The printed config dict, when present,
gives the run-level facts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from ..events import as_int
from ..source import ParsedSource
from .config import dig, printed_dict
from .lines import LineIssues, is_document, lines_frame, note_ending, read_text, timestamps_ns
from .records import split_timers
from .timers import finish
from .values import FIXED3, MAX_STEP, flat_scalars, numbers, py_step, step_number

FORMAT = "verl-log"
EXTENSIONS: tuple[str, ...] = (".log", ".txt", ".out", ".jsonl")

TIMER_KEY = r"^timing(?:_s)?/"
STEP_TOTALS: tuple[str, ...] = ("timing_s/step", "timing/step")
RESUME = r"global_step_(\d+)"
AGENT_LOOP_COUNT = (
    r"^timing_s/agent_loop/(?:\w+/)*(?:num_\w+|tool_calls|\w+_length)(?:/(?:min|max|mean))?$"
)
"""Counts the agent loop (verl ≥ 0.5) logs under ``timing_s/``: preemptions (``-1`` when
unknown), tool calls, the slowest trajectory's lengths. They are metrics, not durations."""
DEVICES: tuple[tuple[str, str, str], ...] = (
    ("npu", "Ascend NPU", r"torch_npu|\bHCCL|\bASCEND_|\bnpu:\d|vllm_ascend|\bCANN\b|Ascend"),
    ("tpu", "TPU (XLA)", r"PJRT_DEVICE=TPU|libtpu|torch_xla|\bTPU device"),
)
"""Accelerators verl and its forks run on besides CUDA GPUs: ``trainer.device`` in the printed
config, else the runtime's own names in the log."""

_CONSOLE_STEP = re.compile(
    rb"(?m)^(?:\x1b\[[0-9;]*m)*(?:\(\S+ pid=\d+[^)]*\)(?:\x1b\[[0-9;]*m)* ?)?step:\d+ - [\w/@.\-]+:"
)
_JSONL_STEP = re.compile(rb'^\s*\{"step":\s*\d+,\s*"data":\s*\{')


def sniff(head: bytes, path: Path) -> int:
    """Step lines score 90; a printed verl config without steps (a crashed run) 60."""
    if is_document(head, path):
        return 0
    if _CONSOLE_STEP.search(head):
        return 90
    first = head.lstrip().split(b"\n", 1)[0]
    if _JSONL_STEP.match(first):
        return 90
    if b"'actor_rollout_ref':" in head and (b"'trainer':" in head or b"'algorithm':" in head):
        return 60
    return 0


def parse(path: Path, source: int = 0) -> ParsedSource:
    path = Path(path)
    out = ParsedSource(path=path, format=FORMAT, meta={"framework": "verl"})
    text, ends_with_newline = read_text(path)
    if _JSONL_STEP.match(text.lstrip()[:200].encode()):
        return _parse_jsonl(out, text, source)
    return _parse_console(out, text, ends_with_newline, source)


def _parse_console(
    out: ParsedSource, text: str, ends_with_newline: bool, source: int
) -> ParsedSource:
    lines = lines_frame(text, out)
    issues = LineIssues("key:value pair")
    raw_step = pl.col("text").str.extract(r"^step:(\d+)(?:\s|$)", 1)
    step_lines = lines.filter(pl.col("text").str.starts_with("step:")).with_columns(
        step_number(raw_step).alias("step"), raw_step.is_not_null().alias("_numbered")
    )
    bad_steps = step_lines.filter(pl.col("step").is_null())
    issues.add_frame(
        bad_steps.filter("_numbered").with_columns(
            pl.lit(f"step number past {MAX_STEP}").alias("problem")
        ),
        kind="dropped_out_of_range",
    )
    issues.add_frame(
        bad_steps.filter(~pl.col("_numbered")).with_columns(
            pl.lit("no step number").alias("problem")
        )
    )
    step_lines = step_lines.filter(pl.col("step").is_not_null())

    pairs = (
        step_lines.select(
            "line",
            "step",
            "pid",
            "actor",
            pl.col("text").str.split(" - ").list.slice(1).alias("pair"),
        )
        .explode("pair")
        .filter(pl.col("pair").str.len_bytes() > 0)
    )
    if not ends_with_newline and step_lines.height and step_lines["line"][-1] == lines["line"][-1]:
        cut = int(step_lines["line"][-1])
        if pairs.height and pairs["line"][-1] == cut:
            pairs = pairs.slice(0, pairs.height - 1)
        out.warn(
            f"line {cut}: the file ends inside this step line; its last key:value pair was dropped"
        )
        out.meta["ended"] = "cut"

    pairs = pairs.with_columns(
        pl.col("pair").str.splitn(":", 2).struct.rename_fields(["key", "raw"])
    ).unnest("pair", separator="_").rename({"pair_key": "key", "pair_raw": "raw"})
    pairs = pairs.with_columns(numbers(pairs["raw"]).alias("value"))
    bad = pairs.filter(pl.col("raw").is_null() | pl.col("value").is_null())
    issues.add_frame(
        bad.with_columns(
            pl.format(
                "unreadable pair '{}'",
                pl.concat_str("key", pl.lit(":"), "raw", ignore_nulls=True).str.slice(0, 60),
            ).alias("problem")
        )
    )
    pairs = pairs.filter(pl.col("raw").is_not_null() & pl.col("value").is_not_null())
    issues.report(out)

    timers, scalars = split_timers(pairs.with_columns(record="line"), is_timer(), extra=("pid",))

    first_step_line = as_int(step_lines["line"].min()) if step_lines.height else None
    _console_meta(out, lines, step_lines, pairs, first_step_line)
    base_ns = _base_time(out, lines, first_step_line)
    finish(out, timers, scalars, source=source, step_totals=STEP_TOTALS, base_ns=base_ns)
    note_ending(out, lines, step_lines)
    device = device_facts(out.meta.get("config"), lines)
    out.meta.update(device)
    stopped = out.meta.get("stopped_at") or {}
    if out.meta.get("ended") == "before_first_step":
        out.warn(
            f"no step recorded: {stopped['description']}" if "line" in stopped
            else "no step line found"
        )
    return out


def _console_meta(
    out: ParsedSource,
    lines: pl.DataFrame,
    step_lines: pl.DataFrame,
    pairs: pl.DataFrame,
    first_step_line: int | None,
) -> None:
    meta = out.meta
    drivers = sorted(set(step_lines["actor"].drop_nulls().to_list()))
    if drivers:
        meta["driver_actor"] = drivers[0] if len(drivers) == 1 else drivers
    pids = sorted(set(step_lines["pid"].drop_nulls().to_list()))
    if len(pids) > 1:
        meta["driver_pids"] = pids
        out.warn(
            f"step lines come from {len(pids)} driver processes (pids {', '.join(map(str, pids))})"
        )
    if pairs.height:
        fixed = pairs.select(pl.col("raw").str.contains(FIXED3).all()).item()
        meta["number_format"] = "fixed3" if fixed else "full"
    config, config_line = printed_dict(lines)
    if config is None and first_step_line is None:
        config_text = lines.filter(pl.col("text").str.contains("'actor_rollout_ref'"))
        if config_text.height:
            out.warn("a config dict is printed but could not be read")
    if config is not None:
        meta["config"] = config
        meta["config_line"] = config_line
        meta.update(config_facts(config))
        if "driver_actor" not in meta:
            actor = lines.filter(pl.col("line") == config_line)["actor"].to_list()
            if actor and actor[0]:
                meta["driver_actor"] = actor[0]
    before = lines if first_step_line is None else lines.filter(pl.col("line") < first_step_line)
    resumed = (
        before.filter(
            pl.col("text").str.contains(r"(?i)load|resum") & pl.col("text").str.contains(RESUME)
        )
        .select(pl.col("text").str.extract(RESUME, 1).cast(pl.Int64, strict=False))
        .to_series()
        .drop_nulls()
    )
    if resumed.len():
        meta["resumed_from_step"] = as_int(resumed.max())


def is_timer() -> pl.Expr:
    """``timing_s/*`` keys that are durations (the agent loop's counts are not)."""
    key = pl.col("key")
    return key.str.contains(TIMER_KEY) & ~key.str.contains(AGENT_LOOP_COUNT)


def device_facts(config: dict[str, Any] | None, lines: pl.DataFrame) -> dict[str, Any]:
    """``device`` (``npu``, ``tpu``, ``cuda``), a readable ``device_name`` and how it was told:
    the config's ``trainer.device``, else the first runtime name the log prints."""
    names = {key: name for key, name, _ in DEVICES}
    stated = dig(config, "trainer", "device")
    if isinstance(stated, str) and stated:
        key = stated.lower()
        return {"device": key, "device_name": names.get(key, key.upper()),
                "device_evidence": "config trainer.device"}
    for key, name, pattern in DEVICES:
        hit = lines.filter(pl.col("text").str.contains(pattern)).head(1)
        if hit.height:
            found = hit["text"].str.extract(f"({pattern})", 1).item()
            return {"device": key, "device_name": name,
                    "device_evidence": f"line {hit['line'].item()}: {found}"}
    return {}


def config_facts(config: dict[str, Any]) -> dict[str, Any]:
    """Run-level facts of a verl config (``ppo_trainer.yaml`` layout)."""
    facts: dict[str, Any] = {}
    nnodes = dig(config, "trainer", "nnodes")
    per_node = dig(config, "trainer", "n_gpus_per_node")
    if isinstance(nnodes, int) and isinstance(per_node, int):
        facts.update(nnodes=nnodes, n_gpus_per_node=per_node, world_size=nnodes * per_node)
    adv = dig(config, "algorithm", "adv_estimator")
    if adv:
        facts["algorithm"] = "ppo" if adv == "gae" else str(adv)
        facts["adv_estimator"] = adv
    rollout = dig(config, "actor_rollout_ref", "rollout") or {}
    for key, fact in (("n", "rollout_n"), ("name", "rollout_engine"), ("mode", "rollout_mode"),
                      ("tensor_model_parallel_size", "rollout_tp")):
        if key in rollout:
            facts[fact] = rollout[key]
    for key in ("max_prompt_length", "max_response_length", "train_batch_size"):
        value = dig(config, "data", key)
        if value is not None:
            facts[key] = value
    hybrid = dig(config, "actor_rollout_ref", "hybrid_engine")
    if hybrid is not None:
        facts["hybrid_engine"] = bool(hybrid)
        facts["placement"] = "colocated" if hybrid else "split"
    if rollout.get("mode") == "async":
        facts["async_rollout"] = True
    strategy = dig(config, "actor_rollout_ref", "actor", "strategy")
    if strategy:
        facts["train_strategy"] = strategy
    use_kl = dig(config, "actor_rollout_ref", "actor", "use_kl_loss") or dig(
        config, "algorithm", "use_kl_in_reward"
    )
    if use_kl is not None:
        facts["uses_ref"] = bool(use_kl)
    if adv is not None:
        facts["uses_critic"] = adv == "gae"
    for key in ("total_training_steps", "total_epochs", "test_freq", "save_freq", "logger"):
        value = dig(config, "trainer", key)
        if value is not None:
            facts[key] = value
    return facts


def _base_time(out: ParsedSource, lines: pl.DataFrame, first_step_line: int | None) -> int:
    """Epoch ns of the last full timestamp before the first step line (0 when the log has none)."""
    before = lines if first_step_line is None else lines.filter(pl.col("line") < first_step_line)
    stamps = before.filter(pl.col("text").str.contains(r"^\d{4}-\d{2}-\d{2}|^\[\d{4}-\d{2}-\d{2}"))
    stamped = stamps.select(timestamps_ns(pl.col("text")).alias("ns")).drop_nulls()
    if stamped.height:
        out.meta["time_base"] = (
            "synthetic: steps laid end to end from the last timestamp before the first step (read "
            "as UTC)"
        )
        return int(stamped["ns"][-1])
    out.meta["time_base"] = (
        "synthetic: steps laid end to end from 0 (the log has no wall-clock time)"
    )
    return 0


def _parse_jsonl(out: ParsedSource, text: str, source: int) -> ParsedSource:
    issues = LineIssues()
    decoder = msgspec.json.Decoder()
    timer_rows: list[tuple[int, str, float, int]] = []
    scalar_rows: list[tuple[int, str, float, int]] = []
    timer = re.compile(TIMER_KEY)
    count = re.compile(AGENT_LOOP_COUNT)
    for number_, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = decoder.decode(line)
            step = py_step(record["step"])
            data = record["data"]
            if step is None:
                raise ValueError(f"step {str(record['step'])[:24]} is no number in 0…{MAX_STEP}")
            if not isinstance(data, dict):
                raise TypeError("data is not an object")
        except (msgspec.DecodeError, KeyError, TypeError, ValueError) as exc:
            issues.add(number_, f"not a step record ({str(exc)[:60]})")
            continue
        for key, value in flat_scalars(data).items():
            timed = timer.match(key) and not count.search(key)
            (timer_rows if timed else scalar_rows).append((step, key, value, number_))
    issues.report(out)
    timers = pl.DataFrame(
        timer_rows,
        schema={"step": pl.Int32, "name": pl.String, "seconds": pl.Float64, "record": pl.UInt32},
        orient="row",
    )
    scalars = pl.DataFrame(
        scalar_rows,
        schema={"step": pl.Int32, "key": pl.String, "value": pl.Float64, "record": pl.UInt32},
        orient="row",
    )
    out.meta["number_format"] = "full"
    out.meta["logger"] = "file"
    out.meta["time_base"] = (
        "synthetic: steps laid end to end from 0 (the file logger records no time)"
    )
    finish(out, timers, scalars, source=source, step_totals=STEP_TOTALS)
    if out.meta["n_steps"] == 0:
        out.warn("no step record found")
    return out
