"""The analyses: each module declares the products it computes (``@provides``, see
``analyzer/model/products.py``); importing this package imports every step of the pipeline, so that
a run can compute any product. Data flows one way: assembly → classification → analyses →
reports.
"""
# No ``from __future__ import annotations`` here: it binds the name ``annotations``, which would
# shadow the submodule of that name in the import below.

from ..assemble import clock, collectives, ranks
from ..classify import classified, dims, placement, pools, profile, ranges, steps, timeline
from . import (
    annotations,
    breakdown,
    bubbles,
    efficiency,
    findings,
    gpu_findings,
    gpu_time,
    guidelines,
    logs,
    outliers,
    overview,
    pipeline,
    quality,
    sync,
    workdepth,
)

PIPELINE = (
    clock,
    collectives,
    ranks,
    profile,
    ranges,
    steps,
    timeline,
    pools,
    classified,
    dims,
    placement,
    annotations,
    breakdown,
    bubbles,
    efficiency,
    findings,
    gpu_findings,
    gpu_time,
    guidelines,
    logs,
    outliers,
    overview,
    pipeline,
    quality,
    sync,
    workdepth,
)
"""Every module holding providers: assembly, classification, then the analyses."""
