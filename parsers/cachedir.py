"""rlperf's cache directory, shared by every part that keeps derived files between runs.

``$RLPERF_CACHE_DIR`` wins, else ``$XDG_CACHE_HOME/rlperf``, else ``~/.cache/rlperf``. Nothing is
ever written next to the user's inputs.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str, create: bool = True) -> Path:
    """The cache directory (or a sub-folder ``parts`` of it), created on first use."""
    root = os.environ.get("RLPERF_CACHE_DIR")
    if root:
        base = Path(root).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "rlperf"
    path = base.joinpath(*parts)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
