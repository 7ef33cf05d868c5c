"""``make demo``: the spec's example end to end.

1. Spec example 10.3.7 (BRGEMM, parallel p and r) written by hand, run by
   ``tp.execute``, checked against numpy.
2. ``tp.einsum`` on trus,pqtu->pqrs with the example figure's |p|=4, |r|=3, |t|=2:
   the explain report (measured), a timed run against numpy, and tile figures:
   demo-tiles.png (the chosen schedule), demo-tiles-10.3.6.png and
   demo-tiles-10.3.7.png (the spec's schedules), in the current directory.
"""

from __future__ import annotations

import time

import numpy as np

import teir_plan as tp

P, Q, R, S, T, U = 4, 48, 3, 48, 2, 48  # Fig. 10.3.1: |r| = 3, |t| = 2, |p| = 4


def _best(fn, repeats: int = 7) -> float:  # type: ignore[no-untyped-def]
    fn()
    return min(_time(fn) for _ in range(repeats))


def _time(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((T, R, U, S)).astype(np.float32)  # t r u s
    b = rng.standard_normal((P, Q, T, U)).astype(np.float32)  # p q t u
    ref = np.einsum("trus,pqtu->pqrs", a.astype(np.float64), b.astype(np.float64))

    print("== 1. Spec example 10.3.7, written by hand ==")
    prog = tp.TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="brgemm", prim_last="none",
        dim_types=["n", "m", "k", "m", "n", "k"],
        exec_types=["parallel", "parallel", "prim", "prim", "prim", "prim"],
        dim_sizes=[P, R, T, S, Q, U],
        strides=[[0, U * S, R * U * S, 1, 0, S],
                 [Q * T * U, 0, U, 0, T * U, 1],
                 [Q * R * S, S, 0, 1, R * S, 0]],
    )
    print(prog.format(list("prtsqu")))
    out = np.empty((P, Q, R, S), np.float32)
    t = _best(lambda: tp.execute(prog, a, b, out))
    err = float(np.abs(out - ref).max())
    ok = err <= 1e-3 * max(1.0, float(np.abs(ref).max()))
    print(f"tp.execute: {t * 1e6:.1f} us, max abs error vs numpy (float64) {err:.1e} "
          f"({'ok' if ok else 'WRONG'})\n")

    print("== 2. tp.einsum('trus,pqtu->pqrs') planned by the cost model ==")
    report = tp.explain("trus,pqtu->pqrs", a, b, measure=True)
    report.print()
    res = tp.einsum("trus,pqtu->pqrs", a, b)
    t_tp = _best(lambda: tp.einsum("trus,pqtu->pqrs", a, b))
    t_np = _best(lambda: np.einsum("trus,pqtu->pqrs", a, b, optimize=True))
    flops = 2 * P * Q * R * S * T * U
    err2 = float(np.abs(res - ref).max())
    ok2 = err2 <= 1e-3 * max(1.0, float(np.abs(ref).max()))
    print(f"tp.einsum    {t_tp * 1e6:8.1f} us  {flops / t_tp / 1e9:6.1f} GFLOP/s  "
          f"(max abs error vs numpy in float64 {err2:.1e}: {'ok' if ok2 else 'WRONG'})")
    print(f"numpy.einsum {t_np * 1e6:8.1f} us  {flops / t_np / 1e9:6.1f} GFLOP/s")
    try:
        report.figure().savefig("demo-tiles.png", dpi=110, bbox_inches="tight")
        print("tile figure of the chosen schedule written to demo-tiles.png")
        # The spec's own schedules of this contraction (10.3.6: loops p, r, t index the
        # tiles; s, q, u fill them; 10.3.7: p, r parallel, t a batch-reduce inside BRGEMM).
        from teir_plan.render.figure import tile_figure

        gemm = tp.TEIR(prog.primitives.__class__("float32", "zero", "gemm", "none"),
                       prog.with_exec_types(["seq"] * 3 + ["prim"] * 3).schedule)
        for name, p, label in (("demo-tiles-10.3.6.png", gemm, "spec 10.3.6"),
                               ("demo-tiles-10.3.7.png", prog, "spec 10.3.7")):
            tile_figure(p, list("prtsqu"), title=f"trus,pqtu->pqrs, {label}").savefig(
                name, dpi=110, bbox_inches="tight")
            print(f"tile figure of the {label} schedule written to {name}")
    except tp.PlanError as exc:
        print(f"(no figure: {exc})")
    if not (ok and ok2):
        raise SystemExit("demo: a result differs from numpy")


if __name__ == "__main__":
    main()
