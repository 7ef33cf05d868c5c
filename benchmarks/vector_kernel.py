"""The vector GEMM kernel against BLAS on the same tiles, one core, in turns.

Each tile shape runs as the calibration's program (``reps`` m x n x k tiles along a
sequential loop: the small operand stays in cache while the others stream) lowered twice:
onto the vector kernel and onto BLAS (``lower(prog, vector_kernel=False)``).  The two are
timed in turns, best of several rounds, on one thread, so that a busy spell of a shared
machine slows both.  It prints the vector target the kernels were generated for: run it
with ``NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=`` to generate AVX2 code on an AVX-512
machine (numpy's BLAS picks its own kernels: ``OPENBLAS_CORETYPE`` chooses them).

Run: .venv/bin/python -m benchmarks.vector_kernel [--rounds N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import teir_plan as tp
from benchmarks.common import machine
from teir_plan.executor.execute import run_lowered
from teir_plan.executor.lower import lower
from teir_plan.isa import target
from teir_plan.planner.calibrate import calibration_program
from teir_plan.tilekinds.vec import KIND as VEC

# Tiles the vector kernel takes in the TCCG set: efbad,cf's blocks, dbea,ec's, a long
# thin tile and a squarer one.
SHAPES = [(432, 24, 36), (96, 96, 96), (1024, 24, 96), (256, 48, 128)]


def _runs(m: int, n: int, k: int, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    reps = max(1, min(4000, int(8e7 / (2 * m * n * k))))
    prog = calibration_program(m, n, k, "float32", reps, 0)
    arrays = [rng.random(m * k).astype(np.float32), rng.random(k * n * reps).astype(np.float32),
              np.zeros(m * n * reps, np.float32)]
    vec, blas = lower(prog, True), lower(prog, False)
    assert vec.kind is VEC, f"{(m, n, k)}: not a vector-kernel tile here"
    return reps, arrays, vec, blas


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    tp.set_num_threads(1)
    info = machine()
    print(f"{info.get('cpu')}: kernels for {target().describe()}, one thread, float32, "
          f"best of {args.rounds} rounds in turns")
    rng = np.random.default_rng(0)
    print("| m x n x k | vector kernel GFLOP/s | BLAS GFLOP/s | kernel / BLAS |")
    print("|---|---|---|---|")
    for m, n, k in SHAPES:
        reps, arrays, vec, blas = _runs(m, n, k, rng)
        best = {"vec": float("inf"), "blas": float("inf")}
        for low in (vec, blas):
            run_lowered(low, arrays)  # compile and warm
        for _ in range(args.rounds):
            for name, low in (("vec", vec), ("blas", blas)):
                t = time.perf_counter()
                run_lowered(low, arrays)
                best[name] = min(best[name], time.perf_counter() - t)
        flops = 2 * m * n * k * reps
        v, b = flops / best["vec"] / 1e9, flops / best["blas"] / 1e9
        print(f"| {m} x {n} x {k} | {v:.1f} | {b:.1f} | {v / b:.2f} |")


if __name__ == "__main__":
    main()
