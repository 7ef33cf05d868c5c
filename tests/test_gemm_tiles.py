"""The scalar GEMM tile kernels (teir_plan/executor/gemm_tiles.py), called directly on
flat arrays with hand-filled tile tables and checked against numpy.einsum in float64
(complex128 for complex): strided loops, dot tiles either way round, row tiles."""

from __future__ import annotations

import numpy as np
import pytest

from teir_plan.executor.gemm_tiles import dot_tile_kernel, gemm_loops, row_tile_kernel
from teir_plan.tilekinds.table import TILE_LEN, set_fields

RNG = np.random.default_rng(7)


def operand(shape: tuple[int, ...], dtype: np.dtype, pad: int = 3
            ) -> tuple[np.ndarray, np.ndarray, int, tuple[int, ...]]:
    """(flat array, the logical view, origin, element strides) of a padded column-major
    layout, so that no stride is a row-major one."""
    full = tuple(s + pad for s in shape)
    data = RNG.standard_normal(int(np.prod(full)) + 5)
    if np.dtype(dtype).kind == "c":
        data = data + 1j * RNG.standard_normal(data.shape)
    flat = data.astype(dtype)
    origin = 5
    strides = tuple(int(np.prod(full[:i])) for i in range(len(full)))  # column-major
    view = np.lib.stride_tricks.as_strided(
        flat[origin:], shape, tuple(s * flat.itemsize for s in strides), writeable=False)
    return flat, view, origin, strides


def wide(dtype: np.dtype) -> type:
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("zero_first", [True, False])
def test_strided_loops_compute_a_batch_reduce_gemm(dtype: type, zero_first: bool) -> None:
    m, n, k, br = 5, 4, 7, 3
    x0, a, ao, (a_br, a_m, a_k) = operand((br, m, k), dtype)
    x1, b, bo, (b_br, b_k, b_n) = operand((br, k, n), dtype)
    y, c, co, (c_m, c_n) = operand((m, n), dtype)
    before = c.astype(wide(dtype))
    flat_before = y.copy()
    tile = np.zeros(TILE_LEN, np.int64)
    set_fields(tile, m=m, n=n, k=k, br=br, a_m=a_m, a_k=a_k, b_k=b_k, b_n=b_n, c_m=c_m,
               c_n=c_n, a_br=a_br, b_br=b_br)
    gemm_loops(x0, ao, x1, bo, y, co, tile, zero_first)
    want = np.einsum("rmk,rkn->mn", a.astype(wide(dtype)), b.astype(wide(dtype)))
    if not zero_first:
        want = want + before
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    # Nothing outside the tile's elements was written.
    outside = np.ones(y.shape, bool)
    for i in range(m):
        for j in range(n):
            outside[co + i * c_m + j * c_n] = False
    np.testing.assert_array_equal(y[outside], flat_before[outside])


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("zero_first", [True, False])
def test_dot_tiles_either_way_round(swap: bool, zero_first: bool) -> None:
    m, k = 6, 33
    dt = np.float32
    if swap:  # C[j] (+)= sum_p A[p] B[p, j]
        x0, a, ao, (a_k,) = operand((k,), dt)
        x1, b, bo, (b_k, b_n) = operand((k, m), dt)
        fields = dict(n=m, k=k, m=1, a_k=a_k, b_k=b_k, b_n=b_n, swap=1)
        want = np.einsum("p,pj->j", a.astype(np.float64), b.astype(np.float64))
    else:  # C[i] (+)= sum_p A[i, p] B[p]
        x0, a, ao, (a_m, a_k) = operand((m, k), dt)
        x1, b, bo, (b_k,) = operand((k,), dt)
        fields = dict(m=m, k=k, n=1, a_m=a_m, a_k=a_k, b_k=b_k)
        want = np.einsum("ip,p->i", a.astype(np.float64), b.astype(np.float64))
    y, c, co, (c_s,) = operand((m,), dt)
    before = c.astype(np.float64)
    tile = np.zeros(TILE_LEN, np.int64)
    set_fields(tile, br=1, c_n=c_s, c_m=c_s, **fields)
    dot_tile_kernel(x0, ao, x1, bo, y, co, tile, zero_first, np.float32(0))
    np.testing.assert_allclose(c, want + (0 if zero_first else before), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("summed", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_row_tiles_sum_or_multiply_a_row(relu: bool, summed: bool, unit: bool) -> None:
    n = 37
    if unit:  # unit strides: the vectorized loops
        x0, x1, y = (RNG.standard_normal(n + 4) for _ in range(3))
        (o0, s0), (o1, s1), (o2, s2) = (2, 1), (1, 1), (3, 1)
    else:
        x0, x1, y = (RNG.standard_normal(3 * n + 4) for _ in range(3))
        (o0, s0), (o1, s1), (o2, s2) = (2, 3), (1, 2), (3, 3)
    a, b = x0[o0::s0][:n].copy(), x1[o1::s1][:n].copy()
    before = y.copy()
    tile = np.zeros(TILE_LEN, np.int64)
    set_fields(tile, a_m=s0, b_n=s1, c_m=0 if summed else s2)
    row_tile_kernel(x0, o0, x1, o1, y, o2, tile, n, False, relu, 0.0)  # accumulate
    if summed:
        want = before[o2] + np.einsum("i,i->", a, b)
        got = y[o2]
        rest = np.delete(np.arange(y.size), [o2])
    else:
        want = before[o2::s2][:n] + a * b
        got = y[o2::s2][:n]
        rest = np.setdiff1d(np.arange(y.size), np.arange(o2, o2 + n * s2, s2))
    np.testing.assert_allclose(got, np.maximum(want, 0) if relu else want, rtol=1e-12)
    np.testing.assert_array_equal(y[rest], before[rest])  # nothing else written
