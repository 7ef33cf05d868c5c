"""``tp.Plan`` (teir_plan/schedule/plan.py): a plan called on arrays of the layouts it was
made for gives numpy.einsum's result (float64 here) on every call, whichever path the
call takes (the first, checked one; the repeated one; several steps sharing borrowed
temporaries; a tiny product on numpy's routes; each ranked alternative on the
executor), writes the layout it planned (``empty_out``), returns a view where the result
is one, and refuses other operands naming what differs.  Its predicted time is the sum
of its steps'.

(tests/test_plan_cache.py checks the layouts a plan remembers and tests/test_bad_inputs.py
its out= checks; here the calls themselves.)"""

from __future__ import annotations

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.schedule.steps import step_seconds

RNG = np.random.default_rng(37)


def test_every_call_gives_numpys_result() -> None:
    a, b = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    plan = tp.plan("ik,kj->ij", a, b)
    for x, y in ((a, b), (a, b), (-a, 2 * b)):  # first, repeated, new arrays alike
        np.testing.assert_allclose(plan(x, y), x @ y, rtol=1e-12)
    out = np.empty((6, 4))
    assert plan(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    x = RNG.standard_normal((7, 3))
    one = tp.plan("ij->i", x)
    for _ in range(2):
        np.testing.assert_allclose(one(x), x.sum(axis=1), rtol=1e-12)


def test_each_alternative_runs_on_the_executor_and_agrees() -> None:
    a, b = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    plan = tp.plan("ik,kj->ij", a, b)
    alts = plan.alternatives
    assert alts and alts[0].teir == plan.teir
    for alt in alts:
        assert alt.numpy_call is None  # timed as the programs they are
        np.testing.assert_allclose(alt(a, b), a @ b, rtol=1e-12)


def test_several_steps_share_borrowed_temporaries() -> None:
    # x is summed in operand 0 only: a step into a temporary (i, j), then the product.
    a, b = RNG.standard_normal((3, 4, 5)), RNG.standard_normal((4, 2))
    plan = tp.plan("ijx,jk->ik", a, b)
    assert len(plan.steps) == 2
    assert [buf.shape for buf in plan.buffers if buf.kind == "temp"] == [(3, 4)]
    assert plan.peak_bytes >= 3 * 4 * 8
    for _ in range(2):
        np.testing.assert_allclose(plan(a, b), np.einsum("ijx,jk->ik", a, b), rtol=1e-12)


def test_the_predicted_time_is_the_sum_of_the_steps() -> None:
    plan = tp.plan("ijx,jk->ik", (3, 4, 5), (4, 2))
    assert plan.predicted_seconds == sum(step_seconds(s) for s in plan.steps) > 0
    kinds = ", ".join(s.kind for s in plan.steps)
    assert repr(plan) == (f"<tp.Plan ijx,jk->ik -> (3, 2) float64: steps [{kinds}], "
                          f"predicted {plan.predicted_seconds * 1e6:.1f} us>")


@pytest.mark.parametrize(("expr", "shapes"), [
    ("ak,kb->ba", [(64, 32), (32, 48)]),  # planned into memory order a b: a permuted view
    ("ij,jk->ik", [(8, 4), (4, 8)]),
    ("ij,jk->ik", [(512, 2), (2, 512)]),  # 2 MiB: borrowed from the workspace's pool
])
def test_a_result_has_the_planned_layout(expr: str, shapes: list) -> None:
    plan = tp.plan(expr, *shapes)
    empty = plan.empty_out()
    assert empty.shape == plan.shape and empty.dtype == plan.dtype
    assert tuple(s // 8 for s in empty.strides) == plan.out_spec.strides
    ops = [RNG.standard_normal(s) for s in shapes]
    got = plan(*ops)
    assert tuple(s // 8 for s in got.strides) == plan.out_spec.strides
    np.testing.assert_allclose(got, np.einsum(expr, *ops), rtol=1e-12, atol=1e-12)


def test_a_view_plan_returns_a_view_and_copies_into_out() -> None:
    x = RNG.standard_normal((4, 4, 3))
    plan = tp.plan("iij->ji", x)
    got = plan(x)
    assert np.shares_memory(got, x)
    np.testing.assert_array_equal(got, np.einsum("iij->ji", x))
    out = plan.empty_out()  # the view's own memory order (x's j is its unit stride)
    assert tuple(s // 8 for s in out.strides) == (1, 3)
    assert plan(x, out=out) is out and not np.shares_memory(out, x)
    np.testing.assert_array_equal(out, np.einsum("iij->ji", x))


def test_other_operands_are_refused_naming_what_differs() -> None:
    a, b = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    plan = tp.plan("ik,kj->ij", a, b)
    plan(a, b)  # (the repeated call's path is primed: the checks must still run)
    with pytest.raises(tp.PlanError, match=r"takes 2 operand\(s\), got 1"):
        plan(a)
    with pytest.raises(tp.PlanError, match=r"operand 1: .*\(shape differs\)"):
        plan(a, b[:4])
    with pytest.raises(tp.PlanError, match=r"operand 0: .*\(dtype differs\)"):
        plan(a.astype(np.float32), b)
    with pytest.raises(tp.PlanError, match=r"operand 0: .*\(strides differs\)"):
        plan(np.asfortranarray(a), b)
