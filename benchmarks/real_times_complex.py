"""A real operand times a complex one (a real Hamiltonian applied to complex states):
tp.einsum taking the real operand directly (a real product over the complex operand's
parts, schedule/parts.py) against tp on the operand cast to complex beforehand (the
complex product alone, the cast not timed), numpy.einsum(optimize=True) and
numpy.matmul, timed in turns (one call of each per round, best of the rounds), so that a
busy spell of the machine falls on all of them.

Run: .venv/bin/python -m benchmarks.real_times_complex [--n 1024] [--states 256]
[--repeats 7]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import teir_plan as tp
from benchmarks.common import machine, machine_md, md_table, write_results


def in_turns(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def systems(h: np.ndarray, psi: np.ndarray) -> dict[str, Callable[[], object]]:
    hc = h.astype(psi.dtype)
    return {"tp (real operand direct)": lambda: tp.einsum("ij,jk->ik", h, psi),
            "tp (operand cast before)": lambda: tp.einsum("ij,jk->ik", hc, psi),
            "numpy.einsum": lambda: np.einsum("ij,jk->ik", h, psi, optimize=True),
            "numpy.matmul": lambda: np.matmul(h, psi)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024, help="the Hamiltonian's side")
    ap.add_argument("--states", type=int, default=256, help="complex columns")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for real, cplx in ((np.float32, np.complex64), (np.float64, np.complex128)):
        h = rng.standard_normal((args.n, args.n)).astype(real)
        psi = (rng.standard_normal((args.n, args.states))
               + 1j * rng.standard_normal((args.n, args.states))).astype(cplx)
        best = in_turns(systems(h, psi), args.repeats)
        base = best["tp (real operand direct)"]
        rows += [[np.dtype(real).name, np.dtype(cplx).name, name, t * 1e3, t / base]
                 for name, t in best.items()]
    md = (f"# A real operand times a complex one ({args.n} x {args.n} by {args.n} x "
          f"{args.states}, best of {args.repeats} in turns)\n\n{machine_md(machine())}\n\n"
          + md_table(["real", "complex", "system", "ms", "time / tp direct"], rows) + "\n")
    path = write_results("real-times-complex", {"rows": rows}, md)
    print(md, f"\nresults: {path}")


if __name__ == "__main__":
    main()
