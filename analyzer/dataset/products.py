"""Analysis products kept in a dataset: a report, stored under a key of everything that shapes
it (the dataset's manifest, rlperf's code, the command's options and the files they name), so
that analyzing the dataset again with the same options reads the report instead of computing
it; any other options, code or tables give another key and the report is computed again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .recall import LINES, PRODUCTS, code_version, umask


def key(manifest: bytes, options: dict[str, Any]) -> str:
    """The key of a report of the dataset whose manifest is ``manifest`` made with ``options``
    (JSON-able values)."""
    ident = {
        "manifest": hashlib.sha1(manifest).hexdigest(),
        "code": code_version(),
        "options": options,
    }
    return hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def reports(root: Path) -> list[Path]:
    """The folders of the reports dataset ``root`` keeps (``lines/`` holds the words that find
    them, analyzer/dataset/recall.py)."""
    folder = root / PRODUCTS
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name != LINES and not p.name.startswith("."))


def stored(root: Path, name: str) -> tuple[bytes, list[str]] | None:
    """The kept report ``name`` and the warnings its run had, or None (none, or unreadable)."""
    folder = root / PRODUCTS / name
    try:
        info = json.loads((folder / "info.json").read_text())
        data = (folder / "report").read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or len(data) != info.get("bytes"):
        return None
    warnings = info.get("warnings")
    return (data, [str(w) for w in warnings]) if isinstance(warnings, list) else None


def keep(root: Path, name: str, data: bytes, warnings: list[str]) -> None:
    """Keep a report (renamed into place whole), its folder with the permissions the umask
    gives any new folder as the dataset's own folders have (mkdtemp makes it 0700: a dataset on
    shared storage is read by other users); a dataset that cannot take it stays as it is:
    keeping is an optimisation, never an error."""
    folder = root / PRODUCTS / name
    try:
        folder.parent.mkdir(exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder.parent))
        try:
            tmp.chmod(0o777 & ~umask())
            (tmp / "report").write_bytes(data)
            info = {"bytes": len(data), "warnings": warnings}
            (tmp / "info.json").write_text(json.dumps(info))
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        return
