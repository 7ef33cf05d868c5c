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
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "teir_plan"

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


def _named_modules(tree: ast.Module, known: set[str]) -> set[str]:
    """The modules the top-level package names in strings: its names imported on first use
    (its ``_LAZY`` table) and the array backends it registers (teir_plan/backends.py),
    both read through importlib rather than an import statement."""
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in known}


def import_graph(lazy: bool) -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph = {name: {t for stmt in _imports(tree, lazy) for t in _targets(name, stmt, known)
                    if t != name}
             for name, tree in modules.items()}
    if lazy:
        graph["teir_plan"] |= _named_modules(modules["teir_plan"], known)
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


def subpackage(module: str) -> str:
    """The subpackage a module belongs to (``teir_plan.planner.cost``: ``planner``); a
    top-level module (``teir_plan.tiles``) is a layer of its own."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of ``graph`` with more than one node (each a set
    of modules that import one another, directly or not), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_crosses_a_subpackage() -> None:
    """Function-level imports included, none allowed: a cycle among modules of one
    subpackage (the TEIR records and their convenience entries to the rules and forms)
    is that subpackage's own affair; one through two subpackages means the layers
    (docs/architecture.md) are not layers."""
    crossing = [sorted(c) for c in strongly_connected(import_graph(lazy=True))
                if len({subpackage(m) for m in c}) > 1]
    assert not crossing, "import cycles across subpackages: " + "; ".join(
        " <-> ".join(c) for c in crossing)


def test_the_cycle_check_sees_a_cycle_across_subpackages() -> None:
    graph = {"teir_plan.a.x": {"teir_plan.b.y"}, "teir_plan.b.y": {"teir_plan.a.x"},
             "teir_plan.c.p": {"teir_plan.c.q"}, "teir_plan.c.q": {"teir_plan.c.p"},
             "teir_plan.d.r": {"teir_plan.a.x"}}
    components = strongly_connected(graph)
    assert sorted(map(sorted, components)) == [["teir_plan.a.x", "teir_plan.b.y"],
                                               ["teir_plan.c.p", "teir_plan.c.q"]]
    assert [subpackage(m) for m in ("teir_plan.a.x", "teir_plan.tiles", "teir_plan")] == [
        "a", "tiles", "teir_plan"]


def test_the_package_names_imported_on_first_use_are_read() -> None:
    assert {"teir_plan.api", "teir_plan.executor"} <= import_graph(lazy=True)["teir_plan"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_planner_imports_without_numba() -> None:
    """The planner decides with the tile rules (teir_plan/tiles.py) and the machine
    parameters (teir_plan/machine/), not the executor's kernels or the calibrations that
    time them: importing it, every module of it, must not load numba (nor, through it,
    compile anything).  (llvmlite's host queries do load: teir_plan/isa.py reads the
    compile target's vector registers from them, and the micro-tile shape with them.)"""
    planner = sorted(p.stem for p in (PACKAGE / "planner").glob("*.py") if p.stem != "__init__")
    machine = sorted(p.stem for p in (PACKAGE / "machine").glob("*.py") if p.stem != "__init__")
    modules = (["teir_plan.planner", "teir_plan.machine"]
               + [f"teir_plan.planner.{m}" for m in planner]
               + [f"teir_plan.machine.{m}" for m in machine])
    assert len(planner) > 10 and "store" in machine
    code = ("import sys\n"
            f"import {', '.join(modules)}\n"
            "from teir_plan.machine import MachineParams\n"
            "assert len(MachineParams().gemm_efficiency) == 864\n"
            "print(sorted(m for m in sys.modules if m == 'numba' or "
            "m.startswith(('numba.', 'teir_plan.executor', 'teir_plan.calibration'))))\n")
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


def private_names_crossing(modules: dict[str, ast.Module]) -> list[str]:
    """Every private name (``_x``, not a dunder) one teir_plan module takes from another:
    imported by ``from teir_plan.m import _x``, or read as ``m._x`` through a name bound
    to a teir_plan module.  A name another module needs is part of its module's interface,
    so it carries a public name (or the two modules are one)."""
    known = set(modules)
    found = []
    for name, tree in modules.items():
        bound: set[str] = set()  # local names of imported teir_plan modules
        for stmt in _imports(tree, lazy=True):
            if isinstance(stmt, ast.Import):
                bound |= {a.asname for a in stmt.names if a.name in known and a.asname}
                continue
            for target in _targets(name, stmt, known):
                for alias in stmt.names:
                    if f"{target.rsplit('.', 1)[0]}.{alias.name}" == target or (
                            f"{target}.{alias.name}" in known):
                        bound.add(alias.asname or alias.name)
                    elif alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{name} imports {target}.{alias.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in bound and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                found.append(f"{name} reads {node.value.id}.{node.attr}")
    return sorted(set(found))


def test_no_private_name_crosses_a_module() -> None:
    crossing = private_names_crossing(_modules())
    assert not crossing, "private names used across modules: " + "; ".join(crossing)


def test_the_private_name_check_sees_both_forms() -> None:
    modules = {
        "teir_plan": ast.parse(""),
        "teir_plan.a": ast.parse("def _x(): pass\ndef y(): pass"),
        "teir_plan.b": ast.parse("from teir_plan.a import _x, y\n"),
        "teir_plan.c": ast.parse("from teir_plan import a\ndef f():\n    return a._x()"),
        "teir_plan.d": ast.parse("import numpy as np\nfrom teir_plan.a import y\n"
                                 "z = np._core"),
    }
    assert private_names_crossing(modules) == ["teir_plan.b imports teir_plan.a._x",
                                               "teir_plan.c reads a._x"]


# The size a newcomer reads in one sitting; a module past it holds two concerns.
MODULE_LINES_MOST = 600


def test_no_library_module_is_longer_than_a_sitting() -> None:
    long = {str(p.relative_to(PACKAGE.parent)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MODULE_LINES_MOST}
    assert not long, f"modules over {MODULE_LINES_MOST} lines: {long}"


def test_the_planner_reaches_the_tile_kinds_through_the_registry() -> None:
    # A kind's module is the registry's business: the planner asks tilekinds' package
    # (choose, library_call, the kinds' hooks), so a new kind is one module there.
    graph = import_graph(lazy=True)
    kinds = {m for m in graph if m.startswith("teir_plan.tilekinds.")
             and m.rsplit(".", 1)[1] not in ("kind", "table")}
    assert "teir_plan.tilekinds.blas" in kinds
    reached = {(m, t) for m, targets in graph.items() if subpackage(m) == "planner"
               for t in targets & kinds}
    assert not reached, reached


# Words of the planner's own that four kinds are also named after: a schedule's loop
# axes (Choice.loops), the copies it plans for packs (planner/copy.py), the relu
# primitive, and a tile's or a reduction's rows (cost.ROW_OVERHEAD_BYTES,
# reduce.ROW_SECONDS).  Any other kind's name in the planner's code is the planner
# knowing a kind.
PLANNER_WORDS = {"loops", "copy", "relu", "row"}


def _identifiers(tree: ast.AST) -> list[tuple[int, str]]:
    """Every name a module's code spells, with its line: names read or bound,
    attributes, definitions, arguments, keywords and imports (not comments, and not
    docstrings, which are strings)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute):
            found.append((node.lineno, node.attr))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((node.lineno, node.name))
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            found.append((node.lineno, node.arg))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found += [(node.lineno, n) for a in node.names for n in (a.name, a.asname) if n]
    return found


def kinds_named(modules: dict[str, ast.Module], kinds: list[str]) -> list[str]:
    """Where these modules' code names one of ``kinds``: a string that is a kind's name
    (``kind.name == "vec"``), or a name with a kind's name as one of its words (split at
    underscores and dots, any case: ``vec_rows_split``, ``VEC_MAX_SPAN``,
    ``teir_plan.tilekinds.vec_p``), except the PLANNER_WORDS as names."""
    words = [k for k in kinds if k not in PLANNER_WORDS]
    spelled = re.compile(r"(?:^|[._])(" + "|".join(map(re.escape, words)) + r")(?:[._]|$)")
    found = []
    for module, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in kinds:
                found.append(f"{module}:{node.lineno}: the string {node.value!r}")
        for line, name in _identifiers(tree):
            if (m := spelled.search(name.lower())) is not None:
                found.append(f"{module}:{line}: {name} (kind {m.group(1)!r})")
    return sorted(set(found))


def test_the_planner_names_no_tile_kind() -> None:
    """The planner asks the registry (teir_plan.tilekinds: choose, the kinds' hooks for
    prices, schedule terms and variants), so that a new kind is one module there and
    the planner's code names none of them, nor their constants."""
    from teir_plan.tilekinds import KINDS

    planner = {m: t for m, t in _modules().items() if subpackage(m) == "planner"}
    found = kinds_named(planner, [k.name for k in KINDS])
    assert not found, "the planner names tile kinds: " + "; ".join(found)


def test_the_kind_name_check_sees_strings_and_words() -> None:
    modules = {"teir_plan.planner.x": ast.parse(
        "from teir_plan.tiles import VEC_ROWS\n"
        "import teir_plan.tilekinds.blas\n"
        "def vec_rows_split(loops, copy, rows):\n"
        "    return kind.name == 'dot' or row_tile(VEC_ROWS, dot_k=1)\n"
        "vector = rows = 'loops'\n")}
    assert kinds_named(modules, ["vec", "dot", "blas", "row", "loops", "copy"]) == [
        "teir_plan.planner.x:1: VEC_ROWS (kind 'vec')",
        "teir_plan.planner.x:2: teir_plan.tilekinds.blas (kind 'blas')",
        "teir_plan.planner.x:3: vec_rows_split (kind 'vec')",
        "teir_plan.planner.x:4: VEC_ROWS (kind 'vec')",
        "teir_plan.planner.x:4: dot_k (kind 'dot')",
        "teir_plan.planner.x:4: the string 'dot'",
        "teir_plan.planner.x:5: the string 'loops'"]
