"""The JSON report: the run summary as one document (also usable as an audit baseline)."""

from __future__ import annotations

import json
import math
from typing import Any

from ..run import Run

SCHEMA = "rlperf-report/1"


def render(run: Run) -> str:
    document = {"schema": SCHEMA, **run.summary()}
    return json.dumps(_clean(document), indent=2, default=str)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
