"""Shared test setup: the real corpus location and an isolated rlperf cache."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
"""CI runs the property tests on a fixed sequence of examples (set by .ci/run); a developer's
`make test` explores new ones each run."""

RAY_TOKEN = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
"""The authentication of the Ray clusters this test process starts and of every driver it runs.
Ray reads the mode and the token once, when it is first imported or connects, and any test may
be the first to import it: so they are in this process's environment from its start, never
set by a test (a token set after the import is ignored and the cluster refuses the driver), and
never Ray's default ~/.ray/auth_token of the user's own clusters."""
os.environ |= RAY_TOKEN

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"

LONGEST_FIRST = ("test_fuzz_corpus.py", "test_ray_engine.py")
"""The files that run for minutes. `make test` hands whole files to its workers in the order
collected (--dist loadfile --no-loadscope-reorder): started first, neither is the one left
running at the end while the other worker idles."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never read or write the user's cache directory."""
    mp = pytest.MonkeyPatch()
    mp.setenv("RLPERF_CACHE_DIR", str(tmp_path_factory.mktemp("rlperf-cache")))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _default_engine() -> None:
    """Each test starts on the local engine, as each rlperf process does: a command run in
    process with ``--engine ray`` leaves its choice in the thread's context, and a later test's
    ``analyzer.load`` would otherwise parse on a Ray cluster that is gone."""
    from analyzer import engines  # the package under test, imported once it is needed

    token = engines._CHOICE.set(None)
    yield
    engines._CHOICE.reset(token)
