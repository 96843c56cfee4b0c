"""Imports point one way: no circle among the trainer's modules (function-level imports count too), and the
library never imports the trainer. Read from the source with `ast`; nothing is imported."""

import ast

from tests import support

ROOT = support.ROOT


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path, package, modules=()):
    """The modules `path` imports anywhere in its body (relative imports resolved against `package`): for
    `from X import y`, X.y where that is one of `modules`, else X."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                names.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return names


def _graph(top):
    modules = {_module_name(p): p for p in (ROOT / top).rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {m for m in _imports(path, package, modules) if m in modules and m != name}
    return graph


def _circles(graph):
    """Every module that lies on a circle of imports, with one circle through it."""
    found = {}
    for start in graph:
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    found[start] = [*trail, start]
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    return found


def test_the_trainer_modules_import_one_way():
    graph = _graph("training")
    assert {"training.distribution", "training.sharding", "training.placements"} <= set(graph)
    assert "training.placements" in graph["training.sharding"]  # the scan sees the imports it is about
    circles = _circles(graph)
    assert not circles, "\n".join(" -> ".join(trail) for trail in circles.values())


def test_the_library_never_imports_the_trainer():
    for path in (ROOT / "keras_vit").rglob("*.py"):
        package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
        assert not any(m == "training" or m.startswith("training.") for m in _imports(path, package)), path
