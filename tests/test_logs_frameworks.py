"""Logs of OpenRLHF, TRL, NeMo-RL, slime, AReaL, ROLL and DeepSpeed-Chat.

DeepSpeed-Chat has a real log in the corpus; the others have small fixtures under
``tests/fixtures/logs/`` written by us from the grammars in docs/logs.md, each carrying
its framework's version traps.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

import parsers
from parsers.discover import read_head, sniff
from parsers.events import validate
from parsers.logs import areal, deepspeed_chat, nemo_rl, openrlhf, roll, slime, trl, verl
from parsers.logs.lines import lines_frame
from parsers.logs.values import python_literal

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
DS_LOG = CORPUS / "logs" / "deepspeed-chat" / (
    "step3_actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log"
)
LOG_MODULES = (verl, openrlhf, trl, nemo_rl, slime, areal, roll, deepspeed_chat)


def durations(out: parsers.ParsedSource, step: int) -> dict[str, float]:
    ev = out.events.filter(pl.col("step") == step)
    return {
        n: (e - s) / 1e9
        for n, s, e in ev.select(pl.col("name").cast(pl.String), "start_ns", "end_ns").iter_rows()
    }


def metrics(out: parsers.ParsedSource, step: int) -> dict[str, float]:
    return dict(out.metrics.filter(pl.col("step") == step).select("key", "value").iter_rows())


def parse(name: str) -> parsers.ParsedSource:
    out = parsers.parse_file(FIXTURES / name)
    validate(out.events)
    return out


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("openrlhf_v0.10_sync.log", "openrlhf-log"), ("openrlhf_async.log", "openrlhf-log"),
        ("openrlhf_v0.5_episode.log", "openrlhf-log"), ("trl_grpo_trainer_state.json", "trl-log"),
        ("trl_grpo_console.log", "trl-log"), ("nemo_rl_grpo_sync.log", "nemo-rl-log"),
        ("nemo_rl_grpo_async.log", "nemo-rl-log"), ("slime_perf.log", "slime-log"),
        ("areal_stats.log", "areal-log"), ("roll_rlvr.log", "roll-log"),
        ("deepspeed_chat_now.log", "deepspeed-chat-log"),
    ],
)
def test_each_fixture_is_sniffed_by_content(name, fmt):
    assert sniff(FIXTURES / name) == fmt


def test_log_sniffers_leave_other_corpus_files_alone():
    others = [
        p for p in CORPUS.rglob("*") if p.is_file() and p.suffix != ".log" and p.name != "README.md"
    ]
    assert len(others) > 15
    for path in others:
        head = read_head(path)
        assert all(m.sniff(head, path) == 0 for m in LOG_MODULES), path


# --- OpenRLHF --------------------------------------------------------------------------------


def test_openrlhf_global_step_dicts_with_timing_keys():
    out = parse("openrlhf_v0.10_sync.log")
    assert out.meta["trainer"] == "sync" and out.meta["has_timing_keys"] is True
    assert durations(out, 1) == pytest.approx({
        "timing/generation": 41.27, "timing/make_experience": 12.406, "timing/ppo_train": 25.731,
        "timing/broadcast": 3.902, "timing/step_total": 83.309, "Experience making": 12.406})
    assert durations(out, 3)["Evaluation"] == pytest.approx(31.25)
    assert metrics(out, 2)["response_length"] == 398.25 and metrics(out, 2)["actor_lr"] == 1e-06
    assert out.meta["weight_sync"] == "nccl broadcast (process group 'openrlhf')"
    assert out.meta["n_steps"] == 3


def test_openrlhf_dict_cut_by_another_process_is_reported():
    out = parse("openrlhf_v0.10_sync.log")
    assert len(out.warnings) == 1
    assert "1 unreadable line" in out.warnings[0] and "line 14" in out.warnings[0]
    assert 4 not in out.events["step"].to_list()


def test_openrlhf_async_trainer_prints_no_sparkle():
    out = parse("openrlhf_async.log")
    assert out.meta["trainer"] == "async" and out.meta["execution"] == "async"
    total = durations(out, 1)["timing/step_total"]
    assert total == pytest.approx(52.337)
    parts = sum(v for k, v in durations(out, 1).items() if k != "timing/step_total")
    assert parts > total


def test_openrlhf_old_episode_bar_postfix_and_experience_lines():
    out = parse("openrlhf_v0.5_episode.log")
    assert out.warnings == []
    assert [durations(out, s) for s in (1, 2, 3)] == [
        {"Experience making": 4.5}, {"Experience making": 5.5}, {"Experience making": 6.5}]
    assert metrics(out, 1) == pytest.approx(
        {
            "policy_loss": 0.0432,
            "kl": 0.0387,
            "reward": 0.827,
            "return": 0.767,
            "response_length": 164.0,
            "total_length": 200.0,
            "critic_loss": 0.0235,
            "values": 0.614,
            "tqdm/seconds_per_step": 9.70,
        }
    )
    assert metrics(out, 3)["tqdm/seconds_per_step"] == pytest.approx(9.61)


# --- TRL -------------------------------------------------------------------------------------


def test_trl_trainer_state_log_history():
    out = parse("trl_grpo_trainer_state.json")
    assert sorted(set(out.events["step"].to_list())) == [10, 20, 30]
    step = durations(out, 20)
    assert step["profiling/Time taken: GRPOTrainer.vLLM.generate"] == pytest.approx(10.44)
    assert step["profiling/Time taken: GRPOTrainer.sync_weights"] == pytest.approx(1.39)
    assert len(step) == 7
    assert metrics(out, 20)["completions/clipped_ratio"] == 0.1875
    assert out.meta["train_runtime"] == 612.3 and out.meta["logging_steps"] == 10
    assert "train_runtime" not in set(out.metrics["key"].to_list())


def test_trl_console_dicts_take_the_bars_step_and_a_cut_dict_reported():
    out = parse("trl_grpo_console.log")
    assert durations(out, 2)[
        "profiling/Time taken: GRPOTrainer._move_model_to_vllm"
    ] == pytest.approx(2.31)
    assert durations(out, 2)[
        "profiling/Time taken: GRPOTrainer.transformers.generate"
    ] == pytest.approx(16.2)
    assert out.meta["step_numbering"].startswith("trainer global_step")
    assert durations(out, 2)["progress/s_per_it"] == pytest.approx(16.4)
    assert any("line 7" in w and "cut short" in w for w in out.warnings)


# --- NeMo-RL ---------------------------------------------------------------------------------


def test_nemo_rl_timing_blocks():
    out = parse("nemo_rl_grpo_sync.log")
    step = durations(out, 2)
    assert step["Total step time"] == pytest.approx(101.88)
    assert step["generation"] == pytest.approx(66.85)
    assert step["prepare_for_generation/transfer_and_update_weights"] == pytest.approx(2.94)
    assert step["checkpointing"] == 0.0
    assert metrics(out, 1) == pytest.approx(
        {
            "Loss": 0.0143,
            "Generation KL Error": 0.0011,
            "Avg Reward": 0.3125,
            "Mean Generation Length": 612.425,
            "E2E (Tokens/sec/gpu)": 1721.35,
            "Policy Training (Tokens/sec/gpu)": 8201.10,
        }
    )
    assert out.meta["total_steps"] == 20
    assert out.meta["ended"] == "crashed" and any("stopped after step 2" in w for w in out.warnings)


def test_nemo_rl_async_labels():
    out = parse("nemo_rl_grpo_async.log")
    assert out.meta["execution"] == "async"
    assert durations(out, 4)["exposed_generation"] == pytest.approx(4.11)
    assert durations(out, 4)["weight_sync"] == pytest.approx(2.75)
    assert metrics(out, 5)["Avg Trajectory Age"] == 1.5 and metrics(out, 5)["Buffer Size"] == 2.0


# --- slime -----------------------------------------------------------------------------------


def test_slime_two_perf_lines_merge_and_numpy_values():
    out = parse("slime_perf.log")
    assert out.warnings == []
    step = durations(out, 0)
    assert step["perf/rollout_time"] == pytest.approx(62.113)
    assert step["perf/step_time"] == pytest.approx(100.93)
    assert step["perf/train_wait_time"] + step["perf/train_time"] == pytest.approx(
        step["perf/step_time"]
    )
    m = metrics(out, 0)
    assert m["perf/tokens_per_gpu_per_sec"] == 2211.4 and m["perf/actor_train_tflops"] == 148.2
    assert m["train/loss"] == pytest.approx(-0.022)
    assert out.meta["train_steps_per_rollout"] == 2.0


def test_slime_steps_end_at_the_trainer_perf_stamp():
    out = parse("slime_perf.log")
    end = datetime(2025, 8, 21, 10, 3, 16, tzinfo=timezone.utc)
    start = out.events.filter(pl.col("step") == 1)["start_ns"].unique()
    assert start.to_list() == [int(end.timestamp()) * 1_000_000_000 - 97_024_000_000]


# --- AReaL -----------------------------------------------------------------------------------


def test_areal_fancy_grid_tables():
    out = parse("areal_stats.log")
    assert out.warnings == []
    assert durations(out, 2) == pytest.approx(
        {
            "timeperf/rollout": 86.55,
            "timeperf/recompute_logp": 6.11,
            "timeperf/ref_logp": 5.93,
            "timeperf/compute_advantage": 0.29,
            "timeperf/train_step": 31.02,
            "timeperf/update_weights": 4.20,
            "timeperf/save": 11.4,
        }
    )
    m = metrics(out, 1)
    assert (
        m["ppo_actor/seq_len/max"] == 8192.0
        and m["version_stats/sample_staleness_theta_max"] == 1.0
    )
    assert not any(k.endswith("__count") for k in m)
    end = datetime(2025, 5, 21, 14, 4, 19, tzinfo=timezone.utc)
    assert out.events.filter(pl.col("step") == 2)["start_ns"][0] == (
        int(end.timestamp()) * 1_000_000_000
        + 90_000_000
        - round(sum(durations(out, 2).values()) * 1e9)
    )


# --- ROLL ------------------------------------------------------------------------------------


def test_roll_metrics_tag_and_the_lagging_step_total():
    out = parse("roll_rlvr.log")
    assert durations(out, 0)["time/step_total"] == pytest.approx(129.446)
    assert durations(out, 1)["time/step_total"] == pytest.approx(141.52)
    assert "time/step_total" not in durations(out, 2)
    assert durations(out, 1)["math/time/reward_postprocess"] == pytest.approx(0.22)
    assert "system/time/step_train_mean" in metrics(out, 1)
    assert (
        out.meta["workers"] == ["DRIVER", "actor_train"]
        and out.meta["worker_world_sizes"]["actor_train"] == 8
    )
    assert any("line 13" in w for w in out.warnings)
    start = out.events.filter(pl.col("step") == 0)["start_ns"][0]
    assert (
        start
        == int(datetime(2025, 8, 19, 9, 10, tzinfo=timezone.utc).timestamp()) * 1_000_000_000
        + 1_000_000
    )


# --- DeepSpeed-Chat --------------------------------------------------------------------------


def test_deepspeed_chat_2023_real_log():
    out = parsers.parse_file(DS_LOG)
    validate(out.events)
    assert out.format == "deepspeed-chat-log"
    assert out.meta["n_steps"] == 477
    assert sorted(set(out.events["step"].to_list())) == list(range(476))
    assert durations(out, 0) == pytest.approx(
        {
            "E2E latency": 7.99,
            "Gather latency": 0.0,
            "Generate time": 5.26,
            "Training time": 2.52,
            "Others": 0.22,
        }
    )
    assert durations(out, 475)["E2E latency"] == pytest.approx(3.85)
    assert metrics(out, 476) == pytest.approx(
        {
            "act_loss": -0.03875732421875,
            "cri_loss": -0.0131072998046875,
            "unsuper_loss": 0.0,
            "average reward score": 4.3828125,
        }
    )
    assert metrics(out, 0)["CurSamplesPerSec"] == 8.01
    assert out.meta["hybrid_engine"] is True and out.meta["world_size"] == 16
    assert out.warnings == [
        f"{DS_LOG.name}: 1 step has a loss line but no latency line (the log ends before it)"]


def test_deepspeed_chat_current_grammar():
    out = parse("deepspeed_chat_now.log")
    assert durations(out, 1) == pytest.approx(
        {"End-to-End => Latency": 5.88, "Generation => Latency": 3.81, "Training => Latency": 2.07}
    )
    m = metrics(out, 0)
    assert m["Generation Per-token Latency"] == pytest.approx(0.0157)
    assert m["Actor Loss"] == 0.21 and m["ema reward score"] == 0.0
    assert out.meta["actor_model"] == "facebook/opt-1.3b"


# --- shared helpers --------------------------------------------------------------------------


def test_ray_prefix_ansi_and_repeat_suffix_are_split_off():
    lines = lines_frame(
        "\x1b[36m(WorkerDict pid=1609, ip=172.26.135.50)\x1b[0m loading\x1b[32m [repeated 16x "
        "across cluster]\x1b[0m\n"
        "plain\r\x1b[36m(TaskRunner pid=7)\x1b[0m step:1 - a:1\n"
    )
    assert lines.select("line", "text", "actor", "pid", "ip", "repeat").rows() == [
        (1, "loading", "WorkerDict", 1609, "172.26.135.50", 16),
        (2, "plain", None, None, None, None),
        (2, "step:1 - a:1", "TaskRunner", 7, None, None),
    ]


def test_python_literal_accepts_numpy_and_special_floats():
    value = python_literal(
        "{'a': np.float64(0.5), 'b': nan, 'c': -inf, 'd': np.int64(3), 'e': 'x nan'}"
    )
    assert value["a"] == 0.5 and value["b"] != value["b"] and value["c"] == float("-inf")
    assert value["d"] == 3 and value["e"] == "x nan"
    with pytest.raises((ValueError, SyntaxError)):
        python_literal("{'a': __import__('os')}")
