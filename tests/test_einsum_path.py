"""tp.einsum_path: numpy.einsum_path's signature and return shape, read from the plan
tp.einsum runs; the path is one numpy itself accepts and gives numpy's result with."""

from __future__ import annotations

import numpy as np
import pytest

import teir_plan as tp

CASES = [
    ("ij,jk,kl->il", [(10, 20), (20, 30), (30, 5)]),
    ("ij,jk,kl,lm->im", [(10, 20), (20, 30), (30, 40), (40, 5)]),
    ("ab,bc,cd,de,ef->af", [(4, 5), (5, 6), (6, 7), (7, 8), (8, 3)]),
    ("iij,jk->k", [(5, 5, 6), (6, 7)]),  # a pre-reduction of one operand first
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("i,i->", [(5,), (5,)]),
    ("ea,fb,abcd,gc,hd->efgh", [(3, 4), (3, 5), (4, 5, 6, 7), (3, 6), (3, 7)]),
]


@pytest.mark.parametrize("expr,shapes", CASES)
def test_the_path_is_numpys_shape_and_gives_numpys_result(expr, shapes):
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s) for s in shapes]
    path, report = tp.einsum_path(expr, *ops)
    assert path[0] == "einsum_path"
    steps = path[1:]
    assert steps and all(isinstance(s, tuple) and all(isinstance(i, int) for i in s)
                         for s in steps)
    # Each step takes positions in the list of operands left: it ends with one.
    left = len(ops)
    for s in steps:
        assert len(set(s)) == len(s) and all(0 <= i < left for i in s)
        left -= len(s) - 1
    assert left == 1
    want = np.einsum(expr, *ops)
    np.testing.assert_allclose(np.einsum(expr, *ops, optimize=path), want, rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(tp.einsum(expr, *ops, optimize=path), want, rtol=1e-10,
                               atol=1e-12)
    assert report.splitlines()[0].strip() == f"Complete contraction:  {expr}"
    assert "Predicted time" in report


def test_a_chain_takes_numpys_greedy_path():
    ops = [np.ones(s) for s in [(10, 20), (20, 30), (30, 5)]]
    assert tp.einsum_path("ij,jk,kl->il", *ops)[0] == \
        np.einsum_path("ij,jk,kl->il", *ops, optimize="greedy")[0]


def test_an_explicit_path_comes_back_as_given():
    ops = [np.ones(s) for s in [(10, 20), (20, 30), (30, 40), (40, 5)]]
    given = ["einsum_path", (0, 1), (0, 1), (0, 1)]
    path, report = tp.einsum_path("ij,jk,kl,lm->im", *ops, optimize=given)
    assert path == given
    assert report.count("contract ") == 3


def test_a_view_is_one_step_as_numpy_says():
    x = np.ones((3, 4, 5))
    assert tp.einsum_path("ijk->kji", x)[0] == np.einsum_path("ijk->kji", x)[0]


def test_a_bad_optimize_is_the_librarys_error():
    with pytest.raises(tp.errors.TEIRPlanError, match="optimize"):
        tp.einsum_path("ij,jk->ik", np.ones((2, 3)), np.ones((3, 4)), optimize="fastest")
