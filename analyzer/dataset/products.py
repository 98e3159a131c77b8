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
from functools import cache
from pathlib import Path
from typing import Any

from parsers.discover import DATASET_MANIFEST as MANIFEST

PRODUCTS = "products"
CODE_ROOTS = ("parsers", "taxonomy", "analyzer")
"""The packages whose code and data shape a report."""
CODE_SUFFIXES = (".py", ".toml", ".json", ".css", ".js", ".html")


@cache
def code_version() -> str:
    """A hash of every file of rlperf's code and data by name, size and modification time (an
    edit changes the time; reading them all would cost more than reusing a report saves): a
    report kept by other code is not reused (the version number does not change while code is
    edited)."""
    here = Path(__file__).resolve().parents[2]
    digest = hashlib.sha1()
    for root in CODE_ROOTS:
        for path in sorted((here / root).rglob("*")):
            if path.suffix in CODE_SUFFIXES and "__pycache__" not in path.parts:
                st = path.stat()
                digest.update(f"{path.relative_to(here)}|{st.st_size}|{st.st_mtime_ns}".encode())
    return digest.hexdigest()


def key(root: Path, options: dict[str, Any]) -> str:
    """The key of a report of dataset ``root`` made with ``options`` (JSON-able values)."""
    ident = {
        "manifest": hashlib.sha1((root / MANIFEST).read_bytes()).hexdigest(),
        "code": code_version(),
        "options": options,
    }
    return hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()


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


def umask() -> int:
    """The process's umask (reading it means setting it: set back at once)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask
