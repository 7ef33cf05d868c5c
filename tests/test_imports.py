"""The package's layering: no import cycles, and a planner that imports without numba.

The import graph is read from the sources with ``ast``, not from a running interpreter,
so that a lazy import inside a function counts as well as one that happens to run.  An
edge goes from a module to the teir_plan module it names (``from teir_plan.executor
import walker`` names ``teir_plan.executor.walker``; ``from teir_plan.schedule.plan import
Plan`` names ``teir_plan.schedule.plan``).  A package's ``__init__``, which Python runs before
any of its submodules, is not an edge of every import below it: only the modules an
``__init__`` imports itself are its edges.  Imports under ``if TYPE_CHECKING:`` never run
and are left out.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "teir_plan"

# Lazy (function-level) imports that close a cycle, each with why it stays.  An edge
# listed here that no longer exists fails the test, so the list cannot go stale.
ALLOWED_LAZY_CYCLES: dict[tuple[str, str], str] = {
    ("teir_plan.api", "teir_plan.distributed.contract"):
        "tp.einsum hands dask arrays to the dask layer, whose tasks run each block through "
        "tp.einsum on the workers",
    ("teir_plan.planner.machine", "teir_plan.planner.calibrate"):
        "machine_params() measures the machine on first use when nothing is cached; the "
        "measurement reads MachineParams and sets the parameters in force",
    ("teir_plan.teir.records", "teir_plan.teir.validate"):
        "TEIR.validate() is the records' convenience entry to the rules, which read them",
    ("teir_plan.teir.records", "teir_plan.teir.serialize"):
        "TEIR.to_json/from_json are the records' convenience entries to the JSON forms",
    ("teir_plan.teir.records", "teir_plan.teir.text"):
        "TEIR.format() is the records' convenience entry to the table form",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text(), str(p))
            for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(node: ast.AST, lazy: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements under ``node``: at module level only (``lazy`` False: those
    in ``if``/``try`` blocks run at import too), or anywhere (``lazy`` True)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if _type_checking(child):
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append(child)
        elif lazy or not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                            ast.ClassDef, ast.Lambda)):
            found.extend(_imports(child, lazy))
    return found


def _targets(module: str, stmt: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    if isinstance(stmt, ast.Import):
        return {a.name for a in stmt.names if a.name in known}
    base = stmt.module or ""
    if stmt.level:  # relative: from the importing module's package
        package = module.split(".")
        package = package[:len(package) - stmt.level + (module + ".__init__" in known)]
        base = ".".join(package + ([base] if base else []))
    out = set()
    for alias in stmt.names:
        if f"{base}.{alias.name}" in known:  # a submodule
            out.add(f"{base}.{alias.name}")
        elif base in known:
            out.add(base)
    return out


def _lazy_names(tree: ast.Module) -> set[str]:
    """The modules of the top-level package's names imported on first use (its ``_LAZY``
    table, read through importlib rather than an import statement)."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)):
            return {v.value for v in node.value.values if isinstance(v, ast.Constant)}
    return set()


def import_graph(lazy: bool) -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {name: {t for stmt in _imports(tree, lazy) for t in _targets(name, stmt, known)
                    if t != name}
             for name, tree in modules.items()}
    if lazy:
        graph["teir_plan"] |= _lazy_names(modules["teir_plan"])
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_module_level_imports_have_no_cycle() -> None:
    cycle = find_cycle(import_graph(lazy=False))
    assert cycle is None, "import cycle at module level: " + " -> ".join(cycle or [])


def test_the_lazy_imports_have_no_cycle_but_the_listed_ones() -> None:
    graph = import_graph(lazy=True)
    for (src, dst), why in ALLOWED_LAZY_CYCLES.items():
        assert dst in graph[src], f"allow-listed import {src} -> {dst} is gone ({why})"
        graph[src] = graph[src] - {dst}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle (function-level imports included): " + " -> ".join(
        cycle or [])


def test_the_package_names_imported_on_first_use_are_read() -> None:
    assert {"teir_plan.api", "teir_plan.executor"} <= import_graph(lazy=True)["teir_plan"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_planner_imports_without_numba() -> None:
    """The planner decides with the tile rules (teir_plan/tiles.py), not the executor's
    kernels: importing it must not load numba (nor, through it, compile anything)."""
    code = ("import sys\n"
            "import teir_plan.planner.cost, teir_plan.planner.search, "
            "teir_plan.planner.candidates, teir_plan.planner.reduce\n"
            "print(sorted(m for m in sys.modules if m == 'numba' or "
            "m.startswith(('numba.', 'teir_plan.executor'))))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]", result.stdout


def test_no_public_function_shares_a_subpackage_name() -> None:
    """``tp.plan`` and ``tp.explain`` are functions: were a subpackage named like one,
    importing it would rebind the package attribute (or the function would hide it)."""
    code = ("import teir_plan as tp, teir_plan.schedule.build, teir_plan.render.report\n"
            "print(callable(tp.plan), callable(tp.explain), callable(tp.pseudocode), "
            "tp.schedule.build.__name__, tp.render.report.__name__)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["True", "True", "True", "teir_plan.schedule.build",
                                     "teir_plan.render.report"]
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    import teir_plan as tp
    assert not packages & set(tp.__all__), packages & set(tp.__all__)
