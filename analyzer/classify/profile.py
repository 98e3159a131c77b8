"""The framework profile of the run (product ``profile``): named with ``--framework``, else stated
by a parser, else the one whose detection patterns match the most names; ``--rules`` puts a
user's rules first.

Inference engines (profiles with ``engine = true``: vLLM, SGLang) record few annotations of
their own, and the batch annotation they share names no engine, so when no RL framework's
annotations match, the engine profiles are scored again over the Python stack and operator
names as well (``vllm/v1/worker/gpu_model_runner.py(…): execute_model``, ``sglang::…``).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from taxonomy import profiles as tp

from ..model.options import Options
from ..model.products import provides
from ..model.run import SourceInfo


@provides("profile")
def detect_profile(
    events: pl.DataFrame, sources: list[SourceInfo], options: Options
) -> dict[str, Any]:
    """The profile of the run: ``--framework`` if given, else a parser's ``framework``, else the
    one whose detection patterns match the most names (annotations, log timers and the titles
    the processes gave themselves)."""
    names = pl.concat([
        events.filter(pl.col("kind").is_in(["annotation", "gpu_annotation", "log_stage"]))["name"]
        .cast(pl.String),
        pl.Series(_process_names(sources), dtype=pl.String),
    ]).unique()
    framework = options.framework
    profiles = tp.load_profiles(options.rules)
    if framework and not any(
        framework == p.name or framework in p.frameworks for p in profiles.values()
    ):
        raise tp.ProfileError(
            f"--framework {framework}: no such profile ({', '.join(sorted(profiles))})"
        )
    meta = next((s.meta for s in sources if s.meta.get("framework")), {})
    detection = tp.detect(names, meta=meta, profiles=profiles, framework=framework)
    if not framework and not meta.get("framework"):
        detection = _engine_detection(detection, events, names, profiles)
    return {
        "profile": detection.profile,
        "name": detection.profile.name,
        "title": detection.profile.title,
        "version": detection.version,
        "reason": detection.reason,
        "scores": dict(detection.scores),
        "detection": detection,
        "profiles": profiles,
    }


ENGINE_NAME_KINDS = ("annotation", "gpu_annotation", "python", "cpu_op")
"""Where an engine's names are: its few annotations, its Python stack and its custom operators
(beside the titles its processes gave themselves, :func:`_process_names`)."""


def _process_names(sources: list[SourceInfo]) -> list[str]:
    """The names the sources' processes call themselves (Kineto ``process_name`` rows:
    ``VLLM::Worker_TP0``, ``ray::WorkerDict.actor_rollout_compute_log_prob``): an engine's
    worker that recorded no engine op of its own still names its engine there."""
    return sorted({str(n) for s in sources for n in s.meta.get("process_names") or [] if n})


def _engine_detection(
    found: tp.Detection, events: pl.DataFrame, names: pl.Series, profiles: dict[str, tp.Profile]
) -> tp.Detection:
    """The engine profile whose patterns match the most annotation, process, Python and operator
    names, when no RL framework's names decided (the generic fallback or an engine won); else
    ``found``. Scores stay those of the annotation pass, engines' replaced by this pass's."""
    if found.profile.name != tp.GENERIC and not found.profile.engine:
        return found
    engines = {n: p for n, p in profiles.items() if p.engine}
    if not engines:
        return found
    wider = pl.concat([
        names,
        events.filter(pl.col("kind").is_in(ENGINE_NAME_KINDS[2:]))["name"].cast(pl.String),
    ]).unique()
    again = tp.detect(wider, profiles={**engines, tp.GENERIC: profiles[tp.GENERIC]})
    if again.profile.name == tp.GENERIC:
        return found
    return tp.Detection(
        profile=again.profile, version=again.version,
        reason=again.reason, scores={**found.scores, **again.scores},
    )
