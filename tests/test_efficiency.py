"""Efficiency (analyzer/analyses/efficiency.py): throughput, MFU per role and peak memory.

On the real verl log every number must equal what the log itself printed, per step and as the
mean over the run; the expected values are read here straight from the raw text with a regular
expression, independently of the parser. Traces are built event by event with known FLOPs and a
known device, so the MFU is known exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import mean
from typing import Any

import polars as pl
import pytest
from rich.console import Console

import analyzer
from analyzer.analyses.efficiency import warmup_steps
from analyzer.report import json as json_report
from analyzer.report import text
from analyzer.report.sections import efficiency as section
from taxonomy.efficiency import EfficiencyTableError, load, table

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
VERL = CORPUS / "logs" / "verl" / "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"
DS_CHAT = CORPUS / "logs" / "deepspeed-chat" / (
    "step3_actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log"
)
H100_PEAK = 989.5e12
BASE_NS = 1_700_000_000_000_000_000
STEP_US = 1_000


def logged(path: Path, key: str) -> dict[int, float]:
    """``key``'s value on every ``step:N`` line of the raw log text."""
    pattern = re.compile(r"step:(\d+) - .*?(?:^| - )" + re.escape(key) + r":(-?[\d.]+)")
    found: dict[int, float] = {}
    for line in path.read_text(errors="replace").splitlines():
        hit = pattern.search(line)
        if hit:
            found[int(hit.group(1))] = float(hit.group(2))
    return found


@pytest.fixture(scope="module")
def verl_run() -> analyzer.Run:
    return analyzer.load([VERL], use_cache=False)


def row(run: analyzer.Run, metric: str, role: str = "all") -> dict[str, Any]:
    rows = run.efficiency.filter((pl.col("metric") == metric) & (pl.col("role") == role))
    assert rows.height == 1, (metric, role, rows)
    return rows.row(0, named=True)


def per_step(run: analyzer.Run, metric: str, role: str = "all") -> dict[int, float]:
    rows = run.efficiency_steps.filter((pl.col("metric") == metric) & (pl.col("role") == role))
    return dict(rows.select("step", "value").iter_rows())


@pytest.mark.parametrize(
    ("metric", "role", "key"),
    [("throughput", "all", "perf/throughput"), ("mfu", "actor", "perf/mfu/actor"),
     ("mfu", "critic", "perf/mfu/critic")],
)
def test_verl_throughput_and_mfu_per_role_equal_the_logs_own_values(verl_run, metric, role, key):
    expected = logged(VERL, key)
    assert len(expected) == 335 and min(expected) == 101 and max(expected) == 435
    assert per_step(verl_run, metric, role) == expected
    summary = row(verl_run, metric, role)
    assert summary["key"] == key and summary["n_steps"] == 335
    assert summary["mean"] == pytest.approx(mean(expected.values()), rel=1e-12)
    assert summary["min"] == min(expected.values()) and summary["max"] == max(expected.values())
    assert summary["warmup_step"] is None and summary["headline_value"] == summary["mean"]
    assert summary["headline"] == "mean over 335 steps"


def test_verl_numbers_are_what_the_log_says_they_are(verl_run):
    """Spot values of the real log, so a regex and a parser that agree on a wrong reading fail."""
    assert per_step(verl_run, "throughput")[101] == 326.485
    assert per_step(verl_run, "mfu", "actor")[101] == 0.067
    assert per_step(verl_run, "mfu", "critic")[102] == 0.076
    assert row(verl_run, "throughput")["mean"] == pytest.approx(325.555296, abs=1e-6)
    assert row(verl_run, "mfu", "actor")["stage"] == "actor_update"
    assert row(verl_run, "mfu", "critic")["stage"] == "critic_update"


@pytest.mark.parametrize(
    ("metric", "key"),
    [("memory_allocated_gb", "perf/max_memory_allocated_gb"),
     ("memory_reserved_gb", "perf/max_memory_reserved_gb"),
     ("cpu_memory_gb", "perf/cpu_memory_used_gb")],
)
def test_verl_peak_memory_is_the_largest_value_the_log_states(verl_run, metric, key):
    expected = logged(VERL, key)
    summary = row(verl_run, metric)
    assert summary["headline_value"] == max(expected.values())
    assert summary["headline"] == "peak over 335 steps"
    assert per_step(verl_run, metric) == expected


def test_verl_first_step_is_no_warm_up_outlier(verl_run):
    """Step 101 (the first after the resume) takes 11.376 s against a median of 10.63 s."""
    times = logged(VERL, "perf/time_per_step")
    rest = sorted(list(times.values())[1:])
    assert times[101] < table().warmup_ratio * (rest[166] + rest[167]) / 2
    assert verl_run.efficiency["warmup_step"].null_count() == verl_run.efficiency.height


def test_deepspeed_chat_warm_up_step_is_named_and_both_means_are_stated():
    """The first DeepSpeed-Chat step takes 7.99 s against ~3.8 s: the headline leaves it out and
    the mean with it is still stated."""
    run = analyzer.load([DS_CHAT], use_cache=False)
    rates = [float(v) for v in re.findall(r"CurSamplesPerSec=([\d.]+)", DS_CHAT.read_text())]
    summary = row(run, "sample_throughput")
    assert summary["warmup_step"] == 0
    assert summary["mean"] == pytest.approx(mean(rates), rel=1e-12)
    assert summary["mean_after_warmup"] == pytest.approx(mean(rates[1:]), rel=1e-12)
    assert summary["headline_value"] == summary["mean_after_warmup"]
    assert summary["headline"] == f"mean over {len(rates) - 1} steps after warm-up step 0"
    note = section.section(run).note
    assert "step 0 is a warm-up outlier" in note
    assert f"{mean(rates):,.4g} samples/s" in note


def test_warm_up_needs_a_first_step_above_the_ratio_and_two_other_steps():
    times = pl.DataFrame(
        {"source": [0, 0, 0, 1, 1, 1, 2, 2], "step": [1, 2, 3, 1, 2, 3, 1, 2],
         "seconds": [3.1, 2.0, 2.0, 2.9, 2.0, 2.0, 9.0, 1.0]}
    )
    found = warmup_steps(times, 1.5)
    assert found.to_dicts() == [{"source": 0, "warmup_step": 1}]


def test_verl_json_report_has_efficiency_with_per_step_rows(verl_run):
    document = json.loads(json_report.render(verl_run))
    by = {(r["metric"], r["role"]): r for r in document["efficiency"]}
    assert by[("mfu", "actor")]["headline_value"] == pytest.approx(
        mean(logged(VERL, "perf/mfu/actor").values()), rel=1e-12
    )
    steps = [r for r in document["efficiency_steps"] if r["metric"] == "throughput"]
    assert {r["step"]: r["value"] for r in steps} == logged(VERL, "perf/throughput")


def test_verl_text_report_shows_the_headlines(verl_run):
    console = Console(record=True, width=160)
    text.render(verl_run, console)
    shown = console.export_text()
    assert "Efficiency" in shown
    assert "325.6 tokens/s/GPU" in shown and "6.9%" in shown and "7.4%" in shown
    assert "60.17 GB" in shown


def test_low_mfu_findings_name_each_training_role(verl_run):
    found = verl_run.efficiency_findings
    assert sorted(found["id"].to_list()) == [
        "efficiency.low_mfu.actor", "efficiency.low_mfu.critic"
    ]
    actor = found.filter(pl.col("id") == "efficiency.low_mfu.actor").row(0, named=True)
    assert actor["title"] == "Low MFU of the actor (6.9%)" and actor["stage"] == "actor_update"
    assert actor["saving_ns"] is None


def test_a_log_without_perf_metrics_has_no_efficiency_section(tmp_path: Path):
    log = tmp_path / "verl.log"
    log.write_text(
        "".join(f"step:{s} - critic/score/mean:0.5 - timing_s/gen:{2 + s}.000 - "
                f"timing_s/update_actor:1.000 - timing_s/step:{4 + s}.000\n" for s in (1, 2, 3))
    )
    run = analyzer.load([log], use_cache=False)
    assert run.log_steps.height == 3
    assert run.efficiency.height == 0 and run.efficiency_steps.height == 0
    assert section.section(run) is None
    assert "efficiency" not in json.loads(json_report.render(run))


# --- traces with FLOPs ------------------------------------------------------------------------


def x(cat: str, name: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1,
      **args: Any) -> dict[str, Any]:
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return {**event, "args": args} if args else event


def flops_trace(path: Path, device: str, steps: dict[int, list[dict[str, Any]]]) -> Path:
    """A Kineto trace of 1 ms ProfilerSteps, each holding the given operators and one kernel."""
    events: list[dict[str, Any]] = []
    for step, ops in steps.items():
        t = (step - 1) * STEP_US
        events.append(x("user_annotation", f"ProfilerStep#{step}", t, STEP_US))
        events += [{**op, "ts": t + 10 + 50 * i} for i, op in enumerate(ops)]
        events.append(x("cuda_runtime", "cudaLaunchKernel", t + 20, 5, correlation=step))
        events.append(x("kernel", "gemm", t + 30, 200, pid=0, tid=7, correlation=step,
                        stream=7, device=0))
    path.write_text(json.dumps({
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": device, "totalGlobalMem": 85018279936}],
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": events,
    }))
    return path


def mm(flops: int) -> dict[str, Any]:
    return x("cpu_op", "aten::mm", 0, 20, flops=flops)


def addmm_shapes(m: int, k: int, n: int) -> dict[str, Any]:
    return x("cpu_op", "aten::addmm", 0, 20, **{"Input Dims": [[n], [m, k], [k, n], [], []]})


def test_mfu_from_recorded_flops_on_a_known_device(tmp_path: Path):
    trace = flops_trace(tmp_path / "t.json", "NVIDIA H100 80GB HBM3",
                        {1: [mm(4 * 10**11), mm(10**11)], 2: [mm(2 * 10**11)]})
    run = analyzer.load([trace], use_cache=False)
    step_s = STEP_US / 1e6
    assert run.steps["step"].to_list() == [1, 2]
    mfu = per_step(run, "mfu")
    assert mfu[1] == pytest.approx(5e11 / (step_s * H100_PEAK), rel=1e-9)
    assert mfu[2] == pytest.approx(2e11 / (step_s * H100_PEAK), rel=1e-9)
    assert per_step(run, "achieved_tflops")[1] == pytest.approx(5e11 / step_s / 1e12, rel=1e-9)
    assert row(run, "mfu")["mean"] == pytest.approx((mfu[1] + mfu[2]) / 2, rel=1e-12)
    assert "read as NVIDIA H100 SXM, peak 989.5 TFLOP/s" in " ".join(run.efficiency_notes)


def test_flops_from_shapes_when_the_trace_records_none(tmp_path: Path):
    """2·M·K·N of an addmm from its recorded Input Dims (bias, mat1 M×K, mat2 K×N)."""
    trace = flops_trace(tmp_path / "t.json", "NVIDIA A100-SXM4-80GB",
                        {1: [addmm_shapes(4096, 1024, 8192)]})
    run = analyzer.load([trace], use_cache=False)
    flops = run.events.filter(pl.col("flops").is_not_null())
    assert flops["flops"].to_list() == [2 * 4096 * 1024 * 8192]
    assert run.sources[0].meta["flops_from_shapes"] == 1
    expected = 2 * 4096 * 1024 * 8192 / (STEP_US / 1e6 * 312e12)
    assert per_step(run, "mfu")[1] == pytest.approx(expected, rel=1e-9)
    assert "lower bound" in " ".join(run.efficiency_notes)


def test_mismatched_shapes_give_no_flops(tmp_path: Path):
    trace = flops_trace(tmp_path / "t.json", "NVIDIA H100 80GB HBM3", {1: [
        x("cpu_op", "aten::mm", 0, 20, **{"Input Dims": [[4, 5], [6, 7]]}),
        x("cpu_op", "aten::mm", 0, 20, **{"Input Dims": [[4]]}),
    ]})
    run = analyzer.load([trace], use_cache=False)
    assert run.events["flops"].null_count() == run.events.height
    assert run.efficiency.height == 0


def test_unknown_device_is_stated_and_no_mfu_guessed(tmp_path: Path):
    trace = flops_trace(tmp_path / "t.json", "NVIDIA L20", {1: [mm(10**11)]})
    run = analyzer.load([trace], use_cache=False)
    assert run.efficiency["metric"].to_list() == ["achieved_tflops"]
    assert per_step(run, "achieved_tflops")[1] == pytest.approx(1e11 / 1e-3 / 1e12, rel=1e-9)
    notes = " ".join(run.efficiency_notes)
    assert "device 'NVIDIA L20' has no peak FLOP/s" in notes and "MFU is not computed" in notes
    assert "MFU" not in section.section(run).frame["number"].to_list()


def test_device_table_matches_the_narrow_forms_first():
    tab = table()
    assert tab.device("NVIDIA H100 80GB HBM3").peak_tflops == 989.5
    assert tab.device("NVIDIA H100 PCIe").peak_tflops == 756.0
    assert tab.device("NVIDIA H200").peak_tflops == 989.5
    assert tab.device("NVIDIA A100-PCIE-40GB").peak_tflops == 312.0
    assert tab.device("AMD Instinct MI300X").peak_tflops == 1307.4
    assert tab.device("NVIDIA L20") is None and tab.device("") is None


def test_a_broken_efficiency_table_names_the_file_and_entry(tmp_path: Path):
    bad = tmp_path / "eff.toml"
    bad.write_text('[thresholds]\nwarmup_ratio = 1.5\nlow_mfu = 0.2\n'
                   '[[device]]\nmatch = "(H100"\nname = "x"\npeak_tflops = 1\n')
    with pytest.raises(EfficiencyTableError, match=r"eff.toml: \[\[device\]\] #1: match"):
        load(bad)


def test_real_mi300x_trace_gets_mfu_per_step_and_per_stage_from_shapes():
    """A real sglang capture on MI300X records shapes, not FLOPs; its kernels run on GPU 9 while
    deviceProperties lists only id 0: the one named device is still the one used."""
    trace = CORPUS / "TraceLens" / "inference" / (
        "sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"
    )
    run = analyzer.load([trace], use_cache=False)
    flops = run.events["flops"].drop_nulls()
    assert flops.len() == run.sources[0].meta["flops_from_shapes"] == 145
    stage = run.efficiency.filter(pl.col("stage") == "rollout")
    by = dict(stage.select("metric", "headline_value").iter_rows())
    assert by["mfu"] == pytest.approx(by["achieved_tflops"] / 1307.4, rel=1e-9)
    whole = row(run, "mfu")
    assert whole["headline_value"] == pytest.approx(row(run, "achieved_tflops")["mean"] / 1307.4)
    assert "read as AMD Instinct MI300X" in " ".join(run.efficiency_notes)


def test_rollout_mfu_is_measured_but_not_a_low_mfu_finding():
    """vLLM decode on MI300X runs at about 0.15% of peak: measured, yet decode is memory-bound
    by nature, so the training advice of the low-MFU finding is not given for it."""
    trace = CORPUS / "TraceLens" / "inference" / "vllm_decode_full__graph_execution.json.gz"
    run = analyzer.load([trace], use_cache=False)
    rollout = run.efficiency.filter((pl.col("metric") == "mfu") & (pl.col("role") == "rollout"))
    assert rollout.height == 1 and 0 < rollout["headline_value"][0] < table().low_mfu
    assert run.efficiency_findings.height == 0
    assert table().low_mfu_exempt == ("rollout",)


@pytest.mark.parametrize("name", [
    "sglang_decode__capture_traces__bs_32_rank0.json.gz",
    "vllm_decode_full__capture_traces__graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
])
def test_a_graph_capture_trace_gets_no_flop_rate(name: str):
    """Captured operators record shapes but do not run: sglang's capture said 14.37 TFLOP/s and
    an MFU of 1.1% (484 GFLOP, one decode step's, over 33.7 ms of capture) beside GPU work of
    11 µs. No trace rate is computed from a capture, and the note says why."""
    run = analyzer.load([CORPUS / "TraceLens" / "inference" / name], use_cache=False)
    assert run.sources[0].meta.get("graph_capture")
    assert run.events["flops"].drop_nulls().len() > 0
    assert run.efficiency_steps.height == 0 and run.efficiency.height == 0
    (note,) = [n for n in run.efficiency_notes if "graph-capture" in n]
    assert note.startswith(f"{name}: a graph-capture trace: its operators were captured")
    assert "no TFLOP/s or MFU" in note


def test_an_exempt_role_the_vocabulary_lacks_names_the_file(tmp_path: Path):
    bad = tmp_path / "eff.toml"
    bad.write_text('[thresholds]\nwarmup_ratio = 1.5\nlow_mfu = 0.2\n'
                   '[low_mfu]\nexempt_roles = ["rollouts"]\n')
    with pytest.raises(EfficiencyTableError,
                       match=r"eff.toml: \[low_mfu\] exempt_roles names no role: rollouts"):
        load(bad)
