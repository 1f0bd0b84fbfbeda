"""The modules of ``lockgate.api`` import one another one way: the graph of their imports
(read from the source with ``ast``, every import counted: top level, in a function, under
``TYPE_CHECKING``) has no cycle, so no module imports, directly or through others of
``lockgate.api``, a module that imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

import lockgate.api

API = Path(lockgate.api.__file__).resolve().parent
PACKAGE = "lockgate.api"


def _module_names() -> dict[str, Path]:
    """``lockgate.api...`` module name -> its file, for every ``.py`` file of the package."""
    names = {}
    for path in sorted(API.rglob("*.py")):
        parts = list(path.relative_to(API).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join([PACKAGE, *parts])] = path
    return names


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``lockgate.api`` that ``module`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        # the module itself, or the nearest package of lockgate.api that holds it
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # ``from pkg import name``: the submodule ``pkg.name`` when there is one, else ``pkg``
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in known else stem
                       for alias in node.names]
        else:
            continue
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                resolved = resolve(target)
                if resolved and resolved != module:
                    found.add(resolved)
    return found


def import_graph() -> dict[str, set[str]]:
    """Each module of ``lockgate.api`` -> the modules of ``lockgate.api`` it imports."""
    known = _module_names()
    return {module: _imports(module, path, known) for module, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or ``None`` when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_of_lockgate_api_has_no_cycle() -> None:
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "lockgate.api imports in a circle: " + " -> ".join(cycle or [])


def test_the_walk_sees_the_imports_it_must_see() -> None:
    """The check would pass vacuously on a walk that found nothing: these edges are real."""
    graph = import_graph()
    assert {"lockgate.api.graphs", "lockgate.api.sql", "lockgate.api.stream"} <= graph["lockgate.api.pipeline"]
    assert "lockgate.api.nodes" in graph["lockgate.api.stream"]
    assert "lockgate.api.aggregates" in graph["lockgate.api.sql.compiler"]  # ``from .. import aggregates``
    assert "lockgate.api.sql.compiler" in graph["lockgate.api.sql"]
    assert "lockgate.api.pipeline" in graph["lockgate.api"]


def test_find_cycle_finds_a_circle_through_several_modules() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_public_names_stay_where_they_were() -> None:
    import lockgate
    from lockgate.api import pipeline

    for name in ("Input", "OpNode", "Pipeline", "Stream", "WindowedStream"):
        assert getattr(pipeline, name) is getattr(lockgate.api, name)
    for name in lockgate.api.__all__:
        assert getattr(lockgate.api, name) is not None
    for name in set(lockgate.__all__) & set(lockgate.api.__all__):
        assert getattr(lockgate, name) is getattr(lockgate.api, name)
