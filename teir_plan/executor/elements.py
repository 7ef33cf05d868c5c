"""Element-type hooks that let one kernel source compile for real and complex elements.

The loop walker and its inlined tiles are compiled once per data type (entries.py), with
every branch typed, whether a program of that type can reach it or not: a ReLU test
``v > 0`` does not type for complex values, and a strided loop that widens its products
with ``float()`` would drop their imaginary parts.  These overloads give each element
type its meaning.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload


def relu_value(v):  # type: ignore[no-untyped-def]
    """numpy.maximum(v, 0), NaN propagated, -0.0 and 0.0 giving +0.0 (real ``v``)."""
    if v > 0 or v != v:
        return v
    return 0.0


def widen(v):  # type: ignore[no-untyped-def]
    """``v`` in the widest type of its kind (float64 or complex128): the strided loop
    tiles accumulate in it."""
    return complex(v) if isinstance(v, complex | np.complexfloating) else float(v)


def accumulator_zero(arr):  # type: ignore[no-untyped-def]
    """Zero in :func:`widen`'s type for the elements of ``arr``."""
    return 0j if arr.dtype.kind == "c" else 0.0


@overload(relu_value)
def _relu_value(v):  # type: ignore[no-untyped-def]
    if isinstance(v, types.Complex):
        # numpy.maximum(v, 0) on complex values (its lexicographic order, NaN in either
        # part propagated).  No program reaches it: teir.validate refuses relu for
        # complex data types; the kernels containing it must still type.
        def lexicographic(v):  # type: ignore[no-untyped-def]
            if v != v or v.real > 0 or (v.real == 0 and v.imag > 0):
                return v
            return v * 0
        return lexicographic

    def relu(v):  # type: ignore[no-untyped-def]
        if v > 0 or v != v:
            return v
        return 0.0
    return relu


@overload(widen)
def _widen(v):  # type: ignore[no-untyped-def]
    if isinstance(v, types.Complex):
        return lambda v: np.complex128(v)
    return lambda v: np.float64(v)


@overload(accumulator_zero)
def _accumulator_zero(arr):  # type: ignore[no-untyped-def]
    if isinstance(arr.dtype, types.Complex):
        return lambda arr: np.complex128(0)
    return lambda arr: np.float64(0)
