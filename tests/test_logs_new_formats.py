"""Logs nobody parsed before: a verl run that stops before its first step (the TPU fork of the
corpus), TRL console output with its tqdm bar and TRL ≥ 0.19 dicts, TRL's trainer_state.json
by content, verl ≥ 0.5 agent-loop and fork timers no rule maps (named in every report format,
with the --rules lines that map them), verl with a critic, verl on Ascend NPUs."""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path

import polars as pl
import pytest
from rich.console import Console

import analyzer
import parsers
from analyzer.model.options import Options
from analyzer.report import html as html_report
from analyzer.report import json as json_report
from analyzer.report import markdown, text
from parsers.events import validate
from parsers.logs import progress, trl, verl
from parsers.logs.lines import lines_frame

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
TPU_LOG = CORPUS / "logs" / "verl-tpu" / "chrisytz-verl_ppo_xla-tpu_verl_demo.log"
PREFIX = "\x1b[36m(TaskRunner pid=14640)\x1b[0m "
WORKER = "\x1b[36m(WorkerDict pid=2001)\x1b[0m "


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def reports(paths: list[Path]) -> dict[str, str]:
    """The text, Markdown, HTML and JSON reports of ``paths``, each as one line of plain text
    (whitespace folded, HTML unescaped), so a sentence wrapped by the terminal still matches."""
    run = analyzer.load(paths, use_cache=False)
    console = Console(record=True, width=400, file=io.StringIO())
    text.render(run, console)
    rendered = {
        "text": console.export_text(),
        "md": markdown.render(run),
        "html": html.unescape(re.sub(r"<[^>]+>", " ", html_report.render(run))),
        "json": json_report.render(run),
    }
    return {fmt: " ".join(body.split()) for fmt, body in rendered.items()}


def seconds(out: parsers.ParsedSource) -> dict[tuple[int, str], float]:
    return {
        (step, name): (end - start) / 1e9
        for step, name, start, end in out.events.select(
            "step", pl.col("name").cast(pl.String), "start_ns", "end_ns"
        ).iter_rows()
    }


def metrics(out: parsers.ParsedSource) -> dict[tuple[int, str], float]:
    return {(s, k): v for s, k, v in out.metrics.select("step", "key", "value").iter_rows()}


# --- a verl run that stops before its first step -------------------------------------------


@pytest.fixture(scope="module")
def tpu() -> parsers.ParsedSource:
    return parsers.parse_file(TPU_LOG)


def test_tpu_log_records_no_step_and_says_where_it_stopped(tpu):
    assert tpu.format == "verl-log" and tpu.events.height == 0 and tpu.meta["n_steps"] == 0
    assert tpu.meta["ended"] == "before_first_step"
    where = tpu.meta["stopped_at"]
    assert where["progress"] == {
        "line": 7618, "label": "Training Progress", "n": 0, "total": 58, "elapsed_s": 436.0
    }
    assert where["line"] == 7178 and where["actor"] == "FusedWorker_actor_rollout_critic"
    assert where["text"].startswith("kwargs: {'n': 1, 'logprobs': 0, 'max_tokens': 128")
    assert where["phase"] == "the first step's rollout"
    assert "traceback_line" not in where
    assert tpu.warnings == [
        f"{TPU_LOG.name}: no step recorded: stopped at Training Progress 0/58 after 07:16 in the "
        "training loop, during the first step's rollout (no traceback: the log just ends); last "
        f"meaningful line 7178 (FusedWorker_actor_rollout_critic): {where['text']}"
    ]


def test_tpu_log_config_read_past_interleaved_stderr_and_device_told(tpu):
    config = tpu.meta["config"]
    assert config["actor_rollout_ref"]["actor"]["strategy"] == "xla"
    assert config["data"]["return_raw_input_ids"] is False
    assert (tpu.meta["world_size"], tpu.meta["rollout_engine"], tpu.meta["adv_estimator"]) == (
        1, "vllm", "gae"
    )
    assert (tpu.meta["device"], tpu.meta["device_name"], tpu.meta["device_evidence"]) == (
        "tpu", "TPU (XLA)", "config trainer.device"
    )


def test_tpu_log_no_step_in_every_report_format():
    shown = reports([TPU_LOG])
    said = (
        f"{TPU_LOG.name}: the run recorded no step — stopped at Training Progress 0/58 after 07:16 "
        "in the training loop, during the first step's rollout"
    )
    for fmt in ("text", "md", "html"):
        assert said in shown[fmt], fmt
        assert "last meaningful line 7178 (FusedWorker_actor_rollout_critic)" in shown[fmt], fmt
        assert "device: TPU (XLA)" in shown[fmt], fmt
    runs = json.loads(shown["json"])["log_runs"]
    assert [(r["file"], r["steps"], r["ended"], r["device"]) for r in runs] == [
        (TPU_LOG.name, 0, "before_first_step", "TPU (XLA)")
    ]
    assert runs[0]["stopped_at"].startswith("stopped at Training Progress 0/58 after 07:16")


def test_hang_in_a_later_phase_and_a_long_elapsed_clock(tmp_path):
    body = "\n".join([
        f"{PREFIX}Training from scratch",
        "Training Progress:   0%|          | 0/10 [00:00<?, ?it/s]",
        f"{WORKER}kwargs: {{'n': 4, 'max_tokens': 512}}",
        f"{WORKER}update_actor: micro batch 1/8",
        "\x1b[36m(pid=)\x1b[0m I0101 10:00:00.000001  4242 tpu_compiler.cc:12] compiling",
        "\x1b[36m(pid=)\x1b[0m 8 10:00:00.000002  4242 tpu_compiler.cc:12] compiling",
        "",
        "Training Progress:   0%|          | 0/10 [1:05:07<?, ?it/s]",
    ]) + "\n"
    out = verl.parse(write(tmp_path, "hang.log", body))
    where = out.meta["stopped_at"]
    assert where["phase"] == "the first step's actor update"
    assert (where["line"], where["actor"], where["text"]) == (
        4, "WorkerDict", "update_actor: micro batch 1/8"
    )
    assert where["progress"]["elapsed_s"] == 3907.0
    assert "stopped at Training Progress 0/10 after 1:05:07 in the training loop" in (
        out.warnings[0]
    )


def test_stop_before_the_training_loop_and_an_empty_log(tmp_path):
    out = verl.parse(write(tmp_path, "setup.log", f"{WORKER}loading checkpoint shards\n"))
    assert out.meta["stopped_at"]["phase"] == "setup, before the training loop started"
    assert out.warnings == [
        "setup.log: no step recorded: stopped during setup, before the training loop started (no "
        "traceback: the log just ends); last meaningful line 1 (WorkerDict): loading checkpoint "
        "shards"
    ]
    empty = verl.parse(write(tmp_path, "empty.log", "\n\n"))
    assert empty.warnings == ["empty.log: no step line found"]
    assert empty.meta["stopped_at"]["description"].startswith("the log holds no meaningful line")


def test_ray_prefix_without_a_pid_is_stripped():
    lines = lines_frame(
        "\x1b[36m(pid=)\x1b[0m I0718 19:14:23.746638  310893 compiler.cc:3664] x\n"
        "(WorkerDict pid=12, ip=10.0.0.2) y\n"
    )
    assert lines.select("text", "actor", "pid", "ip").rows() == [
        ("I0718 19:14:23.746638  310893 compiler.cc:3664] x", None, None, None),
        ("y", "WorkerDict", 12, "10.0.0.2"),
    ]


def test_printed_config_with_the_processes_own_warning_inside(tmp_path):
    body = "\n".join([
        f"{PREFIX}{{'actor_rollout_ref': {{'rollout': {{'name': 'vllm', 'n': 5}}}},",
        f"{PREFIX}DeprecationWarning: `ray.state.available_resources_per_node` is private",
        f"{PREFIX} 'trainer': {{'nnodes': 2, 'n_gpus_per_node': 8}}}}",
        f"{PREFIX}step:1 - timing_s/gen:1.5 - timing_s/step:2.0",
    ]) + "\n"
    out = verl.parse(write(tmp_path, "cfg.log", body))
    assert (out.meta["world_size"], out.meta["rollout_n"], out.meta["rollout_engine"]) == (
        16, 5, "vllm"
    )


# --- TRL console: tqdm bar and TRL >= 0.19 dicts -------------------------------------------


def trl_values(step: int, **extra: object) -> dict[str, object]:
    return {
        "loss": 0.0012 * step, "grad_norm": 0.41, "learning_rate": 1e-06,
        "num_tokens": 28311.0 * step, "completions/mean_length": 200.0 + step,
        "completions/min_length": 37.0, "completions/max_length": 512.0,
        "completions/clipped_ratio": 0.125, "completions/mean_terminated_length": 180.5,
        "rewards/accuracy_reward/mean": 0.4, "rewards/accuracy_reward/std": 0.49, "reward": 0.4,
        "reward_std": 0.33, "frac_reward_zero_std": 0.25, "kl": 0.0, "entropy": 0.41,
        "clip_ratio/low_mean": 0.0, "clip_ratio/high_max": 0.0, **extra, "epoch": 0.01 * step,
    }


def trl_dict(step: int, **extra: object) -> str:
    """The dict as the HF Trainer prints it (``str(logs)``: Python syntax, single quotes)."""
    return repr(trl_values(step, **extra))


def bar(n: int, clock: str, rate: str) -> str:
    pct = round(100 * n / 3)
    return f"{pct:3d}%|███       | {n}/3 [{clock}<00:39, {rate}]"


CLEAR = "\r" + " " * 60 + "\r"


def trl_console(**extra: object) -> str:
    """What ``python train_grpo.py 2>&1 | tee train.log`` leaves: a dataset map bar, the training
    bar redrawn with ``\\r``, dicts written by tqdm.write (bar cleared, dict, bar redrawn), the
    third dict printed straight after a redraw, the final summary dict."""
    return (
        "Map: 100%|██████████| 7473/7473 [00:00<00:00, 21345.67 examples/s]\n"
        "\r  0%|          | 0/3 [00:00<?, ?it/s]"
        f"\r{bar(1, '00:41', '41.02s/it')}{CLEAR}{trl_dict(1, **extra)}\n"
        f"\r{bar(1, '00:41', '41.02s/it')}\r{bar(2, '01:19', '39.51s/it')}{CLEAR}"
        f"{trl_dict(2, **extra)}\n"
        f"\r{bar(2, '01:19', '39.51s/it')}\r{bar(3, '01:57', '38.77s/it')}{trl_dict(3, **extra)}\n"
        f"\r{bar(3, '01:57', '38.77s/it')}{CLEAR}{{'train_runtime': 117.9, "
        "'train_samples_per_second': 0.407, 'train_steps_per_second': 0.025, "
        "'train_loss': 0.0024, 'epoch': 0.03}\n"
        f"\r{bar(3, '01:57', '39.30s/it')}\n"
    )


def test_trl_console_steps_from_the_bar_and_its_seconds_per_step(tmp_path):
    path = write(tmp_path, "train.log", trl_console())
    assert trl.sniff(path.read_bytes(), path) == 70
    out = parsers.parse_file(path)
    validate(out.events)
    assert out.format == "trl-log" and out.warnings == []
    assert out.meta["step_numbering"].startswith("trainer global_step")
    assert seconds(out) == {
        (1, "progress/s_per_it"): 41.02, (2, "progress/s_per_it"): 39.51,
        (3, "progress/s_per_it"): 38.77,
    }
    m = metrics(out)
    assert [m[(s, "progress/elapsed_s")] for s in (1, 2, 3)] == [41.0, 79.0, 117.0]
    assert [m[(s, "completions/mean_length")] for s in (1, 2, 3)] == [201.0, 202.0, 203.0]
    assert m[(2, "rewards/accuracy_reward/std")] == 0.49
    assert out.meta["train_runtime"] == 117.9 and out.meta["n_steps"] == 3


def test_trl_console_bar_time_is_the_step_total_in_the_log_analysis(tmp_path):
    run = analyzer.load([write(tmp_path, "train.log", trl_console())], use_cache=False)
    stats = run.log_stats.row(0, named=True)
    assert (stats["n_steps"], stats["max_s"]) == (3, 41.02)
    assert stats["median_s"] == pytest.approx(39.51, abs=1e-9)
    assert run.log_steps["total_from"].to_list() == ["progress/s_per_it"] * 3
    tail = run.log_long_tail.select("step", "mean_len", "max_len").rows()
    assert tail == [(1, 201.0, 512.0), (2, 202.0, 512.0), (3, 203.0, 512.0)]


def test_trl_console_with_step_time_keeps_the_bar_rate_as_a_metric(tmp_path):
    out = parsers.parse_file(write(tmp_path, "v1.log", trl_console(step_time=40.0)))
    assert {name for _, name in seconds(out)} == {"step_time"}
    assert metrics(out)[(3, "progress/bar_s_per_it")] == 38.77


def test_trl_console_lagging_bar_falls_back_to_order(tmp_path):
    body = (
        f"\r{bar(1, '00:41', '41.02s/it')}{CLEAR}{trl_dict(1)}\n"
        f"\r{bar(1, '00:41', '41.02s/it')}{CLEAR}{trl_dict(2)}\n"
        f"\r{bar(1, '00:41', '41.02s/it')}\n"
    )
    out = parsers.parse_file(write(tmp_path, "lag.log", body))
    assert out.meta["step_numbering"].startswith("ordinal")
    assert sorted(set(out.metrics["step"].to_list())) == [1, 2]
    assert out.events.height == 0
    assert any("do not number the console dicts one to one" in w for w in out.warnings)


def test_trl_console_other_bars_never_number_the_dicts(tmp_path):
    body = (
        "Loading weights: 100%|██████████| 21/21 [00:00<00:00, 900.10it/s]\n"
        f"{trl_dict(1)}\n{trl_dict(2)}\n"
    )
    out = parsers.parse_file(write(tmp_path, "nobar.log", body))
    assert out.meta["step_numbering"].startswith("ordinal") and out.events.height == 0
    assert out.warnings == [
        "nobar.log: console dicts carry no step number: logging steps are numbered 1, 2, … in order"
    ]
    assert metrics(out)[(2, "completions/mean_length")] == 202.0


def test_tqdm_rates_in_both_units():
    drawn = progress.bars(lines_frame(
        " 50%|█████     | 5/10 [00:02<00:02,  2.50it/s]\n"
        "Processed prompts:  10%|█| 1/10 [01:02:03<?, 12.5s/it, est. speed input: 3.1 toks/s]\n"
        " 60%|██████    | 6/10 [00:02<00:02, ?it/s]\n"
    ))
    assert drawn.select("label", "n", "total", "elapsed_s", "s_per_it").rows() == [
        (None, 5, 10, 2.0, 0.4), ("Processed prompts", 1, 10, 3723.0, 12.5),
        (None, 6, 10, 2.0, None),
    ]


# --- TRL trainer_state.json, told by its content ---------------------------------------------


def test_trl_trainer_state_under_another_name(tmp_path):
    history = [
        {**trl_values(s), "step": 10 * s} for s in (1, 2)
    ] + [{"epoch": 0.02, "step": 20, "total_flos": 0.0, "train_loss": 0.0018,
          "train_runtime": 401.5, "train_samples_per_second": 0.8, "train_steps_per_second": 0.05}]
    state = {"best_global_step": None, "epoch": 0.02, "eval_steps": 500, "global_step": 20,
             "is_hyper_param_search": False, "log_history": history, "logging_steps": 10,
             "max_steps": 20, "num_train_epochs": 1, "save_steps": 20, "train_batch_size": 8}
    path = write(tmp_path, "run-0042.json", json.dumps(state, indent=2, sort_keys=True))
    out = parsers.parse_file(path)
    assert out.format == "trl-log" and out.meta["step_numbering"] == "trainer global_step"
    m = metrics(out)
    assert [m[(s, "completions/mean_length")] for s in (10, 20)] == [201.0, 202.0]
    assert (out.meta["first_step"], out.meta["last_step"], out.meta["n_steps"]) == (10, 20, 2)
    assert out.meta["train_runtime"] == 401.5 and out.meta["logging_steps"] == 10
    assert out.events.height == 0


# --- verl >= 0.5: agent-loop counts, unmapped timers in every format -------------------------


def verl_05_step(step: int, filt: float) -> str:
    return PREFIX + " - ".join([
        f"step:{step}", "actor/pg_loss:np.float64(-0.0123)", "response_length/mean:424.5",
        "response_length/max:1024.0", "timing_s/agent_loop/num_preempted/min:-1",
        "timing_s/agent_loop/num_preempted/max:-1",
        "timing_s/agent_loop/generate_sequences/min:1.597659296123311",
        "timing_s/agent_loop/generate_sequences/max:20.618110499111935",
        "timing_s/agent_loop/tool_calls/mean:0.0", "timing_s/agent_loop/slowest/prompt_length:54",
        "timing_s/gen:24.533394969068468", f"timing_s/filter:{filt}",
        "timing_s/fork_rerank_time:0.5", "timing_s/reward:3.863382153213024e-05",
        "timing_s/old_log_prob:13.635552056133747", "timing_s/ref:12.547897297888994",
        "timing_s/adv:0.17872913694009185", "timing_s/update_actor:35.83383133285679",
        "timing_s/update_weights:5.458046867046505", "timing_s/step:95.0",
    ])


@pytest.fixture()
def verl_05(tmp_path) -> Path:
    steps = [verl_05_step(1, 1.25), verl_05_step(2, 0.75)]
    return write(tmp_path, "verl05.log", "\n".join(steps) + "\n")


def test_agent_loop_counts_are_metrics_not_durations(verl_05):
    out = parsers.parse_file(verl_05)
    assert out.warnings == [] and "quality" not in out.meta
    m = metrics(out)
    assert m[(1, "timing_s/agent_loop/num_preempted/min")] == -1.0
    assert m[(2, "timing_s/agent_loop/slowest/prompt_length")] == 54.0
    assert m[(1, "timing_s/agent_loop/tool_calls/mean")] == 0.0
    timed = seconds(out)
    assert timed[(1, "timing_s/agent_loop/generate_sequences/max")] == pytest.approx(20.6181101)
    assert timed[(2, "timing_s/filter")] == 0.75
    assert (1, "timing_s/agent_loop/num_preempted/min") not in timed


def test_unmapped_timers_named_with_their_time_in_every_format(verl_05):
    shown = reports([verl_05])
    for fmt in ("text", "md", "html"):
        body = shown[fmt].replace("\\\\", "\\")
        assert "Unmapped log timers (no rule of the verl profile maps them" in body, fmt
        assert "timing_s/filter 2.000 s over 2 steps (median 1.000 s)" in body, fmt
        assert "timing_s/fork_rerank_time 1.000 s over 2 steps (median 0.500 s)" in body, fmt
        assert "rlperf analyze --rules FILE" in body, fmt
        assert (
            "rules = [{match = '^timing_s/filter$', source = \"log\", stage = \"rollout\", "
            "relation = \"stage\"}, {match = '^timing_s/fork_rerank_time$', source = \"log\", "
            "stage = \"other\", relation = \"stage\"}]"
        ) in body, fmt
        assert "timing_s/agent_loop/generate_sequences" not in body.split("Unmapped")[1], fmt
    unmapped = json.loads(shown["json"])["log_unclassified"]
    assert [(u["name"], u["seconds"], u["n_steps"], u["stage_guess"]) for u in unmapped] == [
        ("timing_s/filter", 2.0, 2, "rollout"), ("timing_s/fork_rerank_time", 1.0, 2, "other")
    ]


def test_the_printed_rules_map_the_timers(verl_05, tmp_path):
    md = reports([verl_05])["md"].replace("\\\\", "\\")
    profile_line = re.search(r'profile = \{name = "verl"\}', md).group(0)
    rules_line = re.search(r"rules = \[\{.*?\}\]", md).group(0)
    rules = write(tmp_path, "rules.toml", f"{profile_line}\n{rules_line}\n")
    run = analyzer.load([verl_05], use_cache=False, options=Options(rules=str(rules)))
    assert run.log_unclassified.height == 0
    stages = run.log_stages.filter(pl.col("step") == 1)
    rollout = stages.filter(pl.col("stage") == "rollout").row(0, named=True)
    assert rollout["seconds"] == pytest.approx(24.533394969068468 + 1.25)
    assert "timing_s/filter" in rollout["keys"]
    other = stages.filter(pl.col("label") == "other")["seconds"].sum()
    assert other == pytest.approx(95.0 - 24.533394969068468 - 1.25 - 0.5 - 3.863382153213024e-05
                                  - 13.635552056133747 - 12.547897297888994 - 0.17872913694009185
                                  - 35.83383133285679 - 5.458046867046505 + 0.5)


# --- verl with a critic; verl on Ascend NPUs --------------------------------------------------


def test_critic_timers_map_to_the_critic_stages(tmp_path):
    lines = [
        PREFIX + " - ".join([
            f"step:{s}", "timing_s/gen:10.000", "timing_s/reward:1.000",
            "timing_s/old_log_prob:2.000", f"timing_s/values:{3 + s}.000", "timing_s/adv:0.500",
            f"timing_s/update_critic:{4 * s}.000",
            "timing_s/update_actor:5.000", f"timing_s/step:{26 + 5 * s}.000",
            "critic/vf_loss:0.123", "critic/vpred_mean:0.456", "critic/values/mean:0.789",
        ])
        for s in (1, 2)
    ]
    run = analyzer.load([write(tmp_path, "ppo.log", "\n".join(lines))], use_cache=False)
    stages = {
        (step, stage): secs
        for step, stage, secs in run.log_stages.select("step", "stage", "seconds").iter_rows()
    }
    assert (stages[(1, "values")], stages[(1, "critic_update")]) == (4.0, 4.0)
    assert (stages[(2, "values")], stages[(2, "critic_update")]) == (5.0, 8.0)
    assert stages[(1, "other")] == pytest.approx(31.0 - 26.5)
    m = dict(run.metrics.filter(pl.col("step") == 2).select("key", "value").iter_rows())
    assert (m["critic/vf_loss"], m["critic/vpred_mean"]) == (0.123, 0.456)
    assert run.log_unclassified.height == 0


def npu_config_lines() -> list[str]:
    return [
        f"{PREFIX}{{'actor_rollout_ref': {{'actor': {{'strategy': 'fsdp'}},",
        f"{PREFIX}                       'rollout': {{'name': 'vllm', 'n': 8}}}},",
        f"{PREFIX} 'trainer': {{'device': 'npu', 'nnodes': 1, 'n_gpus_per_node': 16}}}}",
    ]


def test_ascend_npu_run_from_its_config(tmp_path):
    lines = [
        *npu_config_lines(),
        f"{WORKER}/usr/local/python3.10/site-packages/torch_npu/utils/collect_env.py:58: "
        "UserWarning: The /usr/local/Ascend/ascend-toolkit/latest owner does not match",
        f"{WORKER}[W compiler_depend.ts:133] Warning: Device do not support double dtype now",
        f"{PREFIX}step:1 - timing_s/gen:31.5 - timing_s/update_actor:20.25 - timing_s/step:55.0",
    ]
    path = write(tmp_path, "npu.log", "\n".join(lines) + "\n")
    out = parsers.parse_file(path)
    assert out.format == "verl-log" and out.warnings == []
    assert (out.meta["device"], out.meta["device_name"], out.meta["world_size"]) == (
        "npu", "Ascend NPU", 16
    )
    assert seconds(out)[(1, "timing_s/gen")] == 31.5
    shown = reports([path])
    for fmt in ("text", "md", "html"):
        assert "device: Ascend NPU (npu.log)" in shown[fmt], fmt
    assert json.loads(shown["json"])["log_runs"][0]["device"] == "Ascend NPU"


def test_ascend_npu_run_from_its_runtime_lines(tmp_path):
    lines = [
        f"{PREFIX}step:1 - timing_s/gen:3.5 - timing_s/step:5.0",
        f"{WORKER}export HCCL_CONNECT_TIMEOUT=1800 for the HCCL rendezvous",
    ]
    out = verl.parse(write(tmp_path, "npu2.log", "\n".join(lines) + "\n"))
    assert (out.meta["device"], out.meta["device_evidence"]) == ("npu", "line 2: HCCL")
    cuda = verl.parse(write(tmp_path, "gpu.log", lines[0] + "\n"))
    assert "device" not in cuda.meta
