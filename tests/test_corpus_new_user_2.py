"""A new user's second pass over real files nobody here wrote (vLLM and SGLang on MI300X, verl's
profiler headers from rl-insight, a verl TPU log that stops before step 1): each test holds one
thing that user found wrong to the number or message the file itself gives."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from report_truth import rlperf

from parsers import parse_file
from parsers.kineto import _named_devices

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
INFERENCE = CORPUS / "TraceLens" / "inference"
VLLM_DECODE = INFERENCE / "vllm_decode_full__graph_execution.json.gz"
RL_INSIGHT = CORPUS / "rl-insight"
TPU_LOG = CORPUS / "logs" / "verl-tpu" / "chrisytz-verl_ppo_xla-tpu_verl_demo.log"
MI300X_PEAK_TFLOPS = 1307.4

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")


def _raw_devices(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["deviceProperties"]


def test_unnamed_mi300x_is_named_from_its_properties() -> None:
    """ROCm 7 writes ``"name": ""`` for every device of these vLLM/SGLang traces; 304 CUs,
    192 GiB, gfx94x is an MI300X, so the parser names it (saying so) instead of leaving it
    unknown."""
    raw = _raw_devices(VLLM_DECODE)
    assert [d["name"] for d in raw] == [""] * 8
    props = parse_file(VLLM_DECODE).meta["device_properties"]
    assert len(props) == 8
    for said, read in zip(raw, props, strict=True):
        assert read["name"] == ("AMD Instinct MI300X (unnamed in the trace; from its properties: "
                                "304 CUs, 192 GiB, gfx94x)")
        assert {k: v for k, v in read.items() if k != "name"} == {
            k: v for k, v in said.items() if k != "name"
        }


def test_named_and_unidentified_devices_are_left_as_stated() -> None:
    """A CUDA trace keeps the name it states; a ROCm device the properties do not pin down
    (an MI325X's 256 GiB, an MI300A's 228 CUs) stays unnamed rather than guessed."""
    l20 = parse_file(RL_INSIGHT / "actor_compute_log_prob__prof_rank-0_031847.json.gz")
    assert [d["name"] for d in l20.meta["device_properties"]] == ["NVIDIA L20"]
    gib = 1 << 30
    mi325x = {"name": "", "computeMajor": 9, "computeMinor": 4, "numSms": 304,
              "totalGlobalMem": 256 * gib}
    mi300a = {**mi325x, "numSms": 228, "totalGlobalMem": 128 * gib}
    assert _named_devices([mi325x, mi300a], rocm=True) == [mi325x, mi300a]
    mi300x = {**mi325x, "totalGlobalMem": 206141652992}
    assert _named_devices([mi300x], rocm=False) == [mi300x]


def test_mi300x_trace_gets_an_mfu_against_the_mi300x_peak(capsys) -> None:
    """Before, the report said 'the trace names no device; its MFU is not computed'. Now the
    MFU is the achieved TFLOP/s over the MI300X's 1,307.4 TFLOP/s, for the run and the stage."""
    status, out, err = rlperf(capsys, "analyze", str(VLLM_DECODE), "-f", "json")
    assert status == 0, err
    rows = json.loads(out)["efficiency"]
    by = {(r["metric"], r["role"]): r["mean"] for r in rows}
    for role in ("all", "rollout"):
        achieved = by[("achieved_tflops", role)]
        assert achieved > 0
        assert by[("mfu", role)] == pytest.approx(achieved / MI300X_PEAK_TFLOPS, rel=1e-9)
    assert by[("achieved_tflops", "all")] == pytest.approx(1.939, abs=5e-4)


def test_export_of_a_log_only_run_is_bad_input_naming_the_file(capsys) -> None:
    """A verl log has no timeline: ``rlperf export`` said 'internal error ... ValueError' with
    exit status 3; it is bad input, one line naming the log, exit status 2."""
    status, _out, err = rlperf(capsys, "export", str(TPU_LOG), "-o", "unused.json")
    assert status == 2
    lines = [line for line in err.splitlines() if line.startswith("rlperf: error:")]
    assert lines == [
        f"rlperf: error: {TPU_LOG.name}: nothing to export: no trace events, stage ranges or "
        "idle time in these sources (a Perfetto timeline needs a trace)"
    ]
    assert "internal error" not in err and "Traceback" not in err


def test_run_listing_gives_a_microsecond_window_in_microseconds(capsys, tmp_path: Path) -> None:
    """The rollout headers hold one 1.987 µs ``aten::lift_fresh`` each; the run listing said
    'for 1.99e-06 s'. Without its profiler's span and instants (a run's window counts them:
    10.08 s), the header and its copy a day later are two runs of that one operator."""
    with gzip.open(RL_INSIGHT / ("agent_loop_rollout_replica_0__huawei_372640."
                                 "1771730291744166997.pt.trace.json.gz")) as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    (tmp_path / "a.json").write_text(json.dumps(doc))
    doc["baseTimeNanoseconds"] += 86_400 * 10**9
    (tmp_path / "b.json").write_text(json.dumps(doc))
    status, _out, err = rlperf(capsys, "analyze", str(tmp_path))
    assert status == 2
    run1 = next(line for line in err.splitlines() if line.strip().startswith("run 1:"))
    assert run1.endswith("2026-02-22 03:18:02 UTC for 1.99 µs"), run1
    assert "e-06" not in err


def _marks_and_events(path: Path) -> tuple[dict[str, float], list[dict]]:
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    marks = {e["name"]: e["ts"] for e in events if e.get("ph") == "i"}
    return marks, [e for e in events if e.get("ph") == "X"]


def test_profiler_window_from_the_start_and_end_instants(capsys) -> None:
    """verl's trimmed actor headers have no ``Trace`` span, only the 'Iteration Start' and
    'Record Window End' instants (3.84 s apart); their one ``cudaMemGetInfo`` lasts 10.08 s, so
    it ends 6.2 s past the window. The parser takes the window from the instants, and the data
    quality section counts that one event outside it (it said 'no problems' of the window)."""
    path = RL_INSIGHT / "actor_compute_log_prob__prof_rank-0_031847.json.gz"
    marks, spans = _marks_and_events(path)
    start, end = marks["Iteration Start: PyTorch Profiler"], marks["Record Window End"]
    assert end - start == pytest.approx(3_842_523.9, abs=0.1)
    outside = [e for e in spans if e["ts"] < start or e["ts"] + e["dur"] > end]
    assert [e["name"] for e in outside] == ["cudaMemGetInfo"]
    assert parse_file(path).meta["profiler_window_us"] == (start, end)
    status, out, err = rlperf(capsys, "analyze", str(path), "-f", "json")
    assert status == 0, err
    rows = [r for r in json.loads(out)["data_quality"] if r["check"] == "outside_window"]
    assert [(r["file"], r["count"], r["detail"]) for r in rows] == [
        (path.name, len(outside), "1 runtime"), ("(all files)", 1, "in 1 file")
    ]


def test_a_trace_span_wins_over_the_instants() -> None:
    """The rollout header has both: the ``Trace`` span (10.08 s) is the window, not the
    instants (10.21 s), as before."""
    path = RL_INSIGHT / ("agent_loop_rollout_replica_0__huawei_372640.1771730291744166997"
                         ".pt.trace.json.gz")
    with gzip.open(path) as f:
        span = next(e for e in json.load(f)["traceEvents"] if e.get("cat") == "Trace")
    meta = parse_file(path).meta
    assert meta["profiler_window_us"] == (span["ts"], span["ts"] + span["dur"])
    assert "_window_marks" not in meta
