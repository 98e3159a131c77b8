"""The bundled sample runs ``rlperf demo`` analyses, and where they live."""

from __future__ import annotations

import os
from pathlib import Path

from parsers.errors import InputError

_REPO = Path(__file__).resolve().parents[1]

DEMO_GROUPS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("Real tiny runs on CPU: verl and OpenRLHF naming", "runs", (
        ("verl colocated", "verl_grpo_colocated"),
        ("verl disaggregated", "verl_ppo_disaggregated"),
        ("verl one-step-off", "verl_grpo_one_step_off"),
        ("OpenRLHF disaggregated", "openrlhf_ppo_disaggregated"),
    )),
    ("Synthetic GPU-shaped runs, 8 ranks", "synthetic", (
        ("synthetic colocated", "colocated"),
        ("synthetic disaggregated", "disaggregated"),
        ("synthetic one-step-off", "one_step_off"),
    )),
)
"""(title, folder under ``sample_traces``, [(label, run folder)]): placements colocated vs
disaggregated vs one-step-off, verl-style vs OpenRLHF-style naming, on the same tiny job; then
the same placements on GPU-shaped synthetic traces."""


def samples_root() -> Path:
    """``$RLPERF_SAMPLES``, else the repository's ``sample_traces/``."""
    env = os.environ.get("RLPERF_SAMPLES")
    return Path(env) if env else _REPO / "sample_traces"


def demo_groups() -> list[tuple[str, list[tuple[str, Path]]]]:
    """Each demo group with the (label, folder) of its runs that are present; a group needs two.
    A clear error when no group can be shown."""
    root = samples_root()
    groups = []
    for title, folder, runs in DEMO_GROUPS:
        found = [
            (label, root / folder / name) for label, name in runs if (root / folder / name).is_dir()
        ]
        if len(found) >= 2:
            groups.append((title, found))
    if not groups:
        raise InputError(root, "no sample runs found (run `make samples`, or set RLPERF_SAMPLES)")
    return groups
