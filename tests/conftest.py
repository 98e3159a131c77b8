"""Shared test setup: the real corpus location and an isolated rlperf cache."""

from __future__ import annotations

from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never read or write the user's cache directory."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RLPERF_CACHE_DIR", str(tmp_path_factory.mktemp("rlperf-cache")))
    yield
    mp.undo()
