"""Numerics (GitHub issue 5): NaN and Inf propagate as in numpy; epilogue="relu" is
numpy.maximum(x, 0), also on -0.0 and NaN; float32 contractions accumulate at least
as accurately as numpy.einsum(optimize=True) (with 2x slack)."""

from __future__ import annotations

import numpy as np
import opt_einsum as oe
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import teir_plan as tp
from tests.strategies import (
    EinsumProblem,
    counted,
    einsum_problems,
    einsum_reference,
    einsum_tolerance,
    fuzz_settings,
)

SPECIALS = (0.0, -0.0, np.nan, np.inf, -np.inf)


def _with_specials(rate: float):  # type: ignore[no-untyped-def]
    def fill(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
        x = rng.standard_normal(shape)
        hit = rng.random(shape) < rate
        x[hit] = rng.choice(np.array(SPECIALS), size=int(hit.sum()))
        return x

    return fill


def _special_operands(problem: EinsumProblem, rate: float) -> list[np.ndarray]:
    rng = np.random.default_rng(problem.seed)
    return [np.asarray(r.build(rng, fill=_with_specials(rate))) for r in problem.recipes]


def _refuses(sub: str, ops: list) -> bool:
    try:
        einsum_reference(sub, ops)
    except ValueError:
        return True
    return False


def _kind(x: np.ndarray) -> np.ndarray:
    """0 finite, 1 NaN, 2 +inf, 3 -inf."""
    return np.select([np.isnan(x), x == np.inf, x == -np.inf], [1, 2, 3], 0)


def _reference_orders(sub: str, ops: list) -> list[np.ndarray]:
    """numpy.einsum in float64 along each of numpy's own summation orders.

    Where an infinity meets a sum of terms of both signs, the order decides between
    NaN and an infinity: inf * (x - y) is +-inf, inf * x - inf * y is NaN.  numpy
    itself answers differently with optimize=False (one sum over all indices) and
    optimize=True (pairwise, factored); both are numpy's answer.  With two or more
    operands a third order counts too: numpy's pairwise path with one-operand indices
    summed first (see :func:`_pairwise_prereduced`)."""
    arrs = [np.asarray(o, dtype=np.float64) for o in ops]
    with np.errstate(invalid="ignore", over="ignore"):
        orders = [np.asarray(np.einsum(sub, *arrs, optimize=opt), dtype=np.float64)
                  for opt in (False, True)]
        if len(arrs) >= 2:
            orders.append(_pairwise_prereduced(sub, arrs))
    return orders


def _pairwise_prereduced(sub: str, arrs: list[np.ndarray]) -> np.ndarray:
    """The order teir_plan documents: opt_einsum's pairwise path, and in each pair the
    indices found in one operand only (or broadcast from size 1 in the other) summed out
    of that operand first.  numpy.einsum(optimize=True) does the same for some
    expressions and not others, so this is a third, equally valid order."""
    ins, out, arrs = oe.parser.parse_einsum_input((sub, *arrs))
    terms = ins.split(",")
    _, info = oe.contract_path(f"{ins}->{out}", *arrs, optimize="auto")
    arrs = list(arrs)
    for inds, _removed, einsum_str, _rest, _blas in info.contraction_list:
        picked = sorted(inds, reverse=True)
        pair_terms = [terms.pop(i) for i in picked]
        pair = [arrs.pop(i) for i in picked]
        pair_out = einsum_str.split("->")[1]
        if len(pair) == 2:
            varies = [{c for c, n in zip(t, a.shape) if n > 1} for t, a in zip(pair_terms, pair)]
            for j in (0, 1):
                own = [c for c in dict.fromkeys(pair_terms[j])
                       if c in varies[j] and c not in varies[1 - j] and c not in pair_out]
                if own:
                    kept = "".join(c for c in dict.fromkeys(pair_terms[j]) if c not in own)
                    pair[j] = np.einsum(f"{pair_terms[j]}->{kept}", pair[j])
                    pair_terms[j] = kept
        res = np.einsum(f"{','.join(pair_terms)}->{pair_out}", *pair)
        terms.append(pair_out)
        arrs.append(res)
    return np.asarray(arrs[0], dtype=np.float64)


def assert_same_specials(got: np.ndarray, sub: str, ops: list, dtype: object,
                         relu: bool = False) -> None:
    """Each element NaN, +inf, -inf or finite as numpy has it along one of its summation
    orders (the same one for every element where those orders agree), and the finite
    elements within the usual bound."""
    refs = _reference_orders(sub, ops)
    if relu:
        refs = [np.maximum(r, 0.0) for r in refs]
    with np.errstate(invalid="ignore", over="ignore"):
        tol = einsum_tolerance(sub, ops, dtype)
    got = np.asarray(got, dtype=np.float64)
    kinds = [_kind(r) for r in refs]
    ok = np.zeros(got.shape, bool)
    for k in kinds:
        ok |= _kind(got) == k
    assert ok.all(), (f"{sub}: NaN/inf at {np.argwhere(~ok)[:3].tolist()}: got "
                      f"{got[~ok][:3]}, numpy {[r[~ok][:3] for r in refs]}")
    fin = np.logical_and.reduce([k == 0 for k in kinds])
    err = np.abs(got[fin] - refs[0][fin])
    assert (err <= tol[fin]).all(), f"{sub}: finite elements off by {err.max()}"


@fuzz_settings(default=60, fuzz=10_000)
@given(problem=einsum_problems(work_limit=5_000), rate=st.sampled_from([0.02, 0.1, 0.4]),
       optimize=st.sampled_from([True, False, "plain"]))
@counted
def test_nan_and_inf_propagate_as_in_numpy(problem: EinsumProblem, rate: float,
                                           optimize: bool) -> None:
    ops = [o.astype(r.dtype) for o, r in zip(_special_operands(problem, rate), problem.recipes)]
    assume(not _refuses(problem.subscripts, ops))
    with np.errstate(invalid="ignore", over="ignore"):
        got = tp.einsum(problem.subscripts, *ops, optimize=optimize)
    assert_same_specials(got, problem.subscripts, ops, got.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_times_zero_is_nan_in_every_alternative(dtype):
    """BLAS implementations that skip zero multipliers would lose these NaNs."""
    a = np.zeros((6, 7), dtype)
    b = np.zeros((7, 5), dtype)
    a[2, 3] = np.nan
    b[4, 1] = np.inf
    with np.errstate(invalid="ignore"):
        ref = np.einsum("ij,jk->ik", a.astype(float), b.astype(float))
        for alt in tp.plan("ij,jk->ik", a, b).alternatives:
            np.testing.assert_array_equal(np.isnan(alt(a, b)), np.isnan(ref))
        for sub, ops in [("ij,jk->ik", (a, b)), ("ij,jk->ki", (a, b)), ("ij->", (a,)),
                         ("ij,ij->i", (a, a)), ("ij,kj->ik", (a, a))]:
            got = tp.einsum(sub, *ops)
            want = np.einsum(sub, *[o.astype(float) for o in ops])
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=sub)


@pytest.mark.parametrize("sub", ["aaed,ee->a", "adb,c->d", "ij,k->i"])
def test_an_infinity_meeting_a_sum_over_one_operand_is_numpys_inf(sub):
    """numpy.einsum(optimize=True) sums an index found in one operand only before
    multiplying (its optimize=False loops do so for some expressions, not others): a
    finite sum times inf is inf, where multiplying first (inf terms of both signs) gives
    NaN.  teir_plan pre-reduces such indices, so it gives optimize=True's answer."""
    terms = sub.split("->")[0].split(",")
    sizes = {c: 3 + i for i, c in enumerate(sorted(set("".join(terms))))}
    rng = np.random.default_rng(5)
    ops = [rng.standard_normal([sizes[c] for c in t]).astype(np.float32) for t in terms]
    ops[1].flat[-1] = np.inf  # meets terms of both signs of the other operand's sum
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.einsum(sub, *[o.astype(float) for o in ops], optimize=True)
        got = tp.einsum(sub, *ops)
    assert np.isinf(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


# ---- epilogue="relu" is numpy.maximum(x, 0) ---------------------------------------------


def _bits(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view(np.uint32 if x.dtype == np.float32 else np.uint64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sub", ["ij->ji", "ij->ij", "ij->i", "ij,jk->ik", "ij,ij->ij",
                                 "i,j->ij"])
def test_relu_on_negative_zero_and_nan_is_numpy_maximum(dtype, sub):
    x = np.array([[-0.0, 0.0, np.nan, -np.nan, -1.5, 2.0, -np.inf, np.inf]] * 8, dtype)
    x[3] = -0.0
    ops = {"ij->ji": (x,), "ij->ij": (x,), "ij->i": (x,), "ij,jk->ik": (x, -np.eye(8, dtype=dtype)),
           "ij,ij->ij": (x, -np.ones_like(x)), "i,j->ij": (x[0], -x[1])}[sub]
    with np.errstate(invalid="ignore"):
        got = tp.einsum(sub, *ops, epilogue="relu")
        # These inputs give exact results in any summation order, so relu must be
        # numpy.maximum of the plain result bit for bit (NaN: position only, as
        # which NaN a sum keeps depends on the order).
        want = np.maximum(tp.einsum(sub, *ops), 0)
    assert not np.signbit(got[~np.isnan(got)]).any(), "relu never gives -0.0 or negatives"
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    num = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))
    np.testing.assert_array_equal(_bits(got[num]), _bits(want[num]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_copy_is_bitwise_numpy_maximum(dtype):
    """A permutation moves values without arithmetic: relu(x) must be np.maximum(x, 0)
    bit for bit, NaN payloads and signs included."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((33, 17)).astype(dtype)
    x.ravel()[::5] = -0.0
    x.ravel()[1::7] = np.nan
    x.ravel()[2::11] = -np.nan
    x.ravel()[3::13] = -np.inf
    for sub in ("ij->ji", "ij->ij"):
        got = tp.einsum(sub, x, epilogue="relu")
        want = np.maximum(np.einsum(sub, x), 0)
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=sub)


@fuzz_settings(default=40, fuzz=10_000)
@given(problem=einsum_problems(work_limit=5_000), rate=st.sampled_from([0.0, 0.1, 0.3]))
@counted
def test_relu_epilogue_matches_numpy_maximum(problem: EinsumProblem, rate: float) -> None:
    ops = [o.astype(r.dtype) for o, r in zip(_special_operands(problem, rate), problem.recipes)]
    assume(not _refuses(problem.subscripts, ops))
    with np.errstate(invalid="ignore", over="ignore"):
        got = tp.einsum(problem.subscripts, *ops, epilogue="relu")
    assert not np.signbit(got[~np.isnan(got)]).any(), "relu gave -0.0 or a negative"
    assert_same_specials(got, problem.subscripts, ops, got.dtype, relu=True)


# ---- float32 accuracy: at least numpy.einsum(optimize=True)'s, with 2x slack -----------

ACCURACY_SLACK = 2.0  # tp's summed relative error may be at most 2x numpy's


def _ill_conditioned(shape, rng):  # type: ignore[no-untyped-def]
    """Values spanning eight decades with random signs: sums cancel heavily."""
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 5, shape)).astype(np.float32)


@pytest.mark.parametrize(
    "sub,shapes",
    [
        ("i,i->", [(50_000,), (50_000,)]),
        ("ij,j->i", [(32, 8_000), (8_000,)]),
        ("ij,jk->ik", [(32, 2_048), (2_048, 32)]),
        ("ij->i", [(32, 20_000)]),
        ("ijk->k", [(100, 100, 10)]),
        ("bij,bjk->bik", [(3, 16, 1_000), (3, 1_000, 16)]),
        ("ij,ij->", [(200, 200), (200, 200)]),
        ("ji,jk->ik", [(2_048, 16), (2_048, 16)]),
    ],
)
def test_float32_accumulates_at_least_as_accurately_as_numpy(sub, shapes):
    rng = np.random.default_rng(42)
    err_tp = err_np = 0.0
    for _ in range(4):
        ops = [_ill_conditioned(s, rng) for s in shapes]
        ref = np.einsum(sub, *[o.astype(np.float64) for o in ops])
        scale = np.einsum(sub, *[np.abs(o.astype(np.float64)) for o in ops])
        got = tp.einsum(sub, *ops)
        assert got.dtype == np.float32
        theirs = np.einsum(sub, *ops, optimize=True)
        err_tp += float(np.sum(np.abs(got - ref) / scale))
        err_np += float(np.sum(np.abs(theirs - ref) / scale))
    eps = float(np.finfo(np.float32).eps)
    assert err_tp <= ACCURACY_SLACK * err_np + eps, (sub, err_tp, err_np)
