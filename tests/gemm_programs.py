"""Hand-written GEMM TEIR programs for the executor's kernel tests: one tile of
out = in0 . in1 with a K loop split off and, optionally, a parallel loop, and the check
of such a program against numpy.einsum in float64."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

import teir_plan as tp


def line_aligned(size: int, dtype: type) -> np.ndarray:
    """An array of ``size`` elements whose first element starts a 64-byte line."""
    isz = np.dtype(dtype).itemsize
    raw = np.empty(size + 64 // isz, dtype)
    skip = (-raw.ctypes.data % 64) // isz
    return raw[skip: skip + size]


# (K steps, prim_first, prim_last, parallel) of the kernel tests' programs: one tile; a K
# loop with ReLU last; accumulated onto out; a K loop under a parallel loop.
SCHEDULES = [(1, "zero", "none", False), (3, "zero", "relu", False),
             (2, "none", "none", True), (3, "zero", "none", True)]


def kernel_cases() -> Iterator[tuple[str, str, int, str, str, bool]]:
    """(dtype, vector axis "m" or "n", K steps, prim_first, prim_last, parallel) of every
    program a kernel test runs: both float dtypes, both axes, every schedule."""
    for dtype, along, schedule in itertools.product(("float32", "float64"), "mn", SCHEDULES):
        yield (dtype, along, *schedule)


def gemm_program(dtype: str, m: int, n: int, k: int, ksplit: int,
                 a_mk: tuple[int, int], b_kn: tuple[int, int], c_mn: tuple[int, int],
                 first: str, last: str, parallel_dim: int | None) -> tp.TEIR:
    """The program whose tile is m x n x (k / ksplit), with the element strides of in0
    along (m, k), of in1 along (k, n) and of out along (m, n), under a sequential loop
    of ``ksplit`` K steps; with ``parallel_dim`` (1: m, 2: n) that axis split into a
    parallel loop of 2 around everything."""
    kt = k // ksplit
    (a_m, a_k), (b_k, b_n), (c_m, c_n) = a_mk, b_kn, c_mn
    dims = ["k", "m", "n", "k"]
    execs = ["seq", "prim", "prim", "prim"]
    sizes = [ksplit, m, n, kt]
    strides = [[a_k * kt, a_m, 0, a_k], [b_k * kt, 0, b_n, b_k], [0, c_m, c_n, 0]]
    if parallel_dim is not None:
        half = sizes[parallel_dim] // 2
        sizes[parallel_dim] = half
        dims.insert(0, dims[parallel_dim])
        execs.insert(0, "parallel")
        sizes.insert(0, 2)
        for t in range(3):
            strides[t].insert(0, strides[t][parallel_dim] * half)
    return tp.TEIR.from_fields(
        data_type=dtype, prim_first=first, prim_main="gemm", prim_last=last,
        dim_types=dims, exec_types=execs, dim_sizes=sizes, strides=strides)


def assert_program_matches(teir: tp.TEIR, a: np.ndarray, b: np.ndarray, expr: str,
                           first: str, last: str, err_msg: str) -> None:
    """Run ``teir`` into an out of 0.5s and compare with numpy.einsum(expr) in float64,
    accumulated onto the 0.5s when ``first`` is "none", then ReLU'd when ``last`` is."""
    ref = np.einsum(expr, a.astype(np.float64), b.astype(np.float64))
    out = np.full(ref.shape, 0.5, a.dtype)
    if first == "none":
        ref = ref + 0.5
    if last == "relu":
        ref = np.maximum(ref, 0)
    tp.execute(teir, a, b, out)
    tol = 1e-4 if a.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol, err_msg=err_msg)
