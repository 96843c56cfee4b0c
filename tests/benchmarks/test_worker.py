"""The benchmark worker's task table, and the benchmarks' import graph (no module imports one that imports it)."""

import ast

from benchmarks import coordinator, worker
from tests import support

ROOT = support.ROOT
# Asked for by the coordinator outside the task list: after a phase's rounds, or before its first TFLite round.
SIDE_TASKS = {"sizes": None, "digits_int8": ("keras-vit",), "tflite_setup": coordinator.KERAS_IMPLS}


def _methods(path, name):
    """The method names of class `name` in `path`, read without importing it (torch_impl would import torch)."""
    (cls,) = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == name]
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}


METHODS = {
    "KerasBench": _methods(ROOT / "benchmarks" / "keras_impl.py", "KerasBench"),
    "TimmBench": _methods(ROOT / "benchmarks" / "torch_impl.py", "TimmBench"),
}


def test_every_task_the_coordinator_sends_is_in_the_workers_table_and_exists_on_its_bench():
    from benchmarks.__main__ import parse_args

    options = parse_args(["--bf16"])  # every phase, the step split among them (it follows bfloat16)
    assert options.step_split and options.tflite and options.pipeline_batches and options.input_wait_steps
    sent = {task: impls for _, impls, task, _, _ in coordinator.task_list(options)}
    sent.update({task: impls or tuple(worker.IMPLS) for task, impls in SIDE_TASKS.items()})
    assert set(sent) <= set(worker.TASKS), sorted(set(sent) - set(worker.TASKS))
    for task, impls in sent.items():
        method = getattr(worker.TASKS[task], "method", None)
        if method is None:  # a module-level measurement (peak, step_split), not a bench method
            continue
        for bench in {"TimmBench" if impl == "timm" else "KerasBench" for impl in impls}:
            assert method in METHODS[bench], f"{bench} has no {method}() for task {task!r}"


def _imports(path, package="benchmarks"):
    """The benchmarks modules `path` imports anywhere (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
            if node.module == package:
                found |= {f"{package}.{alias.name}" for alias in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == package}
    return found


def test_the_benchmarks_import_no_module_that_imports_them_back():
    graph = {f"benchmarks.{p.stem}": _imports(p) for p in (ROOT / "benchmarks").glob("*.py")}

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, (*seen, n))) for n in graph.get(start, ()))

    circles = sorted(m for m in graph if reaches(m, m))
    assert circles == [], f"modules on an import circle: {circles}"
