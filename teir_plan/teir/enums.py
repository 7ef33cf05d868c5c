"""The enumerations of TEIR (spec section 10.2).

Every API that expects one of these enums also accepts its name as a
case-insensitive string:

>>> from teir_plan.teir.enums import DimType, ExecType
>>> DimType.coerce("m") is DimType.M
True
>>> ExecType.coerce("Parallel") is ExecType.PARALLEL
True
"""

from __future__ import annotations

import enum
import sys

import numpy as np

from teir_plan.errors import TEIRError


class _NamedEnum(enum.Enum):
    """An enum whose members can be given by case-insensitive name."""

    @classmethod
    def coerce(cls, value: object, field: str = "") -> _NamedEnum:
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.isascii():  # ("ſeq".upper() is "SEQ")
            key = value.strip().upper()
            aliases = getattr(cls, "_aliases", {})
            key = aliases.get(key, key)
            if key in cls.__members__:
                return cls.__members__[key]
        where = f"{field}: " if field else ""
        names = ", ".join(m.name.lower() for m in cls)
        raise TEIRError(f"{where}{value!r} is not a {cls.__name__} (one of {names})")

    def __str__(self) -> str:
        return self.name.lower()


class DimType(_NamedEnum):
    """Role of an axis: which tensors it indexes (teir-notes.md, 'Axis roles')."""

    C = "c"
    M = "m"
    N = "n"
    K = "k"

    def participates(self, tensor: int, num_tensors: int) -> bool:
        """Whether tensor ``tensor`` (0-based in (in0, in1, out) or (in0, out)) takes part."""
        if num_tensors == 2:
            return self is DimType.C
        return _ROLE_MAP[self][tensor]


_ROLE_MAP = {
    DimType.C: (True, True, True),
    DimType.M: (True, False, True),
    DimType.N: (False, True, True),
    DimType.K: (True, True, False),
}


class ExecType(_NamedEnum):
    """How an axis is executed: a sequential loop, a parallel loop, or inside the primitive."""

    SEQ = "seq"
    PARALLEL = "parallel"
    PRIM = "prim"


# etops spells parallel "shared", and walks parallel M/N axes on a space-filling curve ("sfc").
ExecType._aliases = {"SHARED": "PARALLEL", "SFC": "PARALLEL"}  # type: ignore[attr-defined]


class Prim(_NamedEnum):
    """Primitive kinds (spec section 10.2)."""

    NONE = "none"
    ZERO = "zero"
    COPY = "copy"
    RELU = "relu"
    GEMM = "gemm"
    BRGEMM = "brgemm"


class DataType(_NamedEnum):
    """Element type of all tensors of a program."""

    FLOAT32 = "float32"
    FLOAT64 = "float64"
    # Interleaved complex (numpy's layout): one element is a (real, imaginary) pair, and
    # strides count elements, not their parts.
    COMPLEX64 = "complex64"
    COMPLEX128 = "complex128"
    # 16-bit floats: IEEE half precision (numpy's float16) and bfloat16 (ml_dtypes'
    # dtype, float32's exponent with 8 bits of significand).  Valid TEIR; the executor
    # has no 16-bit kernels yet, so tp.einsum runs them as float32 programs
    # (schedule/half.py) and tp.execute refuses them.
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"

    @property
    def numpy(self) -> np.dtype:
        if self is DataType.BFLOAT16:
            return bfloat16()
        return np.dtype(self.value)

    @property
    def is_complex(self) -> bool:
        return self in (DataType.COMPLEX64, DataType.COMPLEX128)

    @property
    def is_half(self) -> bool:
        """A 16-bit float type (float16, bfloat16)."""
        return self in (DataType.BFLOAT16, DataType.FLOAT16)

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType:
        return cls.coerce(np.dtype(dtype).name, "data_type")  # type: ignore[return-value]


DataType._aliases = {"F32": "FLOAT32", "F64": "FLOAT64",  # type: ignore[attr-defined]
                     "C64": "COMPLEX64", "C128": "COMPLEX128",
                     "BF16": "BFLOAT16", "F16": "FLOAT16", "HALF": "FLOAT16"}


def bfloat16() -> np.dtype:
    """ml_dtypes' bfloat16, imported on first use: importing ml_dtypes registers its many
    dtypes and casts with numpy, most of a second, which ``import teir_plan`` does not pay
    (an array of bfloat16 exists only once its caller has imported ml_dtypes)."""
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def is_half(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is a 16-bit float: float16 (in either byte order) or ml_dtypes'
    bfloat16.  Imports nothing: without ml_dtypes imported no dtype is bfloat16.

    >>> import numpy as np
    >>> is_half(np.dtype(np.float16)), is_half(np.dtype(">f2")), is_half(np.dtype(np.float32))
    (True, True, False)
    """
    if dtype.kind == "f":
        return dtype.itemsize == 2
    ml = sys.modules.get("ml_dtypes")
    return ml is not None and dtype.itemsize == 2 and dtype == ml.bfloat16
