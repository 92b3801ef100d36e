"""Every lockcheck module imports on its own, and no two modules import each other.

The walk counts the imports a module makes when it loads and those inside its
functions (which run later, but still tie the two modules together); those under
`if TYPE_CHECKING:` never run and are left out. A cycle is a set of modules each
reachable from the others; the ones in ACCEPTED are known, with the reason.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import lockcheck

ACCEPTED: dict[frozenset[str], str] = {
    # not a cycle of code: the package tries its optional C extension, which lives in
    # the package (`porcupine/checker.py` imports `lockcheck.porcupine` for it)
    frozenset({"lockcheck.checker.porcupine", "lockcheck.checker.porcupine.checker"}):
        "porcupine's optional C search",
}


def modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(lockcheck.__path__, "lockcheck."))


def source(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: at module level or in a function."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in _imports_in(child))
            continue
        yield from _imports_in(node)


def _imports_in(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    else:
        yield from _imports(node)


def imported(module: str, known: set[str]) -> set[str]:
    """The lockcheck modules `module` imports (a name imported from a package counts as
    its submodule when there is one)."""
    path = source(module)
    if path.suffix != ".py":
        return set()  # a compiled extension (porcupine's C search)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parts = parts[:len(parts) - node.level + 1]
            base = ".".join([*parts, *([base] if base else [])])
        out.add(base)
        out |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}
    return {m for m in out if m in known and m != module}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

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
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("module", modules())
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)


def test_no_import_cycles_but_the_accepted_ones() -> None:
    known = set(modules())
    graph = {m: imported(m, known) for m in known}
    found = set(cycles(graph))
    new = [sorted(c) for c in found - set(ACCEPTED)]
    assert not new, f"import cycles: {new}"
    gone = [why for c, why in ACCEPTED.items() if c not in found]
    assert not gone, f"no longer cycles, remove them from ACCEPTED: {gone}"


def test_the_walk_sees_a_cycle_through_a_function_level_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    known = set(modules())
    # `preflight.provider_findings` imports the providers' table inside the function
    assert "lockcheck.cluster.providers" in imported("lockcheck.preflight", known)
    # ... and `providers` imports `preflight` for `Finding` only under TYPE_CHECKING
    assert "lockcheck.preflight" not in imported("lockcheck.cluster.providers", known)
