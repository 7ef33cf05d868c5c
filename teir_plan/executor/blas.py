"""BLAS ``?gemm`` callable from numba-jitted code, with a disk-cacheable signature.

Kernels receive the address of a Fortran-interface ``sgemm``/``dgemm`` and the
width of its integers as plain integer arguments and call through them with
:func:`call_gemm`.  A ctypes function object would be baked into the compiled
code as a process-specific address, which defeats numba's on-disk cache;
passing the address at run time keeps one cached compilation valid in every
process.

Which BLAS: numpy's own OpenBLAS (64-bit integers, symbols ``scipy_?gemm_64_``)
when this numpy bundles one, because it is the library numpy.matmul and
numpy.einsum use and a newer OpenBLAS than scipy's (on the reference machine it
runs tall-skinny GEMMs, m=144384 n=24 k=384, about 2x faster); otherwise scipy's
``cython_blas`` (32-bit integers).  ``TEIR_PLAN_BLAS=scipy`` forces the latter.
"""

from __future__ import annotations

import ctypes
from functools import cache

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import get_cython_function_address, intrinsic

from teir_plan.blaslib import numpy_openblas, uses_numpy_openblas
from teir_plan.tiles import GEMM_NAMES


def _fortran_call(context, builder, signature, args):  # type: ignore[no-untyped-def]
    """Call the Fortran routine at address args[0], every other argument an address (the
    Fortran interface passes everything by reference)."""
    i8p = ir.IntType(8).as_pointer()
    fnty = ir.FunctionType(ir.VoidType(), [i8p] * (len(args) - 1))
    fptr = builder.inttoptr(args[0], fnty.as_pointer())
    builder.call(fptr, [builder.inttoptr(v, i8p) for v in args[1:]])
    return context.get_dummy_value()


@intrinsic
def call_gemm(typingctx, fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # type: ignore[no-untyped-def]
    """Call the Fortran gemm at address ``fn``; every other argument is an address."""
    return types.void(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), _fortran_call


@intrinsic
def call_gemv(typingctx, fn, trans, m, n, alpha, a, lda, xv, incx, beta, y, incy):  # type: ignore[no-untyped-def]
    """Call the Fortran gemv at address ``fn``; every other argument is an address."""
    return types.void(fn, trans, m, n, alpha, a, lda, xv, incx, beta, y, incy), _fortran_call


@cache
def gemm_address(dtype: np.dtype) -> tuple[int, int]:
    """(address, integer width in bytes) of the ``sgemm`` (float32), ``dgemm`` (float64),
    ``cgemm`` (complex64) or ``zgemm`` (complex128) the kernels call: the complex ones
    take the same arguments, alpha and beta complex."""
    name = GEMM_NAMES[np.dtype(dtype).name]
    if uses_numpy_openblas():
        fn = getattr(numpy_openblas(), f"scipy_{name}_64_")
        return int(ctypes.cast(fn, ctypes.c_void_p).value or 0), 8
    return int(get_cython_function_address("scipy.linalg.cython_blas", name)), 4


def blas_name() -> str:
    """Which library the GEMM tiles call (for reports)."""
    return "numpy's OpenBLAS (ILP64)" if gemm_address(np.dtype(np.float32))[1] == 8 else (
        "scipy's BLAS (LP64)")
