"""The JSON report: the run summary as one document (also usable as an audit baseline)."""

from __future__ import annotations

import json
import math
from typing import Any

from ..model.run import Run
from .sections import SOURCES, Section, arranged, failures, sections
from .sources import held_ranks

SCHEMA = "rlperf-report/1"


def render(run: Run) -> str:
    document = {"schema": SCHEMA, **summary(run)}
    return json.dumps(_clean(document), indent=2, default=str)


def summary(run: Run) -> dict[str, Any]:
    """Everything the reports show, as plain JSON-able data: one key per report section, in the
    layout's order (the sources, notes and warnings at their place), then the failures."""
    document: dict[str, Any] = {}
    for part in arranged(sections(run)):
        if isinstance(part, Section):
            frame = part.frame if part.everything is None else part.everything
            document[part.key] = frame.to_dicts() if frame is not None else []
            for name, frame in part.details.items():
                document[name] = frame.to_dicts()
        elif part == SOURCES:
            document |= _sources(run)
    document["failures"] = [
        {"failed": f.what, "module": f.module, "error": f.error} for f in failures(run)
    ]
    return document


def _sources(run: Run) -> dict[str, Any]:
    held = held_ranks(run.events)
    return {
        "sources": [
            {"path": str(s.path), "format": s.format, "rank": s.rank,
             "ranks": held.get(s.index, []), "warnings": s.warnings}
            for s in run.sources
        ],
        "unknown_files": [str(p) for p in run.unknown],
        "notes": run.notes,
        "warnings": run.warnings,
    }


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
