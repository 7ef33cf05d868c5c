"""What a plan is made for and reads: an operand's layout (``OperandSpec``), numpy's
conversion of operands (``as_operand``), and whether the kernels can index an array by
whole elements (``addressable``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from teir_plan.errors import OperandTypeError
from teir_plan.teir.enums import is_half


@dataclass(frozen=True)
class OperandSpec:
    """What a plan was made for: an operand's shape, element strides and dtype."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    dtype: np.dtype

    @classmethod
    def of(cls, arr: np.ndarray) -> OperandSpec:
        isz = arr.itemsize
        if arr.size == 0:  # nothing is read or written: every layout is the same one
            return cls(tuple(arr.shape), (0,) * arr.ndim, arr.dtype)
        return cls(
            tuple(arr.shape),
            tuple(st // isz if n > 1 else 0 for st, n in zip(arr.strides, arr.shape)),
            arr.dtype,
        )

    def matches(self, arr: np.ndarray) -> bool:
        return OperandSpec.of(arr) == self

    def allocate(self) -> np.ndarray:
        """A new, uninitialised array of exactly this layout: its strides, its gaps
        between elements and its negative strides, so that a program planned for the
        layout stays inside it."""
        if 0 in self.shape:
            return np.empty(self.shape, self.dtype)
        span = 1 + sum((n - 1) * abs(st) for n, st in zip(self.shape, self.strides))
        offset = sum((n - 1) * -st for n, st in zip(self.shape, self.strides) if st < 0)
        isz = self.dtype.itemsize
        return np.lib.stride_tricks.as_strided(
            np.empty(span, self.dtype)[offset:], shape=self.shape,
            strides=tuple(st * isz for st in self.strides))

    def random(self, rng: np.random.Generator) -> np.ndarray:
        """A new array of exactly this layout (:meth:`allocate`), uniform in [0, 1) for
        floating dtypes (bfloat16 too; both parts for complex), zeros otherwise: operands
        to time a plan on."""
        arr = self.allocate()
        if self.dtype.kind == "c":
            arr[...] = rng.random(self.shape) + 1j * rng.random(self.shape)
        else:
            floats = self.dtype.kind == "f" or is_half(self.dtype)  # (bfloat16 is a "V")
            arr[...] = rng.random(self.shape) if floats else 0
        return arr


def as_operand(x: object, i: int) -> np.ndarray:
    """numpy's conversion for operands: arrays as they are (a subclass such as
    numpy.matrix or a masked array as its plain ndarray view, as numpy.einsum reads it),
    nested lists and scalars converted; None, strings and object arrays refused."""
    if type(x) is np.ndarray:
        arr = x
    elif isinstance(x, np.ndarray):
        arr = x.view(np.ndarray)
    elif x is None or isinstance(x, (str, bytes)):
        raise OperandTypeError(f"operand {i}: expected an array, got {type(x).__name__}")
    else:
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError) as exc:
            raise OperandTypeError(f"operand {i}: cannot convert to an array ({exc})") from None
    if arr.dtype == object or arr.dtype.kind in "USVMm" and not is_half(arr.dtype):
        raise OperandTypeError(
            f"operand {i}: dtype {arr.dtype} is not numeric; einsum needs numbers"
        )
    if not addressable(arr):
        # A field of a packed record array (byte strides of 5), or memory at an odd
        # address: the kernels index whole elements, so they read a contiguous copy.
        arr = arr.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    return arr


def addressable(arr: np.ndarray) -> bool:
    """Whether the kernels can index ``arr`` by whole elements: its first element's
    address and every stride (along an axis of extent > 1) are whole multiples of the
    element size.  Not so for a field of a packed record array (``np.dtype([("x",
    "f4"), ("y", "u1")])``: byte strides of 5) or a view of a buffer at an odd address;
    operands of such layouts are read from a copy, and such an ``out`` is written
    through one (numpy.einsum accepts both)."""
    if not arr.flags.aligned:
        return False
    isz = arr.itemsize
    return all(st % isz == 0 for n, st in zip(arr.shape, arr.strides) if n > 1)
