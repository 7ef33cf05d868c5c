"""Parsing an expression for operand shapes (teir_plan/frontend/expression.py), against
numpy.einsum on arrays of those shapes: the same result shape where numpy accepts, a
clear error naming the operand or index where numpy refuses."""

from __future__ import annotations

import numpy as np
import pytest

from teir_plan.errors import EinsumError
from teir_plan.frontend.expression import parse

VALID = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),  # implicit output: the indices seen once, sorted
    ("ba,ac", [(2, 3), (3, 4)]),
    ("ii->i", [(3, 3)]),
    ("iij->j", [(3, 3, 2)]),
    ("ij->", [(2, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]),  # broadcast batch axes
    ("i...,i...", [(3, 2), (3, 2)]),
    ("ab,b->a", [(4, 1), (6,)]),  # an extent-1 axis broadcast against 6
    ("i,j->ij", [(0,), (3,)]),  # an empty operand
]


@pytest.mark.parametrize(("expr", "shapes"), VALID, ids=[v[0] for v in VALID])
def test_the_result_shape_is_numpys(expr: str, shapes: list[tuple[int, ...]]) -> None:
    e = parse(expr, shapes)
    want = np.einsum(expr, *(np.zeros(s) for s in shapes)).shape
    assert tuple(e.extent(ch) for ch in e.output) == want
    assert len(e.inputs) == len(shapes)
    # Every index named by an operand has one extent, the broadcast one.
    for term, shape in zip(e.inputs, shapes):
        for ch, n in zip(term, shape):
            assert n == 1 or e.extent(ch) == n


INVALID = [
    ("ij,jk->ik", [(2, 3), (4, 5)], "index 'j'"),  # 3 against 4
    ("ij->i", [(2, 3, 4)], "operand 0"),  # too many dimensions for the term
    ("ii->i", [(2, 3)], "index 'i'"),  # a diagonal of unequal extents
    ("ij->ii", [(2, 2)], "output: index 'i'"),
    ("ij->k", [(2, 2)], "output: index 'k'"),
    ("...i->i", [(2, 3)], "'...'"),  # numpy does not sum over '...'
]


@pytest.mark.parametrize(("expr", "shapes", "names"), INVALID, ids=[v[0] for v in INVALID])
def test_what_numpy_refuses_is_refused_by_name(expr: str, shapes: list[tuple[int, ...]],
                                               names: str) -> None:
    with pytest.raises(ValueError):
        np.einsum(expr, *(np.zeros(s) for s in shapes))
    with pytest.raises(EinsumError) as info:
        parse(expr, shapes)
    assert names in str(info.value)
    assert isinstance(info.value, ValueError)
