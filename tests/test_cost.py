"""planner/cost.py on its own: its public functions against hand-computed values and the
invariants the search relies on (tests/test_search.py checks the search's pruning over
the TCCG cases; tests/test_lower.py the kinds of the ranked candidates).  Planning only:
lowering runs with stand-in entry points, so nothing is compiled."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from teir_plan.frontend.contraction import Contraction, describe, layout_in, with_dtype
from teir_plan.machine import MachineParams
from teir_plan.planner import cost
from teir_plan.planner.candidates import Choice, choices_for, prim_choices, tile_call, to_teir
from teir_plan.teir.axes import NO_AXIS
from teir_plan.tilekinds import GEMM_KINDS, choose
from teir_plan.tilekinds.kind import PriceArgs, ScheduleArgs
from teir_plan.tilekinds.vec import vec_overhead_seconds
from teir_plan.tiles import VEC_BYTES, flop_factor, vector_kernel_dtype

REF = MachineParams.reference()
REL = 1e-12


def _contraction(expr: str, sizes: Mapping[str, int], dtype: type = np.float32,
                 strides: Mapping[int, Sequence[int]] | None = None) -> Contraction:
    """``expr``'s contraction over arrays of these extents: C order, except the tensors
    (0: in0, 1: in1, 2: out) given element ``strides`` (0 along an axis: broadcast)."""
    ins, out = expr.split("->")
    layouts = []
    for j, term in enumerate([*ins.split(","), out]):
        shape = [sizes[ch] for ch in term]
        st = (strides or {}).get(j) or [math.prod(shape[i + 1:]) for i in range(len(shape))]
        layouts.append(layout_in(term, shape, st, sizes))
    return with_dtype(describe(*layouts), np.dtype(dtype))


def _axis(c: Contraction, name: str) -> int:
    return [a.name for a in c.axes].index(name)


def _prims(c: Contraction, m: str, n: str, k: str) -> tuple[int, int, int, int]:
    return (_axis(c, m), _axis(c, n), _axis(c, k), NO_AXIS)


def _choice(c: Contraction, loops: Sequence[str], npar: int, m: str, n: str, k: str) -> Choice:
    mm, nn, kk, _ = _prims(c, m, n, k)
    return Choice(tuple(_axis(c, a) for a in loops), npar, mm, nn, kk, NO_AXIS,
                  tile_call(c, mm, nn, kk))


def _tile(c: Contraction, prim: tuple[int, int, int, int],
          params: MachineParams = REF) -> cost.TileCost:
    return cost.tile_seconds(c, *prim, tile_call(c, *prim[:3]), params)


# Small contractions whose candidates cover every GEMM kind (on a vector target): vector
# kernels along N and M, transposed and packed, BLAS, dot products, scalar tiles folded
# into rows, strided loops; both float types.
SPREAD = [
    ("ij,jk->ik", {"i": 64, "j": 48, "k": 80}, np.float32),
    ("ij,jk->ik", {"i": 4, "j": 4, "k": 4}, np.float64),
    ("ij,ij->ij", {"i": 16, "j": 24}, np.float32),
    ("i,i->", {"i": 1000}, np.float64),
    ("ij,j->i", {"i": 40, "j": 300}, np.float32),
    ("bik,bkj->bij", {"b": 3, "i": 16, "k": 24, "j": 32}, np.float64),
    ("ik,jk->ij", {"i": 64, "j": 48, "k": 36}, np.float32),
    ("bda,dc->abc", {"a": 96, "b": 8, "c": 24, "d": 16}, np.float32),
    ("ak,kb->ab", {"a": 256, "b": 16, "k": 24}, np.float32),
    # Memory-bound, beyond the last-level cache: 3 x 16 MiB.
    ("ij,ij->ij", {"i": 2048, "j": 2048}, np.float32),
]


def _spread(threads: int) -> Iterator[tuple[Contraction, tuple[int, int, int, int], Choice]]:
    for expr, sizes, dtype in SPREAD:
        c = _contraction(expr, sizes, dtype)
        for prim in prim_choices(c):
            for ch in choices_for(c, prim, threads):
                yield c, prim, ch


class _NoEntries:
    """Entry points that are not compiled: lowering reads only the kinds' rules here."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype

    def address(self, name: str) -> int:
        return 1

    def gemm(self, three_m: bool = False) -> tuple[int, int]:
        return 1, 8


@pytest.fixture
def lower_uncompiled(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """executor/lower.py's ``lower`` with stand-in entry points; its memo is cleared
    before and after, so that no table with those addresses outlives the test."""
    from teir_plan.executor import lower as lowering

    monkeypatch.setattr(lowering, "Entries", _NoEntries)
    lowering.lower.cache_clear()
    yield lowering.lower
    lowering.lower.cache_clear()


def test_tile_kind_is_the_kind_the_lowered_program_runs(
        lower_uncompiled: Callable[..., Any]) -> None:
    """For every schedule of every prim choice of the spread: the kind cost.tile_kind
    prices (with the prim choice's mapped library call) is the kind the program's
    lowered tile table reads back as (tilekinds.lowered_kind), and the full rule
    (choose without the mapped call) agrees; a scalar tile the cost model folds into a
    row (the kind's fold) is exactly one that lowering folds (the "row" kind)."""
    seen = set()
    for c, prim, ch in _spread(2):
        kind, axis, tile = cost.tile_kind(c, ch.m, ch.n, ch.k, ch.br, ch.call)
        assert (kind, axis) == choose(tile, vector_kernel_dtype(c.dtype))
        assert tile == cost.gemm_tile(c, *prim)
        flops = 2 * tile.m * tile.n * tile.k * tile.br
        folded = kind.fold(ScheduleArgs(c, ch, axis, REF, 2, flops)) is not None
        low = lower_uncompiled(to_teir(c, ch))
        assert low.kind.name == ("row" if folded else kind.name), (c.axes, ch)
        seen.add(low.kind.name)
    want = {"blas", "dot", "loops", "row"} | ({"vec", "vec_t", "vec_p"} if VEC_BYTES else set())
    assert want <= seen


def test_gemm_tile_reads_the_contractions_strides() -> None:
    c = _contraction("ij,jk->ik", {"i": 64, "j": 48, "k": 80}, strides={0: [100, 1]})
    t = cost.gemm_tile(c, *_prims(c, "i", "k", "j"))
    assert (t.m, t.n, t.k, t.br, t.itemsize) == (64, 80, 48, 1, 4)
    assert (t.a, t.b, t.c) == ((100, 1), (80, 1), (80, 1))


# --- tile_seconds ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_loops_tile_costs_its_flops_at_the_loop_rate(dtype: type) -> None:
    # 4 x 4 x 4 = 64 multiply-adds: too few for a BLAS call.
    c = _contraction("ij,jk->ik", {"i": 4, "j": 4, "k": 4}, dtype)
    t = _tile(c, _prims(c, "i", "k", "j"))
    assert t.kind == "loops" and t.flops == 128
    assert t.seconds == pytest.approx(128 / REF.loop_flops + REF.tile_seconds, rel=REL)
    assert (t.packed_bytes, t.vector_operand, t.streams) == (0, -1, False)


# (expression, extents, the extent doubled, the kind, the prim axes m, n, k)
SCALING = [
    # Strided loops: 64 -> 128 multiply-adds.
    ("ij,jk->ik", {"i": 4, "j": 4, "k": 4}, "j", "loops", ("i", "k", "j")),
    # BLAS with K beyond the efficiency table's last column (4096): the rate stays.
    ("ij,jk->ik", {"i": 64, "j": 4096, "k": 64}, "j", "blas", ("i", "k", "j")),
    # The vector kernel along N (96 float32, whole lines), 24 -> 48 rows: whole
    # micro-tiles of every register file's rows (8, 6 or 4), the same K share.
    ("ij,jk->ik", {"i": 24, "j": 64, "k": 96}, "i", "vec", ("i", "k", "j")),
]


@pytest.mark.parametrize("vec_overhead", [(0.0, 0.0), (40e-9, 3e-9)])
@pytest.mark.parametrize("case", SCALING, ids=[s[3] for s in SCALING])
def test_a_compute_bound_tiles_price_doubles_with_its_flops(
        case: tuple, vec_overhead: tuple[float, float]) -> None:
    """Double one extent of a tile whose rate does not depend on it: the price doubles,
    apart from the set-up term, which is the walker's tile_seconds (and the vector
    kernel's set-up per tile and per strip)."""
    expr, sizes, grown, kind, (m, n, k) = case
    if kind == "vec" and not VEC_BYTES:
        pytest.skip("no vector target: the vector kernel takes no tile")
    params = dataclasses.replace(REF, vec_tile_seconds=vec_overhead[0],
                                 vec_strip_seconds=vec_overhead[1])
    c1 = _contraction(expr, sizes)
    c2 = _contraction(expr, {**sizes, grown: 2 * sizes[grown]})
    t1, t2 = _tile(c1, _prims(c1, m, n, k), params), _tile(c2, _prims(c2, m, n, k), params)
    assert t1.kind == t2.kind == kind
    assert t2.flops == 2 * t1.flops
    setup = params.tile_seconds
    if kind == "vec":
        setup += vec_overhead_seconds(sizes[n], 4, *vec_overhead)
    assert 2 * t1.seconds - t2.seconds == pytest.approx(setup, rel=1e-9)
    assert t2.seconds - setup == pytest.approx(2 * (t1.seconds - setup), rel=REL)


def test_a_blas_call_below_the_grid_costs_what_an_8_does() -> None:
    """Below the efficiency table's smallest extent (8) a call costs what an 8 does
    (docs/cost-model.md): 2 and 3 rows of a 64 x 64 x 64 product cost the same."""
    prices = []
    for rows in (2, 3):
        c = _contraction("ij,jk->ik", {"i": rows, "j": 64, "k": 64})
        t = _tile(c, _prims(c, "i", "k", "j"))
        assert t.kind == "blas"
        prices.append(t.seconds)
    assert prices[0] == pytest.approx(prices[1], rel=REL)


@pytest.mark.parametrize("dtype,field", [(np.float32, "gemm_flops_f32"),
                                         (np.float64, "gemm_flops_f64")])
def test_a_blas_tile_runs_twice_as_fast_on_twice_the_blas_peak(dtype: type, field: str) -> None:
    """MachineParams.reference() with one type's BLAS peak doubled: that type's BLAS
    tiles cost half, apart from the walker's bookkeeping per tile; the other type's
    tiles cost what they did; a schedule's compute halves the same way."""
    fast = dataclasses.replace(REF, **{field: 2 * getattr(REF, field)})
    other = np.float64 if dtype is np.float32 else np.float32
    sizes = {"b": 4, "i": 64, "j": 4096, "k": 64}
    c = _contraction("bij,bjk->bik", sizes, dtype)
    prim = _prims(c, "i", "k", "j")
    slow_tile, fast_tile = _tile(c, prim), _tile(c, prim, fast)
    assert slow_tile.kind == fast_tile.kind == "blas"
    ts = REF.tile_seconds
    assert fast_tile.seconds - ts == pytest.approx((slow_tile.seconds - ts) / 2, rel=REL)
    c_other = _contraction("bij,bjk->bik", sizes, other)
    assert _tile(c_other, prim, fast).seconds == _tile(c_other, prim).seconds
    # One tile per b, on one thread: compute is the tiles' sum.
    ch = _choice(c, ["b"], 0, "i", "k", "j")
    slow, quick = cost.estimate(c, ch, REF, 1), cost.estimate(c, ch, fast, 1)
    assert slow.tile_calls == quick.tile_calls == 4
    assert quick.compute_seconds - 4 * ts == pytest.approx(
        (slow.compute_seconds - 4 * ts) / 2, rel=REL)
    assert quick.memory_seconds == slow.memory_seconds
    assert quick.overhead_seconds == slow.overhead_seconds == REF.call_seconds


# --- the parts of a prediction ---------------------------------------------------------

def test_the_total_and_the_memory_time_by_hand() -> None:
    assert cost.total_seconds(3.0, 1.0, 0.25) == 3.0 + cost.OVERLAP_LOSS * 1.0 + 0.25
    assert cost.total_seconds(1.0, 3.0, 0.0) == cost.total_seconds(3.0, 1.0, 0.0)
    # 20 GB at 20 GB/s and 60 GB at 60 GB/s: a second each on both cores; one busy core
    # gets 60 % of either rate.
    p = REF
    dram, llc = p.dram_bytes_per_second, p.llc_bytes_per_second
    assert cost.memory_seconds(dram, llc, p, 2) == pytest.approx(2.0, rel=REL)
    assert cost.memory_seconds(dram, llc, p, 1) == pytest.approx(2.0 / 0.6, rel=REL)


def test_the_cost_records_bound_and_rate() -> None:
    base = cost.Cost(seconds=2e-3, compute_seconds=1e-3, memory_seconds=1.5e-3,
                     overhead_seconds=2e-6, flops=4_000_000, dram_bytes=0.0, llc_bytes=0.0,
                     tile_calls=1, tile_flops=4_000_000, parallel_iterations=1,
                     parallel_efficiency=1.0, threads=1, packed_bytes_per_call=0)
    assert base.bound == "memory" and base.gflops == pytest.approx(2.0, rel=REL)
    assert dataclasses.replace(base, compute_seconds=2e-3).bound == "compute"
    assert dataclasses.replace(base, overhead_seconds=3e-3).bound == "overhead"
    assert dataclasses.replace(base, seconds=0.0).gflops == 0.0


@pytest.mark.parametrize("threads", [1, 2])
def test_the_prediction_combines_its_parts_by_the_documented_rule(threads: int) -> None:
    """The rule estimate implements (Cost.unoverlapped_seconds' comment):

        seconds = max(C, M) + OVERLAP_LOSS * min(C, M) + O
                  + kind.read_overlap_loss * min(C, R) + pack_seconds

    with C, M, O its compute, memory and overhead parts and R the operands' reads from
    DRAM alone (R <= M).  So, without packs, seconds is at least each part and, as
    OVERLAP_LOSS + every kind's read_overlap_loss <= 1, at most their sum; a kind with no
    read_overlap_loss (every kind but BLAS) adds exactly OVERLAP_LOSS * min(C, M)."""
    assert all(cost.OVERLAP_LOSS + k.read_overlap_loss <= 1 for k in GEMM_KINDS)
    n = 0
    for c, _, ch in _spread(threads):
        e = cost.estimate(c, ch, REF, threads)
        C, M, O = e.compute_seconds, e.memory_seconds, e.overhead_seconds
        kind = cost.tile_kind(c, ch.m, ch.n, ch.k, ch.br, ch.call)[0]
        assert e.seconds == pytest.approx(max(C, M) + e.unoverlapped_seconds + O, rel=REL)
        least = cost.OVERLAP_LOSS * min(C, M)
        assert least * (1 - REL) <= e.unoverlapped_seconds <= (
            (cost.OVERLAP_LOSS + kind.read_overlap_loss) * min(C, M) * (1 + REL))
        if not kind.read_overlap_loss:
            assert e.unoverlapped_seconds == pytest.approx(least, rel=REL, abs=1e-18)
        assert max(C, M, O) <= e.seconds <= (C + M + O) * (1 + REL)
        packed = cost.estimate(c, ch, REF, threads, pack_seconds=1e-4)
        assert packed.seconds == pytest.approx(e.seconds + 1e-4, rel=REL)
        assert dataclasses.replace(packed, seconds=e.seconds, pack_seconds=0.0) == e
        n += 1
    assert n > 100


def test_a_blas_tile_reading_its_operands_from_memory_by_hand() -> None:
    """One 64 x 64 x 2^20 BLAS call, one thread: its operands (256 MiB each) come from
    DRAM at 60 % of its rate (one busy core), its 16 KiB output from DRAM once and is
    read and written (twice its bytes).  The total adds the kind's read_overlap_loss of
    the smaller of compute and the operands' read time R to the usual rule."""
    k = 2**20
    c = _contraction("ij,jk->ik", {"i": 64, "j": k, "k": 64})
    ch = _choice(c, [], 0, "i", "k", "j")
    kind = cost.tile_kind(c, ch.m, ch.n, ch.k, ch.br, ch.call)[0]
    assert kind.name == "blas" and kind.read_overlap_loss > 0
    e = cost.estimate(c, ch, REF, 1)
    operands, out = 2 * 64 * k * 4, 64 * 64 * 4
    assert (e.dram_bytes, e.llc_bytes) == (operands + 2 * out, 0)
    rate = 0.6 * REF.dram_bytes_per_second
    assert e.memory_seconds == pytest.approx((operands + 2 * out) / rate, rel=REL)
    assert e.compute_seconds == pytest.approx(_tile(c, _prims(c, "i", "k", "j")).seconds,
                                              rel=REL)
    C, M, O = e.compute_seconds, e.memory_seconds, e.overhead_seconds
    R = operands / rate
    assert e.seconds == pytest.approx(
        max(C, M) + cost.OVERLAP_LOSS * min(C, M) + O + kind.read_overlap_loss * min(C, R),
        rel=REL)


def test_a_scalar_tile_takes_its_innermost_loop_into_a_row() -> None:
    """ij,ij->ij (16 x 24): scalar tiles, the innermost loop folded into one call (the
    loops kind's fold, a row tile at ROW_FLOPS): along j, where every tensor has unit
    stride, 16 calls of 24 elements; along i (stride 24 in all three tensors, each
    gathered), 24 calls of 16 elements at 1 + 3 x ROW_GATHER_COST times the time."""
    from teir_plan.tilekinds.loops import ROW_FLOPS, ROW_GATHER_COST

    c = _contraction("ij,ij->ij", {"i": 16, "j": 24})
    tile = _tile(c, (NO_AXIS, NO_AXIS, NO_AXIS, NO_AXIS))
    assert tile.kind == "loops" and tile.flops == 2
    ts = REF.tile_seconds
    along_j = cost.estimate(c, Choice((_axis(c, "i"), _axis(c, "j")), 0, NO_AXIS, NO_AXIS,
                                      NO_AXIS, NO_AXIS, None), REF, 1)
    assert along_j.tile_calls == 16
    assert along_j.compute_seconds == pytest.approx(16 * (24 * 2 / ROW_FLOPS + ts), rel=REL)
    along_i = cost.estimate(c, Choice((_axis(c, "j"), _axis(c, "i")), 0, NO_AXIS, NO_AXIS,
                                      NO_AXIS, NO_AXIS, None), REF, 1)
    assert along_i.tile_calls == 24
    assert along_i.compute_seconds == pytest.approx(
        24 * (16 * 2 / ROW_FLOPS * (1 + 3 * ROW_GATHER_COST) + ts), rel=REL)


def test_the_compute_bound_is_below_every_schedules_estimate() -> None:
    """compute_bound, what the search prunes prim choices by, is at most estimate for
    each of the prim choice's schedules (here on the small spread, float64 and scalar
    tiles included, up to 4 threads); given its tile's cost it computes the same."""
    for threads in (1, 2, 4):
        for c, prim, ch in _spread(threads):
            tile = _tile(c, prim)
            bound = cost.compute_bound(c, prim, ch.call, REF, threads)
            assert bound == cost.compute_bound(c, prim, ch.call, REF, threads, tile)
            assert bound <= cost.estimate(c, ch, REF, threads, tile).seconds * (1 + REL), (
                c.axes, ch, threads)


def test_more_threads_on_an_evenly_divided_parallel_loop_never_compute_longer() -> None:
    """A parallel loop of 24 iterations: on t threads that divide it the compute is the
    one-thread compute over t exactly (load balance 1); on 5 threads the balance is
    24 / (5 x 5); past 24 threads only 24 work.  Never more compute for more threads."""
    c = _contraction("bik,bkj->bij", {"b": 24, "i": 16, "k": 24, "j": 32}, np.float64)
    ch = _choice(c, ["b"], 1, "i", "j", "k")
    one = cost.estimate(c, ch, REF, 1)
    assert (one.threads, one.parallel_efficiency, one.parallel_iterations) == (1, 1.0, 24)
    previous = one.compute_seconds
    for t in (2, 3, 4, 6, 8, 12, 24):
        e = cost.estimate(c, ch, REF, t)
        assert (e.threads, e.parallel_efficiency) == (t, 1.0)
        assert e.compute_seconds == pytest.approx(one.compute_seconds / t, rel=REL)
        assert e.compute_seconds <= previous
        assert e.overhead_seconds == pytest.approx(REF.call_seconds + REF.parallel_seconds,
                                                   rel=REL)
        previous = e.compute_seconds
    five = cost.estimate(c, ch, REF, 5)
    assert five.parallel_efficiency == pytest.approx(24 / 25, rel=REL)
    assert five.compute_seconds == pytest.approx(one.compute_seconds / 4.8, rel=REL)
    many = cost.estimate(c, ch, REF, 48)
    assert many.threads == 24 and many.parallel_efficiency == pytest.approx(0.5, rel=REL)
    assert many.compute_seconds == pytest.approx(one.compute_seconds / 24, rel=REL)


# --- memory ----------------------------------------------------------------------------

def test_the_last_level_cache_holds_the_problem_up_to_its_size() -> None:
    c = _contraction("ij,jk->ik", {"i": 64, "j": 48, "k": 80}, np.float64)
    total = 8 * (64 * 48 + 48 * 80 + 64 * 80)
    fits = dataclasses.replace(REF, llc_bytes=total)
    beyond = dataclasses.replace(REF, llc_bytes=total - 1)
    assert cost.fits_llc(c, fits) and not cost.fits_llc(c, beyond)
    assert cost.first_read_rate(c, fits) == REF.llc_bytes_per_second
    assert cost.first_read_rate(c, beyond) == REF.dram_bytes_per_second
    # Resident: every byte from the LLC; not: the distinct bytes from DRAM.
    ch = _choice(c, [], 0, "i", "k", "j")
    inside, outside = cost.estimate(c, ch, fits, 1), cost.estimate(c, ch, beyond, 1)
    assert inside.dram_bytes == 0 and inside.llc_bytes >= total
    assert outside.dram_bytes >= total
    assert inside.dram_bytes + inside.llc_bytes == outside.dram_bytes + outside.llc_bytes


# Contractions and the strides of one operand broadcast (0) along one of its axes.
BROADCASTS = [
    ("bij,bjk->bik", {"b": 6, "i": 32, "j": 24, "k": 40}, {1: [0, 40, 1]}, np.float32),
    ("bij,bjk->bik", {"b": 6, "i": 32, "j": 24, "k": 40}, {0: [0, 24, 1]}, np.float64),
    ("ij,jk->ik", {"i": 64, "j": 48, "k": 80}, {0: [0, 1]}, np.float32),
    ("ij,jk->ik", {"i": 64, "j": 48, "k": 80}, {1: [80, 0]}, np.float32),
    ("abij,bjk->abik", {"a": 4, "b": 64, "i": 3, "j": 2, "k": 5}, {1: [0, 5, 1]}, np.float32),
    ("ij,ij->ij", {"i": 100, "j": 3}, {1: [0, 1]}, np.float64),
    # in1's 4 MiB tile does not stay in L2 across the b loop: streamed again either way.
    ("bij,bjk->bik", {"b": 4, "i": 64, "j": 1024, "k": 1024}, {1: [0, 1024, 1]}, np.float32),
]


@pytest.mark.parametrize("case", BROADCASTS, ids=[
    "bij,bjk-in1", "bij,bjk-in0-float64", "ij,jk-in0", "ij,jk-in1", "abij,bjk-in1", "ij,ij-in1",
    "bij,bjk-in1-beyond-L2"])
def test_a_broadcast_operand_moves_no_more_bytes_than_a_full_one(case: tuple) -> None:
    expr, sizes, strides, dtype = case
    full = _contraction(expr, sizes, dtype)
    broadcast = _contraction(expr, sizes, dtype, strides)
    j = next(iter(strides))
    assert broadcast.elements[j] < full.elements[j]
    for threads in (1, 2):
        for prim in prim_choices(full):
            call = tile_call(broadcast, *prim[:3])
            for a in choices_for(full, prim, threads):
                # The same schedule (loop order, parallel loops, prim axes) on both.
                b = Choice(a.loops, a.npar, a.m, a.n, a.k, a.br, call)
                ef = cost.estimate(full, a, REF, threads)
                eb = cost.estimate(broadcast, b, REF, threads)
                assert eb.dram_bytes + eb.llc_bytes <= (
                    (ef.dram_bytes + ef.llc_bytes) * (1 + REL)), (prim, a)


def test_a_tile_of_short_rows_pays_a_line_per_row() -> None:
    """in0 with rows 100 elements apart (a view of a wider array): its 64 x 48 tile is
    64 runs of 48 float32 (tile_runs), each paying ROW_OVERHEAD_BYTES more (192 -> 256
    bytes a row); in C order it is one block.  One call, all in the LLC: the padded
    layout moves exactly a third of in0's bytes more."""
    sizes = {"i": 64, "j": 48, "k": 80}
    dense = _contraction("ij,jk->ik", sizes)
    padded = _contraction("ij,jk->ik", sizes, strides={0: [100, 1]})
    prim_axes = tuple(_axis(dense, a) for a in "ikj")
    assert cost.tile_runs(dense, prim_axes) == (0, 0, 0)
    assert cost.tile_runs(padded, prim_axes) == (48, 0, 0)
    d, p = _choice(dense, [], 0, "i", "k", "j"), _choice(padded, [], 0, "i", "k", "j")
    assert _tile(dense, _prims(dense, "i", "k", "j")).kind == _tile(
        padded, _prims(padded, "i", "k", "j")).kind
    ed, ep = cost.estimate(dense, d, REF, 1), cost.estimate(padded, p, REF, 1)
    assert ed.dram_bytes == ep.dram_bytes == 0
    in0 = 64 * 48 * 4
    assert cost.ROW_OVERHEAD_BYTES == 64
    assert ep.llc_bytes - ed.llc_bytes == pytest.approx(in0 * 64 / 192, rel=REL)


def test_an_output_streams_only_when_large_zeroed_and_written_once() -> None:
    """streamed: out of at least 32 MiB (tiles.streams_out) with every K axis in the
    tile; a K loop around the tiles accumulates into out, which then cannot stream."""
    big = _contraction("ij,jk->ik", {"i": 4096, "j": 8, "k": 4096})  # out: 64 MiB
    small = _contraction("ij,jk->ik", {"i": 64, "j": 8, "k": 64})
    assert cost.streamed(big, _axis(big, "j"), NO_AXIS)
    assert not cost.streamed(big, NO_AXIS, NO_AXIS)  # j is a loop
    assert not cost.streamed(small, _axis(small, "j"), NO_AXIS)


def test_a_remembered_tile_price_is_its_kinds_price_whatever_contraction_asks() -> None:
    """tile_seconds remembers prices by tile: each equals its kind's price for the tile
    (plus the walker's bookkeeping), asked first or again, and from a contraction that
    has the same tile among other axes (a batch axis added outside it)."""
    cost.forget_tile_prices()
    for c, prim, _ in _spread(1):
        call = tile_call(c, *prim[:3])
        kind, axis, tile = cost.tile_kind(c, *prim, call)
        streams = kind.vector and cost.streamed(c, prim[2], prim[3])
        flops = 2 * tile.m * tile.n * tile.k * tile.br
        assert kind.price is not None
        price = kind.price(tile, axis, PriceArgs(REF, c.dtype, flops * flop_factor(c.dtype),
                                                 streams, call))
        for _ in range(2):
            got = cost.tile_seconds(c, *prim, call, REF)
            assert got.seconds == price.seconds + REF.tile_seconds
            assert (got.kind, got.flops, got.packed_bytes) == (kind.name, flops,
                                                               price.packed_bytes)
    # The same 64 x 80 x 48 tile, from a contraction with a batch loop around it.
    c = _contraction("ij,jk->ik", {"i": 64, "j": 48, "k": 80})
    b = _contraction("bij,bjk->bik", {"b": 5, "i": 64, "j": 48, "k": 80})
    prim, bprim = _prims(c, "i", "k", "j"), _prims(b, "i", "k", "j")
    assert cost.gemm_tile(c, *prim) == cost.gemm_tile(b, *bprim)
    cost.forget_tile_prices()
    first = cost.tile_seconds(b, *bprim, tile_call(b, *bprim[:3]), REF)
    assert cost.tile_seconds(c, *prim, tile_call(c, *prim[:3]), REF) == first
