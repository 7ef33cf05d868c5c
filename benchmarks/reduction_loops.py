"""The reduction kernels against plain numba loops doing the same work, numpy and torch,
taking turns in one process (docs/decisions.md, "The reduction kernels against a plain
numba loop"): whether a gap to a peer is tp's kernel or the host.

Each round times every system best of ``--repeats`` calls back to back, after a pause
of ``--pause`` seconds; the best and the median over ``--rounds`` rounds are printed.
The plain loops: a ``prange`` over CHUNKS_PER_THREAD chunks a thread, one ``reassoc``
loop each (``ij->``), one loop per row (``ij->i``), and tp's own loop order for
``ik,k->i`` (blocks of RUN_BLOCK weights outer, four rows a pass).  torch runs in the
same process (its OpenMP threads spin after each call: keep the pause at 0.1 s or
more when it is timed).

Run: .venv/bin/python -m benchmarks.reduction_loops [--rounds R] [--repeats N]
[--pause S] [--threads T] [--dtype D] [--no-torch]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numba
import numpy as np
from numba import njit, prange

import teir_plan as tp
from teir_plan.calibration import best_seconds
from teir_plan.executor.reduce_runs import RUN_BLOCK
from teir_plan.tiles import CHUNKS_PER_THREAD

SUM_MATH = {"reassoc", "contract"}


@njit(parallel=True, fastmath=SUM_MATH, cache=True)
def flat_sum(x, nch):  # type: ignore[no-untyped-def]
    part = np.zeros(nch, x.dtype)
    n = x.size
    for c in prange(nch):
        a = x[c * n // nch:(c + 1) * n // nch]
        acc = x.dtype.type(0)
        for i in range(a.size):
            acc += a[i]
        part[c] = acc
    return part.sum()


@njit(parallel=True, fastmath=SUM_MATH, cache=True)
def row_sums(x, out, nch):  # type: ignore[no-untyped-def]
    m, n = x.shape
    for c in prange(nch):
        for r in range(c * m // nch, (c + 1) * m // nch):
            a = x[r]
            acc = x.dtype.type(0)
            for i in range(n):
                acc += a[i]
            out[r] = acc
    return out


@njit(parallel=True, fastmath=SUM_MATH, cache=True)
def long_dots(x, v, nch, block):  # type: ignore[no-untyped-def]
    m, n = x.shape
    part = np.zeros((nch, m), x.dtype)
    for c in prange(nch):
        k1 = (c + 1) * n // nch
        q = c * n // nch
        while q < k1:
            e = min(k1, q + block)
            w = v[q:e]
            for i in range(0, m - m % 4, 4):
                r0, r1, r2, r3 = x[i, q:e], x[i + 1, q:e], x[i + 2, q:e], x[i + 3, q:e]
                b0 = b1 = b2 = b3 = x.dtype.type(0)
                for t in range(e - q):
                    b0 += r0[t] * w[t]
                    b1 += r1[t] * w[t]
                    b2 += r2[t] * w[t]
                    b3 += r3[t] * w[t]
                part[c, i] += b0
                part[c, i + 1] += b1
                part[c, i + 2] += b2
                part[c, i + 3] += b3
            for i in range(m - m % 4, m):
                acc = x.dtype.type(0)
                for t in range(e - q):
                    acc += x[i, q + t] * w[t]
                part[c, i] += acc
            q = e
    return part.sum(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    if args.threads is not None:
        tp.set_num_threads(args.threads)
    threads = tp.get_num_threads()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100_000, 300)).astype(args.dtype)
    a = rng.standard_normal((24, 3_000_000)).astype(args.dtype)
    v = rng.standard_normal(3_000_000).astype(args.dtype)
    rows = np.empty(x.shape[0], x.dtype)
    nch = CHUNKS_PER_THREAD * threads
    plans = {sub: tp.plan(sub, *ops) for sub, ops in
             (("ij->", [x]), ("ij->i", [x]), ("ik,k->i", [a, v]))}
    systems: dict[str, Callable[[], object]] = {
        "ij-> tp": lambda: plans["ij->"](x),
        "ij-> plain loop": lambda: flat_sum(x.reshape(-1), nch),
        "ij-> numpy": lambda: x.sum(),
        "ij->i tp": lambda: plans["ij->i"](x),
        "ij->i plain loop": lambda: row_sums(x, rows, nch),
        "ij->i numpy": lambda: x.sum(1),
        "ik,k->i tp": lambda: plans["ik,k->i"](a, v),
        "ik,k->i plain loop": lambda: long_dots(a, v, nch, RUN_BLOCK),
        "ik,k->i numpy": lambda: a @ v,
    }
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            torch.set_num_threads(threads)
            tx, ta, tv = torch.from_numpy(x), torch.from_numpy(a), torch.from_numpy(v)
            systems.update({"ij-> torch": lambda: tx.sum(), "ij->i torch": lambda: tx.sum(1),
                            "ik,k->i torch": lambda: ta @ tv})
    numba.set_num_threads(threads)
    for sub, plan in plans.items():
        print(f"{sub}: {plan.steps[0].describe()}")
    times: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(args.rounds):
        for name in times:
            time.sleep(args.pause)
            times[name].append(best_seconds(systems[name], args.repeats, warmup=1))
    print(f"{args.dtype}, {threads} threads, {args.rounds} rounds of best of {args.repeats}, "
          f"{args.pause} s pauses (ms, best / median over the rounds)")
    for name, ts in times.items():
        print(f"{name:22s} {min(ts) * 1e3:8.3f} / {float(np.median(ts)) * 1e3:8.3f}")


if __name__ == "__main__":
    main()
