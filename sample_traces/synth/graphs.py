"""SYNTHETIC vLLM-style serving trace: engine steps whose kernels are CUDA-graph replays without
launch records of their own, with exact truth.

One rank, one engine process. Each step is one ``execute_model``: the batch annotation
``execute_<tokens>_context_<P>(…)_generation_<D>(…)`` on the main thread, a Python
``gpu_model_runner.py(…): execute_model`` frame under it, then either one ``cudaGraphLaunch``
whose kernels run on the device with no launch of their own (decode steps), or one
``cudaLaunchKernel`` per kernel (eager prefill and mixed steps). The host waits for each step's
last kernel before it launches the next (vLLM synchronises on the sampled tokens), so a graph's
kernels have all started before the next graph is launched.

``replay_corr=True`` gives replayed kernels the graph launch's correlation id (what CUPTI and
roctracer write); ``False`` leaves them without one (a writer that drops it), so only their time
links them. ``capture=True`` writes a start-up capture instead: ``cudaStreamBeginCapture``,
launches recorded into the graph (no kernel runs), ``cudaStreamEndCapture``.

The truth (``truth.json``, key ``graphs``): every device row's launch correlation id, the graph
launches and the kernels each replayed, per step its phase, requests, tokens and window (first
host start to the end of its last kernel), and the captured launches.
``python -m sample_traces.synth.graphs -o DIR``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .kineto import DEVICE_NAME, PYTHON, base_time_ns

PID = 4242
DEVICE = 0
STREAM = 7
EPOCH_NS = 1_767_225_600_000_000_000
RUNNER = "vllm/v1/worker/gpu_model_runner.py(3380): execute_model"
KERNELS = (
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", 90_000),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*)", 8_000),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16>(...)", 6_000),
    ("kernel_unified_attention_2d", 40_000),
    ("void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*)", 5_000),
)
STEP_GAP_NS = 200_000
LAUNCH_NS = 4_000


@dataclass(frozen=True)
class Step:
    prefill_requests: int
    prefill_tokens: int
    decode_requests: int

    @property
    def phase(self) -> str:
        if self.prefill_requests and self.decode_requests:
            return "mixed"
        return "prefill" if self.prefill_requests else "decode"

    @property
    def name(self) -> str:
        d, p, t = self.decode_requests, self.prefill_requests, self.prefill_tokens
        return (
            f"execute_{t + d}_context_{p}(sq{t}sk{t}sqsq{t * t}sqsk{t * t})"
            f"_generation_{d}(sq{d}sk{d * 500}sqsq{d}sqsk{d * 500})"
        )


def plan(seed: int, steps: int) -> list[Step]:
    """A prefill step, then decode steps with one mixed step among them."""
    rng = np.random.default_rng(seed)
    out = [Step(4, int(rng.integers(200, 900)), 0)]
    for i in range(1, steps):
        out.append(Step(1, int(rng.integers(50, 300)), 4) if i == steps // 2 else Step(0, 0, 4))
    return out


def _x(cat: str, name: str, t: int, dur: int, tid: int, pid: int = PID, **args: Any) -> dict:
    event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
             "ts": round(t / 1000, 3), "dur": round(dur / 1000, 3)}
    if args:
        event["args"] = args
    return event


def build(
    seed: int = 1, steps: int = 6, layers: int = 3, replay_corr: bool = True, capture: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trace (a Kineto document) and its truth."""
    rng = np.random.default_rng(seed + 1)
    events: list[dict] = []
    rows: list[dict] = []
    truth_steps: list[dict] = []
    launches: dict[int, int] = {}
    corr = 1000
    t = 1_000_000
    kernels = [k for _ in range(layers) for k in KERNELS]

    def kernel_row(name: str, start: int, dur: int, link: int | None) -> None:
        args: dict[str, Any] = {"device": DEVICE, "stream": STREAM}
        if link is not None:
            args["correlation"] = link
        events.append(_x("kernel", name, start, dur, STREAM, pid=DEVICE, **args))

    if capture:
        events.append(_x("user_annotation", "capture_4_FULL", t, 2_000_000, PID))
        events.append(_x("cuda_runtime", "cudaStreamBeginCapture", t + 10_000, 5_000, PID,
                         correlation=corr))
        corr += 1
        at = t + 20_000
        for _ in kernels:
            events.append(_x("cuda_runtime", "cudaLaunchKernel", at, LAUNCH_NS, PID,
                             correlation=corr))
            corr, at = corr + 1, at + 10_000
        events.append(_x("cuda_runtime", "cudaStreamEndCapture", at, 5_000, PID,
                         correlation=corr))
        truth = {"captures": 1, "captured_launches": len(kernels), "steps": [], "rows": [],
                 "launches": {}}
        return _document(events), truth

    for step in plan(seed, steps):
        host_start = t
        graph = step.phase == "decode"
        at = t + 50_000
        device_at = at + 30_000
        if graph:
            graph_corr = corr
            corr += 1
            events.append(_x("cuda_runtime", "cudaGraphLaunch", at, 20_000, PID,
                             correlation=graph_corr))
            launches[graph_corr] = 0
        last_end = device_at
        for name, dur in kernels:
            dur = int(dur * (1 + 0.2 * rng.random()))
            if graph:
                link = graph_corr
                launches[graph_corr] += 1
            else:
                link = corr
                events.append(_x("cuda_runtime", "cudaLaunchKernel", at, LAUNCH_NS, PID,
                                 correlation=corr))
                corr, at = corr + 1, at + LAUNCH_NS + 1_000
            device_at = max(device_at, at + 2_000)
            kernel_row(name, device_at, dur, link if (replay_corr or not graph) else None)
            rows.append({"start_ns": device_at, "corr": link, "replayed": graph})
            last_end = device_at + dur
            device_at += dur + 1_000
        host_end = max(at, t + 150_000) + 20_000
        events.append(_x("user_annotation", step.name, host_start, host_end - host_start, PID))
        events.append(_x("python_function", RUNNER, host_start + 1_000,
                         host_end - host_start - 2_000, PID))
        truth_steps.append({
            "phase": step.phase, "prefill_requests": step.prefill_requests,
            "prefill_tokens": step.prefill_tokens, "decode_requests": step.decode_requests,
            "decode_tokens": step.decode_requests, "start_ns": host_start, "end_ns": last_end,
        })
        t = last_end + STEP_GAP_NS
    truth = {"steps": truth_steps, "rows": rows, "launches": launches, "captures": 0,
             "captured_launches": 0}
    return _document(events), truth


def _document(events: list[dict]) -> dict[str, Any]:
    meta = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": PYTHON}},
        {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    return {
        "schemaVersion": 1,
        "rlperf_synthetic": True,
        "deviceProperties": [{"id": DEVICE, "name": DEVICE_NAME, "totalGlobalMem": 85029158912,
                              "computeMajor": 9, "computeMinor": 0}],
        "baseTimeNanoseconds": base_time_ns(EPOCH_NS),
        "traceEvents": meta + events,
    }


def write(out: Path, seed: int = 1, **options: Any) -> tuple[Path, Path]:
    """The trace and its truth (absolute times: ``baseTimeNanoseconds`` added) under ``out``."""
    doc, truth = build(seed, **options)
    base = doc["baseTimeNanoseconds"]
    for row in truth["rows"] + truth["steps"]:
        for key in ("start_ns", "end_ns"):
            if key in row:
                row[key] += base
    truth["launches"] = {str(k): v for k, v in truth["launches"].items()}
    out.mkdir(parents=True, exist_ok=True)
    trace, facts = out / "engine_rank0.json", out / "truth.json"
    trace.write_text(json.dumps(doc))
    facts.write_text(json.dumps({"graphs": truth}, indent=1))
    return trace, facts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sample_traces.synth.graphs",
                                description=__doc__.split("\n")[0])
    p.add_argument("-o", "--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--no-replay-corr", action="store_true",
                   help="replayed kernels without a correlation id")
    p.add_argument("--capture", action="store_true", help="a graph-capture trace instead")
    a = p.parse_args(argv)
    write(a.out, a.seed, steps=a.steps, replay_corr=not a.no_replay_corr, capture=a.capture)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
