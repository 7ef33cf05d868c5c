"""Building a plan (teir_plan/schedule/build.py): the result's dtype as numpy's, the
stages outside TEIR as steps of their own (a numpy fallback for dtypes TEIR does not
cover, a fill for a summed index of extent 0, nothing for an empty result, casts of the
operands that need them, a copy into an ``out`` of another dtype), the result layouts
each ``order`` plans for (worked out by hand), and the layout rule: a layout other than
the first is chosen only when predicted at least LAYOUT_MARGIN faster.  Results are
checked against numpy.einsum.

(tests/test_order.py checks that every order gives numpy's values and which layout
avoids a pack; tests/test_views.py the view plans; tests/test_bad_inputs.py the errors
of options and outs; here the steps each case is built from, and the layouts offered.)"""

from __future__ import annotations

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.frontend.expression import Expression, parse
from teir_plan.schedule.build import LAYOUT_MARGIN, result_layouts
from teir_plan.schedule.operands import OperandSpec
from teir_plan.schedule.steps import CastStep

RNG = np.random.default_rng(29)


def _specs(expr: str, shapes: list[tuple[int, ...]], fortran: bool = False
           ) -> tuple[Expression, list[OperandSpec]]:
    arrays = [np.empty(s, order="F" if fortran else "C") for s in shapes]
    return parse(expr, shapes), [OperandSpec.of(a) for a in arrays]


# ---- the result layouts each order plans for ---------------------------------------------

def test_the_layouts_of_each_order_by_hand() -> None:
    # abk,kc->cab, a 2, b 3, k 4, c 5, row-major operands: out (c, a, b) is 5 x 2 x 3.
    e, specs = _specs("abk,kc->cab", [(2, 3, 4), (4, 5)])
    shape = (5, 2, 3)
    c_order, f_order = (6, 3, 1), (1, 5, 10)
    assert result_layouts(e, specs, "C") == [(shape, c_order)]
    assert result_layouts(e, specs, "F") == [(shape, f_order)]
    assert result_layouts(e, specs, "A") == [(shape, c_order)]  # not all Fortran
    # K: C order, then the operands' orders: no index is in both operands and out, so
    # in1's own (c) then in0's (a b, in in0's order) -- C order again -- and in0's own
    # then in1's: memory order a b c, out's strides c 1, a 3 x 5, b 5.
    assert result_layouts(e, specs, "K") == [(shape, c_order), (shape, (1, 15, 5))]
    e, fspecs = _specs("abk,kc->cab", [(2, 3, 4), (4, 5)], fortran=True)
    assert result_layouts(e, fspecs, "A") == [(shape, f_order)]


def test_the_layouts_that_follow_the_operands() -> None:
    # bij,bjk->bik (b 2, i 3, j 4, k 5): b is in both; then in1's own k then in0's own
    # i (memory order b k i: strides b 15, i 1, k 3), or in0's i then in1's k (C order).
    e, specs = _specs("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)])
    assert result_layouts(e, specs, "K") == [((2, 3, 5), (15, 5, 1)), ((2, 3, 5), (15, 1, 3))]
    # One operand: its own stride order (ij->ji on a row-major i j: i outer, j inner).
    e, specs = _specs("ij->ji", [(3, 4)])
    assert result_layouts(e, specs, "K") == [((4, 3), (3, 1)), ((4, 3), (1, 4))]
    # Three operands (a tree plans its own), or an empty result: C order only.
    e, specs = _specs("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)])
    assert result_layouts(e, specs, "K") == [((2, 5), (5, 1))]
    e, specs = _specs("ij,jk->ki", [(0, 3), (3, 4)])
    [(shape, _)] = result_layouts(e, specs, "K")  # (no element: any strides)
    assert shape == (4, 0)


@pytest.mark.parametrize(("expr", "shapes"), [
    ("abk,kc->cab", [(16, 12, 24), (24, 20)]),
    ("bij,bjk->bik", [(4, 24, 32), (4, 32, 16)]),
    ("ik,jk->ji", [(48, 40), (24, 40)]),
    ("ak,kb->ba", [(64, 32), (32, 48)]),  # (the reference machine: a b chosen)
    ("dega,gfbc->abcdef", [(6, 8, 8, 10), (8, 6, 4, 6)]),  # (d e a f b c chosen)
])
def test_a_layout_other_than_c_order_must_be_clearly_faster(expr: str, shapes: list) -> None:
    plan = tp.plan(expr, *shapes)
    layouts = plan.info.result_layouts
    e, specs = _specs(expr, shapes)
    want = ["".join(e.output[a] for a in sorted(range(len(st)), key=lambda a: -st[a]))
            for _, st in result_layouts(e, specs, "K")]
    assert [lay.memory_order for lay in layouts] == want
    assert sum(lay.chosen for lay in layouts) == 1
    chosen = next(lay for lay in layouts if lay.chosen)
    if chosen is not layouts[0]:
        assert chosen.seconds * LAYOUT_MARGIN <= layouts[0].seconds
    ops = [RNG.standard_normal(s) for s in shapes]
    np.testing.assert_allclose(plan(*ops), np.einsum(expr, *ops), rtol=1e-10, atol=1e-10)


# ---- the steps of each case ---------------------------------------------------------------

@pytest.mark.parametrize(("dtypes", "want"), [
    ((np.int32, np.float32), np.float64),  # numpy's promotion
    ((np.float32, np.complex64), np.complex64),
    ((np.float32, np.float64), np.float64),
    ((np.int8, np.int8), np.int8),
    ((np.bool_, np.bool_), np.bool_),
])
def test_the_result_dtype_is_numpys(dtypes: tuple[type, type], want: type) -> None:
    a: np.ndarray = (RNG.standard_normal((3, 4)) * 3).astype(dtypes[0])
    b: np.ndarray = (RNG.standard_normal((4, 5)) * 3).astype(dtypes[1])
    plan = tp.plan("ij,jk->ik", a, b)
    ref = np.einsum("ij,jk->ik", a, b)
    assert ref.dtype == want and plan.info.dtype == want
    got = plan(a, b)
    assert got.dtype == want
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_a_dtype_outside_teir_is_one_numpy_step() -> None:
    a = RNG.integers(-9, 9, (3, 4)).astype(np.int32)
    b = RNG.integers(-9, 9, (4, 5)).astype(np.int32)
    plan = tp.plan("ij,jk->ik", a, b)
    assert [s.kind for s in plan.steps] == ["numpy"]
    assert "int32 is not a TEIR data type" in plan.steps[0].describe()
    np.testing.assert_array_equal(plan(a, b), a @ b)


def test_a_summed_index_of_extent_0_is_a_fill_and_an_empty_result_nothing() -> None:
    plan = tp.plan("ij,jk->ik", (3, 0), (0, 4))
    assert [s.kind for s in plan.steps] == ["fill"]
    np.testing.assert_array_equal(plan(np.empty((3, 0)), np.empty((0, 4))), np.zeros((3, 4)))
    plan = tp.plan("ij,jk->ik", (0, 5), (5, 4))
    assert plan.steps == ()
    assert plan(np.empty((0, 5)), np.empty((5, 4))).shape == (0, 4)


def test_only_the_operand_of_another_dtype_is_cast() -> None:
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 5))
    plan = tp.plan("ij,jk->ik", a, b)
    casts = [s for s in plan.steps if isinstance(s, CastStep)]
    assert len(casts) == 1 and casts[0].src == 0 and casts[0].dtype == np.float64
    np.testing.assert_allclose(plan(a, b), a.astype(np.float64) @ b, rtol=1e-12)
    # dtype= casts both (numpy's casting='unsafe' allows float64 to float32)
    plan = tp.plan("ij,jk->ik", b.T, b, dtype=np.float32, casting="unsafe")
    assert sorted(s.src for s in plan.steps if isinstance(s, CastStep)) == [0, 1]


def test_an_out_of_another_dtype_is_written_by_a_copy() -> None:
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 5))
    out = np.empty((3, 5), np.float32)
    plan = tp.plan("ij,jk->ik", a, b, out=out, casting="same_kind")
    assert plan.steps[-1].kind == "copy"
    assert plan.steps[-1].describe() == "copy result into output (out has dtype float32)"
    got = plan(a, b, out=out)
    assert got is out
    np.testing.assert_array_equal(out, (a @ b).astype(np.float32))


def test_relu_on_a_complex_result_is_refused_naming_why() -> None:
    z = np.ones((3, 4), np.complex64)
    with pytest.raises(tp.DTypeError, match="complex numbers have no order"):
        tp.plan("ij,jk->ik", z, z.T, epilogue="relu")
