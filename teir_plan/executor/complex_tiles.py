"""Tiles for complex elements that the real kernels cannot take.

A complex element is one element (numpy's interleaved real and imaginary parts): strides
stay in elements, and BLAS' ``cgemm``/``zgemm`` (blas.py) take the same leading
dimensions and transpose flags as ``sgemm``/``dgemm``, so GEMM tiles, the strided loops,
dot and row tiles run on the real kernels' source compiled for complex elements
(elements.py types their ReLU and accumulators).  What cannot: the copy kernels' line
transposes and non-temporal stores, built on LLVM vectors of float lanes.  A complex64
Copy program runs as a float64 program instead (an 8-byte element moved whole, bit for bit:
:func:`copy_alias`); a complex128 one copies its tiles here, element by element.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit

from teir_plan.tilekinds.table import T_A_K, T_A_M, T_C_M, T_C_N, T_M, T_N


@njit(cache=True, nogil=True)
def copy_elements(x, xo, y, yo, m, n, x_m, x_n, y_m, y_n):  # type: ignore[no-untyped-def]
    """y[yo + i*y_m + j*y_n] = x[xo + i*x_m + j*x_n] over an m x n tile, the inner loop
    along y's smaller stride (writes in order)."""
    if n > 1 and (m == 1 or abs(y_n) < abs(y_m)):
        m, n = n, m
        x_m, x_n = x_n, x_m
        y_m, y_n = y_n, y_m
    for j in range(n):
        xb = xo + j * x_n
        yb = yo + j * y_n
        for i in range(m):
            y[yb + i * y_m] = x[xb + i * x_m]


def copy_elements_entry(x0p, x0n, o0, x1p, x1n, o1, yp, yn, o2, tp, tn, first, last, sp,  # type: ignore[no-untyped-def]
                        sn, ip, i_n, cp, cn, n0, n1, p2):
    """A Copy tile of complex elements, as a tile entry (walker._run_tile's arguments)."""
    tile = carray(tp, (tn,))
    copy_elements(carray(x0p, (x0n,)), o0, carray(yp, (yn,)), o2, tile[T_M], tile[T_N],
                  tile[T_A_M], tile[T_A_K], tile[T_C_M], tile[T_C_N])


def copy_alias(dtype: np.dtype) -> np.dtype | None:
    """The real type a Copy program of ``dtype`` runs as, moving each element whole
    (complex64: float64, 8 bytes), or None: it runs as itself."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.complex64 else None


def expand_parts(z: np.ndarray, e: np.ndarray) -> None:
    """Write each element of the complex array ``z`` as the real 2 x 2 matrix that
    multiplies a complex number's (re, im) from the left: ``e[..., s, p]`` of the real
    dtype of ``z``'s parts, ``e[..., 0, :] = (re, im)``, ``e[..., 1, :] = (-im, re)``.
    A complex product ``sum_s x[..., s] e[..., s, p]`` over ``x``'s parts is then real
    arithmetic: (xr zr - xi zi, xr zi + xi zr), numpy's formula, so infinities and NaNs
    come out as numpy's.  (``1j * z`` would not do for the second row: inf * 0 is NaN.)"""
    np.copyto(e[..., 0, :].view(z.dtype)[..., 0], z)
    np.negative(z.imag, out=e[..., 1, 0])
    np.copyto(e[..., 1, 1], z.real)
