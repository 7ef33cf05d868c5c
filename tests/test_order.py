"""The result's layout: numpy.einsum's ``order`` (K, C, F, A) and ``out=``."""

from __future__ import annotations

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.executor.threads import get_num_threads
from teir_plan.frontend.expression import parse
from teir_plan.schedule.build import _build, result_layouts
from teir_plan.schedule.in_force import machine_params
from teir_plan.schedule.operands import OperandSpec

RNG = np.random.default_rng(7)
CASES = [
    ("efbad,cf->abcde", {"a": 6, "b": 5, "c": 4, "d": 7, "e": 3, "f": 5}),
    ("dca,bd->abc", {"a": 9, "b": 4, "c": 7, "d": 8}),
    ("ij,jk->ik", {"i": 13, "j": 9, "k": 11}),
    ("abc->cab", {"a": 5, "b": 6, "c": 7}),
    ("bij,bjk->bik", {"b": 3, "i": 5, "j": 6, "k": 4}),
]


def _operands(expr: str, ext: dict[str, int]) -> list[np.ndarray]:
    terms = expr.split("->")[0].split(",")
    return [RNG.standard_normal([ext[c] for c in t]).astype(np.float32) for t in terms]


def _ref(expr: str, ops: list[np.ndarray]) -> np.ndarray:
    return np.einsum(expr, *[o.astype(np.float64) for o in ops])


@pytest.mark.parametrize("expr,ext", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("order", ["K", "C", "F", "A"])
def test_every_order_gives_numpys_values(expr: str, ext: dict[str, int], order: str) -> None:
    ops = _operands(expr, ext)
    got = tp.einsum(expr, *ops, order=order)
    np.testing.assert_allclose(got, _ref(expr, ops), rtol=1e-4, atol=1e-4)
    if order == "C":
        assert got.flags.c_contiguous
    if order == "F":
        assert got.flags.f_contiguous
    # Whatever the layout, the result owns (or views) one contiguous buffer of its size.
    base = got if got.base is None else got.base
    assert base.nbytes == got.nbytes


def test_order_a_follows_fortran_operands() -> None:
    a = np.asfortranarray(RNG.standard_normal((6, 5)))
    b = np.asfortranarray(RNG.standard_normal((5, 4)))
    assert tp.einsum("ij,jk->ik", a, b, order="A").flags.f_contiguous
    assert tp.einsum("ij,jk->ik", np.ascontiguousarray(a), b, order="A").flags.c_contiguous


def test_order_k_picks_a_layout_that_avoids_packing() -> None:
    # out = abcde would need the first operand transposed; in the operand's own
    # order the primitive reads and writes it in place.
    expr, ext = CASES[0][0], {"a": 24, "b": 18, "c": 12, "d": 18, "e": 24, "f": 18}
    ops = _operands(expr, ext)
    k_plan = tp.plan(expr, *ops)
    c_plan = tp.plan(expr, *ops, order="C")
    # C order transposes something: an operand (a pack) or the result (staged and
    # permuted, whole or one block at a time).
    assert any(s.chosen.packs for s in c_plan.steps if hasattr(s, "chosen")) or len(
        c_plan.steps) == 2 or c_plan.steps[0].kind == "blocked"
    assert not any(s.chosen.packs for s in k_plan.steps if hasattr(s, "chosen"))
    assert len(k_plan.steps) == 1
    assert k_plan.predicted_seconds < c_plan.predicted_seconds
    np.testing.assert_allclose(k_plan(*ops), _ref(expr, ops), rtol=1e-4, atol=1e-4)


def test_a_plan_writes_its_own_layout_and_says_so() -> None:
    expr, ext = CASES[1]
    ops = _operands(expr, ext)
    p = tp.plan(expr, *ops)
    out = p.empty_out()
    assert tp.plan(expr, *ops).out_spec == p.out_spec
    assert p(*ops, out=out) is out
    np.testing.assert_allclose(out, _ref(expr, ops), rtol=1e-4, atol=1e-4)
    if not out.flags.c_contiguous:
        with pytest.raises(tp.PlanError, match="empty_out"):
            p(*ops, out=np.empty(out.shape, np.float32))


def test_out_fixes_the_layout_whatever_the_order() -> None:
    expr, ext = CASES[0]
    ops = _operands(expr, ext)
    shape = tuple(ext[c] for c in expr.split("->")[1])
    for out in (np.empty(shape, np.float32), np.empty(shape[::-1], np.float32).T):
        assert tp.einsum(expr, *ops, out=out, order="F") is out
        np.testing.assert_allclose(out, _ref(expr, ops), rtol=1e-4, atol=1e-4)


def test_order_is_case_insensitive_as_in_numpy() -> None:
    a = RNG.standard_normal((4, 3))
    assert tp.einsum("ij,jk->ik", a, a.T, order="f").flags.f_contiguous


@pytest.mark.parametrize("bad", ["X", "", "CF", None, 1])
def test_a_bad_order_names_the_argument(bad: object) -> None:
    a = np.ones((2, 2))
    with pytest.raises(tp.PlanError, match="order"):
        tp.einsum("ij,jk->ik", a, a, order=bad)  # type: ignore[arg-type]


def test_explain_names_the_result_layout_and_the_others_costed() -> None:
    expr, ext = CASES[1]
    ops = _operands(expr, ext)
    text = str(tp.plan(expr, *ops).explain())
    assert "result layout (order='K')" in text and "also costed: " in text
    assert "result layout" not in str(tp.plan(expr, *ops, order="C").explain())



def test_explain_marks_a_layout_whose_search_stopped_at_the_best_so_far() -> None:
    """A result layout that could not beat the best so far by the layout margin is not
    searched to the end: the report gives the ceiling it stopped at, not a prediction,
    and the plan is the one a full search of every layout makes."""
    ext = {"a": 96, "b": 84, "c": 24, "d": 96, "e": 96}
    shapes = [tuple(ext[ch] for ch in t) for t in ("dbea", "ec")]
    plan = tp.plan("dbea,ec->abcd", *shapes, dtype=np.float32)
    layouts = plan.info.result_layouts
    stopped = [lay for lay in layouts if lay[3]]
    chosen = next(lay for lay in layouts if lay[2])
    # Each stopped layout's ceiling is what it had to beat: at least the winner's cost.
    assert stopped and all(lay[1] >= chosen[1] * (1 - 1e-9) for lay in stopped)
    assert f"{stopped[0][0]} above " in str(plan.explain())
    assert chosen[0] == "cdba"  # the layout a full search picks (predicted 1.8x faster than C)

def _staged_plan(expr: str, ops: list[np.ndarray], out: np.ndarray) -> tp.Plan:
    """The plan that stages the whole result in the first operand-following layout."""
    specs = [OperandSpec.of(o) for o in ops]
    e = parse(expr, [s.shape for s in specs])
    strides = result_layouts(e, specs, "K")[1][1]
    return _build(e, expr, specs, OperandSpec.of(out), None, True, None, get_num_threads(),
                  machine_params(), None, strides)


def test_out_in_c_order_may_stage_the_result_and_permute_it() -> None:
    # With out= in C order, writing abcde directly needs the large operand transposed;
    # staging the result in the operand's order and permuting it moves fewer bytes, and
    # staging it one block at a time through a stage in cache fewer still.
    expr, ext = CASES[0][0], {"a": 24, "b": 18, "c": 12, "d": 18, "e": 24, "f": 18}
    ops = _operands(expr, ext)
    shape = tuple(ext[c] for c in expr.split("->")[1])
    out = np.full(shape, np.nan, np.float32)
    chosen = tp.plan(expr, *ops, out=out)
    kinds = [(s.kind, getattr(s, "role", None)) for s in chosen.steps]
    assert kinds in ([("teir", "contract"), ("teir", "permute")], [("blocked", "contract")])
    direct = tp.plan(expr, *ops, out=out, optimize="plain")
    assert len(direct.steps) == 1
    assert direct.predicted_seconds > chosen.predicted_seconds
    p = _staged_plan(expr, ops, out)
    assert [(s.kind, s.role) for s in p.steps] == [("teir", "contract"), ("teir", "permute")]
    staged = p.buffers[0]
    assert staged.name.startswith("result staged") and staged.axis_order is not None
    for plan in (chosen, p):
        out[...] = np.nan
        assert plan(*ops, out=out) is out
        np.testing.assert_allclose(out, _ref(expr, ops), rtol=1e-4, atol=1e-4)
    # The staged plan's alternatives write through the same staging buffer.
    for alt in p.alternatives[:3]:
        out[...] = np.nan
        alt(*ops, out=out)
        np.testing.assert_allclose(out, _ref(expr, ops), rtol=1e-4, atol=1e-4)


def test_explain_says_why_the_result_is_staged() -> None:
    expr, ext = CASES[0][0], {"a": 24, "b": 18, "c": 12, "d": 18, "e": 24, "f": 18}
    ops = _operands(expr, ext)
    out = np.empty(tuple(ext[c] for c in expr.split("->")[1]), np.float32)
    text = str(_staged_plan(expr, ops, out).explain())
    assert "staged in memory order" in text and "permuted into out's order abcde" in text
