"""Packaging: every third-party import of the installed packages is a declared dependency.

`make demo` installs the runtime dependencies only, so a module that imports something only the
test extra brings would break it on a fresh machine.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("parsers", "taxonomy", "analyzer")
IMPORT_NAME = {"vl-convert-python": "vl_convert", "traceinsight": "hta"}
OPTIONAL = {"hta": "hta", "ray": "ray"}
"""Imports that an extra provides, with the extra's name; the code imports them lazily and says
what to install when they are missing."""


def requirement_names(requirements: list[str]) -> set[str]:
    names = set()
    for requirement in requirements:
        name = re.split(r"[<>=!~;\s\[]", requirement, maxsplit=1)[0].lower()
        names.add(IMPORT_NAME.get(name, name.replace("-", "_")))
    return names


def third_party_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top in sys.stdlib_module_names or top in PACKAGES or top == "__future__":
                        continue
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_import_is_a_runtime_dependency_or_an_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = requirement_names(project["dependencies"])
    extras = {
        extra: requirement_names(reqs) for extra, reqs in project["optional-dependencies"].items()
    }
    imports = third_party_imports()
    assert {"polars", "msgspec", "typer", "altair"} <= set(imports)
    for module, files in imports.items():
        if module in OPTIONAL:
            assert module in extras[OPTIONAL[module]], module
            continue
        assert module in runtime, (
            f"{module} (imported by {sorted(files)}) is not a runtime dependency"
        )


def test_torch_is_never_a_runtime_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch" not in requirement_names(project["dependencies"])
    assert "torch" not in third_party_imports()
