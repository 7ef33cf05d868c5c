"""Properties of tp.einsum and tp.plan on random einsum problems (GitHub issue 5).

* tp.einsum agrees with numpy.einsum computed in float64, within an error bound that
  grows with the number of terms summed (``einsum_tolerance``); where numpy refuses an
  expression, tp refuses it too, with a TEIRPlanError that is a ValueError/TypeError.
* Planner invariants: every candidate in ``plan.alternatives`` validates and computes
  the same answer; a plan reused on new arrays of the same layouts gives their answer;
  a plan called with another layout (or dtype) raises tp.PlanError before writing.
* dtypes TEIR does not cover (integers, bool, float16) give numpy's answer, and so do
  complex ones, which TEIR covers (their own properties: tests/test_complex.py).

``make test`` runs a fixed, derandomized set of examples per property;
``TEIR_PLAN_FUZZ=1`` (``make fuzz``) runs many more (see tests/strategies.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import teir_plan as tp
from tests.strategies import (
    EinsumProblem,
    assert_einsum_close,
    counted,
    einsum_problems,
    einsum_reference,
    fuzz_settings,
    operand_layout_changed,
    operand_recipes,
)

SENTINEL = -12345.0


def _numpy_refuses(problem: EinsumProblem) -> BaseException | None:
    try:
        einsum_reference(problem.subscripts, problem.operands)
    except ValueError as exc:
        return exc
    return None


def _result_dtype(problem: EinsumProblem) -> np.dtype:
    return np.result_type(*problem.arrays())


def _all_teir_steps_validate(plan: tp.Plan) -> None:
    for step in plan.steps:
        teir = getattr(step, "teir", None)
        if teir is not None:
            teir.validate()


@fuzz_settings(default=80, fuzz=30_000)
@given(problem=einsum_problems(), data=st.data())
@counted
def test_einsum_matches_numpy_float64(problem: EinsumProblem, data: st.DataObject) -> None:
    optimize = data.draw(st.sampled_from([True, True, False, "plain"]), label="optimize")
    relu = data.draw(st.integers(0, 4), label="relu") == 0
    refused = _numpy_refuses(problem)
    if refused is not None:
        with pytest.raises(tp.TEIRPlanError) as info:
            tp.einsum(problem.subscripts, *problem.operands, optimize=optimize)
        assert isinstance(info.value, (ValueError, TypeError))
        return
    rdt = _result_dtype(problem)
    out = None
    shape = einsum_reference(problem.subscripts, problem.operands).shape
    if data.draw(st.integers(0, 3), label="use out") == 0:
        out_dt = "float64" if rdt == np.float32 and data.draw(st.booleans()) else str(rdt)
        recipe = data.draw(operand_recipes(shape, out_dt, allow_broadcast=False))
        out = recipe.build(np.random.default_rng(0))
        out[...] = SENTINEL
    res = tp.einsum(problem.subscripts, *problem.operands, out=out, optimize=optimize,
                    epilogue="relu" if relu else None)
    if out is not None:
        assert res is out
    else:
        assert res.dtype == rdt
    assert_einsum_close(res, problem.subscripts, problem.operands, rdt, relu=relu)


@fuzz_settings(default=50, fuzz=20_000)
@given(problem=einsum_problems())
@counted
def test_every_alternative_validates_and_agrees(problem: EinsumProblem) -> None:
    assume(_numpy_refuses(problem) is None)
    rdt = _result_dtype(problem)
    p = tp.plan(problem.subscripts, *problem.operands)
    alts = p.alternatives
    assert alts, "a plan always has at least its own choice"
    assert alts[0].teir == p.teir, "the first alternative is the plan's own choice"
    for alt in alts:
        _all_teir_steps_validate(alt)
        assert_einsum_close(alt(*problem.operands), problem.subscripts, problem.operands, rdt)


@fuzz_settings(default=40, fuzz=10_000)
@given(problem=einsum_problems(), data=st.data())
@counted
def test_plans_made_for_an_out_run_with_and_without_it(problem: EinsumProblem,
                                                       data: st.DataObject) -> None:
    """A plan made for an out of any layout (gaps, reversed, transposed, a record field,
    an odd address) gives numpy's answer into that out and, called without one, into a
    new array; so do its alternatives (their programs are proven for out's layout only,
    so the new array must have exactly that layout)."""
    assume(_numpy_refuses(problem) is None)
    rdt = _result_dtype(problem)
    shape = einsum_reference(problem.subscripts, problem.operands).shape
    recipe = data.draw(operand_recipes(shape, str(rdt), allow_broadcast=False), label="out")
    out = recipe.build(np.random.default_rng(1))
    p = tp.plan(problem.subscripts, *problem.operands, out=out)
    for alt in [p, *p.alternatives[:3]]:
        assert_einsum_close(alt(*problem.operands), problem.subscripts, problem.operands, rdt)
        out[...] = SENTINEL
        assert alt(*problem.operands, out=out) is out
        assert_einsum_close(out, problem.subscripts, problem.operands, rdt)


@fuzz_settings(default=50, fuzz=20_000)
@given(problem=einsum_problems(), data=st.data())
@counted
def test_plan_reuse_and_wrong_layout(problem: EinsumProblem, data: st.DataObject) -> None:
    assume(_numpy_refuses(problem) is None)
    rdt = _result_dtype(problem)
    p = tp.plan(problem.subscripts, *problem.operands)
    # Reuse on new arrays of the same layouts (and with the plan's own out).
    fresh = problem.fresh(problem.seed + 1)
    assert_einsum_close(p(*fresh), problem.subscripts, fresh, rdt)
    out = p.empty_out()  # order='K': the plan may write a permuted layout of its own
    out[...] = SENTINEL
    assert p(*fresh, out=out) is out
    assert_einsum_close(out, problem.subscripts, fresh, rdt)
    last = p.alternatives[-1]
    assert_einsum_close(last(*fresh), problem.subscripts, fresh, rdt)

    # Another layout, or another dtype, of one operand: PlanError, out untouched.
    arrays = problem.arrays()
    i = data.draw(st.integers(0, len(arrays) - 1), label="operand")
    bad = list(arrays)
    other = operand_layout_changed(arrays[i])
    if other is None or data.draw(st.booleans(), label="change dtype"):
        other = arrays[i].astype(np.float64 if arrays[i].dtype == np.float32 else np.float32)
    bad[i] = other
    out[...] = SENTINEL
    with pytest.raises(tp.PlanError, match=f"operand {i}"):
        p(*bad, out=out)
    assert (out == SENTINEL).all()
    with pytest.raises(tp.PlanError, match="operand"):
        p(*arrays[:-1], out=out)
    assert (out == SENTINEL).all()


@fuzz_settings(default=40, fuzz=10_000)
@given(problem=einsum_problems(layouts=False), data=st.data())
@counted
def test_plans_made_from_shapes(problem: EinsumProblem, data: st.DataObject) -> None:
    """tp.plan on shape tuples plans for row-major operands of ``dtype``."""
    assume(_numpy_refuses(problem) is None)
    dt = data.draw(st.sampled_from(["float32", "float64"]), label="dtype")
    ops = [np.array(a, dtype=dt, order="C") for a in problem.arrays()]
    p = tp.plan(problem.subscripts, *[a.shape for a in ops], dtype=dt)
    assert p.dtype == np.dtype(dt)
    assert_einsum_close(p(*ops), problem.subscripts, ops, dt)


# ---- dtypes TEIR does not cover: computed by numpy, must give numpy's answer ----------

OTHER_DTYPES = ("bool", "int8", "int32", "int64", "uint8", "uint16", "float16", "complex64",
                "complex128", "float32", "float64")


def _small_values(dtype: str):  # type: ignore[no-untyped-def]
    def fill(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
        kind = np.dtype(dtype).kind
        if kind == "b":
            return rng.integers(0, 2, shape).astype(bool)
        if kind == "u":
            return rng.integers(0, 4, shape)
        if kind == "c":
            return rng.integers(-3, 4, shape) + 1j * rng.integers(-3, 4, shape)
        return rng.integers(-3, 4, shape)

    return fill


@fuzz_settings(default=60, fuzz=20_000)
@given(problem=einsum_problems(dtypes=OTHER_DTYPES, work_limit=2_000))
@counted
def test_other_dtypes_follow_numpy(problem: EinsumProblem) -> None:
    rng = np.random.default_rng(problem.seed)
    ops = [np.asarray(r.build(rng, fill=_small_values(r.dtype))) for r in problem.recipes]
    try:
        want = np.einsum(problem.subscripts, *ops)
    except ValueError:
        with pytest.raises(tp.TEIRPlanError) as info:
            tp.einsum(problem.subscripts, *ops)
        assert isinstance(info.value, (ValueError, TypeError))
        return
    got = tp.einsum(problem.subscripts, *ops)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)  # integer arithmetic is exact (or wraps)
    elif want.dtype == np.float16:
        # numpy's own float16 result depends on its summation order: compare loosely
        ref = np.einsum(problem.subscripts, *[o.astype(np.float64) for o in ops])
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-2, atol=0.5)
    elif want.dtype.kind == "c":
        ref = np.einsum(problem.subscripts, *[o.astype(np.complex128) for o in ops])
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    else:  # float32/float64 results of mixed inputs: the TEIR path, after a cast
        assert_einsum_close(got, problem.subscripts, ops, want.dtype)


def test_integer_results_are_exact_even_when_floats_would_round():
    a = np.array([2**53 + 1, 1], dtype=np.int64)
    assert tp.einsum("i,i", a, np.array([1, 1])) == np.einsum("i,i", a, np.array([1, 1]))
    big = np.full(4, 2**62, dtype=np.int64)  # wraps exactly as numpy does
    assert tp.einsum("i->", big) == np.einsum("i->", big)


def test_dtype_argument_upcasts_like_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 6)).astype(np.float32)
    b = rng.standard_normal((6, 7)).astype(np.float32)
    got = tp.einsum("ij,jk->ik", a, b, dtype=np.float64)
    want = np.einsum("ij,jk->ik", a, b, dtype=np.float64)
    assert got.dtype == want.dtype == np.float64
    assert_einsum_close(got, "ij,jk->ik", [a, b], np.float64)


# ---- regressions: bugs these properties found (minimal examples) ----------------------


def test_regression_broadcast_index_of_an_intermediate_is_written_in_full():
    # ',ca,a->': the pairwise step 'ca,->a' saw 'a' with extent 1 (broadcast in 'ca') and
    # wrote one element of a 2-element intermediate; the rest was uninitialized memory.
    s, x, y = np.array(2.0), np.array([[1.0], [10.0]]), np.array([1.0, 100.0])
    for sub, ops in [(",ca,a->", (s, x, y)), ("ca,a,->", (x, y, s))]:
        assert tp.einsum(sub, *ops) == np.einsum(sub, *ops) == 2222.0


def test_regression_diagonal_of_a_reversed_strided_view():
    # strides (4, -2) elements: the trace steps +2, which is 1 * 4 + 1 * (-2); the bounds
    # proof used to split it greedily as 0 * 4 - 1 * (-2) and refuse the program.
    x = np.arange(8.0).reshape(2, 4)[:, ::-2]
    assert tp.einsum("cc", x) == np.trace(x)


def test_regression_empty_arrays_have_one_layout():
    # numpy gives new empty arrays strides of 0; a plan for one must accept another.
    p = tp.plan(",ad", np.array(1.0), np.ones((0, 2)))
    out = np.full((0, 2), 0.0)
    assert p(np.array(1.0), np.ones((3, 2))[:0], out=out) is out
    assert tp.plan("ij,jk->ik", (0, 3), (3, 4))(np.zeros((0, 3)), np.zeros((3, 4))).shape == (0, 4)


def test_regression_ellipsis_rules_follow_numpy():
    a = np.ones((2, 3))
    with pytest.raises(tp.EinsumError, match=r"'\.\.\.'"):
        tp.einsum("...i->i", a)  # numpy refuses: '...' dims are not summed
    with pytest.raises(tp.EinsumError):
        tp.einsum("...->", np.ones(1))
    assert tp.einsum("ij->...ij", a).shape == np.einsum("ij->...ij", a).shape  # empty '...'


def test_regression_bool_with_integers_sums_in_the_result_dtype():
    # numpy.einsum(optimize=True) reduces the bool operand alone (logical or) first: 3;
    # numpy.einsum's own answer (and tp's) sums in int64: 6.
    a, s = np.ones((1, 2, 2), bool), np.array(3)
    assert tp.einsum("abb,", a, s) == np.einsum("abb,", a, s) == 6
