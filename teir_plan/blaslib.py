"""Which BLAS library the GEMM tiles call, and whether its complex GEMM has the 3M form.

numba-free (ctypes only), so that the planner can ask what the executor will call
without importing it: a complex tile's price depends on whether it runs on ``?gemm3m``.

OpenBLAS' ``cgemm3m``/``zgemm3m`` take ``cgemm``/``zgemm``'s arguments and compute the
product with three real matrix products instead of four (Karatsuba's form:
``Re = Ar Br - Ai Bi``, ``Im = (Ar + Ai)(Br + Bi) - Ar Br - Ai Bi``, on real and
imaginary parts it separates while packing), a quarter of the multiply-adds.  Measured
on one core of the project's AMD EPYC (Zen 5, OpenBLAS 0.3.31's Haswell kernels, both
forms timed in turns in one process, in cache): 1.2-1.3x on complex64 tiles of 96^3 to
376 x 376 x 384 and 512 x 24 x 384, 1.2-1.6x on complex128 ones, 1.0-1.1x at 64^3 and
48^3; slower on small or thin tiles (0.4-0.9x at 16^3, on any extent of 4 to 8, and at
k = 4 or 16), where its extra packing passes are not paid back.  Its error is
normwise (about twice cgemm's largest relative error on those tiles: 1.1e-6 against
5.8e-7 in complex64, 2e-15 against 1e-15 in complex128), as numpy's einsum tolerances
allow.  ``TEIR_PLAN_GEMM3M=0`` keeps every complex tile on ``?gemm``.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

import numpy as np

# A complex tile runs on ?gemm3m when its m and n are at least GEMM3M_MIN_MN, its k at
# least GEMM3M_MIN_K, and m n k above GEMM3M_MIN_MNK (the measurements above: below
# these the 3M form's extra packing costs more than the quarter of the products it
# saves).  GEMM3M_MIN_MNK is also OpenBLAS' own threshold for running a call on one
# thread (tiles.BLAS_SERIAL_MNK): every 3M tile then runs with BLAS limited
# to one thread, where it was measured (on two of OpenBLAS' threads a 96 x 9261 x 96
# complex64 product ran 0.26x as fast as cgemm's).
GEMM3M_MIN_MN = 24
GEMM3M_MIN_K = 32
GEMM3M_MIN_MNK = 65536 * 4
# The cost model's speed-up of a 3M tile over ?gemm at the same shape: the lower end of
# the measured 1.2-1.6x (a quarter fewer products would be 1.33x).
GEMM3M_SPEEDUP = 1.2
# OpenBLAS' 3M driver (driver/level3/gemm3m_level3.c) packs each operand's panel once per
# real product, three times in all, each time from the operand itself: a panel that does
# not stay in cache between the passes is read from memory three times (cost._traffic).
GEMM3M_PASSES = 3


@cache
def numpy_openblas() -> ctypes.CDLL | None:
    """numpy's bundled ILP64 OpenBLAS (already loaded by numpy), or None."""
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for path in sorted(libs.glob("libscipy_openblas64_*.so*")):
        try:
            lib = ctypes.CDLL(str(path))
            lib.scipy_sgemm_64_, lib.scipy_dgemm_64_  # noqa: B018 - all must exist
            lib.scipy_cgemm_64_, lib.scipy_zgemm_64_  # noqa: B018
        except (OSError, AttributeError):
            continue
        return lib
    return None


def uses_numpy_openblas() -> bool:
    """Whether the GEMM tiles call numpy's OpenBLAS (else scipy's cython_blas;
    ``TEIR_PLAN_BLAS=scipy`` forces scipy's)."""
    return os.environ.get("TEIR_PLAN_BLAS") != "scipy" and numpy_openblas() is not None


@cache
def numpy_openblas_kernels() -> str | None:
    """The CPU whose kernels numpy's OpenBLAS chose (``Haswell``, ``SkylakeX``, ...:
    ``OPENBLAS_CORETYPE`` can choose a narrower one than the CPU's), or None."""
    lib = numpy_openblas()
    corename = getattr(lib, "scipy_openblas_get_corename64_", None)
    if corename is None:
        return None
    corename.restype = ctypes.c_char_p
    name = corename()
    return name.decode(errors="replace") if name else None


def blas_kernels() -> str:
    """The library the GEMM tiles call and the kernels it runs: ``numpy OpenBLAS
    Haswell`` or ``scipy BLAS``.  The cost model's measured GEMM rates hold for these
    kernels alone (machine/store.machine_key)."""
    if not uses_numpy_openblas():
        return "scipy BLAS"
    return f"numpy OpenBLAS {numpy_openblas_kernels() or ''}".rstrip()


@cache
def gemm3m_address(dtype: np.dtype) -> int:
    """The address of numpy's OpenBLAS ``cgemm3m`` (complex64) or ``zgemm3m``
    (complex128), 64-bit integers like its ``?gemm``; 0 when the tiles do not call that
    library, it lacks the symbol, ``dtype`` is real or ``TEIR_PLAN_GEMM3M=0``."""
    dt = np.dtype(dtype)
    if dt.kind != "c" or os.environ.get("TEIR_PLAN_GEMM3M") == "0" or not (
            uses_numpy_openblas()):
        return 0
    lib = numpy_openblas()
    name = f"scipy_{'c' if dt.itemsize == 8 else 'z'}gemm3m_64_"
    fn = getattr(lib, name, None)
    return int(ctypes.cast(fn, ctypes.c_void_p).value or 0) if fn is not None else 0


def gemm3m_available(dtype: np.dtype) -> bool:
    """Whether complex tiles of ``dtype`` can run on ?gemm3m here."""
    return gemm3m_address(dtype) != 0


def uses_gemm3m(dtype: np.dtype, m: int, n: int, k: int) -> bool:
    """Whether a BLAS tile of these extents runs on ?gemm3m (the rule above; symmetric
    in m and n, so a swapped call gives the same answer).

    >>> uses_gemm3m(np.float32, 512, 512, 512)
    False
    """
    return (min(m, n) >= GEMM3M_MIN_MN and k >= GEMM3M_MIN_K and m * n * k > GEMM3M_MIN_MNK
            and gemm3m_available(dtype))
