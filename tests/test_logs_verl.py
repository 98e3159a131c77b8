"""verl logs: the real PPO console log of the corpus, the crashed run, and the version traps
(written here from the verl grammar of docs/logs.md)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

import parsers
from parsers.events import validate
from parsers.logs import verl

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
PPO_LOG = CORPUS / "logs" / "verl" / "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"
CRASHED = CORPUS / "VERL-Maze" / "verl_demo.log"
STAGE_TIMERS = ("gen", "reward", "old_log_prob", "values", "adv", "update_critic", "update_actor")
PREFIX = "\x1b[36m(TaskRunner pid=14640)\x1b[0m "


def seconds(events: pl.DataFrame) -> pl.DataFrame:
    return events.select(
        "step",
        pl.col("name").cast(pl.String),
        ((pl.col("end_ns") - pl.col("start_ns")) / 1e9).alias("s"),
        "start_ns",
        "synthetic_time",
    )


@pytest.fixture(scope="module")
def ppo() -> parsers.ParsedSource:
    return parsers.parse_file(PPO_LOG)


def reference_steps(path: Path) -> dict[int, dict[str, float]]:
    """An independent, line-by-line reading of the step lines (regex per line)."""
    found: dict[int, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        match = re.search(r"step:(\d+) - (.*)$", line)
        if match:
            found[int(match.group(1))] = {
                k: float(v)
                for k, v in (item.rsplit(":", 1) for item in match.group(2).split(" - "))
            }
    return found


def test_ppo_log_every_step_with_its_stage_durations(ppo):
    validate(ppo.events)
    assert ppo.format == "verl-log"
    assert ppo.warnings == []
    steps = sorted(set(ppo.events["step"].to_list()))
    assert steps == list(range(101, 436))
    per_step = seconds(ppo.events).group_by("step").agg(pl.col("name"))
    for names in per_step["name"].to_list():
        assert {f"timing_s/{t}" for t in STAGE_TIMERS} | {"timing_s/step"} <= set(names)
    assert (
        ppo.meta["first_step"] == 101
        and ppo.meta["last_step"] == 435
        and ppo.meta["n_steps"] == 335
    )


def test_ppo_log_matches_an_independent_reading(ppo):
    ref = reference_steps(PPO_LOG)
    timers = {(s, k): v for s, d in ref.items() for k, v in d.items() if k.startswith("timing_s/")}
    got = {(s, n): v for s, n, v in seconds(ppo.events).select("step", "name", "s").iter_rows()}
    assert got.keys() == timers.keys()
    assert all(abs(got[k] - timers[k]) < 1e-9 for k in timers)
    scalars = {
        (s, k): v for s, d in ref.items() for k, v in d.items() if not k.startswith("timing_s/")
    }
    metrics = {(s, k): v for s, k, v in ppo.metrics.select("step", "key", "value").iter_rows()}
    assert metrics == scalars


def test_ppo_log_testing_and_checkpoint_steps(ppo):
    ev = seconds(ppo.events)
    testing = sorted(ev.filter(pl.col("name") == "timing_s/testing")["step"].to_list())
    saving = sorted(ev.filter(pl.col("name") == "timing_s/save_checkpoint")["step"].to_list())
    assert testing == saving == [*range(110, 431, 10), 435]


def test_ppo_log_step_110_reconciles(ppo):
    step = seconds(ppo.events).filter(pl.col("step") == 110)
    values = dict(step.select("name", "s").iter_rows())
    assert values["timing_s/gen"] == pytest.approx(4.163)
    assert values["timing_s/testing"] == pytest.approx(6.277)
    assert values["timing_s/save_checkpoint"] == pytest.approx(18.155)
    assert values["timing_s/step"] == pytest.approx(34.248)
    parts = sum(v for k, v in values.items() if k != "timing_s/step")
    assert parts == pytest.approx(34.242)


def test_ppo_log_steps_laid_end_to_end_from_the_last_stamp(ppo):
    ev = seconds(ppo.events)
    assert ev["synthetic_time"].all()
    first = ev.filter(pl.col("step") == 101)
    assert first["start_ns"].n_unique() == 1
    stamp = datetime(2025, 5, 22, 7, 3, 43, tzinfo=timezone.utc)
    assert first["start_ns"][0] == int(stamp.timestamp()) * 1_000_000_000 + 653_000_000
    second = ev.filter(pl.col("step") == 102)["start_ns"][0]
    assert second - first["start_ns"][0] == 11_376_000_000


def test_ppo_log_run_facts(ppo):
    meta = ppo.meta
    assert meta["framework"] == "verl"
    assert meta["driver_actor"] == "TaskRunner"
    assert meta["number_format"] == "fixed3"
    assert (meta["nnodes"], meta["n_gpus_per_node"], meta["world_size"]) == (2, 8, 16)
    assert (
        meta["adv_estimator"] == "gae" and meta["uses_critic"] is True and meta["uses_ref"] is False
    )
    assert (
        meta["rollout_n"] == 1
        and meta["rollout_engine"] == "vllm"
        and meta["rollout_mode"] == "sync"
    )
    assert meta["hybrid_engine"] is True and meta["placement"] == "colocated"
    assert (meta["max_prompt_length"], meta["max_response_length"]) == (512, 256)
    assert meta["resumed_from_step"] == 100
    assert meta["config"]["actor_rollout_ref"]["model"]["path"] == "Qwen/Qwen2.5-7B-Instruct"
    assert meta["ended"] == "completed"


def test_ppo_log_metrics(ppo):
    m = {(s, k): v for s, k, v in ppo.metrics.select("step", "key", "value").iter_rows()}
    assert m[(101, "response_length/max")] == 256.0
    assert m[(101, "response_length/mean")] == pytest.approx(128.648)
    assert m[(101, "global_seqlen/minmax_diff")] == 808.0
    assert m[(110, "val-core/openai/gsm8k/reward/mean@1")] == pytest.approx(0.892)
    assert m[(101, "perf/max_memory_reserved_gb")] == pytest.approx(59.592)


def test_crashed_run_reads_the_config_and_says_so():
    out = parsers.parse_file(CRASHED)
    assert out.format == "verl-log"
    assert out.events.height == 0 and out.meta["n_steps"] == 0
    assert out.meta["ended"] == "crashed"
    assert out.meta["driver_actor"] == "main_task"
    assert out.meta["config"]["actor_rollout_ref"]["model"]["path"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert out.meta["world_size"] == 1
    assert any("failed before its first step" in w and "line 264" in w for w in out.warnings)


def write(tmp_path: Path, name: str, lines: list[str], newline: bool = True) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + ("\n" if newline else ""))
    return path


def test_full_precision_numpy_values_repeated_suffix_and_tqdm_redraws(tmp_path):
    step = (
        "step:7 - timing_s/gen:np.float64(41.83012512) - timing_s/reshard:1.4500012 - "
        "timing_s/generate_sequences:39.9 - timing_s/old_log_prob:5.25 - "
        "timing_s/update_actor:20.5 - "
        "timing_s/step:70.12 - perf/total_num_tokens:1833221 - "
        "response_length/clip_ratio:np.float64(0.0625)"
    )
    path = write(
        tmp_path,
        "v05.log",
        [
            "\x1b[36m(WorkerDict pid=77, ip=10.1.2.3)\x1b[0m After sync model weights in sharding "
            "manager\x1b[32m [repeated 7x across cluster]\x1b[0m",
            "Training Progress:  10%|█         | 6/60 [06:01<54:10, 60.2s/it]\r" + PREFIX + step,
            PREFIX + "step:8 - timing_s/gen:40.0 - timing_s/step:65.5",
        ],
    )
    out = verl.parse(path)
    validate(out.events)
    got = dict(seconds(out.events).filter(pl.col("step") == 7).select("name", "s").iter_rows())
    assert got["timing_s/gen"] == pytest.approx(41.83012512)
    assert got["timing_s/reshard"] == pytest.approx(1.4500012)
    m = {(s, k): v for s, k, v in out.metrics.select("step", "key", "value").iter_rows()}
    assert m[(7, "perf/total_num_tokens")] == 1833221.0
    assert m[(7, "response_length/clip_ratio")] == 0.0625
    assert out.meta["number_format"] == "full"
    assert out.warnings == []
    assert out.events.filter(pl.col("step") == 8)["start_ns"][0] == 70_120_000_000


def test_v01_timing_keys(tmp_path):
    path = write(
        tmp_path,
        "v01.log",
        [
            "(main_task pid=3) step:1 - timing/gen:10.500 - timing/ref:1.250 - "
            "timing/update_actor:4.000 - timing/step:16.000 - mfu/actor:0.210",
        ],
    )
    out = verl.parse(path)
    assert set(seconds(out.events)["name"].to_list()) == {
        "timing/gen",
        "timing/ref",
        "timing/update_actor",
        "timing/step",
    }
    assert out.metrics["key"].to_list() == ["mfu/actor"]
    assert out.meta["driver_actor"] == "main_task"


def test_resumed_run_keeps_the_last_record_of_each_step(tmp_path):
    first = [
        f"{PREFIX}step:{s} - timing_s/gen:{s}.000 - timing_s/step:{s + 1}.000" for s in range(1, 6)
    ]
    again = [
        f"{PREFIX}step:{s} - timing_s/gen:{s}.500 - timing_s/step:{s + 2}.000" for s in range(4, 8)
    ]
    path = write(
        tmp_path,
        "resumed.log",
        [
            *first,
            "Traceback (most recent call last):",
            "RuntimeError: NCCL timeout",
            "(TaskRunner pid=999) Load from checkpoint folder: ckpt/global_step_3",
            *again,
        ],
    )
    out = verl.parse(path)
    gen = dict(
        seconds(out.events).filter(pl.col("name") == "timing_s/gen").select("step", "s").iter_rows()
    )
    assert gen == pytest.approx({1: 1.0, 2: 2.0, 3: 3.0, 4: 4.5, 5: 5.5, 6: 6.5, 7: 7.5})
    assert out.meta["repeated_steps"] == [4, 5]
    assert any("2 steps logged more than once" in w for w in out.warnings)
    assert out.meta["ended"] == "completed"


def test_log_cut_inside_a_step_line(tmp_path):
    lines = [f"{PREFIX}step:1 - timing_s/gen:3.000 - timing_s/step:5.000",
             f"{PREFIX}step:2 - timing_s/gen:3.100 - timing_s/update_actor:1.2"]
    out = verl.parse(write(tmp_path, "cut.log", lines, newline=False))
    names = seconds(out.events).filter(pl.col("step") == 2)["name"].to_list()
    assert names == ["timing_s/gen"]
    assert out.meta["ended"] == "cut"
    assert any("line 2" in w and "ends inside this step line" in w for w in out.warnings)


def test_crash_after_a_step_is_reported_and_the_rest_kept(tmp_path):
    lines = [
        f"{PREFIX}step:1 - timing_s/gen:3.000 - timing_s/step:5.000",
        "(WorkerDict pid=5) generating...",
        "Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory",
    ]
    out = verl.parse(write(tmp_path, "crash.log", lines))
    assert out.meta["last_step"] == 1 and out.meta["ended"] == "crashed"
    assert any("stopped after step 1" in w and "line 3" in w for w in out.warnings)


def test_interleaved_process_output_is_counted_and_the_rest_read(tmp_path):
    lines = [
        f"{PREFIX}step:1 - timing_s/gen:3.000 - timing_s/values:0.5(WorkerDict pid=8) loading "
        f"shards - timing_s/step:5.000",
        f"{PREFIX}step:2 - timing_s/gen:2.900 - timing_s/step:4.900",
        "(WorkerDict pid=8) INFO 05-22 07:10:01 worker.py:1] step - not a metric line",
    ]
    out = verl.parse(write(tmp_path, "interleaved.log", lines))
    got = dict(seconds(out.events).filter(pl.col("step") == 1).select("name", "s").iter_rows())
    assert got == {"timing_s/gen": 3.0, "timing_s/step": 5.0}
    assert out.meta["n_steps"] == 2
    assert (
        len(out.warnings) == 1
        and "1 unreadable key:value pair" in out.warnings[0]
        and "line 1" in out.warnings[0]
    )


def test_fork_keys_are_kept_by_name(tmp_path):
    lines = [
        f"{PREFIX}step:1 - timing_s/get_batch_rollout_with_filtering:50.25 - "
        f"timing_s/update_actor:9.5 - "
        "timing_s/step:61.0 - rollout/too_bad_sample_ratio:0.125"
    ]
    out = verl.parse(write(tmp_path, "fork.log", lines))
    assert (
        "timing_s/get_batch_rollout_with_filtering" in out.events["name"].cast(pl.String).to_list()
    )
    assert out.metrics["key"].to_list() == ["rollout/too_bad_sample_ratio"]


def test_file_logger_jsonl(tmp_path):
    records = [
        {
            "step": s,
            "data": {
                "timing_s/gen": 10.0 + s,
                "timing_s/step": 20.0 + s,
                "response_length/max": 1024,
                "actor/pg_loss": -0.01,
            },
        }
        for s in (1, 2)
    ]
    path = tmp_path / "exp.jsonl"
    path.write_text(
        "\n".join(json.dumps(r) for r in records) + '\n{"step": 3, "data": {"timing_s/gen": 1\n'
    )
    assert verl.sniff(path.read_bytes(), path) == 90
    out = parsers.parse_file(path)
    validate(out.events)
    assert out.format == "verl-log" and out.meta["logger"] == "file"
    assert dict(
        seconds(out.events).filter(pl.col("step") == 2).select("name", "s").iter_rows()
    ) == {"timing_s/gen": 12.0, "timing_s/step": 22.0}
    assert any("line 3" in w for w in out.warnings)


def test_sniff_claims_verl_logs_only():
    head = PPO_LOG.read_bytes()[:262144]
    assert verl.sniff(head, PPO_LOG) == 90
    assert verl.sniff(CRASHED.read_bytes()[:262144], CRASHED) == 60
    ds = CORPUS / "logs" / "deepspeed-chat" / (
        "step3_actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log"
    )
    assert verl.sniff(ds.read_bytes()[:262144], ds) == 0
