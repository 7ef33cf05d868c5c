"""Planning time, per phase: what a plan for a shape never seen costs, and where it goes.

Three workloads, each planned from scratch (plan cache and planner memos cleared before
every plan, so no cache answers), timed in the planning process' CPU seconds (see
:func:`fresh_plan`):

* 8-index binary contractions (``aebfcg,dgeh->abcdfh``, nothing fuses) with distinct
  extents each plan, drawn from a seeded generator; the median over the plans;
* a tree: a random 3-regular network of ``--tensors`` tensors with bonds of 2-3 (networkx's
  generator, seeded) contracted along opt_einsum's greedy path; the time per step;
* the MERA tree of ``benchmarks/trees_einsum_ir.tsv`` along its recorded path.

The trees are planned as structures never seen (the prim choices remembered per structure
are dropped too); the binary plans keep them, as a sweep over extents does.  The median
of three trees is reported.  (A process' first plan of a large tree used to cost several
times the later ones, MERA 270-335 ms a step against 21-25 on a 2-core Xeon: the later
ones found the cross-core handoffs counted by the first in a memo that forget_memos now
drops; the counts themselves now cost a seventeenth of what they did: 0.33 s against
5.7 for MERA's and the 100-tensor network's 175.)

Each is then planned once more under cProfile, and the profile's cumulative time is
split into the planner's phases (:data:`PHASES`; nested phases are listed under the one
that calls them, so the shares overlap where the table says so).  Run as a script it plans
with the reference machine parameters (``TEIR_PLAN_AUTOCALIBRATE=reference`` unless set),
so that the plans, and the work of finding them, do not depend on this machine's
calibration; ``benchmarks/overhead.py`` runs it with the parameters in force.

Run: .venv/bin/python -m benchmarks.planning [--quick]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time
from collections.abc import Callable

import numpy as np
import opt_einsum as oe

import teir_plan as tp
from benchmarks.common import machine, machine_md, md_table, write_results
from teir_plan.executor.checks import forget_layouts
from teir_plan.planner.candidates import forget_structures
from teir_plan.planner.search import forget_memos

BINARY = "aebfcg,dgeh->abcdfh"
# Each index's extent is drawn from [2, BINARY_MAX_EXTENT].
BINARY_MAX_EXTENT = 32

# (phase, the functions whose cumulative time it is: (module path's tail, name)).
# Indented phases run inside the one above them.
PHASES: list[tuple[str, list[tuple[str, str]]]] = [
    ("parse, describe", [("frontend/expression.py", "parse"),
                         ("frontend/contraction.py", "describe")]),
    ("search (rank), all of it", [("planner/search.py", "rank")]),
    ("  variants (fuse, packs, splits)", [("planner/search.py", "variants")]),
    # (_floor_order: floors memoized per structure; prim_floors before it)
    ("  prim choices' floors (enumerate, floor_bounds)", [("planner/search.py",
                                                          "prim_floors"),
                                                         ("planner/search.py",
                                                          "_floor_order")]),
    ("  prim choices' tiles and bounds", [("planner/search.py", "prim_option")]),
    # (cost.estimate is _work then _priced; the search bounds every schedule with
    # _work as it lists them, and prices with _priced only those whose bound is under
    # its cutoff, when it gets to them: cost.Schedules)
    ("  schedules: loop orders, parallel sets, bounds", [("planner/search.py", "_expand")]),
    ("    of which bounds (cost._work)", [("planner/cost.py", "_work")]),
    ("  schedules' prices (cost._priced)", [("planner/cost.py", "_priced")]),
    ("  to_teir of the kept candidates", [("planner/candidates.py", "to_teir")]),
    ("validation and proofs", [("schedule/contract.py", "_prove")]),
    ("lowering", [("executor/lower.py", "lower")]),
    ("tree layouts DP (choose_layouts, its searches included)",
     [("schedule/tree_plan.py", "choose_layouts")]),
    ("self-correction set-up (trials.attach)", [("schedule/trials.py", "attach")]),
]


def binary_cases(count: int, seed: int = 0) -> list[list[tuple[int, ...]]]:
    """``count`` distinct operand shape pairs of :data:`BINARY`."""
    rng = np.random.default_rng(seed)
    terms = BINARY.split("->")[0].split(",")
    seen: set[tuple[int, ...]] = set()
    out = []
    while len(out) < count:
        ext = dict(zip("abcdefgh", (int(x) for x in rng.integers(2, BINARY_MAX_EXTENT + 1,
                                                                  size=8))))
        key = tuple(ext.values())
        if key not in seen:
            seen.add(key)
            out.append([tuple(ext[c] for c in t) for t in terms])
    return out


def regular_network(tensors: int, seed: int = 0
                    ) -> tuple[str, list[tuple[int, ...]], list[tuple[int, ...]]]:
    """A closed random 3-regular network: (expression, shapes, opt_einsum's greedy path)."""
    import networkx as nx

    g = nx.random_regular_graph(3, tensors, seed=seed)
    rng = np.random.default_rng(seed)
    bond = {tuple(sorted(e)): (oe.get_symbol(i), int(rng.integers(2, 4)))
            for i, e in enumerate(g.edges())}
    terms, shapes = [], []
    for v in g.nodes():
        edges = [bond[(min(v, u), max(v, u))] for u in g.neighbors(v)]
        terms.append("".join(s for s, _ in edges))
        shapes.append(tuple(d for _, d in edges))
    expr = ",".join(terms) + "->"
    path, _ = oe.contract_path(expr, *shapes, shapes=True, optimize="greedy")
    return expr, shapes, [tuple(p) for p in path]


def mera() -> tuple[str, list[tuple[int, ...]], list[tuple[int, ...]]]:
    from benchmarks.trees import paper_trees

    name, expr, extents, path = next(c for c in paper_trees(False) if c[0] == "MERA")
    assert path is not None
    shapes = [tuple(extents[c] for c in t) for t in expr.split("->")[0].split(",")]
    return expr, shapes, path


def fresh_plan(expr: str, shapes: list[tuple[int, ...]],
               path: list[tuple[int, ...]] | None = None,
               clock: Callable[[], float] = time.process_time) -> float:
    """Seconds to plan ``expr`` on ``shapes`` as a problem never seen.  By default the
    process' CPU seconds: planning runs on the calling thread alone, and on a shared
    host its CPU time varies far less than its wall time (which also counts the time
    other processes hold the cores)."""
    tp.plan_cache.clear()
    forget_memos()
    forget_layouts()  # (the proofs' memo: executor-side, which the planner never imports)
    if path is not None:
        # A tree is timed as a structure never seen; the binary plans share theirs (an
        # expression seen before, with new extents: what the structure memos are for).
        forget_structures()
    kw = {} if path is None else {"optimize": ["einsum_path", *path]}
    t = clock()
    tp.plan(expr, *shapes, dtype=np.float32, **kw)
    return clock() - t


def phases(run: Callable[[], object], per: int) -> list[tuple[str, float]]:
    """(phase, cumulative milliseconds per ``per``) of one profiled ``run``."""
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    run()
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in stats.values())
    cum: dict[tuple[str, str], float] = {}
    for (path, _, name), (_, _, _, ct, _) in stats.items():
        for _, funcs in PHASES:
            for tail, fn in funcs:
                if name == fn and path.replace("\\", "/").endswith(tail):
                    cum[(tail, fn)] = cum.get((tail, fn), 0.0) + ct
    rows = [("everything (profiled)", total * 1e3 / per)]
    for phase, funcs in PHASES:
        rows.append((phase, sum(cum.get(f, 0.0) for f in funcs) * 1e3 / per))
    return rows


def measure(quick: bool, tensors: int) -> dict:
    plans = 15 if quick else 60
    shapes = binary_cases(plans + 3)
    for s in shapes[:3]:  # (imports, first compiles of the planner's own numba code)
        fresh_plan(BINARY, s)
    binary = [fresh_plan(BINARY, s) for s in shapes[3:]]
    expr, tshapes, tpath = regular_network(tensors)
    tree = [fresh_plan(expr, tshapes, tpath) for _ in range(1 if quick else 3)]
    mexpr, mshapes, mpath = mera()
    mtimes = [fresh_plan(mexpr, mshapes, mpath) for _ in range(1 if quick else 3)]
    profile_binary = phases(lambda: [fresh_plan(BINARY, s) for s in shapes[3:18]], 15)
    profile_tree = phases(lambda: fresh_plan(expr, tshapes, tpath), len(tpath))
    return {
        "binary": {"expression": BINARY, "plans": len(binary),
                   "median_ms": statistics.median(binary) * 1e3,
                   "min_ms": min(binary) * 1e3},
        "tree": {"tensors": tensors, "steps": len(tpath),
                 "median_s": statistics.median(tree),
                 "per_step_ms": statistics.median(tree) / len(tpath) * 1e3},
        "mera": {"steps": len(mpath), "median_s": statistics.median(mtimes),
                 "per_step_ms": statistics.median(mtimes) / len(mpath) * 1e3},
        "phases_binary_ms_per_plan": profile_binary,
        "phases_tree_ms_per_step": profile_tree,
    }


def markdown(info: dict, r: dict) -> str:
    b, t, m = r["binary"], r["tree"], r["mera"]
    rows = [[f"{b['expression']}, distinct extents in [2, {BINARY_MAX_EXTENT}] "
             f"({b['plans']} plans)", "per plan", b["median_ms"], b["min_ms"]],
            [f"random 3-regular network, {t['tensors']} tensors, bonds 2-3, greedy path",
             f"per step ({t['steps']} steps)", t["per_step_ms"], None],
            ["MERA (trees_einsum_ir.tsv)", f"per step ({m['steps']} steps)",
             m["per_step_ms"], None]]
    prof = [[p, a, c] for (p, a), (_, c) in zip(r["phases_binary_ms_per_plan"],
                                                  r["phases_tree_ms_per_step"])]
    return (f"# Planning time\n\n{machine_md(info)}\n\nEach plan from scratch (plan cache "
            f"and planner memos cleared), float32, {info['params']} parameters; CPU time "
            "of the planning process (on a shared host its wall time varies more).\n\n"
            + md_table(["problem", "unit", "median (ms)", "best (ms)"], rows)
            + "\n\n## Per phase (cProfile, cumulative; indented phases run inside the one "
              "above)\n\nThe profiler's own cost (it reads the CPU clock at every call and "
              "return) inflates the times several-fold, most in phases of many small calls: "
              "read them as where the time goes, the table above as how much there is."
              "\n\n"
            + md_table(["phase", "binary, ms per plan", "3-regular tree, ms per step"], prof)
            + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer plans (a partial result)")
    ap.add_argument("--tensors", type=int, default=100)
    args = ap.parse_args()
    # (read at the first plan: teir_plan fixes its parameters then, not at import)
    os.environ.setdefault("TEIR_PLAN_AUTOCALIBRATE", "reference")
    info = machine()
    r = measure(args.quick, args.tensors)
    md = markdown(info, r)
    print(md)
    complete = not args.quick and args.tensors == 100
    print(f"results: {write_results('planning', {'machine': info, **r}, md, complete)}")


if __name__ == "__main__":
    main()
