"""tp.einsum and tp.plan against numpy.einsum computed in float64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from tests.strategies import counted, fuzz_settings

CASES = [
    ("trus,pqtu->pqrs", [(3, 4, 5, 6), (7, 2, 3, 5)]),  # the spec's contraction
    ("ij,jk->ik", [(30, 40), (40, 50)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output
    ("ij->ji", [(5, 7)]),  # permutation (Copy)
    ("ii->i", [(4, 4)]),  # diagonal view
    ("ii", [(4, 4)]),  # trace
    ("ij->i", [(30, 600)]),  # reduction
    ("i->", [(17,)]),
    ("i,i", [(700,), (700,)]),  # dot product
    ("ab,b->a", [(60, 70), (70,)]),  # matrix-vector
    ("ij,ij->ij", [(3, 4), (3, 4)]),  # elementwise, C only
    ("i,j->ij", [(5,), (6,)]),  # outer product, no K
    ("bij,bjk->bik", [(4, 30, 40), (4, 40, 20)]),
    ("ij,jk,kl->il", [(5, 6), (6, 7), (7, 8)]),  # three operands
    ("ab,bc,cd,de->ae", [(3, 4), (4, 5), (5, 6), (6, 2)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),  # ellipsis
    ("...ij,jk->...ik", [(2, 1, 3, 4), (4, 5)]),
    (",->", [(), ()]),  # scalars
    ("i,->i", [(5,), ()]),
    ("ij,k->i", [(3, 4), (5,)]),  # indices summed in one operand only
    ("ij,ij->", [(3, 1), (3, 4)]),  # broadcast size-1 dim
    ("iij,jk->ik", [(3, 3, 4), (4, 2)]),  # diagonal inside a contraction
    ("Ab,bC->AC", [(3, 4), (4, 5)]),  # upper case
    (" ij , jk -> ik ", [(3, 4), (4, 5)]),  # spaces
    ("ij,jk->ik", [(0, 4), (4, 5)]),  # extent 0 in the output
    ("ij,jk->ik", [(3, 0), (0, 5)]),  # extent 0 summed: zeros
    ("ij,jk->ik", [(1, 1), (1, 1)]),  # extent 1
    ("efbad,cf->abcde", [(4, 3, 5, 6, 7), (2, 3)]),
]


def _check(sub, ops, dtype, **kw):
    res = tp.einsum(sub, *ops, **kw)
    ref = np.einsum(sub, *[np.asarray(o, dtype=np.float64) for o in ops])
    assert res.shape == ref.shape
    assert res.dtype == np.result_type(*ops) if "dtype" not in kw else True
    tol = 2e-4 if dtype == np.float32 else 1e-10
    scale = max(1.0, float(np.abs(ref).max(initial=0)))
    np.testing.assert_allclose(res, ref, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sub,shapes", CASES, ids=[c[0] for c in CASES])
def test_cases_match_numpy(sub, shapes, dtype):
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s).astype(dtype) for s in shapes]
    _check(sub, ops, dtype)


@pytest.mark.parametrize("sub,shapes", CASES[:16], ids=[c[0] for c in CASES[:16]])
def test_every_alternative_is_correct(sub, shapes):
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    p = tp.plan(sub, *ops)
    ref = np.einsum(sub, *[o.astype(np.float64) for o in ops])
    assert p.alternatives, "a plan always has at least its own choice"
    for alt in p.alternatives:
        if alt.teir is not None:
            alt.teir.validate()
        np.testing.assert_allclose(alt(*ops), ref, rtol=2e-4, atol=2e-4 * max(1, np.abs(ref).max()))


def test_alternatives_run_through_execute_on_the_callers_arrays():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)  # t r u s
    b = rng.standard_normal((7, 2, 3, 5)).astype(np.float32)  # p q t u
    p = tp.plan("trus,pqtu->pqrs", a, b)
    ref = np.einsum("trus,pqtu->pqrs", a.astype(float), b.astype(float))
    ran = 0
    for alt in p.alternatives:
        if alt.main_step.chosen.packs:
            continue  # packs are an extra step
        out = alt.empty_out()  # the layout the plan writes (order="K" chose it)
        tp.execute(alt.teir, a, b, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
        ran += 1
    assert ran > 0


def test_layouts_without_copies():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 9, 10))
    b = rng.standard_normal((10, 12))
    views = [a.transpose(2, 0, 1), a[::-1, ::2, :], a[:, :, ::-1], np.asfortranarray(a)]
    for v in views:
        sub = "kij,jl->il" if v.shape[0] == 10 else "ijk,kl->ijl"
        bb = b if v.shape[-1] == 10 else rng.standard_normal((v.shape[-1], 12))
        _check(sub, [v, bb], np.float64)
    bc = np.broadcast_to(rng.standard_normal(10), (8, 10))
    _check("ij,jk->ik", [bc, b], np.float64)


def test_mixed_and_other_dtypes():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.arange(20, dtype=np.float64).reshape(4, 5)
    assert tp.einsum("ij,jk->ik", a, b).dtype == np.float64
    ia, ib = np.arange(12).reshape(3, 4), np.arange(20).reshape(4, 5)
    np.testing.assert_array_equal(tp.einsum("ij,jk->ik", ia, ib), np.einsum("ij,jk->ik", ia, ib))
    c = ia + 1j
    np.testing.assert_allclose(tp.einsum("ij,jk->ik", c, ib), np.einsum("ij,jk->ik", c, ib))
    assert tp.einsum("ij,jk", [[1.0, 2.0]], [[3.0], [4.0]]).tolist() == [[11.0]]
    with pytest.raises(TypeError):
        np.einsum("ij,jk->ik", ia, ib, dtype=np.float32)
    with pytest.raises(tp.DTypeError, match="operand 0"):
        tp.einsum("ij,jk->ik", ia, ib, dtype=np.float32)
    up = tp.einsum("ij,jk->ik", a, a.T, dtype=np.float64)
    assert up.dtype == np.float64
    np.testing.assert_allclose(up, a.astype(float) @ a.T.astype(float))


def test_out_argument_and_epilogue():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((20, 30)), rng.standard_normal((30, 40))
    out = np.empty((40, 20)).T  # an F-ordered out
    r = tp.einsum("ij,jk->ik", a, b, out=out)
    assert r is out
    np.testing.assert_allclose(out, a @ b, atol=1e-12)
    np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, b, epilogue="relu"),
                               np.maximum(a @ b, 0), atol=1e-12)
    for opt in (False, "autotune"):
        np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, b, optimize=opt), a @ b, atol=1e-12)


def test_plan_reuse_and_wrong_layout():
    rng = np.random.default_rng(5)
    p = tp.plan("ij,jk->ik", (6, 7), (7, 8))
    for _ in range(2):
        a, b = rng.standard_normal((6, 7)), rng.standard_normal((7, 8))
        np.testing.assert_allclose(p(a, b), a @ b, atol=1e-12)
    with pytest.raises(tp.PlanError, match="operand 0"):
        p(np.asfortranarray(a), b)
    with pytest.raises(tp.PlanError, match="shape"):
        p(a[:5], b)


@fuzz_settings(default=60)
@given(st.data())
@counted
def test_random_binary_contractions(data):
    letters = "abcdefg"
    n = data.draw(st.integers(1, 6))
    idx = letters[:n]
    ext = {c: data.draw(st.sampled_from([1, 2, 3, 5, 7])) for c in idx}
    t0 = "".join(data.draw(st.permutations(idx))[: data.draw(st.integers(0, n))])
    t1 = "".join(data.draw(st.permutations(idx))[: data.draw(st.integers(0, n))])
    used = sorted(set(t0 + t1))
    out = "".join(c for c in data.draw(st.permutations(used)) if data.draw(st.booleans()))
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    ops = []
    for t in (t0, t1):
        x = rng.standard_normal([ext[c] for c in t]).astype(dtype)
        if x.ndim >= 2 and data.draw(st.booleans()):
            x = np.asfortranarray(x)
        if x.ndim >= 1 and data.draw(st.booleans()):
            x = x[::-1]
        ops.append(x)
    _check(f"{t0},{t1}->{out}", ops, dtype)


def test_autotune_times_the_candidates_in_turns_and_keeps_the_fastest(monkeypatch):
    from teir_plan.planner.autotune import autotune, time_in_turns

    rng = np.random.default_rng(11)
    a = rng.standard_normal((8, 6, 5, 7))
    b = rng.standard_normal((4, 3, 8, 5))
    plan = tp.plan("trus,pqtu->pqrs", a, b)
    alts = plan.alternatives[:3]
    assert len(alts) == 3
    order: list[int] = []
    now = [0.0]  # the clock the timings read: each run advances it by its cost

    def clock() -> float:
        return now[0]

    def recording(i, run, cost=0.001):
        def wrapped(arrays, out):
            order.append(i)
            now[0] += cost
            run(arrays, out)
        return wrapped

    for i, alt in enumerate(alts):
        alt.run = recording(i, alt.run, cost=0.02 if i == 0 else 0.001)
    seconds = time_in_turns(alts, [a, b], repeats=2, clock=clock)
    assert order == [0, 1, 2] * 3  # a warm-up run of each, then two rounds
    assert seconds == pytest.approx([0.02, 0.001, 0.001])

    # autotune keeps the fastest candidate, whichever the cost model ranked first.
    slowed = plan.alternatives
    slowed_first = slowed[0]
    slowed_first.run = recording(0, slowed_first.run, cost=0.02)
    for alt in slowed[1:3]:
        alt.run = recording(1, alt.run)
    monkeypatch.setattr(type(plan), "alternatives", property(lambda self: slowed))
    tuned = autotune(plan, [a, b], top=3, clock=clock)
    assert tuned is not slowed_first and tuned in slowed[1:3]
    np.testing.assert_allclose(tuned(a, b), np.einsum("trus,pqtu->pqrs", a, b), atol=1e-12)
