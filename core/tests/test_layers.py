"""The core package is layered: imports run down the layers, never up, never in a circle.

Layers, lowest first: ``_model`` < ``_policy`` < ``_engine`` < ``_audit`` < ``_runtime`` <
``_server`` < ``_cli``; the public modules (``charter``, ``charter.rules``, ``charter.audit``,
``charter.integration``, ``charter.testing``) sit on top. Every ``import`` statement counts,
including those inside functions and ``if TYPE_CHECKING:`` blocks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import charter

ROOT = Path(charter.__file__).parent
LAYERS = ("_model", "_policy", "_engine", "_audit", "_runtime", "_server", "_cli")
PUBLIC = len(LAYERS)


def module_name(path: Path) -> str:
    parts = ["charter", *path.relative_to(ROOT).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer(module: str) -> int | None:
    """The layer of a module; None for a module that belongs to no layer."""
    parts = module.split(".")
    if len(parts) == 1:
        return PUBLIC
    if parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    if not parts[1].startswith("_"):  # a public module, or a public package's private part
        return PUBLIC
    return None


def resolve(name: str) -> str | None:
    """The charter module `name` refers to (its longest known prefix), or None outside charter."""
    if name != "charter" and not name.startswith("charter."):
        return None
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(module: str) -> set[str]:
    """Every charter module `module` imports, anywhere in its body."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import sub` imports the submodule when there is one.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        for target in targets:
            resolved = resolve(target)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def test_the_layout_is_layered() -> None:
    """No flat private modules: everything private lives in one of the layer subpackages."""
    stray = sorted(m for m in MODULES if layer(m) is None)
    assert not stray, f"modules outside the layer subpackages: {stray}"


def test_no_import_goes_up_a_layer() -> None:
    upward = [
        f"{src} ({_layer_name(src)}) imports {dst} ({_layer_name(dst)})"
        for src, targets in sorted(GRAPH.items())
        for dst in sorted(targets)
        if (layer(src) or 0) < (layer(dst) or 0)
    ]
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def test_no_import_cycle() -> None:
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _layer_name(module: str) -> str:
    index = layer(module)
    if index is None:
        return "no layer"
    return "public" if index == PUBLIC else LAYERS[index]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path that returns to its start) per strongly connected component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan; the graph is small enough for recursion
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, set(c), c[0]) for c in components]


def _cycle_in(graph: dict[str, set[str]], members: set[str], start: str) -> list[str]:
    """A shortest path from `start` back to itself inside one strongly connected component."""
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{start} is in no cycle")  # pragma: no cover
