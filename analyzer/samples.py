"""The bundled sample runs ``rlperf demo`` analyses, and where they live."""

from __future__ import annotations

import os
from pathlib import Path

from parsers.errors import InputError

_REPO = Path(__file__).resolve().parents[1]

DEMO_RUNS: tuple[tuple[str, str], ...] = (
    ("verl colocated", "verl_grpo_colocated"),
    ("verl disaggregated", "verl_ppo_disaggregated"),
    ("verl one-step-off", "verl_grpo_one_step_off"),
    ("OpenRLHF disaggregated", "openrlhf_ppo_disaggregated"),
)
"""(label, folder under ``sample_traces/runs``): placements colocated vs disaggregated vs
one-step-off, and verl-style vs OpenRLHF-style naming, on the same tiny job."""


def samples_root() -> Path:
    """``$RLPERF_SAMPLES``, else the repository's ``sample_traces/``."""
    env = os.environ.get("RLPERF_SAMPLES")
    return Path(env) if env else _REPO / "sample_traces"


def demo_runs() -> list[tuple[str, Path]]:
    """(label, folder) of every demo run that is present; a clear error when none is."""
    root = samples_root() / "runs"
    found = [(label, root / name) for label, name in DEMO_RUNS if (root / name).is_dir()]
    if not found:
        raise InputError(root, "no sample runs found (run `make samples`, or set RLPERF_SAMPLES)")
    return found


def demo_inputs() -> list[Path]:
    """The folders of the demo runs."""
    return [path for _, path in demo_runs()]
