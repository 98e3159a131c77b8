"""The analyses: each module declares the products it computes (``@provides``, see
``analyzer/products.py``); importing this package imports every step of the pipeline, so that
a run can compute any product. Data flows one way: assembly → classification → analyses →
reports.
"""
# No ``from __future__ import annotations`` here: it binds the name ``annotations``, which would
# shadow the submodule of that name in the import below.

from .. import assemble, classify, placement, steps
from . import (
    annotations,
    breakdown,
    bubbles,
    gpu_time,
    guidelines,
    logs,
    overview,
    quality,
    sync,
    workdepth,
)

__all__ = ["annotations", "assemble", "breakdown", "bubbles", "classify", "gpu_time", "guidelines", "logs", "overview",
           "placement", "quality", "steps", "sync", "workdepth"]
