"""teir_plan as opt_einsum's and cotengra's backend (teir_plan/interop.py), against numpy
in float64."""

from __future__ import annotations

from unittest import mock

import numpy as np
import opt_einsum as oe
import pytest
from hypothesis import given

import teir_plan as tp
import teir_plan.interop as interop
from teir_plan.errors import EinsumError
from tests.strategies import assert_einsum_close, fuzz_settings
from tests.test_trees import networks


@fuzz_settings(25, 1000)
@given(networks(max_operands=8))
def test_opt_einsum_backend_matches_numpy(case):
    expr, recipes, optimize, seed = case
    rng = np.random.default_rng(seed)
    ops = [np.asarray(r.build(rng)) for r in recipes]
    got = oe.contract(expr, *ops, backend="teir_plan", optimize=optimize)
    assert_einsum_close(np.asarray(got), expr, ops, np.float64)


@fuzz_settings(15, 500)
@given(networks(max_operands=8))
def test_cotengra_backend_matches_numpy(case):
    ctg = pytest.importorskip("cotengra")
    expr, recipes, _optimize, seed = case
    rng = np.random.default_rng(seed)
    ops = [np.asarray(r.build(rng)) for r in recipes]
    lhs, out = expr.split("->")
    got = ctg.array_contract(ops, [tuple(t) for t in lhs.split(",")], tuple(out),
                             backend="teir_plan")
    assert_einsum_close(np.asarray(got), expr, ops, np.float64)


def test_opt_einsum_backend_runs_its_steps_through_teir_plan():
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s) for s in ((5, 6), (6, 7, 3), (7, 3, 4)))
    calls = []
    real = interop.einsum
    with mock.patch.object(interop, "einsum",
                           lambda sub, *ops, **kw: calls.append(sub) or real(sub, *ops, **kw)):
        got = oe.contract("ij,jkl,kln->in", a, b, c, backend="teir_plan")
    assert calls  # opt_einsum's tensordot steps went through teir_plan
    np.testing.assert_allclose(got, np.einsum("ij,jkl,kln->in", a, b, c), rtol=1e-10)


@pytest.mark.parametrize("sa,sb,axes", [
    ((3, 4, 5), (4, 5, 6), 2), ((3, 4), (4, 2), 1), ((2, 3), (4, 5), 0),
    ((3, 4, 5), (5, 3, 2), ([0, 2], [1, 0])), ((3, 4, 5), (6, 4), (1, 1)),
    ((3, 4, 5), (5, 4), ([-1, -2], [0, 1])),
])
def test_tensordot_matches_numpy(sa, sb, axes):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    np.testing.assert_allclose(tp.tensordot(a, b, axes), np.tensordot(a, b, axes),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("axes,words", [
    (4, "4 axes to sum"), (([0], [0, 1]), "1 axes of a against 2"),
    (([0, 0], [0, 1]), "appears twice"), (([5], [0]), "axes[0]: 5"), ("x", "axes"),
])
def test_tensordot_bad_axes_are_named(axes, words):
    with pytest.raises(EinsumError, match=words.replace("[", r"\[").replace("]", r"\]")):
        tp.tensordot(np.ones((2, 3)), np.ones((2, 3)), axes)


def test_transpose_is_a_view():
    a = np.arange(24.0).reshape(2, 3, 4)
    t = tp.transpose(a, (2, 0, 1))
    assert np.shares_memory(t, a) and np.array_equal(t, np.transpose(a, (2, 0, 1)))


def test_cotengra_contracts_through_teir_plan():
    ctg = pytest.importorskip("cotengra")
    rng = np.random.default_rng(3)
    inputs = [("a", "b"), ("b", "c", "d"), ("d", "e"), ("c", "e", "f")]
    size = dict(a=4, b=5, c=6, d=3, e=7, f=2)
    arrays = [rng.standard_normal([size[c] for c in t]) for t in inputs]
    want = np.einsum("ab,bcd,de,cef->af", *arrays)
    got = ctg.array_contract(arrays, inputs, ("a", "f"), backend="teir_plan")
    np.testing.assert_allclose(got, want, rtol=1e-10)
    tree = ctg.array_contract_tree(inputs, ("a", "f"), size_dict=size)
    np.testing.assert_allclose(tree.contract(arrays, backend="teir_plan"), want, rtol=1e-10)
    # the tree's path, given to tp.einsum
    np.testing.assert_allclose(tp.einsum("ab,bcd,de,cef->af", *arrays, optimize=tree), want,
                               rtol=1e-10)
