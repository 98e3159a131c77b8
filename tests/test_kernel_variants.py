"""Kernels that share a short name: a template kernel instantiated for many dtypes and functors
(PyTorch's ``at::native::elementwise_kernel<…>``) is many names with one short name. Listing
one of them by its short name and its own share read as the whole kernel's: nsys-ai's
``mfu_2gpu_before.sqlite`` listed ``elementwise_kernel 4.9%`` among its top compute kernels,
one of 8 instantiations that take 16.2% of the kernel time together."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import polars as pl
import pytest

import analyzer

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
MFU = CORPUS / "nsys-ai" / "mfu_2gpu_before.sqlite"


def _elementwise_shares() -> tuple[int, float, float]:
    """Read off the sqlite: how many distinct ``elementwise_kernel`` instantiations ran, their
    share of all kernel time together, and the largest one's."""
    with sqlite3.connect(f"file:{MFU}?mode=ro", uri=True) as db:
        rows = db.execute(
            "select s.value, sum(k.end - k.start) from CUPTI_ACTIVITY_KIND_KERNEL k "
            "join StringIds s on s.id = k.demangledName group by s.value"
        ).fetchall()
    total = sum(ns for _, ns in rows)
    mine = [ns for name, ns in rows if re.match(r"^void (\w+::)*elementwise_kernel<", name)]
    return len(mine), sum(mine) / total, max(mine) / total


def test_a_listed_kernel_says_how_many_share_its_short_name() -> None:
    variants, together, largest = _elementwise_shares()
    assert variants == 8
    assert together == pytest.approx(0.1623, abs=5e-5)
    assert largest == pytest.approx(0.0486, abs=5e-5)
    findings = analyzer.load([MFU]).gpu_findings
    top = findings.filter((pl.col("id") == "gpu.top_kernel") & (pl.col("stage") == ""))
    assert top.height == 1
    evidence = top["evidence"][0]
    assert (f"elementwise_kernel {largest:.1%} (1 of {variants} elementwise_kernel variants, "
            f"{together:.1%} together)") in evidence
    assert "flash_fwd_kernel 50.9%;" in evidence  # a kernel alone under its name says no more
