"""numpy.einsum's calling convention beyond a subscripts string: the interleaved
operand/sublist form, numpy's and opt_einsum's ``optimize`` values (path strategies,
``(strategy, memory_limit)``, explicit paths) and ``casting``.  Every answer is
compared with numpy.einsum in float64; every refusal with numpy's own."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.errors import PlanError
from teir_plan.frontend.convention import from_interleaved, pairwise
from tests.strategies import (
    EinsumProblem,
    assert_einsum_close,
    counted,
    einsum_problems,
    fuzz_settings,
)

RNG = np.random.default_rng(11)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ---- the interleaved form -----------------------------------------------------------


@pytest.mark.parametrize("args", [
    lambda a, b, c: (a, [0, 1], b, [1, 2], [0, 2]),
    lambda a, b, c: (a, [0, 1], b, [1, 2]),                 # implicit output
    lambda a, b, c: (a, [30, 1], b, [1, 2]),                # labels either side of 25/26
    lambda a, b, c: (a, [1, 30], b, [30, 51]),
    lambda a, b, c: (a, [0, 1], b, [1, 2], c, [2, 3], [3, 0]),
    lambda a, b, c: (a, [Ellipsis, 1], b, [1, 2]),
    lambda a, b, c: (a, [0, 0]),                            # a trace
    lambda a, b, c: (a, [0, 1], [1, 0]),                    # a transpose
    lambda a, b, c: (a, (np.int64(0), np.int32(1)), b, [1, 2]),
])
def test_interleaved_matches_numpy(args):
    a, b, c = _f32(5, 5), _f32(5, 6), _f32(6, 5)
    got = tp.einsum(*args(a, b, c))
    want = np.einsum(*args(a.astype(float), b.astype(float), c.astype(float)))
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_interleaved_plan_and_out():
    a, b = _f32(4, 7), _f32(7, 3)
    p = tp.plan(a, [0, 1], b, [1, 2], [2, 0])
    out = np.empty((3, 4), np.float32)
    assert p(a, b, out=out) is out
    np.testing.assert_allclose(out, (a @ b).T, rtol=1e-5, atol=1e-5)
    # shapes instead of arrays, as with a subscripts string
    q = tp.plan((4, 7), [0, 1], (7, 3), [1, 2], dtype=np.float32)
    np.testing.assert_allclose(q(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_interleaved_labels_follow_numpy_mapping():
    assert from_interleaved(("x", [0, 25, 26, 51]))[0] == "AZaz"
    # beyond numpy's 52: opt_einsum's symbols, none of them a numpy letter
    assert from_interleaved(("x", [52, 75, 0]))[0] == "\u00c0\u00d7A"
    assert from_interleaved(("x", [Ellipsis, 3], [3, Ellipsis]))[0] == "...D->D..."


@pytest.mark.parametrize("args,words", [
    ((np.ones(3), [-1]), ["operand 0's sublist", "-1"]),
    ((np.ones(3), ["i"]), ["operand 0's sublist", "'i'"]),
    ((np.ones(3), [1.0]), ["operand 0's sublist", "1.0"]),
    ((np.ones(3), [True]), ["operand 0's sublist"]),
    ((np.ones(3), "i"), ["subscripts", "string", "interleaved"]),
    ((np.ones(3), [0], [7]), ["output", "does not appear"]),
    ((np.ones(3), [0], ["x"]), ["output sublist", "x"]),
    ((np.ones(3),), ["subscripts", "sublists"]),
    ((np.ones((2, 2)), [0]), ["operand 0", "names 1 axes"]),
])
def test_interleaved_errors(args, words):
    with pytest.raises(tp.TEIRPlanError) as info:
        tp.einsum(*args)
    assert isinstance(info.value, (ValueError, TypeError))
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    with pytest.raises((ValueError, TypeError)):
        np.einsum(*args)  # numpy refuses each of them too


# ---- optimize: numpy's and opt_einsum's path options --------------------------------

EXPR = "ab,bc,cd,de->ae"


def _chain():
    return [_f32(6, 40), _f32(40, 3), _f32(3, 50), _f32(50, 7)]


@pytest.mark.parametrize("optimize", [
    "greedy", "optimal", "dp", "branch-2", "auto-hq", "random-greedy", ("greedy", 10**6),
    ("optimal", 300.0), ["einsum_path", (0, 1), (0, 1), (0, 1)], [(2, 3), (0, 1), (0, 1)],
    [(0, 1, 2, 3)], ("einsum_path", (3, 1, 2), (0, 1)), [(0,), (0, 1), (0, 1, 2)],
])
def test_optimize_paths_match_numpy(optimize):
    ops = _chain()
    got = tp.einsum(EXPR, *ops, optimize=optimize)
    assert_einsum_close(got, EXPR, ops, np.float32)


def _step_inputs(p: tp.Plan) -> list[list[str]]:
    """Each step's input terms (the pairwise steps of a 3+-operand plan), sorted."""
    subs = [s.describe().split()[1] for s in p.steps]
    return [sorted("".join(sorted(t)) for t in sub.split("->")[0].split(",")) for sub in subs]


def test_explicit_path_is_followed():
    ops = _chain()
    # (c d) first, then (a b), then the two intermediates
    p = tp.plan(EXPR, *ops, optimize=[(2, 3), (0, 1), (0, 1)])
    assert _step_inputs(p) == [["cd", "de"], ["ab", "bc"], ["ac", "ce"]], _step_inputs(p)
    assert_einsum_close(p(*ops), EXPR, ops, np.float32)
    # numpy.einsum_path's own answer is accepted as it is
    path, _ = np.einsum_path(EXPR, *ops, optimize="optimal")
    assert_einsum_close(tp.einsum(EXPR, *ops, optimize=path), EXPR, ops, np.float32)
    # a list is cached like any other option (normalized to a hashable value)
    assert tp.plan(EXPR, *ops, optimize=list(path)) is tp.plan(EXPR, *ops, optimize=path)


def test_memory_limit_is_passed_to_the_path():
    ops = _chain()
    # with a limit of 1 element, no pairwise intermediate is allowed: opt_einsum then
    # contracts everything in one step, which TEIR can only run two at a time, making
    # intermediates over the limit: an error naming the limit, before anything runs
    with pytest.raises(PlanError, match="memory_limit of 1 elements cannot be met"):
        tp.plan(EXPR, *ops, optimize=("greedy", 1))
    p = tp.plan(EXPR, *ops, optimize=("greedy", 10**6))
    assert_einsum_close(p(*ops), EXPR, ops, np.float32)


def test_pairwise_splits_long_steps():
    assert pairwise(((0, 1, 2, 3),), 4) == ((0, 1), (2, 0), (1, 0))
    assert pairwise(((1, 2), (0, 1)), 3) == ((1, 2), (0, 1))


@pytest.mark.parametrize("optimize,words", [
    ("fastest", ["optimize", "'fastest'", "'greedy'"]),
    (("greedy", -5), ["memory limit"]),
    (("quick", 5), ["optimize", "quick"]),
    ([(0, 1), (0, 5)], ["path step 1", "(0, 5)"]),
    ([(0, 0), (0, 1), (0, 1)], ["path step 0"]),
    ([(0, 1)], ["leaves 3 operands"]),
    (["einsum_path"], ["at least one step"]),
    ([(0, 1.5)], ["path step 0"]),
])
def test_bad_optimize_values(optimize, words):
    with pytest.raises(tp.PlanError) as info:
        tp.einsum(EXPR, *_chain(), optimize=optimize)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


# ---- casting ------------------------------------------------------------------------

CASTINGS = ["no", "equiv", "safe", "same_kind", "unsafe"]


@pytest.mark.parametrize("casting", CASTINGS)
@pytest.mark.parametrize("case", ["mixed", "dtype f32", "dtype i32", "out f16", "out f64",
                                  "same"])
def test_casting_follows_numpy(casting, case):
    a32, b32 = _f32(3, 4), _f32(4, 5)
    ops = [a32, b32.astype(np.float64)] if case == "mixed" else [a32, b32]
    if case == "dtype f32":
        ops = [a32.astype(np.float64), b32.astype(np.float64)]
    kw: dict = {}
    if case.startswith("dtype"):
        kw["dtype"] = np.float32 if case == "dtype f32" else np.int32
    if case.startswith("out"):
        kw["out"] = np.empty((3, 5), np.float16 if case == "out f16" else np.float64)
    try:
        # numpy's rule as its own loops apply it (optimize=True skips the check on out)
        want = np.einsum("ij,jk->ik", *ops, casting=casting, optimize=False, **kw)
    except TypeError:
        with pytest.raises(tp.DTypeError) as info:
            tp.einsum("ij,jk->ik", *ops, casting=casting, **kw)
        assert repr(casting) in str(info.value)
        return
    want = np.array(want, copy=True)
    if "out" in kw:
        kw["out"] = np.empty_like(kw["out"])
    got = tp.einsum("ij,jk->ik", *ops, casting=casting, **kw)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(float), want.astype(float), rtol=2e-3, atol=2e-3)


def test_bad_casting_value():
    with pytest.raises(tp.PlanError, match="casting: expected one of"):
        tp.einsum("ij,jk->ik", _f32(2, 2), _f32(2, 2), casting="sometimes")


# ---- property: random problems in the interleaved form, along random paths ----------


def _interleaved(problem: EinsumProblem) -> list:
    text = problem.subscripts.replace(" ", "")
    lhs, _, rhs = text.partition("->")
    label = {ch: i for i, ch in enumerate(sorted(set(text) - set(",.->")))}

    def sub(term: str) -> list:
        head, dots, tail = term.partition("...")
        return [label[c] for c in head] + ([Ellipsis] if dots else []) + [label[c] for c in tail]

    args: list = []
    for op, term in zip(problem.operands, lhs.split(",")):
        args += [op, sub(term)]
    if "->" in text:
        args.append(sub(rhs))
    return args


@fuzz_settings(default=40, fuzz=5_000)
@given(problem=einsum_problems(min_operands=2), data=st.data())
@counted
def test_interleaved_random_paths_match_numpy(problem: EinsumProblem, data: st.DataObject
                                              ) -> None:
    args = _interleaved(problem)
    try:
        want = np.einsum(*[np.asarray(a, dtype=np.float64) if i % 2 == 0 and i < 2 * len(
            problem.operands) else a for i, a in enumerate(args)])
    except ValueError:
        with pytest.raises(tp.TEIRPlanError):
            tp.einsum(*args)
        return
    # a random explicit path: contract two (or all remaining) operands at a time
    n = len(problem.operands)
    path = []
    while n > 1:
        k = data.draw(st.integers(2, n), label="step size")
        step = data.draw(st.permutations(range(n)), label="step")[:k]
        path.append(tuple(step))
        n -= k - 1
    got = tp.einsum(*args, optimize=path)
    assert got.shape == want.shape
    assert_einsum_close(got, problem.subscripts, problem.operands, np.result_type(
        *problem.arrays()))


def test_optimize_false_contracts_left_to_right_as_numpy():
    # numpy's optimize=False is one step of all operands; TEIR contracts two at a time,
    # so the same step split left to right: ((a b) c) d, each step still ranked.
    rng = np.random.default_rng(5)
    ops = [rng.standard_normal(s) for s in ((6, 7), (7, 8), (8, 9), (9, 5))]
    expr = "ij,jk,kl,lm->im"
    assert np.einsum_path(expr, *ops, optimize=False)[0] == ["einsum_path", (0, 1, 2, 3)]
    path, _ = tp.einsum_path(expr, *ops, optimize=False)
    assert path == ["einsum_path", (0, 1), (0, 2), (0, 1)]
    np.testing.assert_allclose(tp.einsum(expr, *ops, optimize=False),
                               np.einsum(expr, *ops, optimize=False), rtol=1e-10)
    assert tp.plan(expr, *ops, optimize=False).info.optimize.search
    assert not tp.plan(expr, *ops, optimize="plain").info.optimize.search
