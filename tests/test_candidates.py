"""Candidate schedules of a binary contraction (teir_plan/planner/candidates.py): axes fused
where their strides compose, split into an outer loop and an inner tile, every prim
choice with its loop orders and parallel sets, and the TEIR program of each.  Every
program the candidates make, run by the test-only reference interpreter
(tests/reference.py), must compute numpy.einsum in float64; the fused and split axes and
the parallel sets are checked against values worked out by hand.

(tests/test_search.py checks that the search's pruning keeps what costing every
candidate keeps, and which prim choices a split allows; here what the candidates
compute.)"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.frontend.contraction import Axis, Contraction, describe, layout_of, with_dtype
from teir_plan.planner.candidates import (
    Choice,
    ParallelRanking,
    axis_names,
    choices_for,
    fuse_axes,
    parallel_sets,
    prim_choices,
    split_axis,
    split_inner,
    to_teir,
)
from teir_plan.teir.axes import NO_AXIS
from tests.reference import run_reference

RNG = np.random.default_rng(3)


def _contraction(expr: str, *ops: np.ndarray) -> Contraction:
    ins, out = expr.split("->")
    terms = ins.split(",")
    ext = {ch: n for t, a in zip(terms, ops) for ch, n in zip(t, a.shape)}
    res = np.empty([ext[ch] for ch in out])
    lays = [layout_of(t, a, ext) for t, a in zip([*terms, out], [*ops, res])]
    return with_dtype(describe(*lays), np.dtype(np.float64))


def _flat(view: np.ndarray) -> tuple[np.ndarray, int]:
    """The flat float64 memory behind ``view`` (its base, made 1-D) and the index of the
    view's first element in it."""
    base = view.base if view.base is not None else view
    while base.base is not None:
        base = base.base
    return base.reshape(-1), (view.ctypes.data - base.ctypes.data) // view.itemsize


def _run(prog: tp.TEIR, ops: list[np.ndarray], out0: np.ndarray) -> np.ndarray:
    bufs, origins = zip(*(_flat(op) for op in ops))
    out = out0.copy().reshape(-1)
    run_reference(prog, [*(b.copy() for b in bufs), out], [*origins, 0])
    return out.reshape(out0.shape)


# akl,lkc->ac: a (M) 4, k and l (K) 2 and 3, c (N) 4, in0 row-major, in1 stored l k c
# with l reversed: k and l compose in neither order in in1, so nothing fuses and both
# K axes stay for BRGEMM; a is split 2 x 2 below.
A, K, L, C = 4, 2, 3, 4
IN0 = RNG.standard_normal((A, K, L))
IN1 = RNG.standard_normal((L, K, C))[::-1]
EXPR = "akl,lkc->ac"


@pytest.mark.parametrize("variant", ["as described", "a split 2 x 2"])
@pytest.mark.parametrize(("zero", "relu"), [(True, False), (False, True)])
def test_every_candidate_program_computes_the_contraction(variant: str, zero: bool,
                                                          relu: bool) -> None:
    c = _contraction(EXPR, IN0, IN1)
    assert fuse_axes(c) == c  # nothing composes
    if variant == "a split 2 x 2":
        c = split_axis(c, [ax.name for ax in c.axes].index("a"), 2)
    out0 = RNG.standard_normal((A, C))
    want = np.einsum(EXPR, IN0, IN1) + (0 if zero else out0)
    want = np.maximum(want, 0) if relu else want
    seen = 0
    for prim in prim_choices(c):
        for ch in choices_for(c, prim, threads=2):
            prog = to_teir(c, ch, zero_first=zero, relu_last=relu)
            prog.validate()
            assert sorted(ch.loops + ch.prim_axes) == list(range(len(c.axes)))
            np.testing.assert_allclose(_run(prog, [IN0, IN1], out0), want, atol=1e-12)
            seen += 1
    # GEMM and BRGEMM shapes: (M or none) x (N or none) x (k, l, none, or the BRGEMMs
    # (k, l) and (l, k)) = 2 x 2 x 5 unsplit; with a split, a^ goes only with a.
    assert {ch for ch in prim_choices(c) if ch[3] != NO_AXIS}
    assert seen >= 20


def test_axes_fuse_where_their_strides_compose_in_every_tensor() -> None:
    # abk,kc->abc, a 2 b 3 k 4 c 5, row-major: a's strides (in0 12, in1 0, out 15) are
    # b's (4, 0, 5) times |b| = 3, so a and b fuse into one M axis `ab` of 6 at b's
    # strides; c (N) and k (K) have other roles.
    a = RNG.standard_normal((2, 3, 4))
    b = RNG.standard_normal((4, 5))
    fused = fuse_axes(_contraction("abk,kc->abc", a, b))
    assert [(ax.name, ax.role, ax.extent, ax.strides) for ax in fused.axes] == [
        ("ab", tp.DimType.M, 6, (4, 0, 5)), ("c", tp.DimType.N, 5, (0, 1, 1)),
        ("k", tp.DimType.K, 4, (1, 5, 0))]
    # in0 stored b a k: a's in0 stride 4 and b's 8; b then a composes in in0 (8 = 4 x 2)
    # but not in out (5 against 15 x 2): nothing fuses.
    bak = np.ascontiguousarray(a.transpose(1, 0, 2)).transpose(1, 0, 2)
    kept = fuse_axes(_contraction("abk,kc->abc", bak, b))
    assert [ax.name for ax in kept.axes] == ["a", "b", "c", "k"]
    # Every candidate of either computes the same products.
    out0 = np.zeros((2, 3, 5))
    want = np.einsum("abk,kc->abc", a, b)
    for c, x in ((fused, a), (kept, bak)):
        for prim in prim_choices(c):
            for ch in choices_for(c, prim, threads=2):
                np.testing.assert_allclose(_run(to_teir(c, ch), [x, b], out0), want,
                                           atol=1e-12)


def _fused_pair_by_pair(c: Contraction) -> Contraction:
    """Fusion as first written: find the first (outer, inner) pair of one role whose
    strides compose in every tensor, trying every pair; fuse it into the earlier one's
    place; start again."""
    axes = list(c.axes)
    while True:
        pair = next(((i, j) for i, o in enumerate(axes) for j, n in enumerate(axes)
                     if i != j and o.role is n.role
                     and o.strides == tuple(x * n.extent for x in n.strides)), None)
        if pair is None:
            return Contraction(tuple(axes), c.dtype)
        i, j = pair
        o, n = axes[i], axes[j]
        fused = Axis(o.name + n.name, o.role, o.extent * n.extent, n.strides)
        axes = [a for t, a in enumerate(axes) if t not in (i, j)]
        axes.insert(min(i, j), fused)


def test_axes_fuse_as_pair_by_pair_fusion_does_in_every_layout() -> None:
    """fuse_axes, which fuses whole chains of axes in one pass where the links are
    unambiguous, gives what fusing pair by pair gives: on the operands and result of
    four contractions stored in many axis orders (some transposes keep runs of axes
    that fuse, some break them), extents 1 included (links that loop)."""
    cases = [("abk,kc->abc", (2, 3, 4), (4, 5)),
             ("abcd,dcef->abef", (2, 3, 4, 5), (5, 4, 3, 2)),
             ("aebfcg,dgeh->abcdfh", (2, 3, 2, 3, 2, 3), (3, 3, 2, 2)),
             ("abcd,cdx->abx", (2, 1, 3, 1), (3, 1, 4))]
    rng = np.random.default_rng(7)
    fused_somewhere = 0
    for expr, s0, s1 in cases:
        ins, out = expr.split("->")
        t0, t1 = ins.split(",")
        for _ in range(40):
            p0, p1 = rng.permutation(len(s0)), rng.permutation(len(s1))
            x = np.ascontiguousarray(np.zeros(s0).transpose(p0)).transpose(np.argsort(p0))
            y = np.ascontiguousarray(np.zeros(s1).transpose(p1)).transpose(np.argsort(p1))
            ext = {ch: n for t, a in ((t0, x), (t1, y)) for ch, n in zip(t, a.shape)}
            q = rng.permutation(len(out))
            shape = [ext[ch] for ch in out]
            res = np.ascontiguousarray(np.zeros(shape).transpose(q)).transpose(np.argsort(q))
            lays = [layout_of(t, a, ext) for t, a in zip((t0, t1, out), (x, y, res))]
            c = with_dtype(describe(*lays), np.dtype(np.float64))
            want = _fused_pair_by_pair(c)
            assert fuse_axes(c) == want, (expr, p0, p1, q)
            fused_somewhere += len(want.axes) < len(c.axes)
    assert fused_somewhere >= 20


def test_a_split_is_an_outer_loop_over_inner_tiles() -> None:
    c = _contraction(EXPR, IN0, IN1)
    i = [ax.name for ax in c.axes].index("a")
    split = split_axis(c, i, 2)
    outer, inner = split.axes[i], split.axes[i + 1]
    # a (extent 4, strides in0 K*L = 6, in1 0, out C = 4): an outer part a^ of 2 at twice
    # those strides, an inner a of 2 at a's own.
    assert (outer.name, outer.extent, outer.strides) == ("a^", 2, (12, 0, 8))
    assert (inner.name, inner.extent, inner.strides) == ("a", 2, (6, 0, 4))
    assert split_inner(split) == {i: i + 1} and split_inner(c) == {}
    assert [ax.name for ax in split.axes if ax.name not in ("a", "a^")] == [
        ax.name for ax in c.axes if ax.name != "a"]


def _parallel_sets_by_sorting(c: Contraction, order: list[int], threads: int
                              ) -> list[tuple[int, ...]]:
    """The rule written out: every single axis and pair of non-K loops (extent > 1) with
    at least ``threads`` iterations, sorted by balance, size, then positions in
    ``order``; the first two after the empty set."""
    if threads <= 1:
        return [()]
    cands = [a for a in order if c.axes[a].role.value != "k" and c.axes[a].extent > 1]
    combos = [(a,) for a in cands] + [
        (a, b) for i, a in enumerate(cands) for b in cands[i + 1:]]
    scored = []
    for combo in combos:
        iters = int(np.prod([c.axes[a].extent for a in combo]))
        if iters >= threads:
            balance = iters / (threads * -(-iters // threads))
            scored.append((-balance, len(combo), [order.index(a) for a in combo], combo))
    return [()] + [s[3] for s in sorted(scored)[:2]]


def test_parallel_sets_ranked_once_match_each_orders_sort() -> None:
    """ParallelRanking ranks a prim choice's sets once for all its loop orders: in every
    order of every loop set of these contractions, on 1-8 threads, its sets are those
    sorting each order's candidates gives (ties in balance and size are common: extents
    2, 4 and 6 on 2 threads all balance perfectly)."""
    shapes = [("abk,kcd->abcd", (2, 3, 4), (4, 6, 5)),
              ("abk,kc->abc", (4, 2, 3), (3, 6)),
              ("aebk,dk->abde", (6, 2, 4, 3), (8, 3))]
    for expr, s0, s1 in shapes:
        c = _contraction(expr, RNG.standard_normal(s0), RNG.standard_normal(s1))
        for prim in prim_choices(c):
            loops = [a for a in range(len(c.axes)) if a not in prim]
            for threads in (1, 2, 3, 4, 8):
                ranking = ParallelRanking(c, loops, threads)
                for order in itertools.permutations(loops):
                    want = _parallel_sets_by_sorting(c, list(order), threads)
                    assert ranking.sets(order) == want, (expr, prim, order, threads)
                    assert parallel_sets(c, order, threads) == want


def test_parallel_sets_by_balance_then_fewer_axes() -> None:
    # Non-K loops of extents 3 and 4 on 2 threads.  Balance = iterations / (threads x
    # iterations per thread, rounded up): 4 -> 4 / 4 = 1; 3 x 4 -> 12 / 12 = 1; 3 -> 3 / 4.
    # Ties go to fewer axes: (), then 4 alone, then both; three sets at most.
    x = RNG.standard_normal((3, 5))
    y = RNG.standard_normal((5, 4))
    c = _contraction("ik,kj->ij", x, y)
    names = [ax.name for ax in c.axes]
    i, j, k = (names.index(ch) for ch in "ijk")
    assert parallel_sets(c, [i, j, k], 2) == [(), (j,), (i, j)]
    assert parallel_sets(c, [i, j, k], 1) == [()]
    # 8 threads: only both together have 8 iterations (12 / 16 balanced).
    assert parallel_sets(c, [i, j, k], 8) == [(), (i, j)]
    # K never runs in parallel.
    assert all(k not in s for t in (2, 3, 8) for s in parallel_sets(c, [k, i, j], t))


def test_the_program_of_a_choice() -> None:
    # abk,kc->abc fused (ab 6, c 5, k 4): ab in parallel, a GEMM over c and k (no M).
    a = RNG.standard_normal((2, 3, 4))
    b = RNG.standard_normal((4, 5))
    c = fuse_axes(_contraction("abk,kc->abc", a, b))
    # loops (ab,), one parallel; m none, n c, k k, no batch; no library call
    ch = Choice((0,), 1, NO_AXIS, 1, 2, NO_AXIS, None)
    prog = to_teir(c, ch, zero_first=False, relu_last=True)
    assert prog == tp.TEIR.from_fields(
        data_type="float64", prim_first="none", prim_main="gemm", prim_last="relu",
        dim_types=["m", "n", "k"], exec_types=["parallel", "prim", "prim"],
        dim_sizes=[6, 5, 4], strides=[[4, 0, 1], [0, 1, 5], [5, 1, 0]])
    assert axis_names(c, ch) == ("ab", "c", "k")
    # A BRGEMM's prim axes come batch first, then m, n, k.
    d = _contraction(EXPR, IN0, IN1)
    names = [ax.name for ax in d.axes]
    a_, c_, k_, l_ = (names.index(ch) for ch in "ackl")
    br = Choice((), 0, a_, c_, k_, l_, None)
    prog = to_teir(d, br)
    assert prog.primitives.prim_main is tp.Prim.BRGEMM
    assert axis_names(d, br) == ("l", "a", "c", "k")
    assert list(prog.schedule.dim_types) == [tp.DimType.K, tp.DimType.M, tp.DimType.N,
                                            tp.DimType.K]


def test_a_choice_derives_its_prim_axes_and_parallel_loops_and_stays_frozen() -> None:
    """Choice sets its fields in one step (not through the frozen dataclass' own
    __init__): the derived fields follow the given ones, also through
    dataclasses.replace, equality and hashing ignore them, and nothing can be set."""
    ch = Choice((4, 0, 5), 2, 1, NO_AXIS, 2, 3, None)
    assert (ch.prim_axes, ch.parallel) == ((3, 1, 2), (4, 0))
    again = dataclasses.replace(ch, npar=1, br=NO_AXIS, n=6)
    assert (again.prim_axes, again.parallel) == ((1, 6, 2), (4,))
    assert again == Choice((4, 0, 5), 1, 1, 6, 2, NO_AXIS, None)
    assert hash(again) == hash(Choice((4, 0, 5), 1, 1, 6, 2, NO_AXIS, None))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ch.npar = 0  # type: ignore[misc]
