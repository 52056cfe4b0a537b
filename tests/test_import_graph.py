"""The package's import graph has no cycles, and every module imports on its own.

The graph is read from the source with ``ast``: every ``import`` and
``from ... import`` of a combolayer module is an edge, wherever it stands
(a function-level import of a sibling module hides a cycle, it does not
remove it), except under ``if TYPE_CHECKING:``. Imports of other packages
are not edges.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import combolayer

PACKAGE = "combolayer"
ROOT = Path(combolayer.__file__).resolve().parent


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    names = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Import nodes anywhere in ``tree``, skipping ``if TYPE_CHECKING:`` bodies."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _imports(child)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node)


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1])
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                # "import a.b.c" of a name inside a module: the longest module prefix
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith(PACKAGE) and target != name:
                    graph[name].add(target)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A concrete cycle through the component's first module, for the message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        v = frontier.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                frontier.append(w)
    return component


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]
    assert _cycle_in(["a", "b", "c"], graph) == ["a", "b", "c", "a"]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_type_checking_imports_are_not_edges():
    tree = ast.parse(textwrap.dedent("""
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from .layer import ComboLayer
        def f():
            from .specs import ILP
    """))
    found = [node.module for node in _imports(tree) if isinstance(node, ast.ImportFrom)]
    assert found == ["typing", "specs"]


def test_no_import_cycles():
    graph = import_graph()
    assert graph["combolayer"], "the graph builder found no imports at all"
    cycles = [" -> ".join(_cycle_in(c, graph)) for c in find_cycles(graph)]
    assert not cycles, "import cycles:\n  " + "\n  ".join(cycles)


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module as the first combolayer import of a process (third-party packages
    are shared, combolayer's modules are dropped before each)."""
    names = sorted(set(module_names()) - {"combolayer.__main__"})
    script = textwrap.dedent(f"""
        import importlib, sys, traceback
        failed = []
        for name in {names!r}:
            for loaded in [m for m in sys.modules if m.split(".")[0] == "combolayer"]:
                del sys.modules[loaded]
            try:
                importlib.import_module(name)
            except Exception:
                failed.append(name + ": " + traceback.format_exc(limit=3))
        print("\\n".join(failed))
        sys.exit(1 if failed else 0)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_module_is_named_after_a_package_it_imports():
    """A module named after the package it wraps (``backends/torch.py`` importing torch)
    shadows that package in tracebacks and in imports relative to its folder. The
    modules of ``combolayer.interop`` are the exception by design: each is named after
    the library whose models it adapts (``combolayer.interop.pyepo``)."""
    shadowing = []
    for name, path in module_names().items():
        short = name.rpartition(".")[2]
        if name.startswith("combolayer.interop."):
            continue
        imported = {alias.name.split(".")[0] for node in _imports(ast.parse(path.read_text()))
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split(".")[0] for node in _imports(ast.parse(path.read_text()))
                     if isinstance(node, ast.ImportFrom) and not node.level and node.module}
        if short in imported:
            shadowing.append(f"{name} imports {short}")
    assert not shadowing, "modules named after a package they import: " + ", ".join(shadowing)
