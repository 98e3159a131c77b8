"""Numbers in framework logs past their column's range: dropped or left empty and counted in
``meta["quality"]``, never wrapped and never a polars cast error (issue 10, class 5)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import parsers
from parsers.events import validate
from parsers.logs import areal, deepspeed_chat, nemo_rl, openrlhf, roll, slime, trl, verl

BIG = "99999999999"
"""Past int32: Ray's ``[repeated 99999999999x across cluster]`` overflowed the repeat column."""
HUGE = "9" * 24
"""Past int64 as well."""
NOISE = bytes(b for b in range(1, 256) if b not in b"\n\r").decode("latin-1")
LONG = "x" * 1_000_000
DS_LATENCY = (
    "|E2E latency=2.0s |Gather latency=0.5s (25%) |Generate time=1.0s (50%) |Training time=0.5s "
    "(25%) "
    "|Others=0.0 (0%)|CurSamplesPerSec=1.0 |AvgSamplesPerSec=1.0"
)

CASES = [
    # (parser, file name, lines, steps kept, quality counts)
    (
        verl,
        "verl.log",
        [
            "step:1 - timing_s/gen:1.5 - timing_s/step:2.0 - critic/score:nan",
            f"step:{BIG} - timing_s/step:1.0",
            f"(TaskRunner pid={HUGE}) step:2 - timing_s/step:3.0",
            f"step:3 - timing_s/step:4.0 [repeated {BIG}x across cluster]",
            "step:4 - timing_s/step:inf",
        ],
        [1, 2, 3],
        {"dropped_out_of_range": 3, "dropped_timer": 1, "non_finite_metric": 1},
    ),
    (
        verl,
        "verl.jsonl",
        [
            '{"step": 1, "data": {"timing_s/step": 1.0}}',
            f'{{"step": {HUGE}, "data": {{"timing_s/step": 1.0}}}}',
            '{"step": -1, "data": {"timing_s/step": 1.0}}',
            '{"step": 2.5, "data": {"timing_s/step": 1.0}}',
        ],
        [1],
        {"unreadable_line": 3},
    ),
    (
        openrlhf,
        "openrlhf.log",
        [
            "✨ Global step 1: {'timing/step_total': 2.0, 'x': 1}",
            f"✨ Global step {BIG}: {{'timing/step_total': 1.0}}",
            "✨ Global step 2: {'timing/step_total': float('inf')}",
            f"✨ Global step 3: {{'x': "
            f"{HUGE}0000000000000000000000000000000000000000000000000000000000000000"
            "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
            "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
            "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000}",
        ],
        [1],
        {"dropped_out_of_range": 1, "dropped_timer": 1, "non_finite_metric": 1},
    ),
    (
        nemo_rl,
        "nemo.log",
        [
            "===== Step 1/2 =====",
            "⏱️  Timing:",
            "  • Total step time: 2.00s",
            "  • generation: 1.00s (50.0%)",
            f"===== Step {BIG}/2 =====",
            "⏱️  Timing:",
            "  • Total step time: 3.00s",
        ],
        [1],
        {"dropped_out_of_range": 1},
    ),
    (
        slime,
        "slime.log",
        [
            "perf 1: {'perf/step_time': 2.0, 'perf/train_time': 1.0}",
            f"perf {BIG}: {{'perf/step_time': 1.0}}",
            f"step {HUGE}: {{'train/loss': 1}}",
        ],
        [1],
        {"dropped_out_of_range": 2},
    ),
    (
        areal,
        "areal.log",
        [
            "20240101-00:00:00.000 StatsLogger INFO: Epoch 1/1 Step 1/2 Train step 1/2 done.",
            "│ timeperf/a │ 1.0000e+00 │ loss │ 2.0000e+00 │",
            f"20240101-00:00:05.000 StatsLogger INFO: Epoch 1/1 Step 1/2 Train step {BIG}/2 done.",
            "│ timeperf/a │ 1.0000e+00 │ loss │ 2.0000e+00 │",
            "99991231-23:59:59.000 StatsLogger INFO: Epoch 1/1 Step 2/2 Train step 2/2 done.",
            "│ timeperf/a │ 3.0000e+00 │ loss │ 2.0000e+00 │",
        ],
        [1, 2],
        {"dropped_out_of_range": 1},
    ),
    (
        roll,
        "roll.log",
        [
            'metrics_tag: {"step": 1, "metrics": {"time/gen": 1.0}}',
            f'metrics_tag: {{"step": {BIG}, "metrics": {{"time/gen": 1.0}}}}',
            'metrics_tag: {"step": -3, "metrics": {"time/gen": 1.0}}',
            f"[2024-01-01 00:00:00,000] [x.py (1)] [INFO] [WORKER 0 / {HUGE}][PID {HUGE}] pipeline "
            f"step {BIG} finished",
        ],
        [1],
        {"unreadable_line": 2},
    ),
    (
        deepspeed_chat,
        "ds.log",
        [
            "epoch: 0|step: 0|ppo_ep: 1|act_loss: 1.0|cri_loss: 1.0|unsuper_loss: 0.0",
            DS_LATENCY,
            f"epoch: {BIG}|step: 1|ppo_ep: 1|act_loss: 1.0|cri_loss: 1.0|unsuper_loss: 0.0",
            DS_LATENCY,
            "epoch: 1|step: 2147483647|ppo_ep: 1|act_loss: 1.0|cri_loss: 1.0|unsuper_loss: 0.0",
            DS_LATENCY,
        ],
        [0],
        {"dropped_out_of_range": 2},
    ),
    (
        trl,
        "trl.log",
        [
            "{'loss': 0.5, 'reward': 1.0, 'completions/mean_length': 3.0, 'epoch': 0.1}",
            "{'loss': 1e400, 'reward': 1.0, 'epoch': 0.2}",
            f"{{'profiling/Time taken: A.b': {HUGE}, 'reward': 1.0, 'epoch': 0.3}}",
        ],
        [1, 2, 3],
        {"non_finite_metric": 1, "dropped_timer": 1},
    ),
    (
        trl,
        "trainer_state.json",
        [
            f'{{"log_history": [{{"step": 1, "loss": 1.0}}, {{"step": {HUGE}, "loss": 1.0}}, '
            '{"step": -4, "loss": 1.0}], "global_step": 1}',
        ],
        [1],
        {"unreadable_line": 2},
    ),
]


def checked(source: parsers.ParsedSource) -> parsers.ParsedSource:
    """The invariants of every log result: a valid event table, no negative span, finite values."""
    validate(source.events, where=source.path.name)
    assert (source.events["end_ns"] >= source.events["start_ns"]).all()
    assert source.events["start_ns"].min() is None or source.events["start_ns"].min() >= 0
    assert source.metrics.filter(~pl.col("value").is_finite()).height == 0
    return source


def steps_of(source: parsers.ParsedSource) -> list[int]:
    return sorted(
        set(source.events["step"].drop_nulls()) | set(source.metrics["step"].drop_nulls())
    )


@pytest.mark.parametrize(
    ("module", "name", "lines", "steps", "quality"), CASES, ids=lambda v: str(v)[:20]
)
def test_out_of_range_numbers_are_dropped_and_counted(
    tmp_path: Path, module, name: str, lines: list[str], steps: list[int], quality: dict
) -> None:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    source = checked(module.parse(path))
    assert steps_of(source) == steps
    assert source.meta.get("quality", {}) == quality
    assert source.warnings


TEXT_CASES = [case for case in CASES if not case[1].endswith((".json", ".jsonl"))]
"""The console logs (a JSON file has no place for a stray line)."""


@pytest.mark.parametrize(
    ("module", "name", "lines", "steps", "quality"), TEXT_CASES, ids=lambda v: str(v)[:20]
)
@pytest.mark.parametrize("garbage", ["noise", "long line"])
def test_noise_and_a_1_mb_line_change_nothing(
    tmp_path: Path,
    module,
    name: str,
    lines: list[str],
    steps: list[int],
    quality: dict,
    garbage: str,
) -> None:
    path = tmp_path / name
    path.write_text(
        "\n".join([NOISE if garbage == "noise" else LONG, *lines]) + "\n",
        encoding="latin-1"
        if garbage == "noise" and not any(ord(c) > 255 for c in "".join(lines))
        else "utf-8",
    )
    source = checked(module.parse(path))
    assert steps_of(source) == steps
    assert source.meta.get("quality", {}) == quality


@pytest.mark.parametrize(
    ("module", "name", "lines", "steps", "quality"), CASES, ids=lambda v: str(v)[:20]
)
def test_every_line_alone_is_a_result_or_one_input_error(
    tmp_path: Path, module, name: str, lines: list[str], steps: list[int], quality: dict
) -> None:
    for i, line in enumerate(lines):
        path = tmp_path / f"{i}-{name}"
        path.write_text(line + "\n")
        try:
            checked(module.parse(path))
        except parsers.InputError as exc:
            assert "\n" not in str(exc) and path.name in str(exc)


def test_steps_laid_end_to_end_past_int64_are_left_out_not_wrapped(tmp_path: Path) -> None:
    """300 steps of 31 000 000 s (under a year each) sum past int64 ns; the running sum once
    wrapped into a negative start."""
    path = tmp_path / "long.log"
    path.write_text("".join(f"step:{i} - timing_s/step:31000000\n" for i in range(1, 301)))
    source = checked(verl.parse(path))
    kept = 2**62 // (31_000_000 * 10**9)
    assert source.meta["n_steps"] == kept == 148
    assert source.meta["quality"] == {"dropped_out_of_range": 300 - kept}
    assert source.events["end_ns"].max() == kept * 31_000_000 * 10**9


def test_stamps_outside_the_years_of_real_logs_are_no_time_base(tmp_path: Path) -> None:
    path = tmp_path / "stamps.log"
    path.write_text("1500-01-01 00:00:00 start\nstep:1 - timing_s/step:2.0\n")
    assert checked(verl.parse(path)).events["start_ns"].to_list() == [0]
    path.write_text("2024-01-01 00:00:00 start\nstep:1 - timing_s/step:2.0\n")
    assert checked(verl.parse(path)).events["start_ns"].to_list() == [1704067200 * 10**9]


@pytest.mark.parametrize("levels", [1_200, 40_000])
def test_deep_json_in_a_trainer_state_is_one_error_naming_the_limit(
    tmp_path: Path, levels: int
) -> None:
    """msgspec recursed once per level: RecursionError escaped from trainer_state.json."""
    path = tmp_path / "trainer_state.json"
    deep = "[" * levels + "]" * levels
    path.write_text(f'{{"log_history": [{{"step": 1, "loss": 1.0}}], "distributedInfo": {deep}}}')
    with pytest.raises(parsers.InputError) as caught:
        trl.parse(path)
    message = str(caught.value)
    assert "\n" not in message and path.name in message
    assert f"JSON nesting depth is over rlperf's limit ({levels + 1:,} > 256)" in message


def test_nesting_within_the_limit_in_a_trainer_state_is_read(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    deep = "[" * 200 + "]" * 200
    path.write_text(f'{{"log_history": [{{"step": 3, "loss": 1.0}}], "distributedInfo": {deep}}}')
    assert steps_of(checked(trl.parse(path))) == [3]


def test_an_areal_total_step_count_past_int64_is_left_out_and_counted(tmp_path: Path) -> None:
    """``Train step 2/9223372036854775808``: the total read as null reached int() (TypeError)."""
    path = tmp_path / "areal.log"
    path.write_text(
        "20240101-00:00:00.000 StatsLogger INFO: Epoch 1/1 Step 1/2 Train step 1/3 done.\n"
        "│ timeperf/a │ 1.0000e+00 │ loss │ 2.0000e+00 │\n"
        "20240101-00:00:05.000 StatsLogger INFO: Epoch 1/1 Step 2/2 Train step "
        "2/9223372036854775808 done.\n"
        "│ timeperf/a │ 3.0000e+00 │ loss │ 2.0000e+00 │\n"
    )
    source = checked(areal.parse(path))
    assert steps_of(source) == [1, 2]
    assert source.meta["total_steps"] == 3
    assert source.meta["quality"] == {"dropped_out_of_range": 1}
