"""The framework profile of the run (product ``profile``): named with ``--framework``, else stated
by a parser, else the one whose detection patterns match the most names; ``--rules`` puts a
user's rules first.
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
    one whose detection patterns match the most names."""
    names = (
        events.filter(pl.col("kind").is_in(["annotation", "gpu_annotation", "log_stage"]))["name"]
        .cast(pl.String)
        .unique()
    )
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
