"""The plan cache's direct keys (api._direct_key): a repeated tp.einsum call finds its
plan by the arrays' own shapes, byte strides and dtypes.  Every answer is checked
against numpy in float64; the cache must tell apart whatever changes the plan and
still check each call's out."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.errors import DTypeError, PlanError
from teir_plan.machine import set_machine_params
from teir_plan.schedule.in_force import machine_params

RNG = np.random.default_rng(21)


def _ref(expr: str, *ops: np.ndarray) -> np.ndarray:
    return np.einsum(expr, *[o.astype(np.float64) for o in ops])


def test_a_repeated_call_reuses_its_plan_and_counts_one_hit() -> None:
    a = RNG.standard_normal((6, 5)).astype(np.float32)
    b = RNG.standard_normal((5, 7)).astype(np.float32)
    tp.plan_cache.clear()
    tp.einsum("ij,jk->ik", a, b)
    assert (tp.plan_cache.hits, tp.plan_cache.misses) == (0, 1)
    for _ in range(3):
        np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, b), _ref("ij,jk->ik", a, b),
                                   rtol=1e-5, atol=1e-5)
    assert (tp.plan_cache.hits, tp.plan_cache.misses) == (3, 1)
    assert len(tp.plan_cache) == 1


def test_layouts_dtypes_and_byte_orders_that_share_a_shape_get_their_own_plans() -> None:
    """Alternating calls: C and Fortran order, a reversed view, float32, float64 and a
    big-endian float64 of the same shape; each answer is numpy's every time."""
    base = RNG.standard_normal((9, 8))
    b = RNG.standard_normal((8, 4))
    variants = [base, np.asfortranarray(base), base[::-1, ::-1].copy()[::-1, ::-1],
                base[::-1], base.astype(np.float32), base.astype(">f8")]
    tp.plan_cache.clear()
    for _ in range(3):
        for a in variants:
            got = tp.einsum("ij,jk->ik", a, b.astype(a.dtype.newbyteorder("=")))
            tol = 1e-4 if a.dtype == np.float32 else 1e-10
            np.testing.assert_allclose(got, _ref("ij,jk->ik", a, b), rtol=tol, atol=tol)


def test_extent_one_axes_with_any_byte_stride_share_one_plan() -> None:
    """A length-1 axis' byte stride varies between arrays (numpy leaves it free); the
    answer does not depend on it."""
    a = RNG.standard_normal((4, 1, 6))
    b = RNG.standard_normal((6, 3))
    odd = np.lib.stride_tricks.as_strided(a, a.shape, (a.strides[0], 8 * 1000, a.strides[2]))
    for x in (a, odd, a, odd):
        np.testing.assert_allclose(tp.einsum("iaj,jk->iak", x, b), _ref("iaj,jk->iak", a, b),
                                   atol=1e-12)


def test_out_is_checked_on_every_call() -> None:
    a = RNG.standard_normal((5, 5))
    out = np.empty((5, 5))
    tp.einsum("ij,jk->ik", a, a, out=out)
    np.testing.assert_allclose(out, _ref("ij,jk->ik", a, a), atol=1e-12)
    with pytest.raises(PlanError, match="overlaps"):
        tp.einsum("ij,jk->ik", out, a, out=out)
    frozen = np.empty((5, 5))
    frozen.flags.writeable = False
    with pytest.raises(PlanError, match="read-only"):
        tp.einsum("ij,jk->ik", a, a, out=frozen)
    with pytest.raises(DTypeError):
        tp.einsum("ij,jk->ik", a, a, out=np.empty((5, 5), np.float32))


def test_thread_count_and_machine_parameters_are_part_of_the_key() -> None:
    a = RNG.standard_normal((40, 30)).astype(np.float32)
    b = RNG.standard_normal((30, 20)).astype(np.float32)
    tp.plan_cache.clear()
    saved_threads = tp.get_num_threads()
    saved_params = machine_params()
    try:
        first = tp.plan("ij,jk->ik", a, b)
        tp.einsum("ij,jk->ik", a, b)
        tp.set_num_threads(1)
        tp.einsum("ij,jk->ik", a, b)  # a new plan: another thread count
        assert tp.plan_cache.misses == 2
        tp.set_num_threads(saved_threads)
        set_machine_params(replace(saved_params, call_seconds=saved_params.call_seconds * 2))
        np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, b), _ref("ij,jk->ik", a, b),
                                   rtol=1e-4, atol=1e-4)
        assert tp.plan_cache.misses == 3  # new parameters: every plan dropped, planned again
        assert tp.plan("ij,jk->ik", a, b) is not first
    finally:
        tp.set_num_threads(saved_threads)
        set_machine_params(saved_params)
        tp.plan_cache.clear()


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_subclasses_and_lists_take_the_full_path() -> None:
    """numpy.matrix (whose reshape stays 2-D) and masked arrays are read as their plain
    ndarray views, as numpy.einsum reads them: the result is an ndarray."""
    m = np.asmatrix(RNG.standard_normal((3, 3)))
    masked = np.ma.masked_array(RNG.standard_normal(4), mask=[0, 1, 0, 0])
    lst = [[1.0, 2.0], [3.0, 4.0]]
    for _ in range(2):
        got = tp.einsum("ij,jk->ik", m, m)
        assert type(got) is np.ndarray
        np.testing.assert_allclose(got, _ref("ij,jk->ik", np.asarray(m), np.asarray(m)))
        np.testing.assert_allclose(tp.einsum("ij->ji", m), np.asarray(m).T)
        np.testing.assert_allclose(tp.einsum("i,i->i", masked, masked),
                                   np.einsum("i,i->i", masked, masked))
        np.testing.assert_allclose(tp.einsum("ij->ji", lst), np.asarray(lst).T)
        out = np.asmatrix(np.empty((3, 3)))  # numpy writes it and returns it
        assert tp.einsum("ij,jk->ik", m, m, out=out) is out
        np.testing.assert_allclose(out, _ref("ij,jk->ik", np.asarray(m), np.asarray(m)))


def test_a_plan_object_remembers_matching_layouts_and_still_rejects_others() -> None:
    """Plan.__call__ compares a plain array's (shape, byte strides, dtype) with the
    layouts it has already accepted; any other layout is checked in full, and refused."""
    a = RNG.standard_normal((4, 1, 6))
    b = RNG.standard_normal((6, 3))
    p = tp.plan("iaj,jk->iak", a, b)
    for _ in range(2):
        np.testing.assert_allclose(p(a, b), _ref("iaj,jk->iak", a, b), atol=1e-12)
    with pytest.raises(PlanError, match="operand 0"):
        p(np.asfortranarray(a), b)
    with pytest.raises(PlanError, match="operand 1"):
        p(a, b.astype(np.float32))
    for step in range(20):  # extent-1 strides vary freely: all match, a few remembered
        odd = np.lib.stride_tricks.as_strided(a, a.shape, (a.strides[0], 8 * step, a.strides[2]))
        np.testing.assert_allclose(p(odd, b), _ref("iaj,jk->iak", a, b), atol=1e-12)
    assert 1 <= len(p._seen[0]) <= 8
