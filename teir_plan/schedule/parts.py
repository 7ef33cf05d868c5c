"""A real operand times a complex one, taken directly: a real contraction over the complex
tensors' parts.

numpy's interleaved complex layout makes a complex64 (complex128) tensor a float32
(float64) tensor with one more axis, of extent 2 and unit stride, its real and imaginary
parts: element strides double.  A product of a real operand ``x`` and a complex one ``z``
is then real arithmetic, ``(x z)[..., p] = sum x[...] z[..., p]`` for p in (re, im): the
same einsum with a parts index carried by ``z`` and the result.  Taken this way the real
operand is neither cast (no pass writing a complex copy of it) nor multiplied by zero
imaginary parts: half the real multiply-adds of the promoted product (2 against 4 per
complex multiply-add).  The TEIR program is a real one; the executor views the complex
arrays as their parts (executor.execute.run_lowered).

>>> import numpy as np
>>> from teir_plan.schedule.operands import OperandSpec
>>> parts_spec(OperandSpec((3, 4), (4, 1), np.dtype(np.complex64)))
OperandSpec(shape=(3, 4, 2), strides=(8, 2, 1), dtype=dtype('float32'))
>>> parts_letter(["ij", "jk"], "ik")
'a'
"""

from __future__ import annotations

import string

import numpy as np

from teir_plan.schedule.operands import OperandSpec

# The letters a parts index may take (the einsum grammar's), the first unused one.
_LETTERS = string.ascii_lowercase + string.ascii_uppercase


def parts_dtype(dtype: np.dtype) -> np.dtype:
    """float32 for complex64, float64 for complex128."""
    return np.dtype(f"f{np.dtype(dtype).itemsize // 2}")


def parts_spec(spec: OperandSpec) -> OperandSpec:
    """A complex operand as the real tensor of its parts: one more axis, extent 2, unit
    stride; every other stride doubled."""
    return OperandSpec((*spec.shape, 2), (*(2 * s for s in spec.strides), 1),
                       parts_dtype(spec.dtype))


def complex_operand(specs: list[OperandSpec], result: np.dtype) -> int | None:
    """Which of two operands is the complex one, when the product can be taken directly:
    one complex operand of the result's type and one real operand of its parts' type
    (float32 with complex64, float64 with complex128).  Otherwise None (the operands are
    cast to the result type)."""
    result = np.dtype(result)
    if len(specs) != 2 or result.kind != "c":
        return None
    kinds = [s.dtype.kind for s in specs]
    if sorted(kinds) != ["c", "f"]:
        return None
    z = kinds.index("c")
    if specs[z].dtype != result or specs[1 - z].dtype != parts_dtype(result):
        return None
    return z


def parts_letter(terms: list[str], out_term: str) -> str | None:
    """An index letter no term uses, for the parts axis (None if all 52 are taken)."""
    used = set("".join(terms)) | set(out_term)
    return next((c for c in _LETTERS if c not in used), None)
