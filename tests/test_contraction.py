"""The planner's description of a binary contraction (teir_plan/frontend/contraction.py):
each index's role, extent and strides read from the arrays, checked against what numpy
says of the same arrays; and the counts derived from them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from teir_plan.frontend.contraction import (
    c_order_layout,
    describe,
    layout_of,
    with_dtype,
)
from teir_plan.teir.enums import DimType

RNG = np.random.default_rng(11)

CASES = [  # expression, extents
    ("trus,pqtu->pqrs", dict(t=3, r=4, u=5, s=2, p=6, q=7)),
    ("bik,bkj->bij", dict(b=3, i=4, k=5, j=6)),
    ("ij,j->i", dict(i=5, j=7)),
    ("ak,kb->ab", dict(a=1, k=4, b=3)),  # an extent-1 index is dropped
]


def strided(shape: tuple[int, ...]) -> np.ndarray:
    """An array of ``shape`` with gaps and a reversed axis: strides no layout rule guesses."""
    big = RNG.standard_normal(tuple(2 * n for n in shape))
    view = big[tuple(slice(None, None, 2) for _ in shape)]
    return view[::-1] if view.ndim and view.shape[0] > 1 else view


@pytest.mark.parametrize(("expr", "ext"), CASES, ids=[c[0] for c in CASES])
def test_roles_extents_and_strides_as_numpy_sees_the_arrays(expr: str, ext: dict) -> None:
    (t0, t1), t2 = expr.split("->")[0].split(","), expr.split("->")[1]
    a = strided(tuple(ext[c] for c in t0))
    b = np.asfortranarray(RNG.standard_normal(tuple(ext[c] for c in t1)))
    out = c_order_layout(t2, ext)
    c = describe(layout_of(t0, a, ext), layout_of(t1, b, ext), out)
    kept = [ch for ch in dict.fromkeys(t2 + t0 + t1) if ext[ch] > 1]
    assert [ax.name for ax in c.axes] == kept
    for ax in c.axes:
        in0, in1, o = ax.name in t0, ax.name in t1, ax.name in t2
        want = (DimType.C if in0 and in1 and o else DimType.M if in0 and o
                else DimType.N if in1 and o else DimType.K)
        assert ax.role is want and ax.extent == ext[ax.name]
        # Strides in elements, from numpy's byte strides of each array.
        for j, (term, arr) in enumerate(((t0, a), (t1, b))):
            pos = term.find(ax.name)
            assert ax.strides[j] == (arr.strides[pos] // arr.itemsize if pos >= 0 else 0)
        pos = t2.find(ax.name)
        assert ax.strides[2] == (math.prod(ext[ch] for ch in t2[pos + 1:]) if pos >= 0 else 0)
    assert c.flops == 2 * math.prod(ext.values())
    assert c.extents == tuple(ax.extent for ax in c.axes)
    # Distinct elements each tensor spans: its own size (extent-1 axes add nothing).
    assert c.elements == (a.size, b.size, math.prod(ext[ch] for ch in t2))
    assert with_dtype(c, np.float32).axes == c.axes


def test_a_repeated_index_sums_its_strides_and_a_broadcast_has_none() -> None:
    x = RNG.standard_normal((4, 4, 3))
    lay = layout_of("iij", x, {"i": 4, "j": 3})
    assert lay.indices == "ij" and lay.strides == (
        (x.strides[0] + x.strides[1]) // x.itemsize, x.strides[2] // x.itemsize)
    # The diagonal numpy reads through those strides is the diagonal einsum takes.
    flat = x.ravel()
    diag = np.array([[flat[i * lay.strides[0] + j * lay.strides[1]] for j in range(3)]
                     for i in range(4)])
    np.testing.assert_array_equal(diag, np.einsum("iij->ij", x))
    y = np.broadcast_to(RNG.standard_normal((1, 5)), (4, 5))
    assert layout_of("ab", y, {"a": 4, "b": 5}).strides == (0, 1)


def test_c_order_is_numpys() -> None:
    ext = {"p": 3, "q": 1, "r": 4}
    assert c_order_layout("pqr", ext).strides == (4, 0, 1)
    z = np.zeros((3, 1, 4))
    assert [s // z.itemsize for s in z.strides][::2] == [4, 1]
