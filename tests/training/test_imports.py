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
    return _imports_in(ast.parse(path.read_text(), str(path)), package, modules)


def _imports_in(tree, package, modules=()):
    names = set()
    for node in ast.walk(tree):
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
    placement = {f"training.placement.{name}" for name in ("distribution", "sharding", "placements")}
    assert placement <= set(graph)
    assert "training.placement.placements" in graph["training.placement.sharding"]  # the scan sees what it is about
    circles = _circles(graph)
    assert not circles, "\n".join(" -> ".join(trail) for trail in circles.values())


def test_the_library_never_imports_the_trainer():
    for path in (ROOT / "keras_vit").rglob("*.py"):
        package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
        assert not any(m == "training" or m.startswith("training.") for m in _imports(path, package)), path


def _without_bodies(tree, functions=None):
    """`tree` with the bodies of `functions` (all functions when None) emptied: imports there run only when called."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (functions is None or node.name in functions):
            node.body = [ast.Pass()]
    return tree


def test_the_jax_route_imports_no_tensorflow_strategy_module():
    """The JAX placement takes the strategy names and `StrategyError` from the options: what
    `training.placement.distribution` imports outside its TensorFlow branch, and what that imports when loaded,
    never reaches the TensorFlow strategy module."""
    modules = {_module_name(p): p for p in (ROOT / "training").rglob("*.py")}

    def loaded(name, functions=None):
        path = modules[name]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = _without_bodies(ast.parse(path.read_text(), str(path)), functions)
        return {m for m in _imports_in(tree, package, modules) if m in modules}

    tensorflow_branch = ("_tensorflow_placement", "_tensorflow_gpu_name")
    todo = list(loaded("training.placement.distribution", functions=tensorflow_branch))
    reached = set()
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(loaded(name))
    assert {"training.options", "training.placement.sharding"} <= reached  # the scan follows the JAX route
    assert "training.placement.strategy" not in reached, sorted(reached)
