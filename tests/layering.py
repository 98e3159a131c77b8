"""The import graph of ``parsers/``, ``taxonomy/`` and ``analyzer/`` read from the source (AST),
and the layering rules it must follow (issue 11): no module imports a layer to its right, no
import cycle, no private name imported from another module.

Every import counts, wherever it is written: at module level, inside a function (imports put
there to dodge a cycle are still a dependency), and under ``if TYPE_CHECKING:`` (kept apart: no
runtime edge, so not part of a cycle, but still a rightward dependency of the code). Calls of
``importlib.import_module`` / ``__import__`` are listed as *dynamic*, violations of their own;
where they lead is read from the strings that name a module (the registries they would walk),
each an edge from the module holding the string (``named``). A registry is a tuple of the
imported modules or functions instead (``parsers.discover.PARSER_MODULES``,
``analyzer.cli.COMMANDS``), so its entries are ordinary imports.

    .venv/bin/python -m tests.layering            # the summary and every violation
"""

from __future__ import annotations

import ast
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("parsers", "taxonomy", "analyzer")

LAYERS: tuple[str, ...] = (
    "parsers", "taxonomy", "analyzer.model", "analyzer.assemble", "analyzer.classify",
    "analyzer.analyses", "analyzer.report", "analyzer.ops", "analyzer.cli",
)
"""The pipeline, left to right: a module may import its own layer and those to its left."""

PLACEMENT: dict[str, str] = {
    "parsers": "parsers",
    "taxonomy": "taxonomy",
    # One package per step: its name is its layer.
    "analyzer.model": "analyzer.model",
    "analyzer.assemble": "analyzer.assemble",
    # Where parse jobs run (a process pool, Ray tasks): below ingest, which maps its jobs there.
    "analyzer.engines": "analyzer.assemble",
    "analyzer.dataset": "analyzer.assemble",
    "analyzer.classify": "analyzer.classify",
    "analyzer.analyses": "analyzer.analyses",
    "analyzer.report": "analyzer.report",
    "analyzer.ops": "analyzer.ops",
    # The package itself: load() = ingest + runs + build, with every provider imported.
    "analyzer": "analyzer.analyses",
    # The command line and what only it uses.
    "analyzer.cli": "analyzer.cli",
    "analyzer.commands": "analyzer.cli",
    "analyzer.progress": "analyzer.cli",
    "analyzer.samples": "analyzer.cli",
    "analyzer.entry": "analyzer.cli",
}
"""Module (or package: every module below it) → layer; the longest matching prefix wins."""


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    where: str
    """``top`` (module level), ``local`` (inside a function), ``type`` (under TYPE_CHECKING) or
    ``named`` (a string naming the module, as the registries that ``importlib`` reads hold)."""
    names: tuple[str, ...] = ()
    """For ``from target import a, b`` when a and b are not modules: the names imported."""


def module_files(root: Path = REPO, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Dotted module name → file, for every module of the checked packages."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def layer_of(module: str, placement: dict[str, str] = PLACEMENT) -> str | None:
    best = max(
        (p for p in placement if module == p or module.startswith(p + ".")), key=len, default=None
    )
    return placement[best] if best else None


def _is_package(module: str, files: dict[str, Path]) -> bool:
    return files[module].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom, files: dict[str, Path]) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module, files):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every node with where it sits: ``type`` beats ``local`` beats ``top``."""
    stack: list[tuple[ast.AST, str]] = [(tree, "top")]
    while stack:
        node, where = stack.pop()
        yield node, where
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack += [(c, "type") for c in node.body] + [(c, where) for c in node.orelse]
            continue
        inner = "local" if where == "top" and isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) else where
        stack += [(c, inner) for c in ast.iter_child_nodes(node)]


def imports(module: str, files: dict[str, Path]) -> tuple[list[Import], list[int]]:
    """``module``'s imports of the checked packages, and the lines of its dynamic imports."""
    tree = ast.parse(files[module].read_text(encoding="utf-8"))
    found: list[Import] = []
    dynamic: list[int] = []
    for node, where in _walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, a.name, node.lineno, where) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node, files)
            names = [a.name for a in node.names]
            found += [
                Import(module, f"{base}.{n}", node.lineno, where)
                for n in names
                if f"{base}.{n}" in files
            ]
            plain = tuple(n for n in names if f"{base}.{n}" not in files)
            if plain:
                found.append(Import(module, base, node.lineno, where, plain))
        elif isinstance(node, ast.Call) and _dynamic_call(node):
            dynamic.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value \
                and node.value in files:
            found.append(Import(module, node.value, node.lineno, "named"))
    packages = {m.split(".")[0] for m in files}
    internal = [i for i in found if i.target.split(".")[0] in packages]
    return sorted(internal, key=lambda i: (i.line, i.target)), sorted(dynamic)


def _dynamic_call(node: ast.Call) -> bool:
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr == "import_module") or (
        isinstance(f, ast.Name) and f.id in ("__import__", "import_module"))


@dataclass
class Graph:
    files: dict[str, Path]
    imports: list[Import]
    dynamic: dict[str, list[int]]

    def edges(self, wheres: Iterable[str] = ("top", "local", "named")) -> dict[str, set[str]]:
        wanted = set(wheres)
        out: dict[str, set[str]] = defaultdict(set)
        for i in self.imports:
            if i.where in wanted and i.target != i.source and i.target in self.files:
                out[i.source].add(i.target)
        return out


def graph(root: Path = REPO, packages: Iterable[str] = PACKAGES) -> Graph:
    files = module_files(root, packages)
    found: list[Import] = []
    dynamic: dict[str, list[int]] = {}
    for module in files:
        mine, calls = imports(module, files)
        found += mine
        if calls:
            dynamic[module] = calls
    return Graph(files, found, dynamic)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted({*edges, *(w for ws in edges.values() for w in ws)}):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(out)


def violations(
    g: Graph, placement: dict[str, str] = PLACEMENT, layers: tuple[str, ...] = LAYERS
) -> list[str]:
    """Every violation as one stable line (no line numbers, so unrelated edits do not move it)."""
    found: set[str] = set()
    rank = {layer: i for i, layer in enumerate(layers)}
    for module in g.files:
        if layer_of(module, placement) is None:
            found.add(f"unplaced {module}")
    runtime = {(i.source, i.target) for i in g.imports if i.where != "type"}
    for i in g.imports:
        a, b = layer_of(i.source, placement), layer_of(i.target, placement)
        if a and b and rank[b] > rank[a]:
            kind = "rightward" if (i.source, i.target) in runtime else "rightward-type"
            found.add(f"{kind} {i.source} ({a}) -> {i.target} ({b})")
        for name in i.names:
            if name.startswith("_") and not name.startswith("__") and i.target != i.source:
                found.add(f"private {i.source} -> {i.target}.{name}")
    static = g.edges(("top", "local"))
    for kind, edges in (("cycle", static), ("cycle-via-registry", g.edges())):
        for component in cycles(edges):
            members = set(component)
            for a in component:
                found.update(f"{kind} {a} -> {b}" for b in sorted(edges[a] & members)
                             if f"cycle {a} -> {b}" not in found)
    found.update(f"dynamic {m}" for m in g.dynamic)
    return sorted(found)


def unexplained_locals(g: Graph) -> list[str]:
    """Function-local imports with no comment on their line: an import belongs at module level
    unless it defers a heavy dependency, and then its comment says so (``source:line``)."""
    out = []
    for i in g.imports:
        if i.where != "local":
            continue
        line = g.files[i.source].read_text(encoding="utf-8").splitlines()[i.line - 1]
        if "#" not in line:
            out.append(f"{i.source}:{i.line} -> {i.target}")
    return sorted(set(out))


def summary(g: Graph, found: list[str]) -> str:
    kinds = Counter(v.split(" ", 1)[0] for v in found)
    wheres = Counter(i.where for i in g.imports)
    local_analyzer = sum(
        1 for i in g.imports if i.where == "local" and i.source.split(".")[0] == "analyzer"
    )
    lines = [
        f"modules: {len(g.files)}; internal imports: {len(g.imports)} "
        f"(module level {wheres['top']}, function-local {wheres['local']}, TYPE_CHECKING "
        f"{wheres['type']}, "
        f"named in a string {wheres['named']}); "
        f"function-local imports in analyzer/: {local_analyzer}",
        "violations: "
        + (", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none")
        + f" (total {len(found)})",
    ]
    lines += [f"function-local import without a reason: {where}" for where in unexplained_locals(g)]
    static = cycles(g.edges(("top", "local")))
    for component in static:
        lines.append(f"cycle of {len(component)}: " + " ".join(component))
    for component in cycles(g.edges()):
        if component not in static:
            lines.append(
                f"cycle through registry strings, of {len(component)}: " + " ".join(component)
            )
    for module, calls in sorted(g.dynamic.items()):
        lines.append(f"dynamic imports: {module} line(s) {', '.join(map(str, calls))}")
    return "\n".join(lines)


def main() -> None:
    g = graph()
    found = violations(g)
    print(summary(g, found))
    if found:
        print("\n".join(found))


if __name__ == "__main__":
    main()
