"""Primitive-level benchmarks of the executor (issue: TEIR core).

1. One large GEMM tile (m = n = k = 2048, float32, column-major) as a TEIR program
   vs numpy.matmul of the same shape; goal >= 0.9x.
2. A 4-D permutation of 64 MiB through a Copy program vs
   np.ascontiguousarray(a.transpose(...)); goal >= 1.0x, GB/s printed.  Then the
   permutations that move a contraction's staged result into a C-order ``out``
   (the staging layouts the planner picks for deca,be->abcd, efbad,cf->abcde and
   dfgb,geac->abcdef; short extents such as 20 make the copy's tiles partial) vs
   numpy.copyto on the same view.
3. The spec's contraction trus,pqtu->pqrs as the BRGEMM-tiled program (10.3.7) vs
   the GEMM-tiled one (10.3.6), both vs numpy.einsum(optimize=True).

Run: .venv/bin/python benchmarks/prims.py [--repeats N]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import teir_plan as tp
from benchmarks.common import machine, machine_md, md_table, timeit, write_results


def gemm_tile(repeats: int) -> list:
    n = 2048
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.random((n, n), dtype=np.float32))
    b = np.asfortranarray(rng.random((n, n), dtype=np.float32))
    c = np.empty((n, n), np.float32, order="F")
    prog = tp.TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["m", "n", "k"], exec_types=["prim"] * 3, dim_sizes=[n, n, n],
        strides=[[1, 0, n], [0, n, 1], [1, n, 0]],
    )
    t_tp, _ = timeit(lambda: tp.execute(prog, a, b, c), repeats)
    t_np, _ = timeit(lambda: np.matmul(a, b), repeats)
    assert np.allclose(c, a @ b, rtol=1e-3)
    flops = 2 * n**3
    return ["GEMM tile 2048^3 f32", flops / t_tp / 1e9, flops / t_np / 1e9, t_np / t_tp, "GFLOP/s"]


def permutation(repeats: int) -> list:
    shape, perm = (64, 128, 64, 32), (2, 0, 3, 1)  # 64 MiB of float32
    a = np.random.default_rng(1).random(shape, dtype=np.float32)
    out_shape = tuple(shape[p] for p in perm)
    out = np.empty(out_shape, np.float32)
    sub = "abcd->" + "".join("abcd"[p] for p in perm)
    # order="C": the program writes ``out``'s layout (order K would follow the input's).
    plan = tp.plan(sub, a, order="C")
    prog = plan.teir
    t_tp, _ = timeit(lambda: tp.execute(prog, a, out), repeats)
    t_np, _ = timeit(lambda: np.ascontiguousarray(a.transpose(perm)), repeats)
    assert np.array_equal(out, a.transpose(perm))
    moved = 2 * a.nbytes
    return [f"permute {shape} -> {perm} (64 MiB)", moved / t_tp / 1e9, moved / t_np / 1e9,
            t_np / t_tp, "GB/s"]


# (name, shape, element strides of the staged result): each copied into C order.
STAGED = (
    ("deca,be->abcd staged", (96, 24, 84, 96), (1, 774144, 96, 8064)),
    ("efbad,cf->abcde staged", (48, 36, 24, 36, 48), (36, 1728, 2985984, 1, 62208)),
    ("dfgb,geac->abcdef staged", (24, 20, 20, 24, 20, 20),
     (192000, 1, 9600, 400, 4608000, 20)),
)


def staged_permutations(repeats: int) -> list[list]:
    rows = []
    rng = np.random.default_rng(3)
    for name, shape, strides in STAGED:
        base = rng.random(math.prod(shape), dtype=np.float32)
        x = np.lib.stride_tricks.as_strided(base, shape, [s * base.itemsize for s in strides])
        out = np.empty(shape, np.float32)
        plan = tp.plan("abcdef"[:len(shape)] + "->" + "abcdef"[:len(shape)], x, out=out)
        t_tp, _ = timeit(lambda plan=plan, x=x, out=out: plan(x, out=out), repeats)
        t_np, _ = timeit(lambda x=x, out=out: np.copyto(out, x), repeats)
        plan(x, out=out)
        assert np.array_equal(out, x)
        moved = 2 * out.nbytes
        rows.append([f"{name} -> C order ({out.nbytes >> 20} MiB)", moved / t_tp / 1e9,
                     moved / t_np / 1e9, t_np / t_tp, "GB/s"])
    return rows


def brgemm_vs_gemm(repeats: int) -> list[list]:
    p, q, r, s, t, u = 8, 96, 24, 96, 8, 96
    rng = np.random.default_rng(2)
    in0 = rng.random((t, r, u, s), dtype=np.float32)
    in1 = rng.random((p, q, t, u), dtype=np.float32)
    out = np.empty((p, q, r, s), np.float32)
    s0 = [0, u * s, r * u * s, 1, 0, s]
    s1 = [q * t * u, 0, u, 0, t * u, 1]
    s2 = [q * r * s, s, 0, 1, r * s, 0]
    common = dict(data_type="float32", prim_first="zero", prim_last="none",
                  dim_types=["n", "m", "k", "m", "n", "k"], dim_sizes=[p, r, t, s, q, u],
                  strides=[s0, s1, s2])
    gemm = tp.TEIR.from_fields(prim_main="gemm", exec_types=["seq"] * 3 + ["prim"] * 3, **common)
    brgemm = tp.TEIR.from_fields(
        prim_main="brgemm", exec_types=["parallel", "parallel"] + ["prim"] * 4, **common)
    flops = 2 * p * q * r * s * t * u
    t_np, _ = timeit(lambda: np.einsum("trus,pqtu->pqrs", in0, in1, optimize=True), repeats)
    rows = []
    for name, prog in (("10.3.6 GEMM tiles (seq p, r, t)", gemm),
                       ("10.3.7 BRGEMM tiles (parallel p, r)", brgemm)):
        t_tp, _ = timeit(lambda prog=prog: tp.execute(prog, in0, in1, out), repeats)
        assert np.allclose(out, np.einsum("trus,pqtu->pqrs", in0, in1), rtol=1e-3, atol=1e-3)
        rows.append([name, flops / t_tp / 1e9, flops / t_np / 1e9, t_np / t_tp, "GFLOP/s"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    info = machine()
    rows = [gemm_tile(args.repeats), permutation(args.repeats),
            *staged_permutations(args.repeats), *brgemm_vs_gemm(args.repeats)]
    header = ["benchmark", "teir_plan", "numpy", "ratio (tp/np speed)", "unit"]
    table = md_table(header, rows)
    md = f"# Primitive benchmarks\n\n{machine_md(info)}\n\nBest of {args.repeats}.\n\n{table}\n"
    print(md)
    path = write_results("prims", {"machine": info, "header": header, "rows": rows}, md)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
