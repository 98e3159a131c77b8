"""Where the bundled sample traces live (the default input of ``rlperf demo``)."""

from __future__ import annotations

import os
from pathlib import Path

from parsers.errors import InputError

_REPO = Path(__file__).resolve().parents[1]


def samples_root() -> Path:
    """``$RLPERF_SAMPLES``, else the repository's ``sample_traces/``."""
    env = os.environ.get("RLPERF_SAMPLES")
    return Path(env) if env else _REPO / "sample_traces"


def demo_inputs() -> list[Path]:
    """The sample runs the demo analyses; a clear error when they are not there."""
    root = samples_root()
    runs = [p for p in sorted((root / "runs").glob("*")) if p.is_dir()] if (root / "runs").is_dir() else []
    if runs:
        return runs[:1]
    corpus = _REPO.parent / "shared" / "corpus" / "HolisticTraceAnalysis" / "nccl_data.json.gz"
    if corpus.is_file():
        return [corpus]
    raise InputError(root, "no sample traces found (run `make samples`, or set RLPERF_SAMPLES)")
