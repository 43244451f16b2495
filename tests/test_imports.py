"""Imports flow one way: no cycle between the project's modules, nor between its top-level packages.

Every ``.py`` file of the packages below is parsed with ``ast`` (nothing is imported). An edge
``a -> b`` is any import of project module ``b`` by module ``a``: at module level or inside a function
(lazy imports count: they are cycles that only wait for the right call order), absolute or
relative, and every ``"module.path:Name"`` string naming a project module (the registries that
import their entries lazily: ``pipelines/clean/registry.py``, ``pipelines/sources/__init__.py``).
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipelines", "synth", "classifiers", "relabel", "schemas", "model")
# The intended layering (lower first): a package may import only packages before it.
LAYERS = ("schemas", "synth", "relabel", "pipelines", "model", "classifiers")
_REGISTRY_ENTRY = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # path:line of the import or registry string


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``PACKAGES``."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` denotes: itself, or the nearest enclosing module that exists."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Edge]:
    """Every project module the file of ``module`` imports, anywhere in it, with where."""
    source = path.read_text(encoding="utf-8")
    return imports_in(module, source, path.name == "__init__.py", str(path.relative_to(ROOT)), modules)


def imports_in(module: str, source: str, is_package: bool, filename: str, modules: dict[str, Path]) -> list[Edge]:
    """``imports_of`` on source text: ``is_package`` for an ``__init__.py`` (relative imports start there)."""
    tree = ast.parse(source, filename=filename)
    package = module if is_package else module.rpartition(".")[0]
    edges: list[Edge] = []

    def add(name: str, line: int) -> None:
        target = _resolve(name, modules)
        if target is not None and target != module:
            edges.append(Edge(module, target, f"{filename}:{line}"))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in modules else base, node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _REGISTRY_ENTRY.match(node.value)
            if match and match.group(1) in modules:
                add(match.group(1), node.lineno)
    return edges


def import_graph() -> list[Edge]:
    modules = module_files()
    return [edge for module, path in modules.items() for edge in imports_of(module, path, modules)]


def find_cycles(edges: list[tuple[str, str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one node."""
    graph: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if a != b and b not in graph[a]:
            graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm; the graph is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
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
                components.append(sorted(component))

    for v in sorted({n for e in edges for n in e}):
        if v not in index:
            connect(v)
    return [_cycle_through(component, graph) for component in sorted(components)]


def _cycle_through(component: list[str], graph: dict[str, list[str]]) -> list[str]:
    """A shortest cycle from the component's first node back to it, staying inside the component."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in graph[v]:
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if w in members and w not in previous:
                    previous[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle through {component}")  # a component of > 1 node always has one


def _describe(cycle: list[str], where: dict[tuple[str, str], list[str]]) -> str:
    steps = [f"{a} -> {b}  ({', '.join(where[(a, b)][:3])})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(cycle) + "\n    " + "\n    ".join(steps)


def _where(edges: list[tuple[str, str, str]]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for a, b, at in edges:
        if at not in out[(a, b)]:
            out[(a, b)].append(at)
    return out


def test_the_graph_sees_lazy_imports_relative_imports_and_registry_strings():
    """The parser finds each kind of edge the cycle checks rely on (else they would pass vacuously)."""
    edges = {(e.source, e.target) for e in import_graph()}
    assert ("pipelines.render", "schemas.images") in edges  # module level
    assert ("pipelines.sources.synth", "synth.plan") in edges  # inside a method
    assert ("pipelines.sources", "pipelines.sources.synth") in edges  # a "module:Class" registry entry
    assert ("pipelines.clean.registry", "synth.augment") in edges

    modules = dict.fromkeys(("pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"), ROOT)

    def targets(source: str, module: str = "pkg.a", is_package: bool = False) -> set[str]:
        return {e.target for e in imports_in(module, source, is_package, "<test>", modules)}

    assert targets("from . import b") == {"pkg.b"}
    assert targets("from .b import thing") == {"pkg.b"}
    assert targets("from .sub import c", "pkg", is_package=True) == {"pkg.sub.c"}
    assert targets("from . import c", "pkg.sub", is_package=True) == {"pkg.sub.c"}
    assert targets("from .. import b", "pkg.sub.c") == {"pkg.b"}
    assert targets("def f():\n    from pkg import b\n") == {"pkg.b"}
    assert targets("import pkg.sub.c as c") == {"pkg.sub.c"}
    assert targets("from pkg.b import missing_name") == {"pkg.b"}
    assert targets("X = {'k': 'pkg.b:Thing', 'other': 'numpy.linalg:norm'}") == {"pkg.b"}
    assert targets("import numpy") == set()


def test_no_import_cycle_between_modules():
    edges = [(e.source, e.target, e.where) for e in import_graph()]
    cycles = find_cycles([(a, b) for a, b, _ in edges])
    where = _where(edges)
    assert not cycles, "import cycles between modules:\n" + "\n".join(_describe(c, where) for c in cycles)


def test_no_import_cycle_between_packages():
    edges = [(e.source.split(".")[0], e.target.split(".")[0], f"{e.source} -> {e.target} at {e.where}")
             for e in import_graph() if e.source.split(".")[0] != e.target.split(".")[0]]
    cycles = find_cycles([(a, b) for a, b, _ in edges])
    where = _where(edges)
    assert not cycles, "import cycles between packages:\n" + "\n".join(_describe(c, where) for c in cycles)


def test_packages_import_only_lower_layers():
    """schemas <- synth <- relabel <- pipelines <- model <- classifiers: each imports only those before it."""
    rank = {package: i for i, package in enumerate(LAYERS)}
    upward = list(dict.fromkeys(
        f"{e.source} -> {e.target} at {e.where}" for e in import_graph()
        if e.source.split(".")[0] in rank and e.target.split(".")[0] in rank
        and rank[e.target.split(".")[0]] > rank[e.source.split(".")[0]]))
    assert not upward, "imports against the layering " + " <- ".join(LAYERS) + ":\n" + "\n".join(upward)
