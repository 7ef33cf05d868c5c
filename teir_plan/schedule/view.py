"""Results that are views of the operand: permutations and diagonals.

numpy.einsum returns a view, not a copy, when an expression only rearranges one
operand: a permutation (``ijk->kji``), the identity, a diagonal (``ii->i``,
``iij->ji``).  No element is computed, so no program runs: the result's strides
are sums of the operand's own strides (a diagonal steps along both of its axes
at once) and the call costs microseconds whatever the operand's size.  Like
numpy's, the view is writable when the operand is, and writing it writes the
operand.  With ``out=``, another dtype, an epilogue, or an ``order`` the view
does not have, a copy is what the caller asked for, and the plan computes one.

>>> import numpy as np
>>> from teir_plan.frontend.expression import parse
>>> v = view_for(parse("iij->ji", [(3, 3, 4)]), [(3, 3, 4)])
>>> a = np.arange(36.0).reshape(3, 3, 4)
>>> r = v.of(a)
>>> bool(np.shares_memory(r, a)), r.shape, float(r[1, 2]), float(a[2, 2, 1])
(True, (4, 3), 33.0, 33.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from teir_plan.frontend.expression import Expression


@dataclass(frozen=True)
class View:
    """The result as a view of operand ``operand``: output axis ``o`` walks the operand's
    axes ``groups[o]`` together (one axis for a permutation, several for a diagonal)."""

    operand: int
    groups: tuple[tuple[int, ...], ...]
    shape: tuple[int, ...]

    @property
    def permutation(self) -> tuple[int, ...] | None:
        """The operand axes in output order, when the view is a plain transpose."""
        if all(len(g) == 1 for g in self.groups):
            return tuple(g[0] for g in self.groups)
        return None

    def of(self, arr: np.ndarray) -> np.ndarray:
        """The view of ``arr`` (an array of the layout the plan was made for)."""
        perm = self.permutation
        if perm is not None:
            return arr.transpose(perm)
        st = arr.strides
        strides = tuple(sum(st[a] for a in g) for g in self.groups)
        if arr.flags.c_contiguous:
            # An array over the operand's own buffer (which bounds the view: the
            # constructor refuses one reaching past it) takes 0.2 us; as_strided's round
            # trip through an array interface 2 us, more than numpy.einsum's whole call.
            return np.ndarray(self.shape, arr.dtype, arr, 0, strides)
        return as_strided(arr, self.shape, strides)

    def element_strides(self, strides: Sequence[int]) -> tuple[int, ...]:
        """The view's element strides for an operand of element ``strides``, normalized
        as :class:`teir_plan.schedule.plan.OperandSpec` normalizes them (0 along extent 1;
        all 0 for an empty result)."""
        if 0 in self.shape:
            return (0,) * len(self.shape)
        return tuple(sum(strides[a] for a in g) if n > 1 else 0
                     for g, n in zip(self.groups, self.shape))

    def describe(self) -> str:
        what = "a transpose" if self.permutation is not None else "a diagonal"
        return (f"the result is {what} of operand {self.operand}, a view of its memory "
                f"(no copy), as numpy.einsum returns")


def view_for(expr: Expression, shapes: Sequence[Sequence[int]]) -> View | None:
    """The view that ``expr`` is of its single operand, or None if it computes anything
    (a sum over an index, several operands)."""
    if len(expr.inputs) != 1:
        return None
    term = expr.inputs[0]
    if len(term) != len(shapes[0]) or set(term) - set(expr.output):
        return None
    extents = expr.extent_map
    groups = tuple(tuple(a for a, t in enumerate(term) if t == ch) for ch in expr.output)
    return View(0, groups, tuple(extents[ch] for ch in expr.output))
