"""Contraction descriptions: each index's role, extent and stride in every tensor.

An operand's layout comes straight from the array's own strides: a repeated
index (a diagonal) is one axis whose stride is the sum of the repeated dims'
strides; a dim of extent 1 against a larger index extent (broadcasting) is
stride 0.  Nothing is copied.

>>> import numpy as np
>>> from teir_plan.frontend.contraction import layout_of
>>> layout_of("ii", np.zeros((3, 3)), {"i": 3})
Layout(indices='i', extents=(3,), strides=(4,))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from teir_plan.teir.enums import DimType


@dataclass(frozen=True)
class Layout:
    """A tensor as unique indices with extents and element strides."""

    indices: str
    extents: tuple[int, ...]
    strides: tuple[int, ...]

    def stride(self, index: str) -> int:
        pos = self.indices.find(index)
        return self.strides[pos] if pos >= 0 else 0


def layout_in(term: str, shape: Sequence[int], strides: Sequence[int],
              extents: Mapping[str, int]) -> Layout:
    """The layout of an operand of ``shape`` and element ``strides`` indexed by ``term``:
    a repeated index's strides summed (a diagonal), an extent-1 dimension's stride 0
    (a broadcast).

    >>> layout_in("iij", (3, 3, 4), (12, 4, 1), {"i": 3, "j": 4})
    Layout(indices='ij', extents=(3, 4), strides=(16, 1))
    """
    order: list[str] = []
    summed: dict[str, int] = {}
    for ch, n, st in zip(term, shape, strides):
        if ch not in summed:
            order.append(ch)
            summed[ch] = 0
        summed[ch] += st if n > 1 else 0
    return Layout(
        "".join(order),
        tuple(extents[ch] for ch in order),
        tuple(summed[ch] for ch in order),
    )


def layout_of(term: str, arr: np.ndarray, extents: Mapping[str, int]) -> Layout:
    """The layout of ``arr`` indexed by ``term`` (see :func:`layout_in`)."""
    isz = arr.itemsize
    return layout_in(term, arr.shape, [st // isz for st in arr.strides], extents)


def c_order_layout(indices: str, extents: Mapping[str, int]) -> Layout:
    """The row-major layout numpy gives a new array indexed by ``indices``."""
    strides = []
    acc = 1
    for ch in reversed(indices):
        strides.append(acc if extents[ch] > 1 else 0)
        acc *= max(extents[ch], 1)
    return Layout(indices, tuple(extents[ch] for ch in indices), tuple(reversed(strides)))


@dataclass(frozen=True)
class Axis:
    """One index of a binary contraction: its role and its stride in (in0, in1, out)."""

    name: str
    role: DimType
    extent: int
    strides: tuple[int, int, int]


@dataclass(frozen=True)
class Contraction:
    """out[...] (+)= in0[...] * in1[...] over named axes, as the planner sees it.

    ``axes`` keeps the order of first appearance in (out, in0, in1).  Indices of
    extent 1 are dropped: they select a single element everywhere.
    """

    axes: tuple[Axis, ...]
    dtype: np.dtype

    def __hash__(self) -> int:
        # The planner's memos are keyed by contractions, a few thousand lookups per
        # plan; hashing every axis' fields each time was a tenth of planning.
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.axes, self.dtype))
            object.__setattr__(self, "_hash", h)
        return h

    @cached_property
    def flops(self) -> int:
        """Multiply-adds times two, the conventional flop count."""
        total = 2
        for ax in self.axes:
            total *= ax.extent
        return total

    @cached_property
    def extents(self) -> tuple[int, ...]:
        """Each axis' extent, in axis order."""
        return tuple(ax.extent for ax in self.axes)

    @cached_property
    def tensor_strides(self) -> tuple[tuple[int, ...], ...]:
        """Each tensor's strides (in0, in1, out) along the axes, in axis order: as a TEIR
        schedule's ``strides``."""
        return tuple(tuple(ax.strides[j] for ax in self.axes) for j in range(3))

    @cached_property
    def k_axes(self) -> tuple[int, ...]:
        """The positions of the K (summed) axes: the cost model asks, for each prim
        choice, whether one is left out of the tile."""
        return tuple(i for i, ax in enumerate(self.axes) if ax.role is DimType.K)

    def by_role(self, role: DimType) -> list[int]:
        return [i for i, ax in enumerate(self.axes) if ax.role is role]

    def tensor_elements(self, j: int) -> int:
        """Number of distinct elements tensor j spans over the contraction."""
        return self.elements[j]

    @cached_property
    def elements(self) -> tuple[int, ...]:
        """Distinct elements of in0, in1 and out over the contraction (stride-0 axes
        counted once)."""
        return tuple(
            math.prod(ax.extent for ax in self.axes if ax.strides[j] != 0) for j in range(3)
        )


def describe(in0: Layout, in1: Layout, out: Layout) -> Contraction:
    """Roles from where each index appears: C (all three), M (in0, out), N (in1, out),
    K (in0 and/or in1, not out).  An index summed in one input only is a K axis with
    stride 0 in the other input (the planner pre-reduces such indices in a step of
    their own before it describes the contraction; hand-built descriptions may keep
    them)."""
    names: list[str] = []
    for lay in (out, in0, in1):
        for ch in lay.indices:
            if ch not in names:
                names.append(ch)
    extents = {}
    for lay in (out, in0, in1):
        extents.update(dict(zip(lay.indices, lay.extents)))
    axes = []
    for ch in names:
        if extents[ch] == 1:
            continue
        a, b, o = ch in in0.indices, ch in in1.indices, ch in out.indices
        if o:
            role = DimType.C if a and b else DimType.M if a else DimType.N
            if not a and not b:
                raise AssertionError(f"output index {ch!r} in no input")  # parse rejects it
        else:
            role = DimType.K
        axes.append(
            Axis(ch, role, extents[ch], (in0.stride(ch), in1.stride(ch), out.stride(ch)))
        )
    return Contraction(tuple(axes), np.dtype(np.float64))


def with_dtype(c: Contraction, dtype: np.dtype) -> Contraction:
    return Contraction(c.axes, np.dtype(dtype))


def index_order(*terms: Sequence[str]) -> str:
    seen: list[str] = []
    for term in terms:
        for ch in term:
            if ch not in seen:
                seen.append(ch)
    return "".join(seen)
