"""The vector GEMM kernel against BLAS on the same tiles, one core, in turns.

Each tile shape runs as the calibration's program (``reps`` m x n x k tiles along a
sequential loop: the small operand stays in cache while the others stream) lowered twice:
onto the vector kernel and onto BLAS (``lower(prog, vector_kernel=False)``).  The two are
timed in turns, best of several rounds, on one thread, so that a busy spell of a shared
machine slows both.  It prints the vector target the kernels were generated for: run it
with ``NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=`` to generate AVX2 code on an AVX-512
machine (numpy's BLAS picks its own kernels: ``OPENBLAS_CORETYPE`` chooses them).

``--sweep`` instead measures the kernel alone on tiles of several vector lengths, rows
and K, in two settings: the calibration's program (the vector operand's m x k block in
cache, one contiguous run; the other operand and out stream) and tiles along a long
vector operand whose K rows are far apart (the rows of a tensor several MiB large, as a
tree's first step reads them).  Each tile's rate is divided by what the model predicts
for it: the rate the calibration derives (the 432 x 24 x 36 tile's rate over its
``vec_efficiency``) times the tile's ``vec_efficiency``; 1.00 is a tile the model
prices right.

Run: .venv/bin/python -m benchmarks.vector_kernel [--rounds N] [--sweep]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import teir_plan as tp
from benchmarks.common import machine
from teir_plan.calibration import calibration_program
from teir_plan.executor.execute import run_lowered
from teir_plan.executor.lower import Lowered, lower
from teir_plan.isa import target
from teir_plan.machine import MachineParams
from teir_plan.schedule.in_force import machine_params
from teir_plan.teir.records import TEIR
from teir_plan.tilekinds.vec import KIND as VEC
from teir_plan.tilekinds.vec import aliased_k_rows, vec_efficiency

# Tiles the vector kernel takes in the TCCG set: efbad,cf's blocks, dbea,ec's, a long
# thin tile and a squarer one.
SHAPES = [(432, 24, 36), (96, 96, 96), (1024, 24, 96), (256, 48, 128)]
# The sweep's vector lengths, rows and K.
LENGTHS = (32, 48, 64, 96, 128, 192, 256, 512, 1024)
ROWS = (8, 24, 32, 64)
KS = (32, 96)


def _runs(m: int, n: int, k: int, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    reps = max(1, min(4000, int(8e7 / (2 * m * n * k))))
    prog = calibration_program(m, n, k, "float32", reps, 0)
    arrays = [rng.random(m * k).astype(np.float32), rng.random(k * n * reps).astype(np.float32),
              np.zeros(m * n * reps, np.float32)]
    return reps, arrays, lower(prog, True), lower(prog, False)


def _why_not(m: int, n: int, k: int) -> str:
    """Why the calibration program's m x n x k tile is not the vector kernel's here."""
    if aliased_k_rows(k, n, m, 4):
        return "K rows a multiple of 4 KiB apart alias in L1 at this vector width"
    return "not a vector-kernel tile at this vector width"


def _far_rows(length: int, rows: int, k: int, rng: np.random.Generator
              ) -> tuple[int, list[np.ndarray], Lowered]:
    """Tiles ``length`` long along a vector operand of K rows ``ld`` elements apart
    (about 8 MiB in all), ``rows`` rows of a small operand in cache, into an out of rows
    ``ld`` apart: out[r, v] = sum_p V[p, v] S[r, p], one tile per ``length`` of v.  The
    rows are a line longer than the tiles' span, so that no two share their cache sets
    (rows a power of two apart would: that is the cost model's business, not the
    kernel's)."""
    tiles = max(1, int(2 * 2**20 / (k * length)))
    ld = tiles * length + 16
    prog = TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["m", "m", "n", "k"], exec_types=["seq", "prim", "prim", "prim"],
        dim_sizes=[tiles, length, rows, k],
        strides=[[length, 1, 0, ld], [0, 0, k, 1], [length, 1, ld, 0]])
    arrays = [rng.random(k * ld).astype(np.float32), rng.random(rows * k).astype(np.float32),
              np.zeros(rows * ld, np.float32)]
    return tiles, arrays, lower(prog, True)


def _best(low: Lowered, arrays: list[np.ndarray], rounds: int) -> float:
    run_lowered(low, arrays)  # compile and warm
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        run_lowered(low, arrays)
        best = min(best, time.perf_counter() - t)
    return best


def sweep(rounds: int) -> None:
    rng = np.random.default_rng(0)
    tile_s = MachineParams.reference().tile_seconds

    def rate(m: int, n: int, k: int, tiles: int, seconds: float) -> float:
        return 2 * m * n * k / max(seconds / tiles - tile_s, 1e-12)

    # The K steps of the parameters in force (a calibration's fit, or the reference's).
    steps = machine_params().vec_k_steps
    reps, arrays, vec, _ = _runs(432, 24, 36, rng)
    full = (rate(432, 24, 36, reps, _best(vec, arrays, rounds))
            / vec_efficiency(432, 24, 36, 4, steps))
    print(f"vector kernel at full efficiency (432 x 24 x 36 / its vec_efficiency, "
          f"K steps {steps:.2f}): {full / 1e9:.1f} GFLOP/s")
    print("| length | rows | k | vec_efficiency | V in cache GFLOP/s | measured / model "
          "| V rows far apart GFLOP/s | measured / model |")
    print("|---|---|---|---|---|---|---|---|")
    for k in KS:
        for rows in ROWS:
            for length in LENGTHS:
                eff = vec_efficiency(length, rows, k, 4, steps)
                cells = ["-", "-"]
                reps, arrays, vec, _ = _runs(length, rows, k, rng)
                if vec.kind is VEC:
                    r = rate(length, rows, k, reps, _best(vec, arrays, rounds))
                    cells = [f"{r / 1e9:.1f}", f"{r / (full * eff):.2f}"]
                tiles, arrays, low = _far_rows(length, rows, k, rng)
                if low.kind is VEC:
                    r = rate(length, rows, k, tiles, _best(low, arrays, rounds))
                    cells += [f"{r / 1e9:.1f}", f"{r / (full * eff):.2f}"]
                else:
                    cells += ["-", "-"]
                print(f"| {length} | {rows} | {k} | {eff:.2f} | " + " | ".join(cells) + " |",
                      flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sweep", action="store_true",
                    help="the kernel alone against the model on short and long tiles")
    args = ap.parse_args()
    tp.set_num_threads(1)
    info = machine()
    print(f"{info.get('cpu')}: kernels for {target().describe()}, one thread, float32, "
          f"best of {args.rounds} rounds{'' if args.sweep else ' in turns'}")
    if args.sweep:
        sweep(args.rounds)
        return
    rng = np.random.default_rng(0)
    print("| m x n x k | vector kernel GFLOP/s | BLAS GFLOP/s | kernel / BLAS |")
    print("|---|---|---|---|")
    for m, n, k in SHAPES:
        reps, arrays, vec, blas = _runs(m, n, k, rng)
        if vec.kind is not VEC:
            print(f"| {m} x {n} x {k} | - ({_why_not(m, n, k)}) | | |")
            continue
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
