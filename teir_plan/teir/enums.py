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

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def is_complex(self) -> bool:
        return self in (DataType.COMPLEX64, DataType.COMPLEX128)

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DataType:
        return cls.coerce(np.dtype(dtype).name, "data_type")  # type: ignore[return-value]


DataType._aliases = {"F32": "FLOAT32", "F64": "FLOAT64",  # type: ignore[attr-defined]
                     "C64": "COMPLEX64", "C128": "COMPLEX128"}
