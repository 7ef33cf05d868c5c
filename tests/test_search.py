"""The search's pruning is exact: branch and bound keeps the same candidates, in the
same order and at the same predicted cost, as costing every candidate; its bounds are
lower bounds, and a ceiling drops only candidates at or above it."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from teir_plan.frontend.contraction import Contraction, describe, layout_of, with_dtype
from teir_plan.machine import MachineParams
from teir_plan.planner.candidates import (
    Choice,
    choices_for,
    fuse_axes,
    loop_orders,
    prim_choices,
    split_axis,
    split_inner,
)
from teir_plan.planner.cost import Schedules, estimate, floor_bounds, tile_runs
from teir_plan.planner.search import prim_floors, prim_options, rank, variants
from teir_plan.teir.axes import NO_AXIS
from teir_plan.tilekinds.blas import out_round_trips, set_aliased

CASES = [
    line.split()
    for line in (Path(__file__).parents[1] / "benchmarks" / "tccg24.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]

# Beyond TCCG: nothing fuses (eight indices), a missing K, a dot, an elementwise product
# and a matrix-vector product (row, dot and BLAS tiles' floors).
FLOOR_CASES = [
    ["aebfcg,dgeh->abcdfh", "a=8,b=8,c=8,d=8,e=8,f=8,g=8,h=8"],
    ["ij,jk->ik", "i=1000,j=1,k=1000"],
    ["i,i->", "i=100000"],
    ["ij,ij->ij", "i=64,j=64"],
    ["ik,k->i", "i=4096,k=4096"],
]


def _c_order_view(shape: tuple[int, ...]) -> np.ndarray:
    """A float32 view with C-order strides over one element: only shapes and strides
    matter to the planner, and this needs no memory."""
    strides = tuple(4 * math.prod(shape[i + 1:]) for i in range(len(shape)))
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape, strides)


def _contraction(expr: str, sizes: str, scale: int):  # type: ignore[no-untyped-def]
    ext = {kv.split("=")[0]: max(1, int(kv.split("=")[1]) // scale) for kv in sizes.split(",")}
    ins, out = expr.split("->")
    terms = ins.split(",")
    arrays = [_c_order_view(tuple(ext[c] for c in t)) for t in [*terms, out]]
    lays = [layout_of(t, a, ext) for t, a in zip([*terms, out], arrays)]
    return with_dtype(describe(*lays), np.dtype(np.float32))


@pytest.mark.parametrize("threads", [1, 2, 8])
@pytest.mark.parametrize("scale", [1, 4])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pruned_search_equals_exhaustive(case: list[str], scale: int, threads: int) -> None:
    c = _contraction(case[0], case[1], scale)
    params = MachineParams()
    pruned = rank(c, params, threads, top=8)
    full = rank(c, params, threads, top=8, prune=False)
    assert [r.teir for r in pruned] == [r.teir for r in full]
    assert [r.predicted_seconds for r in pruned] == [r.predicted_seconds for r in full]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_schedule_costs_at_least_its_prim_choice_bound(case: list[str],
                                                             threads: int) -> None:
    """The bound the search prunes by is a lower bound on every schedule it stands for,
    including tiles whose output streams to memory (written once: a bound counting it
    twice pruned ebad,ce->abcd's best schedule once a ceiling was given)."""
    params = MachineParams()
    for v, packs in variants(_contraction(case[0], case[1], 1), params, threads):
        pack_seconds = sum(p.seconds for p in packs)
        for opt in prim_options(v, params, threads):
            for ch in choices_for(v, opt.prim, threads, opt.call):
                cost = estimate(v, ch, params, threads, opt.tile, pack_seconds=pack_seconds)
                assert cost.seconds >= (opt.bound + pack_seconds) * (1 - 1e-12), (opt.prim, ch)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("scale", [1, 8])
@pytest.mark.parametrize("case", [*CASES, *FLOOR_CASES], ids=[c[0] for c in CASES + FLOOR_CASES])
def test_every_prim_choice_costs_at_least_its_floor(case: list[str], scale: int,
                                                    threads: int) -> None:
    """The floor the search orders prim choices by before costing them (from their
    extents alone) is at most the bound costing gives, for every prim choice of every
    variant: otherwise the best-first search could cost and expand in the wrong order,
    or never cost a prim choice that belonged in the result."""
    params = MachineParams()
    for v, _ in variants(_contraction(case[0], case[1], scale), params, threads):
        floors = {p: f for f, _, p in prim_floors(v, params, threads)}
        options = prim_options(v, params, threads)
        assert len(floors) == len(options)
        for opt in options:
            assert floors[opt.prim] <= opt.bound * (1 + 1e-12), opt


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_ceiling_keeps_every_candidate_under_it(case: list[str]) -> None:
    """A search given a ceiling (another result layout's best) finds every candidate
    the full search finds below it, at the same cost, and may skip the others."""
    c = _contraction(case[0], case[1], 4)
    params = MachineParams()
    full = rank(c, params, 2, top=8, prune=False)
    for ceiling in (full[0].predicted_seconds * 0.99, full[3].predicted_seconds,
                    full[-1].predicted_seconds * 1.01):
        capped = rank(c, params, 2, top=8, ceiling=ceiling)
        below = [(r.teir, r.predicted_seconds) for r in full if r.predicted_seconds < ceiling]
        assert [(r.teir, r.predicted_seconds) for r in capped][:len(below)] == below


def test_tiles_take_split_axes_as_blocks() -> None:
    """cdeh,defg->chfg (gen LM first+last's step): d and e fuse into one K axis of 1024,
    split 32 x 32.  A tile takes the outer part only with its inner part, and the inner
    part as its K (the outer then as a BRGEMM's batch); every other prim choice stays."""
    c = fuse_axes(_contraction("cdeh,defg->chfg", "c=16,d=32,e=32,f=16,g=16,h=16", 1))
    k_axis = next(i for i, a in enumerate(c.axes) if a.extent == 1024)
    split = split_axis(c, k_axis, 32)
    inner = split_inner(split)
    assert len(inner) == 1
    [(outer, part)] = inner.items()
    assert split.axes[outer].name == split.axes[part].name + "^"
    kept = set(prim_choices(split))
    assert not split_inner(c)
    assert kept
    for m, n, k, br in kept:
        if outer in (m, n, k, br):
            assert part in (m, n, k, br) and (k, br) == (part, outer)
    ks = {k for _, _, k, br in kept if br == NO_AXIS}
    assert part in ks and outer not in ks
    assert any(br == outer and k == part for _, _, k, br in kept)
    # Choices without the split axis in the tile all stay.
    rest = {p for p in prim_choices(split, True) if outer not in p and part not in p}
    assert rest <= kept and rest


def test_loop_orders_come_largest_out_stride_first() -> None:
    """Few loops: every order, those with out's larger strides outer first, so that of
    orders priced alike the search keeps the one whose workers write contiguous parts of
    out (FCTN's dgij,cfhj->dgicfh written in fgdich order: f's rows of out are 800 KiB
    apart, d's 5 KiB, i's 640 B)."""
    c = fuse_axes(_contraction("dgij,cfhj->fgdich", "c=20,d=20,f=8,g=8,h=8,i=8,j=8", 1))
    names = [a.name for a in c.axes]
    loops = [names.index(x) for x in "dfi"]
    orders = loop_orders(c, loops)
    assert sorted(orders) == sorted(itertools.permutations(loops))
    assert [names[a] for a in orders[0]] == ["f", "d", "i"]
    keys = [[-abs(c.axes[a].strides[2]) for a in o] for o in orders]
    assert keys == sorted(keys)


def _bda_dc_split(out_row: int) -> Contraction:
    """bda,dc->abc at TCCG size with d split as (d^ 8, e 48), written into out rows
    ``out_row`` elements apart along a (9216: C order, each row 36 KiB on from the last)."""
    ext = {"a": 384, "b": 384, "c": 24, "d": 8, "e": 48}
    in0 = _c_order_view((384, 8, 48, 384))
    in1 = _c_order_view((8, 48, 24))
    out = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (384, 384, 24),
                                          (4 * out_row, 4 * 24, 4))
    lays = [layout_of(t, a, ext) for t, a in zip(["bdea", "dec", "abc"], [in0, in1, out])]
    return with_dtype(describe(*lays), np.dtype(np.float32))


def _accumulating_blas_choice(c: Contraction) -> Choice:
    """b parallel, then one BRGEMM tile per b: m = a, n = c, k = e, d^ batch-reduced (each
    member one BLAS call adding into the same 384 x 24 tile of out)."""
    names = [a.name for a in c.axes]
    m, n, k, br = (names.index(x) for x in "ace" + "d")
    return next(ch for ch in choices_for(c, (m, n, k, br), 2)
                if ch.loops == (names.index("b"),) and ch.npar == 1)


def test_out_rows_that_share_cache_sets_are_costed_as_leaving_l2() -> None:
    """A tile of many short rows whose stride is a multiple of 4 KiB uses a few sets of
    every cache level: with a 1 MiB L2 the 384 rows of 96 bytes, 36 KiB apart, that
    bda,dc->abc's BLAS tiles accumulate into are not kept between the calls (measured
    58 ms against 29 with the rows 64 bytes further apart, AMD EPYC).  The same tile
    with padded rows, or with a 2 MiB L2 (which holds 512 such rows), costs as before."""
    aliased, padded = _bda_dc_split(384 * 24), _bda_dc_split(384 * 24 + 16)
    small_l2 = MachineParams(l2_bytes=1 << 20)
    prims = _accumulating_blas_choice(aliased).prim_axes
    assert set_aliased(aliased, prims, 2, small_l2.l2_bytes)
    assert not set_aliased(padded, prims, 2, small_l2.l2_bytes)
    assert not set_aliased(aliased, prims, 2, 2 << 20)

    def seconds(c: Contraction, params: MachineParams) -> float:
        return estimate(c, _accumulating_blas_choice(c), params, 2).seconds

    assert seconds(aliased, small_l2) > 1.2 * seconds(padded, small_l2)
    big_l2 = MachineParams(l2_bytes=2 << 20)
    assert seconds(aliased, big_l2) == pytest.approx(seconds(padded, big_l2), rel=0.01)


def test_a_brgemm_tile_reads_and_writes_its_c_once_per_member_call() -> None:
    """The executor runs a BLAS BRGEMM tile as one call per batch-reduce member, each
    adding into C: a C tile larger than L2 goes through memory once per member and block
    of K, not once per block of the members' K summed (eafd,fbec->abcd planned as a
    BRGEMM on that count measured 7.4 s against 5.3 for the plan it now picks)."""
    c = _bda_dc_split(384 * 24)
    ch = _accumulating_blas_choice(c)
    assert out_round_trips(c, ch) == 1 + 8  # zeroing, then 8 members of k = 48


def test_blas_tiles_overlap_less_with_the_reads_they_pack() -> None:
    """BLAS packs its operands before it multiplies them, so a BLAS program pays
    BLAS_READ_OVERLAP_LOSS of the smaller of its compute and its operands' read time on
    top of the usual OVERLAP_LOSS; the vector kernel (its next tile prefetched) does not.
    bda,dc->abc's 384 x 24 x 48 x 8 BRGEMM tiles, 226 MB of bda from memory, measured
    21.2-22.9 ms against 14.1-15.8 for the vector kernel's GEMM tiles."""
    from teir_plan.planner import cost

    # The result in its own layout (a unit-stride, as order='K' picks): both kernels
    # can take the tiles.
    ext = {"a": 384, "b": 384, "c": 24, "d": 8, "e": 48}
    out = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (384, 384, 24),
                                          (4, 4 * 384, 4 * 384 * 384))
    lays = [layout_of(t, a, ext) for t, a in zip(
        ["bdea", "dec", "abc"], [_c_order_view((384, 8, 48, 384)), _c_order_view((8, 48, 24)),
                                 out])]
    c = with_dtype(describe(*lays), np.dtype(np.float32))
    params = MachineParams()
    blas = _accumulating_blas_choice(c)
    names = [a.name for a in c.axes]
    m, n, k = (names.index(x) for x in "ace")
    vec = next(ch for ch in choices_for(c, (m, n, k, -1), 2)
               if ch.loops == (names.index("b"), names.index("d")) and ch.npar == 1)
    kind, axis, _ = cost.tile_kind(c, vec.m, vec.n, vec.k, vec.br, vec.call)
    assert (kind.name, axis) == ("vec", 1)  # along M
    assert not cost.tile_kind(c, blas.m, blas.n, blas.k, blas.br, blas.call)[0].vector

    def parts(ch: Choice) -> tuple[float, float]:
        e = estimate(c, ch, params, 2)
        assert e.seconds == pytest.approx(
            max(e.compute_seconds, e.memory_seconds) + e.unoverlapped_seconds
            + e.overhead_seconds)
        return e.unoverlapped_seconds, cost.OVERLAP_LOSS * min(e.compute_seconds,
                                                               e.memory_seconds)

    extra, usual = parts(blas)
    assert extra > usual * 1.5  # the operand streams: its reads are most of the memory
    assert parts(vec)[0] == pytest.approx(parts(vec)[1])


def test_a_row_axis_too_long_for_the_vector_kernel_is_split_to_fit() -> None:
    """bhqk,bhkd->bhqd's 128 x 64 x 128 products have rows x K = 16384, over the vector
    kernel's VEC_MAX_ROWS_TIMES_K: on one thread (no split for the workers) the search
    still offers q split into tiles of 64 rows, which run on the vector kernel and give
    numpy's answer; 24 rows of K 384 (BLAS measured faster) are not offered."""
    import teir_plan as tp
    from teir_plan.executor.lower import lower
    from teir_plan.tilekinds.vec_variants import vec_rows_split
    from teir_plan.tiles import VEC_MAX_ROWS_TIMES_K

    assert vec_rows_split(128, [128]) == [64]
    assert vec_rows_split(384, [384]) == []
    assert 64 * 128 <= VEC_MAX_ROWS_TIMES_K < 128 * 128
    c = _contraction("bhqk,bhkd->bhqd", "b=2,h=3,q=128,k=128,d=64", 1)
    split = [v for v, packs in variants(c, MachineParams(), 1) if not packs
             and any(a.name.startswith("q") and a.extent == 64 for a in v.axes)]
    assert split
    ranked = rank(split[0], MachineParams(), 1, top=8)
    vec = [r for r in ranked if lower(r.teir).kind.name == "vec"]
    assert vec and 64 in vec[0].teir.schedule.dim_sizes
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 3, 128, 128)).astype(np.float32)
    b = rng.standard_normal((2, 3, 128, 64)).astype(np.float32)
    out = np.empty((2, 3, 128, 64), np.float32)
    tp.execute(vec[0].teir, a, b, out)
    want = np.einsum("bhqk,bhkd->bhqd", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


# A tree step of many small axes (hundreds of prim choices: the floors are ordered on
# arrays) and a binary contraction of eight indices (the plain path), each in several
# result layouts.
SHARED_FLOOR_CASES = [
    ["aebfcgdh,eifjgkhl->abcdijkl",
     "a=2,b=3,c=2,d=3,e=2,f=3,g=2,h=3,i=2,j=3,k=2,l=3"],
    ["aebfcg,dgeh->abcdfh", "a=5,b=7,c=3,d=11,e=2,f=13,g=4,h=6"],
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", SHARED_FLOOR_CASES, ids=[c[0] for c in SHARED_FLOOR_CASES])
def test_floors_shared_across_layouts_are_each_layouts_own(case: list[str],
                                                           threads: int) -> None:
    """The floors remembered per structure (shared by every layout of a contraction:
    search.floor_order) are what ``floor_bounds`` gives each layout's own prim choices,
    in the order of (floor, position), and the prim choices remembered per structure
    are each contraction's own enumeration."""
    params = MachineParams()
    sub, out = case[0].split("->")
    step = math.factorial(len(out)) // 4
    for perm in itertools.islice(itertools.permutations(out), 0, None, step):
        c = fuse_axes(_contraction(f"{sub}->{''.join(perm)}", case[1], 1))
        prims = _enumerated_prims(c)
        assert tuple(prim_choices(c)) == tuple(prims)
        ext = {**dict(enumerate(c.extents)), NO_AXIS: 1}
        floors = floor_bounds(c, [(ext[m], ext[n], ext[k], ext[br])
                                  for m, n, k, br in prims], params, threads)
        want = sorted(zip(floors, range(len(prims)), prims), key=lambda f: (f[0], f[1]))
        assert list(prim_floors(c, params, threads)) == want


def _enumerated_prims(c: Contraction) -> list[tuple[int, int, int, int]]:
    """Every (m, n, k, br) the roles allow, a split axis only with its other part (the
    rule of candidates._blocked, written out)."""
    roles = [ax.role for ax in c.axes]
    inner = split_inner(c)
    ms = [i for i, r in enumerate(roles) if r.name == "M"] + [NO_AXIS]
    ns = [i for i, r in enumerate(roles) if r.name == "N"] + [NO_AXIS]
    ks = [i for i, r in enumerate(roles) if r.name == "K"]
    out = []
    for m, n in itertools.product(ms, ns):
        for k in [*ks, NO_AXIS]:
            for br in [NO_AXIS, *(b for b in ks if b != k and k != NO_AXIS)]:
                prim = (m, n, k, br)
                if all(a not in inner or (inner[a] in prim and not (a == k and inner[a] == br))
                       for a in prim):
                    out.append(prim)
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_lazily_priced_schedules_are_estimates_above_their_bounds(case: list[str],
                                                                 threads: int) -> None:
    """Schedules, what the search prices a prim choice's schedules with, gives each
    schedule exactly its estimate, and a bound at most that when asked with a cutoff at
    the bound or below (the schedule then unpriced: the search skips it)."""
    params = MachineParams()
    for v, packs in variants(_contraction(case[0], case[1], 4), params, threads):
        pack_seconds = sum(p.seconds for p in packs)
        for opt in prim_options(v, params, threads):
            choices = list(choices_for(v, opt.prim, threads, opt.call))
            runs = tile_runs(v, choices[0].prim_axes)
            sched = Schedules(v, choices, params, threads, opt.tile, runs, pack_seconds)
            for i, ch in enumerate(choices):
                bound = sched.below(i, 0.0)
                assert isinstance(bound, float)
                assert sched.below(i, bound) == bound  # (at the cutoff: not priced)
                full = estimate(v, ch, params, threads, opt.tile, runs, pack_seconds)
                assert bound <= full.seconds, (opt.prim, ch)
                assert sched.below(i, math.nextafter(bound, math.inf)) == full
                assert sched.below(i, 0.0) == full  # priced once, kept


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_search_reusing_the_first_searchs_schedules_finds_what_a_fresh_one_does(
        case: list[str]) -> None:
    """build.py's second search (more candidates kept) reuses the first's schedules,
    some of them left unpriced under the first's tighter cutoff: it finds the same
    candidates at the same costs as a search of its own, with or without a ceiling."""
    c = _contraction(case[0], case[1], 4)
    params = MachineParams()
    fresh = rank(c, params, 2, top=8)
    for ceiling in (math.inf, fresh[0].predicted_seconds * 1.05):
        shared: dict = {}
        rank(c, params, 2, top=1, expansions=shared, ceiling=ceiling)
        again = rank(c, params, 2, top=8, expansions=shared)
        assert [(r.teir, r.cost) for r in again] == [(r.teir, r.cost) for r in fresh]
