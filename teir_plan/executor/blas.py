"""BLAS ``?gemm`` callable from numba-jitted code, with a disk-cacheable signature.

Kernels receive the address of scipy's Fortran ``sgemm``/``dgemm`` as a plain
integer argument and call through it with :func:`call_gemm`.  A ctypes function
object would be baked into the compiled code as a process-specific address,
which defeats numba's on-disk cache; passing the address at run time keeps one
cached compilation valid in every process.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import get_cython_function_address, intrinsic


@intrinsic
def call_gemm(typingctx, fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):  # type: ignore[no-untyped-def]
    """Call the Fortran gemm at address ``fn``; every other argument is an address."""
    sig = types.void(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i8p] * 13)
        fptr = builder.inttoptr(args[0], fnty.as_pointer())
        builder.call(fptr, [builder.inttoptr(v, i8p) for v in args[1:]])
        return context.get_dummy_value()

    return sig, codegen


@cache
def gemm_address(dtype: np.dtype) -> int:
    """Address of scipy.linalg.cython_blas' sgemm (float32) or dgemm (float64)."""
    name = {"float32": "sgemm", "float64": "dgemm"}[np.dtype(dtype).name]
    return int(get_cython_function_address("scipy.linalg.cython_blas", name))
