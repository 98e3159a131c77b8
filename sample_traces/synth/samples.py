"""The committed synthetic samples (``sample_traces/synthetic/<scenario>/``) and how to remake them.

``python -m sample_traces.synth.samples`` rewrites all of them; the tests regenerate each one
in a temporary folder and require the same content in every file (gunzipped), so the committed
files are exactly the generator's output.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from . import generate, preset

ROOT = Path(__file__).resolve().parents[1] / "synthetic"
SAMPLES: dict[str, dict[str, int]] = {
    "colocated": {"ranks": 8, "steps": 2, "seed": 11},
    "disaggregated": {"ranks": 8, "steps": 2, "seed": 12},
    "one_step_off": {"ranks": 8, "steps": 2, "seed": 13},
    "stage_fused": {"ranks": 8, "steps": 2, "seed": 14},
}
"""Scenario → the run committed for it (8 ranks, 2 steps each; ≤ 3 MB in all)."""


def make(scenario: str, out: Path) -> dict[str, object]:
    spec = SAMPLES[scenario]
    cfg = preset(scenario, spec["ranks"], steps=spec["steps"], seed=spec["seed"])
    return generate(cfg, out, jobs=1, level=3)


def main() -> int:
    for scenario in SAMPLES:
        out = ROOT / scenario
        if out.exists():
            shutil.rmtree(out)
        make(scenario, out)
        size = sum(f.stat().st_size for f in out.iterdir())
        print(f"{out}: {size / 1e6:.2f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
