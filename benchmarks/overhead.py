"""Overheads: planning time (with the per-phase profile of ``benchmarks/planning.py``:
binary contractions of distinct shapes, a random regular tree, MERA), cached-plan call
overhead on a tiny contraction (against numpy.einsum on the same), first-call latency in a
fresh process (cold and warm numba disk cache), and the first-use calibration a process
runs when no calibration is cached.

Run: .venv/bin/python -m benchmarks.overhead
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import teir_plan as tp
from benchmarks import planning
from benchmarks.common import machine, machine_md, md_table, timeit, write_results
from teir_plan.planner.search import forget_memos

PLANNED = [
    ("ij,jk->ik", [(64, 64), (64, 64)]),
    ("trus,pqtu->pqrs", [(8, 24, 48, 48), (8, 48, 8, 48)]),
    ("efbad,cf->abcde", [(48, 36, 36, 48, 36), (24, 36)]),
    ("aebf,dfce->abcd", [(96, 84, 84, 84), (96, 84, 84, 84)]),
    ("dega,gfbc->abcdef", [(24, 20, 24, 24), (24, 20, 20, 20)]),
    # Eight indices, no two adjacent in every tensor (nothing fuses): the largest space.
    ("aebfcg,dgeh->abcdfh", [(8,) * 6, (8,) * 4]),
]


def planning_times() -> list[list]:
    rows = []
    for sub, shapes in PLANNED:
        def fresh(sub: str = sub, shapes: list = shapes) -> None:
            # Forget every plan and the planner's memos, as for a problem never seen.
            tp.plan_cache.clear()
            forget_memos()
            tp.plan(sub, *shapes, dtype=np.float32)

        best, med = timeit(fresh, 5)
        cached, _ = timeit(lambda sub=sub, shapes=shapes: tp.plan(sub, *shapes,
                                                                   dtype=np.float32), 20)
        axes = len(set("".join(sub.split("->")[0].split(","))))
        rows.append([f"plan {sub} ({axes} indices)", best * 1e3, med * 1e3, cached * 1e6])
    return rows


def call_overhead() -> list[list]:
    a, b = np.ones((4, 4), np.float32), np.ones((4, 4), np.float32)
    out = np.empty((4, 4), np.float32)
    p = tp.plan("ij,jk->ik", a, b)
    rows = []
    for name, fn in [
        ("tp.einsum('ij,jk->ik', 4x4)", lambda: tp.einsum("ij,jk->ik", a, b)),
        ("tp.einsum(..., out=)", lambda: tp.einsum("ij,jk->ik", a, b, out=out)),
        ("plan(a, b) (cached plan object)", lambda: p(a, b)),
        ("numpy.einsum('ij,jk->ik', 4x4)", lambda: np.einsum("ij,jk->ik", a, b)),
        ("numpy.einsum(..., optimize=True)",
         lambda: np.einsum("ij,jk->ik", a, b, optimize=True)),
    ]:
        reps = 2000

        def many(fn=fn, reps=reps) -> None:
            for _ in range(reps):
                fn()

        best, _ = timeit(many, 5)
        rows.append([name, best / reps * 1e6])
    return rows


# Small calls (issue of the call path's cost: parse, key, lookup, checks, dispatch): each
# against numpy.einsum without optimize (its C loop, the bar) and opt_einsum's
# contract_expression (a parsed expression called again), in turns.  The first four are
# the cases users reported; the rest are held out, of the same kinds.
SMALL = [
    ("abc,cd->abd", [(3, 4, 5), (5, 6)], np.float64),
    ("abc,cd->abd", [(3, 4, 5), (5, 6)], np.float32),
    ("ij,jk->ik", [(8, 8), (8, 8)], np.float64),
    ("i,i->", [(32,), (32,)], np.float64),
    ("abcd,de->abce", [(2, 3, 4, 5), (5, 3)], np.float32),
    ("ijk,jk->i", [(4, 5, 6), (5, 6)], np.float32),
    ("bij,bjk->bik", [(4, 5, 6), (4, 6, 3)], np.float64),
    ("ab,cb->ac", [(6, 7), (5, 7)], np.float32),
    ("ij,j->i", [(12, 10), (10,)], np.float64),
    ("ijk->ik", [(6, 7, 8)], np.float64),
]


def small_calls(rounds: int = 7, reps: int = 2000) -> list[list]:
    """us per call (best of ``rounds`` of ``reps`` calls, the callers in turns each
    round): numpy.einsum, tp.einsum, a tp.plan called, contract_expression."""
    import opt_einsum as oe

    rng = np.random.default_rng(0)
    rows = []
    for sub, shapes, dtype in SMALL:
        ops = [rng.random(s).astype(dtype) for s in shapes]
        p = tp.plan(sub, *ops)
        expr = oe.contract_expression(sub, *shapes)
        callers = {
            "numpy": lambda sub=sub, ops=ops: np.einsum(sub, *ops),
            "tp.einsum": lambda sub=sub, ops=ops: tp.einsum(sub, *ops),
            "plan": lambda p=p, ops=ops: p(*ops),
            "contract_expression": lambda expr=expr, ops=ops: expr(*ops),
        }
        for fn in callers.values():  # past the trials of the plans' first calls
            for _ in range(60):
                fn()
        best = dict.fromkeys(callers, float("inf"))
        for _ in range(rounds):
            for name, fn in callers.items():
                start = time.perf_counter()
                for _ in range(reps):
                    fn()
                best[name] = min(best[name], (time.perf_counter() - start) / reps * 1e6)
        rows.append([f"{sub} {'x'.join(map(str, shapes[0]))}"
                     + "".join(f", {'x'.join(map(str, s))}" for s in shapes[1:])
                     + f" {np.dtype(dtype).name}", *best.values(),
                     best["tp.einsum"] / best["numpy"], best["plan"] / best["tp.einsum"]])
    return rows


# First calls in a fresh process: one BLAS call (it compiles only the runner of plain BLAS
# programs, executor/lower.plain_blas) and one on the general loop walker (the vector
# kernel), each on a cold numba cache and then on the warm one it left.
FIRST_CALLS = [("8x8 matrix product: one BLAS call", 8),
               ("64x64 matrix product: the loop walker and vector kernel", 64)]


def first_call() -> list[list]:
    rows = []
    pkg = Path(tp.__file__).parent
    for what, n in FIRST_CALLS:
        code = ("import time; t=time.perf_counter(); import numpy as np, teir_plan as tp; "
                f"a=np.ones(({n},{n}),np.float32); tp.einsum('ij,jk->ik',a,a); "
                "print(time.perf_counter()-t)")
        with tempfile.TemporaryDirectory() as cache:
            # The reference parameters: these rows are the compile and the call, the same
            # whether this machine's calibration is cached or not (first_use_rows times
            # the measurement a process without one adds).
            env = dict(os.environ, NUMBA_CACHE_DIR=cache, TEIR_PLAN_AUTOCALIBRATE="reference")
            for label in ("cold numba cache", "warm numba cache"):
                t = time.perf_counter()
                out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                     text=True, check=True, cwd=pkg.parent)
                wall = time.perf_counter() - t
                rows.append([f"first tp.einsum in a fresh process, {what} ({label})",
                             float(out.stdout.strip()), wall])
            shutil.rmtree(cache, ignore_errors=True)
    return rows


def first_use_rows() -> list[list]:
    """The first-use measurement's first part as a first call runs it
    (calibration.quick_calibrate without the vector kernel, which the first plan that runs
    on it measures) in a fresh process with nothing cached: on a cold numba cache (it
    compiles the float32 BLAS runner it reads the call overhead on, which a float32
    product would compile anyway) and on the warm one it left."""
    pkg = Path(tp.__file__).parent
    code = ("import time, warnings; import teir_plan as tp; "
            "from teir_plan.calibration import quick_calibrate; warnings.simplefilter('ignore'); "
            "t=time.perf_counter(); quick_calibrate(save=False, vector=False); "
            "print(time.perf_counter()-t)")
    rows = []
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as params:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, TEIR_PLAN_CACHE_DIR=params)
        env.pop("TEIR_PLAN_AUTOCALIBRATE", None)
        for label in ("cold numba cache", "warm numba cache"):
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                 text=True, check=True, cwd=pkg.parent)
            rows.append([f"first-use measurement's first part, nothing cached ({label})",
                         float(out.stdout.strip()), time.perf_counter() - t])
    return rows


def main() -> None:
    info = machine()
    plan_rows = planning_times()
    phases = planning.measure(quick=False, tensors=100)
    call_rows = call_overhead()
    small_rows = small_calls()
    first_rows = first_call() + first_use_rows()
    md = (f"# Overheads\n\n{machine_md(info)}\n\n## Planning (float32)\n\n"
          + md_table(["problem", "fresh plan best (ms)", "median (ms)", "cached lookup (us)"],
                     plan_rows)
          + "\n\n" + planning.markdown(info, phases).split("\n", 4)[4].replace("## ", "### ")
          + "\n\n## Per-call overhead, tiny contraction (us per call, best of 5 x 2000)\n\n"
          + md_table(["call", "us per call"], call_rows)
          + "\n\n## Small calls against numpy.einsum (us per call, best of 7 x 2000, in "
          "turns)\n\n"
          + md_table(["case", "numpy.einsum", "tp.einsum", "tp.plan called",
                      "contract_expression", "tp.einsum / numpy", "plan / tp.einsum"],
                     small_rows)
          + "\n\n## First call in a fresh process (seconds)\n\n"
          + md_table(["case", "import + first call or calibration (s)",
                      "process wall time (s)"], first_rows)
          + "\n")
    print(md)
    print(f"results: {write_results('overhead', {'machine': info, 'planning': plan_rows, 'planning_phases': phases, 'calls': call_rows, 'small_calls': small_rows, 'first_call': first_rows}, md)}")  # noqa: E501


if __name__ == "__main__":
    main()
