"""Runs of small steps in one compiled call (schedule/one_call.py,
executor/steps_runner.py): the same results and the same memory as step by step."""

from __future__ import annotations

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.planner import reduce as reduce_planner
from teir_plan.schedule.steps import ReduceStep
from tests.test_trees import tracked_borrows


def _chain(n: int, size: int, rng: np.random.Generator) -> tuple[str, list[np.ndarray]]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    expr = ",".join(letters[i] + letters[i + 1] for i in range(n)) + "->" + letters[0] + \
        letters[n]
    return expr, [rng.standard_normal((size, size)) for _ in range(n)]


@pytest.mark.parametrize("n", [3, 9, 12, 19])  # the buffers gathered 8 at a time
def test_a_chain_of_small_matrices_runs_in_one_call(n: int) -> None:
    rng = np.random.default_rng(n)
    expr, ops = _chain(n, 6, rng)
    tp.plan_cache.clear()
    plan = tp.plan(expr, *ops, optimize="greedy")
    one = plan._one_call
    assert one is not None and one.whole
    with tracked_borrows() as seen:
        got = plan(*ops)
    assert seen["now"] == 0 and seen["peak"] == plan.peak_bytes
    np.testing.assert_allclose(got, np.linalg.multi_dot(ops), rtol=1e-10, atol=1e-12)


def test_operands_with_negative_and_gapped_strides() -> None:
    """Each operand's first element where its flat view puts it (the origins)."""
    rng = np.random.default_rng(3)
    expr, ops = _chain(5, 7, rng)
    ops = [ops[0][::-1], ops[1][:, ::-1], np.asfortranarray(ops[2]),
           rng.standard_normal((7, 14))[:, ::2], ops[4][::-1, ::-1]]
    tp.plan_cache.clear()
    plan = tp.plan(expr, *ops, optimize="greedy")
    assert plan._one_call is not None
    np.testing.assert_allclose(plan(*ops), np.linalg.multi_dot(ops), rtol=1e-10, atol=1e-12)
    out = np.full(plan.shape, np.nan)[::-1]
    with pytest.raises(tp.PlanError):  # out= of another layout than planned: refused
        plan(*ops, out=out)
    tp.plan_cache.clear()
    got = tp.einsum(expr, *ops, out=out, optimize="greedy")
    np.testing.assert_allclose(got, np.linalg.multi_dot(ops), rtol=1e-10, atol=1e-12)


def test_a_network_with_packs_and_a_reduction_runs_in_segments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A scalar network: its steps (some with packs) in one call, the final reduction
    on its own kernel; results and peak memory as step by step.  (The reduction's call
    priced as one executor call's, so that this small one stays a reduction step.)"""
    monkeypatch.setattr(reduce_planner, "REDUCE_CALLS", 1.0)
    rng = np.random.default_rng(5)
    expr = "abc,cde,efa,bdf->"
    ops = [rng.standard_normal((5, 6, 7)), rng.standard_normal((7, 8, 5)),
           rng.standard_normal((5, 6, 5)), rng.standard_normal((6, 8, 6))]
    ops = [np.moveaxis(o, 0, -1) .copy().transpose(2, 0, 1) for o in ops]  # strided
    tp.plan_cache.clear()
    plan = tp.plan(expr, *ops, optimize="greedy")
    kinds = [type(s) for s in plan.steps]
    one = plan._one_call
    assert one is not None and not one.whole and kinds[-1] is ReduceStep
    assert one.segments[0].pack_bytes > 0
    with tracked_borrows() as seen:
        got = plan(*ops)
    assert seen["now"] == 0 and seen["peak"] == plan.peak_bytes
    want = np.einsum(expr, *ops)
    np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize("seed", [4, 13, 16, 258])
def test_steps_with_two_packs_in_one_call(seed: int) -> None:
    """Steps whose programs read both operands packed: the packs cut from one buffer at
    the offsets schedule.workspace.carve gives (shapes found to plan two packs in a
    step of a segment with 32- and with 64-byte vectors)."""
    rng = np.random.default_rng(seed)
    ext = dict(zip("abcdefg", rng.integers(2, 12, 7)))
    expr = ["abc,bdce,efa,fg->dg", "abcd,cdef,efgb->ag", "abc,cda,db->"][seed % 3]
    ops = [rng.standard_normal([ext[c] for c in t]) for t in expr.split("->")[0].split(",")]
    perms = [rng.permutation(o.ndim) for o in ops]
    ops = [np.ascontiguousarray(o.transpose(p)).transpose(np.argsort(p))
           for o, p in zip(ops, perms)]
    tp.plan_cache.clear()
    plan = tp.plan(expr, *ops, optimize="greedy")
    one = plan._one_call
    assert one is not None
    assert any(len(st.chosen.packs) >= 2 for seg in one.segments
               for st in plan.steps[seg.start:seg.stop])
    with tracked_borrows() as seen:
        got = plan(*ops)
    assert seen["now"] == 0 and seen["peak"] == plan.peak_bytes
    np.testing.assert_allclose(got, np.einsum(expr, *ops), rtol=1e-10, atol=1e-12)
