"""The idle table's host-bound column holds every gap inside a stage range; where launched work
was queued then, the GPU waited for something other than the host, and the table's note says
how much. TraceLens' SGLang prefill-decode trace (one MI300X): ``resolve_future_token_ids_kernel``
started 493.239 ms after its ``hipLaunchKernel`` returned (read off the JSON below), and the
column read 495 ms of "host bound" with nothing beside it to say that 493 ms of it was not."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import analyzer
from analyzer.report.sections import bubbles

TRACE = (Path(__file__).resolve().parents[2] / "shared" / "corpus" / "TraceLens" / "inference"
         / "sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz")


def _lag_ms() -> float:
    with gzip.open(TRACE) as raw:
        events = [e for e in json.load(raw)["traceEvents"] if e.get("ph") == "X"]
    (kernel,) = [e for e in events if e.get("cat") == "kernel"
                 and "::resolve_future_token_ids_kernel<long>" in e["name"]]
    corr = kernel["args"]["correlation"]
    (launch,) = [e for e in events if e.get("cat") == "cuda_runtime"
                 and e.get("args", {}).get("correlation") == corr]
    return (kernel["ts"] - launch["ts"] - launch["dur"]) / 1000


def test_the_idle_note_says_how_much_host_bound_had_work_queued() -> None:
    assert round(_lag_ms(), 3) == 493.239
    shown = bubbles.section(analyzer.load([TRACE]))
    assert shown is not None
    assert (" Of the 495 ms host bound, 493 ms had launched work queued, not yet started: the GPU "
            "waited for something other than the host") in shown.note


def test_host_bound_without_queued_work_says_nothing_of_it() -> None:
    """The bundled TRL sample: 64.7 ms of host-bound idle, each launch's kernel started at once."""
    runs = Path(__file__).resolve().parents[1] / "sample_traces" / "runs" / "trl_grpo"
    run = analyzer.load([p for p in sorted(runs.iterdir()) if p.is_dir()])
    assert run.bubbles.filter(run.bubbles["cause"] == "host_bound")["idle_ns"].sum() == 64_677_835
    shown = bubbles.section(run)
    assert shown is not None
    assert "had launched work queued" not in shown.note
