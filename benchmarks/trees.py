"""Einsum trees: expressions of three or more operands, every system given the same
pairwise path.

Systems: tp.einsum (``optimize=path``: the intermediates' layouts chosen across the tree,
teir_plan/schedule/tree_plan.py), the same with every intermediate in opt_einsum's order
(what teir_plan did before, as a control), numpy.einsum(optimize=path),
opt_einsum.contract(optimize=path) on numpy, opt_einsum with torch when torch is
installed, cotengra when installed, TBLIS (through cotengra with
``implementation="pytblis"``) and JAX (jax.jit of jnp.einsum(optimize=path)) when
installed (benchmarks/peers.py).  Every peer's answer is checked against the same path in
float64 (complex128) through numpy.einsum (opt_einsum beyond its 52 letters); a peer that
raises or disagrees is left out of the case, and the table says so (in float32 the
16-qubit circuits' state has values below float32's smallest normal number, about 1e-38,
which XLA flushes to zero: JAX is marked wrong there).

Cases: the Einsum Trees paper's trees (benchmarks/trees_einsum_ir.tsv, from einsum_ir's
artifact; TNLM, 7 TFLOP, only with --all), ML chains (an MLP, attention, a bilinear form,
a Tucker reconstruction), quantum-circuit networks (product states, layers of 2 x 2
single-qubit gates and a brickwork of 4 x 4 two-qubit gates as (2, 2, 2, 2) tensors, all
unitary; the output state or one amplitude) and instances of einsum_benchmark's generators
when that package is installed.  ``--dtype complex64`` (or complex128) fills both parts of
every operand; ``--circuits`` runs the circuits alone (the networks a complex dtype is
for).  Each case is timed per system, back to back after a pause, best and median of
``--repeats`` calls (a short case more: as many as fill SLOT_SECONDS at the fastest
system's pace) after a warm-up, in ``--rounds`` rounds over the systems; GFLOP/s count two flops per
multiply-add of the path's steps (eight per complex one); "peak MiB" is the scratch
memory tp's plan holds at once (its ``peak_bytes``) and numpy.einsum's allocation peak
(tracemalloc).

``--overhead`` instead times the per-step overhead of a cached tree plan on chains of
small matrices, and the tiny binary call, against numpy.einsum and opt_einsum.

Run: .venv/bin/python -m benchmarks.trees [--quick] [--all] [--repeats N] [--dtype float32]
     .venv/bin/python -m benchmarks.trees --overhead
"""

from __future__ import annotations

import argparse
import math
import os
import re
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import opt_einsum as oe

import teir_plan as tp
from benchmarks import peers
from benchmarks.common import (
    PAUSE_SECONDS,
    machine,
    machine_md,
    md_table,
    progress,
    timeit,
    write_results,
)
from benchmarks.tccg import timeit_in_turns
from teir_plan.planner.tree import tree_for
from teir_plan.schedule import tree_plan
from teir_plan.tiles import flop_factor

TREES_FILE = Path(__file__).parent / "trees_einsum_ir.tsv"
# Calls a round: enough to fill SLOT_SECONDS at the fastest system's pace (run_case).
SLOT_SECONDS = 0.005
MAX_CALLS = 50
Case = tuple[str, str, dict[str, int], list[tuple[int, ...]] | None]


def paper_trees(include_tnlm: bool) -> list[Case]:
    """The paper's trees: (name, expression, extents, path).  MERA and TNLM name indices
    by integers; they become opt_einsum's symbols (TNLM has 88: beyond numpy's 52)."""
    cases: list[Case] = []
    for line in TREES_FILE.read_text().splitlines():
        name, expr, ext, path = line.split("\t")
        if name == "TNLM" and not include_tnlm:
            continue
        if "[" in expr:
            lhs, rhs = expr.split("->")
            sym = lambda k: oe.get_symbol(int(k))  # noqa: E731
            terms = re.findall(r"\[([0-9,]*)\]", lhs)
            expr = ",".join("".join(sym(k) for k in t.split(",")) for t in terms) + "->" + \
                "".join(sym(k) for k in rhs.strip("[]").split(","))
            extents = {sym(k): int(v) for k, v in (kv.split("=") for kv in ext.split(","))}
        else:
            extents = {k: int(v) for k, v in (kv.split("=") for kv in ext.split(","))}
        steps = [tuple(int(x) for x in s.split(",")) for s in re.findall(r"\(([0-9,]+)\)", path)]
        cases.append((name, expr, extents, steps))
    return cases


def ml_chains(quick: bool) -> list[Case]:
    s = 2 if quick else 1
    return [
        ("MLP 3 layers", "bi,ij,jk,kl->bl",
         dict(b=1024 // s, i=1024, j=1024, k=1024, l=256), None),
        ("attention scores x values", "bhqd,bhkd,bhkv->bhqv",
         dict(b=4 // s, h=12, q=256, k=256, d=64, v=64), [(0, 1), (0, 1)]),
        ("bilinear", "bi,ij,bj->b", dict(b=4096 // s, i=512, j=512), None),
        ("Tucker 32^3 -> 96^3", "abc,ai,bj,ck->ijk",
         dict(a=32, b=32, c=32, i=96, j=96, k=96 // s), None),
        ("Tucker 96^3, rank 32", "abc,ai,bj,ck->ijk",
         dict(a=96, b=96, c=96, i=32, j=32, k=32), None),
    ]


# (name, qubits, layers, amplitude): the output state of all qubits, or the amplitude
# <0...0|U|psi> (every wire closed by a product bra).  With 10 qubits and 2 layers the
# network has 48 indices, within numpy.einsum's 52 letters; the others take opt_einsum's
# symbols (numpy.einsum is left out of those rows).
CIRCUITS = [("circuit 10q x 2, state", 10, 2, False),
            ("circuit 12q x 4, state", 12, 4, False),
            ("circuit 16q x 8, state", 16, 8, False),
            ("circuit 16q x 16, amplitude", 16, 16, True)]


def circuit_expr(qubits: int, layers: int, amplitude: bool) -> str:
    """The einsum of a brickwork circuit on a product state: per layer a single-qubit
    gate on every qubit (``ab``: in, out) and two-qubit gates on alternate pairs
    (``abcd``: two wires in, two out); every index has extent 2."""
    count = 0

    def new() -> str:
        nonlocal count
        count += 1
        return oe.get_symbol(count - 1)

    wire = [new() for _ in range(qubits)]
    terms = list(wire)  # the product state, one vector per qubit
    for layer in range(layers):
        for q in range(qubits):
            o = new()
            terms.append(wire[q] + o)
            wire[q] = o
        for q in range(layer % 2, qubits - 1, 2):
            o1, o2 = new(), new()
            terms.append(wire[q] + wire[q + 1] + o1 + o2)
            wire[q], wire[q + 1] = o1, o2
    if amplitude:
        return ",".join(terms + wire) + "->"
    return ",".join(terms) + "->" + "".join(wire)


def circuits() -> list[Case]:
    cases: list[Case] = []
    for name, qubits, layers, amplitude in CIRCUITS:
        expr = circuit_expr(qubits, layers, amplitude)
        extents = {c: 2 for c in expr if c not in ",->"}
        cases.append((name, expr, extents, None))
    return cases


def circuit_operands(terms: list[str], dtype: np.dtype, rng: np.random.Generator
                     ) -> list[np.ndarray]:
    """Unitary gates (Q of a complex Gaussian's QR) and unit vectors, so that amplitudes
    neither overflow nor vanish over many layers; complex parts both non-zero (a real
    dtype keeps the real parts)."""
    ops = []
    for t in terms:
        dim = 2 ** (len(t) // 2) if len(t) > 1 else 2
        z = rng.standard_normal((dim, dim)) + 1j * rng.standard_normal((dim, dim))
        u = np.linalg.qr(z)[0]
        op = u[:, 0] if len(t) == 1 else u.reshape((2,) * len(t))
        ops.append(np.ascontiguousarray(op if dtype.kind == "c" else op.real).astype(dtype))
    return ops


def operands(name: str, terms: list[str], extents: dict[str, int], dtype: np.dtype
             ) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    if name.startswith("circuit"):
        return circuit_operands(terms, dtype, rng)
    shapes = [[extents[c] for c in t] for t in terms]
    if dtype.kind == "c":
        return [(rng.standard_normal(s) + 1j * rng.standard_normal(s)).astype(dtype)
                for s in shapes]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def generated(quick: bool) -> list[Case]:
    """Instances of einsum_benchmark's generators (no data set download), when installed:
    a matrix chain, a lattice, a random tree and a random regular graph (cotengra's
    generators), and two language-model networks (MERA-structured HMMs)."""
    try:
        import einsum_benchmark.generators as gen  # type: ignore[import-untyped]
    except ImportError:
        return []
    s, lm = gen.structured, gen.language_model
    makers: list[tuple[str, Callable[[], tuple[str, list]]]] = [
        ("gen matrix chain", lambda: s.matrix_chain(num_matrices=8, min_dim=256,
                                                     max_dim=1024, seed=0)),
        ("gen lattice 4x4", lambda: s.lattice((4, 4), d_min=4, d_max=8, seed=0)),
        ("gen tree 60", lambda: s.tree(n=60, d_min=4, d_max=12, seed=1)),
        ("gen regular 20", lambda: gen.random.regular(20, 3, d_min=4, d_max=8, seed=0)),
        ("gen LM first+last", lambda: lm.p_first_and_last(
            mera_depth=1, axis_size_hidden=32, axis_size_observable=16)),
        ("gen LM sliding", lambda: lm.sliding_likelihood(
            mera_depth=1, axis_size_hidden=16, axis_size_observable=8,
            batch_size=200 if quick else 1000)),
    ]
    cases: list[Case] = []
    for name, make in makers:
        expr, shapes = make()[:2]
        lhs = expr.split("->")[0].split(",")
        extents = {c: int(n) for t, sh in zip(lhs, shapes) for c, n in zip(t, sh)}
        cases.append((name, expr, extents, None))
    return cases


def run_case(case: Case, dtype: np.dtype, repeats: int, rounds: int) -> dict:
    name, expr, extents, path = case
    lhs, out = expr.split("->")
    terms = lhs.split(",")
    ops = operands(name, terms, extents, dtype)
    if path is None:
        path = list(oe.contract_path(expr, *ops, optimize="auto")[0])
    tree = tree_for(terms, out, extents, tuple(path))
    # Real flops: 2 per multiply-add, 8 per complex one.
    flops = flop_factor(dtype) * sum(tree.flops(n.node) for n in tree.steps)
    results: dict[str, tuple[float, float]] = {}
    systems: dict[str, Callable[[], object]] = {}
    plan = tp.plan(expr, *ops, optimize=path)
    systems["tp"] = lambda: plan(*ops)
    saved = tree_plan.MAX_LAYOUTS
    tree_plan.MAX_LAYOUTS = 1  # every intermediate in opt_einsum's order
    try:
        tp.plan_cache.clear()
        plain = tp.plan(expr, *ops, optimize=path)
    finally:
        tree_plan.MAX_LAYOUTS = saved
        tp.plan_cache.clear()
    systems["tp, opt_einsum's orders"] = lambda: plain(*ops)
    np_path = ["einsum_path", *path]
    if len(set(lhs.replace(",", ""))) <= 52:
        systems["numpy.einsum"] = lambda: np.einsum(expr, *ops, optimize=np_path)
    systems["opt_einsum"] = lambda: oe.contract(expr, *ops, optimize=path)
    try:
        import torch

        tops = [torch.from_numpy(o) for o in ops]
        systems["opt_einsum+torch"] = lambda: oe.contract(expr, *tops, optimize=path,
                                                          backend="torch")
    except ImportError:
        pass
    try:
        import cotengra as ctg

        systems["cotengra"] = lambda: ctg.einsum(expr, *ops, optimize=path)
    except ImportError:
        pass
    more, failed = peers.runs(expr, ops, path=path)
    systems |= more
    want = systems["opt_einsum"]()
    got = systems["tp"]()
    # float32 and complex64 sums over a path agree to about 1e-3 of the largest value.
    tol = 1e-2 if np.dtype(dtype).itemsize // (2 if dtype.kind == "c" else 1) == 4 else 1e-8
    ok = bool(np.allclose(got, want, rtol=tol, atol=tol * float(np.abs(want).max() or 1)))
    ref = reference(expr, ops, path)
    # Every system makes as many calls a round as fill SLOT_SECONDS at the fastest one's
    # pace (``repeats`` at least): after the pause the host runs a short case's first
    # calls slower (Tucker 32^3 -> 96^3, best of 3 calls after 0.25 s: tp 354-474 us,
    # numpy 439-573, cotengra 411-528; in a tight loop 272, 341, 271), so that a few
    # calls measured how far each system got out of that spell more than the system.
    calls = repeats
    # Each system's first call here (tp's and opt_einsum's second): its time sets the
    # calls a round, and a peer's answer is checked against the float64 reference.
    firsts = []
    for sysname, fn in list(systems.items()):
        t = time.perf_counter()
        try:
            res = fn()
        except Exception as exc:
            if sysname.startswith("tp"):
                raise
            failed[sysname] = peers.failure(exc)
            del systems[sysname]
            continue
        firsts.append(time.perf_counter() - t)
        if not sysname.startswith("tp") and not _agrees(res, ref, tol):
            failed[sysname] = peers.wrong(res, ref)
            del systems[sysname]
    once = min(firsts)
    if once > 0:
        calls = min(MAX_CALLS, max(repeats, math.ceil(SLOT_SECONDS / once)))
    # In rounds: each round times every system back to back (see common.timeit), and a
    # system's time is its best over the rounds, so that a spell of load on a shared
    # machine during one system's turn does not decide a ratio.
    # A pause before each system and every other round in reverse order: the threads of
    # a BLAS call keep spinning a while after it and slow the next system on a small
    # machine (tp after cotengra: 9-13 ms against 5-6 after a pause).
    for r in range(rounds):
        order = list(systems.items())
        for sysname, fn in (order if r % 2 == 0 else order[::-1]):
            time.sleep(PAUSE_SECONDS)  # (common.PAUSE_SECONDS)
            best, med = timeit(fn, calls)
            old = results.get(sysname, (math.inf, math.inf))
            results[sysname] = (min(best, old[0]), min(med, old[1]))
    # tp against itself with opt_einsum's orders, in turns (one call of each per round,
    # as benchmarks.tccg times tp's own variants): the layouts' effect, measured where a
    # spell of load cannot fall on one of the two alone.
    turns = timeit_in_turns({"tp": systems["tp"], "plain": systems["tp, opt_einsum's orders"]},
                            max(6, calls * rounds))
    tracemalloc.start()
    if "numpy.einsum" in systems:
        systems["numpy.einsum"]()
    np_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    others = [s for s in results if not s.startswith("tp")]
    best_peer = min(results[s][0] for s in others)
    return {
        "case": name, "expression": expr if len(expr) < 60 else expr[:57] + "...",
        "operands": len(terms), "indices": len(extents), "steps": len(tree.steps),
        "gflop": flops / 1e9, "ok": ok,
        "times": {s: t for s, t in results.items()},
        "tp_gflops": flops / results["tp"][0] / 1e9,
        "ratio_best_peer": best_peer / results["tp"][0],
        "ratio_opt_orders": turns["plain"] / turns["tp"],
        "tp_peak_mib": getattr(plan, "peak_bytes", math.nan) / 2**20,
        "numpy_peak_mib": np_peak / 2**20 if "numpy.einsum" in systems else None,
        "plan_seconds_note": "", "calls_per_round": calls, "failed": failed,
    }


def reference(expr: str, ops: list[np.ndarray], path: list[tuple[int, ...]]) -> np.ndarray:
    """The result along ``path`` in float64 (complex128): numpy.einsum, or opt_einsum on
    numpy beyond numpy.einsum's 52 letters."""
    wide = [o.astype(np.complex128 if o.dtype.kind == "c" else np.float64) for o in ops]
    if len(set(expr.split("->")[0].replace(",", ""))) <= 52:
        return np.einsum(expr, *wide, optimize=["einsum_path", *path])
    return oe.contract(expr, *wide, optimize=path)


def _agrees(res: object, ref: np.ndarray, tol: float) -> bool:
    return bool(np.allclose(np.asarray(res), ref, rtol=tol,
                            atol=tol * float(np.abs(ref).max() or 1)))


def _per_call(fn: Callable[[], object], reps: int) -> float:
    """Best of 5 of ``reps`` back-to-back calls, seconds per call."""
    def many() -> None:
        for _ in range(reps):
            fn()
    return timeit(many, 5)[0] / reps


def overhead_rows() -> list[list]:
    """Per-step overhead of a cached tree plan: chains of n 8 x 8 float64 matrices (n - 1
    steps, the same left-to-right path for every system), and the tiny binary call."""
    rows: list[list] = []
    a, b = np.random.default_rng(0).standard_normal((2, 8, 8))
    p = tp.plan("ij,jk->ik", a, b)
    tiny = [("tp.einsum", lambda: tp.einsum("ij,jk->ik", a, b)),
            ("cached plan object", lambda: p(a, b)),
            ("numpy.einsum", lambda: np.einsum("ij,jk->ik", a, b)),
            ("opt_einsum.contract", lambda: oe.contract("ij,jk->ik", a, b))]
    for name, fn in tiny:
        rows.append([f"8x8 @ 8x8 float64: {name}", None, _per_call(fn, 2000) * 1e6, None])
    for n in (10, 100):
        s = [oe.get_symbol(i) for i in range(n + 1)]
        expr = ",".join(s[i] + s[i + 1] for i in range(n)) + "->" + s[0] + s[n]
        ops = list(np.random.default_rng(1).standard_normal((n, 8, 8)) * 0.3)
        path = [(0, 1)] + [(0, n - 2 - i) for i in range(n - 2)]
        q = tp.plan(expr, *ops, optimize=path)
        chain = [("tp (cached plan)", lambda q=q, ops=ops: q(*ops)),
                 ("opt_einsum.contract", lambda e=expr, o=ops, pa=path: oe.contract(
                     e, *o, optimize=pa))]
        if n + 1 <= 52:
            chain.append(("numpy.einsum", lambda e=expr, o=ops, pa=path: np.einsum(
                e, *o, optimize=["einsum_path", *pa])))
        for name, fn in chain:
            t = _per_call(fn, 200 if n <= 10 else 20)
            rows.append([f"chain of {n} 8x8 matrices: {name}", n - 1, t * 1e6,
                         t / (n - 1) * 1e6])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller ML chains, 3 repeats")
    ap.add_argument("--all", action="store_true", help="include TNLM (7 TFLOP: minutes)")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per round")
    # 5 rounds: the shared host runs every thread at half speed in spells of seconds
    # (docs/troubleshooting.md), long enough to cover one system's turns in 2 of 3
    # rounds (gen LM first+last read 0.75x and 1.11x the best peer in two runs of 3).
    ap.add_argument("--rounds", type=int, default=5, help="rounds over the systems")
    ap.add_argument("--dtype", default="float32",
                    choices=("float32", "float64", "complex64", "complex128"))
    ap.add_argument("--circuits", action="store_true",
                    help="only the quantum-circuit networks (results: trees-circuits-<dtype>)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run only the case of this name (names hold commas: repeat the "
                         "option for several)")
    ap.add_argument("--overhead", action="store_true",
                    help="only the per-step overhead of small tensors (results: trees-overhead)")
    args = ap.parse_args()
    if args.overhead:
        rows = overhead_rows()
        info = machine()
        md = "\n\n".join(["# Tree plans: per-step overhead (benchmarks/trees.py --overhead)",
                           machine_md(info) + "; best of 5",
                           md_table(["call", "steps", "us per call", "us per step"], rows)])
        print(md)
        path = write_results("trees-overhead", {"machine": info, "rows": rows}, md)
        print(f"written {path}")
        return
    peers.configure(tp.get_num_threads())
    dtype = np.dtype(args.dtype)
    repeats = 2 if args.quick else args.repeats
    cases = (circuits() if args.circuits else
             paper_trees(args.all) + ml_chains(args.quick) + generated(args.quick) + circuits())
    if args.only:
        unknown = set(args.only) - {c[0] for c in cases}
        if unknown:
            ap.error(f"--only: no case named {', '.join(map(repr, sorted(unknown)))}")
        cases = [c for c in cases if c[0] in args.only]
    rows_data = []
    for i, case in enumerate(cases):
        progress(i, len(cases), case[0])
        rows_data.append(run_case(case, dtype, repeats, args.rounds))
    progress(len(cases), len(cases), "done")
    systems = list(dict.fromkeys(s for r in rows_data for s in [*r["times"], *r["failed"]]))
    header = ["case", "ops", "idx", "GFLOP", *[f"{s} ms" for s in systems], "tp GFLOP/s",
              "tp / best peer", "tp / opt orders (in turns)", "tp peak MiB", "numpy peak MiB", "ok"]
    rows = []
    for r in rows_data:
        rows.append([r["case"], r["operands"], r["indices"], r["gflop"],
                     *[r["times"][s][0] * 1e3 if s in r["times"] else
                       peers.cell(r["failed"][s]) if s in r["failed"] else None
                       for s in systems],
                     r["tp_gflops"], r["ratio_best_peer"], r["ratio_opt_orders"],
                     r["tp_peak_mib"], r["numpy_peak_mib"], r["ok"]])
    geo = math.exp(sum(math.log(r["ratio_best_peer"]) for r in rows_data) / len(rows_data))
    geo_o = math.exp(sum(math.log(r["ratio_opt_orders"]) for r in rows_data) / len(rows_data))
    info = machine(with_peers=True)
    left_out = peers.excluded_md([(r["case"], s, why) for r in rows_data
                                  for s, why in r["failed"].items()])
    md = "\n\n".join([
        "# Einsum trees (benchmarks/trees.py)",
        machine_md(info) + f"; dtype {dtype}; best of {args.rounds} rounds of {repeats} "
        f"calls per system, or as many as fill {SLOT_SECONDS * 1e3:g} ms at the fastest "
        f"system's pace (at most {MAX_CALLS}); load average {os.getloadavg()[0]:.1f} at the end",
        md_table(header, rows),
        f"Geometric mean, tp / best peer: {geo:.2f}; tp / tp with opt_einsum's orders "
        f"(timed in turns): {geo_o:.2f}"
        + ("\n\n" + left_out if left_out else "")])
    name = "trees" + ("-circuits" if args.circuits else "") + (
        f"-{dtype}" if args.circuits or dtype != np.float32 else "")
    path = write_results(name, {"machine": info, "dtype": str(dtype), "rows": rows_data,
                                "geomean": geo, "geomean_layouts": geo_o}, md,
                         complete=not args.only)
    print(md)
    print(f"written {path}")


if __name__ == "__main__":
    main()
