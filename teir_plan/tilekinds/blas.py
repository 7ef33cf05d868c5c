"""BLAS tiles (executor/gemm_tiles.gemm_blas): one ``?gemm`` call per tile on the
operands in place, packing those BLAS cannot address, and computing into scratch when
out is not addressable."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from teir_plan.blaslib import GEMM3M_PASSES, GEMM3M_SPEEDUP, gemm3m_available, uses_gemm3m
from teir_plan.isa import LINE_BYTES
from teir_plan.planner.gemm_rate import best_gemm_efficiency, gemm_efficiency
from teir_plan.teir.axes import NO_AXIS, extent_at
from teir_plan.tilekinds.kind import (
    GemmTile,
    Lowering,
    OutTraffic,
    Price,
    PriceArgs,
    ScheduleArgs,
    Split,
    TileKind,
)
from teir_plan.tilekinds.table import (
    KIND_BRGEMM,
    T_A_K,
    T_A_M,
    T_B_K,
    T_B_N,
    T_BR,
    T_C_M,
    T_C_N,
    T_K,
    T_KIND,
    T_M,
    T_MODE,
    T_N,
    set_fields,
)
from teir_plan.tiles import BLAS_THREADED_TILE_FLOPS, GEMM_NAMES, gather_bytes

if TYPE_CHECKING:
    from teir_plan.frontend.contraction import Contraction
    from teir_plan.machine.params import MachineParams
    from teir_plan.planner.candidates import Choice

MODE = 1
# Below this many multiply-adds per product a tile runs as strided loops: a BLAS call
# and its argument set-up cost more than the arithmetic.
SMALL_TILE_FLOPS = 512

_INT32_MAX = 2**31 - 1
_ORD_T = ord("T")


class BlasPlan(NamedTuple):
    """How one GEMM tile maps onto column-major ``?gemm``.

    ``swap``: BLAS computes C^T = B^T A^T because out's unit stride is along N.
    ``transa``/``transb``: ord('N'), ord('T'), or 0 when the operand must be packed.
    ``ldc`` 0: out's tile is not addressable, so BLAS writes a scratch tile that is
    then added to out.

    A named tuple, not a frozen dataclass: the search maps a few hundred tiles per plan,
    and a dataclass' construction was a fifth of that.
    """

    swap: bool
    transa: int
    lda: int
    transb: int
    ldb: int
    ldc: int

    @property
    def needs_scratch(self) -> bool:
        return self.transa == 0 or self.transb == 0 or self.ldc == 0


def _as_operand(rows: int, cols: int, s_rows: int, s_cols: int) -> tuple[int, int]:
    """(trans, ld) for a rows x cols matrix with these strides, or (0, 0) if BLAS
    cannot address it.  Strides along extent-1 axes are free and normalized."""
    r = 1 if rows == 1 else s_rows
    c = max(1, rows) if cols == 1 else s_cols
    if r == 1 and max(1, rows) <= c <= _INT32_MAX:
        return ord("N"), c
    r = max(1, cols) if rows == 1 else s_rows
    c = 1 if cols == 1 else s_cols
    if c == 1 and max(1, cols) <= r <= _INT32_MAX:
        return ord("T"), r
    return 0, 0


def _as_output(rows: int, cols: int, s_rows: int, s_cols: int) -> int:
    r = 1 if rows == 1 else s_rows
    c = max(1, rows) if cols == 1 else s_cols
    return c if r == 1 and max(1, rows) <= c <= _INT32_MAX else 0


# Bounded: one plan looks up at most a few hundred tiles, and a memo of 65536 entries
# grew a process by 32 MB over 9,000 distinct problems (tests/test_memory.py).
@lru_cache(maxsize=4096)
def blas_plan(
    m: int,
    n: int,
    k: int,
    a: tuple[int, int],
    b: tuple[int, int],
    c: tuple[int, int],
) -> BlasPlan | None:
    """Map C(m x n) += A(m x k) B(k x n), given each operand's (row, col) strides.

    Returns None when the extents do not fit BLAS' 32-bit integers.
    """
    if max(m, n, k) > _INT32_MAX:
        return None
    best: tuple = ()
    for swap in (False, True):
        if swap:
            mm, nn = n, m
            sa, sb, sc = (b[1], b[0]), (a[1], a[0]), (c[1], c[0])
        else:
            mm, nn = m, n
            sa, sb, sc = a, b, c
        ldc = _as_output(mm, nn, *sc)
        ta, lda = _as_operand(mm, k, *sa)
        tb, ldb = _as_operand(k, nn, *sb)
        # Prefer in-place output, then fewer packed operands; unswapped on a tie.
        score = (ldc == 0, (ta == 0) + (tb == 0))
        if not best or score < best[0]:
            best = (score, swap, ta, lda, tb, ldb, ldc)
        if score == (False, 0):
            break  # nothing beats it
    return BlasPlan(*best[1:])


def blas_call(m: int, n: int, k: int, a: tuple[int, int], b: tuple[int, int],
              c: tuple[int, int]) -> BlasPlan | None:
    """The BLAS call a tile runs as, or None: too few multiply-adds for a call to pay
    off (SMALL_TILE_FLOPS), or extents beyond BLAS' integers."""
    if m * n * k < SMALL_TILE_FLOPS:
        return None
    return blas_plan(m, n, k, a, b, c)


def tile_call(t: GemmTile) -> BlasPlan | None:
    """The BLAS call ``t`` runs as (blas_call on the tile's extents and strides)."""
    return blas_call(t.m, t.n, t.k, t.a, t.b, t.c)


def blas_form(blas: BlasPlan) -> int:
    """The index in GEMM_FORMS of this call's (transA, transB); a packed operand is
    packed into the N form."""
    return (blas.transa == _ORD_T) + 2 * (blas.transb == _ORD_T)


def _takes(t: GemmTile) -> int:
    return int(blas_call(t.m, t.n, t.k, t.a, t.b, t.c) is not None)


def _encode(table: np.ndarray, t: GemmTile, axis: int, low: Lowering) -> None:
    plan = blas_call(t.m, t.n, t.k, t.a, t.b, t.c)
    assert plan is not None  # _takes said so
    fn, width = low.entries.gemm(uses_gemm3m(low.dtype, t.m, t.n, t.k))
    set_fields(table, mode=MODE, tile_fn=low.entries.address("blas"), swap=plan.swap,
               transa=plan.transa, lda=plan.lda, transb=plan.transb, ldb=plan.ldb,
               ldc=plan.ldc, gemm_fn=fn, blas_int=width)
    if plan.needs_scratch:
        mm, nn = (t.n, t.m) if plan.swap else (t.m, t.n)
        set_fields(table, scratch=mm * t.k + t.k * nn + mm * nn)


def _price(t: GemmTile, axis: int, p: PriceArgs) -> Price:
    blas = p.call
    assert blas is not None  # the cost model prices BLAS only with its call
    params, isz = p.params, t.itemsize
    m, n, k, br = t.m, t.n, t.k, t.br
    mm, nn = (n, m) if blas.swap else (m, n)
    rate = params.gemm_flops(p.dtype) * gemm_efficiency(params, mm, nn, k, blas_form(blas))
    if uses_gemm3m(p.dtype, m, n, k):
        # Three real products for four (blaslib): the same shape, priced faster.
        rate *= GEMM3M_SPEEDUP
    a_op, b_op = (t.b, t.a) if blas.swap else (t.a, t.b)
    packed = 0
    if blas.transa == 0:
        packed += mm * k * br * gather_bytes(a_op, isz)
    if blas.transb == 0:
        packed += k * nn * br * gather_bytes(b_op, isz)
    if blas.ldc == 0:
        packed += 2 * m * n * gather_bytes(t.c, isz)
    seconds = p.flops / rate + packed / params.pack_bytes_per_second
    if blas.ldc and blas.ldc != mm and mm * isz < LINE_BYTES:
        # Each of C's nn columns, shorter than a line, is a line of its own: read for
        # ownership and written back, beyond the lines the efficiency table's tiles
        # (C contiguous) touch.  1 x 64 x 8 float32 calls into a C of stride 1000 took
        # 277 ns against 94 for 64 x 1 x 8 into a contiguous C (AMD EPYC Zen 5, one
        # core, OpenBLAS' Haswell kernels; docs/decisions.md).
        lines = nn - -(-mm * nn * isz // LINE_BYTES)
        seconds += 2 * lines * LINE_BYTES / params.llc_bytes_per_second
    return Price(seconds, packed_bytes=packed)


def _floor_rate(m: int, n: int, k: int, itemsize: int, params: MachineParams,
                dtype: np.dtype) -> float:
    # Either way round, in any form.
    if m * n * k >= SMALL_TILE_FLOPS:
        # A complex tile of any shape might run on ?gemm3m: the floor takes its rate.
        three_m = GEMM3M_SPEEDUP if gemm3m_available(dtype) else 1.0
        return params.gemm_flops(dtype) * best_gemm_efficiency(params, m, n, k) * three_m
    return 0.0


def _owns(table: np.ndarray) -> bool:
    return bool(table[T_MODE] == MODE)


def _describe(table: np.ndarray, dtype: np.dtype) -> str:
    m, n, k = int(table[T_M]), int(table[T_N]), int(table[T_K])
    a_st = (int(table[T_A_M]), int(table[T_A_K]))
    b_st = (int(table[T_B_K]), int(table[T_B_N]))
    c_st = (int(table[T_C_M]), int(table[T_C_N]))
    bp = blas_plan(m, n, k, a_st, b_st, c_st)
    assert bp is not None  # lowered as a BLAS tile
    name = GEMM_NAMES[np.dtype(dtype).name] + ("3m" if uses_gemm3m(dtype, m, n, k) else "")
    mm, nn = (n, m) if bp.swap else (m, n)
    ta, tb = chr(bp.transa) if bp.transa else "packed", chr(bp.transb) if bp.transb else "packed"
    call = (f"{name}(transA={ta}, transB={tb}, m={mm}, n={nn}, k={k}, lda={bp.lda}, "
            f"ldb={bp.ldb}, ldc={bp.ldc or 'scratch'})")
    per = (f", {int(table[T_BR])} times (once per batch-reduce member)"
           if table[T_KIND] == KIND_BRGEMM else "")
    swap = " (as C^T = B^T A^T: out is unit-stride along N)" if bp.swap else ""
    return f"each tile runs BLAS {call}{swap}{per}"


# The part of the smaller of a BLAS program's compute time and its operands' read time
# from memory that overlaps neither, beyond the model's OVERLAP_LOSS: BLAS packs its
# operands before it computes on them, and each call's packing waits on the memory (the
# output's write-back overlaps as for every kernel).  Without it the model ranked BLAS
# tiles above faster vector ones (docs/decisions.md).
BLAS_READ_OVERLAP_LOSS = 0.5


# A threaded BLAS call gets half its threads' ideal speed-up at this many flops.
BLAS_THREAD_HALF_FLOPS = 8e6

# BLAS sums K in blocks of about this many (OpenBLAS' GEMM_Q is 256 to 512 on x86).
BLAS_K_BLOCK = 384


def out_round_trips(c: Contraction, ch: Choice) -> float:
    """How often one tile's BLAS calls read and write its C tile when the tile does not
    stay in L2: once to apply beta (zeroing it when beta = 0), then once per block of K
    in each call (a BRGEMM tile is one call per batch-reduce member).  ?gemm3m's three
    products are not counted here: priced so, deca,be->abcd in complex128 (C's 24 columns
    12 MB apart, set_aliased) left its 504 x 24 x 84 tiles, which ran at twice the
    speed of the plan the model then preferred first (docs/decisions.md)."""
    k, br = extent_at(c.extents, ch.k), extent_at(c.extents, ch.br)
    return 1.0 + br * math.ceil(k / BLAS_K_BLOCK)


def gemm3m_passes(c: Contraction, ch: Choice) -> int:
    """How often a BLAS tile's call packs each operand panel: GEMM3M_PASSES on ?gemm3m
    (blaslib.uses_gemm3m, the executor's rule), else once."""
    if ch.call is None or c.dtype.kind != "c":
        return 1
    m, n, k = (extent_at(c.extents, a) for a in (ch.m, ch.n, ch.k))
    return GEMM3M_PASSES if uses_gemm3m(c.dtype, m, n, k) else 1


def panel_rereads(c: Contraction, ch: Choice, j: int, l2_bytes: int) -> int:
    """How often operand ``j`` of a BLAS tile is read from beyond L2 per call: on
    ?gemm3m, once per real product (GEMM3M_PASSES) when its panel (the tile's rows of
    one batch-reduce member, K cut to BLAS' block BLAS_K_BLOCK) is larger than L2; else
    once.  Measured on dca,bd->abc in complex64 (both cores): cgemm3m tiles of
    512 x 24 x 384, their A panel 1.5 MiB, 48 GFLOP/s against 62-66 for the same tiles
    with K in blocks of 48 (docs/decisions.md: half of L2 was too little)."""
    passes = gemm3m_passes(c, ch)
    if passes == 1:
        return 1
    ax = c.axes
    panel = c.dtype.itemsize
    for a in (ch.m, ch.n, ch.k):
        if a != NO_AXIS and ax[a].strides[j] != 0:
            panel *= min(ax[a].extent, BLAS_K_BLOCK) if a == ch.k else ax[a].extent
    return passes if panel > l2_bytes else 1


def accumulating_calls(c: Contraction, ch: Choice, trips: float) -> float:
    """How many passes of a BLAS tile's calls add into one output tile: each call's
    blocks of K (``trips``, its :func:`out_round_trips`, less the beta pass), in every
    iteration of its K loops (stride 0 in out)."""
    calls = trips - 1.0
    for a in ch.loops:
        if c.axes[a].strides[2] == 0:
            calls *= c.axes[a].extent
    return calls


# Cache sets repeat every way of a cache (64 KiB to 128 KiB on current x86 L2s): rows
# whose byte stride shares a large power of two with it land in the same few sets.
SET_PERIOD_BYTES = 128 * 1024


# How much slower than streamed bytes such rows move: each is a line or two in a set
# already full, fetched on demand (no prefetcher follows hundreds of rows) and evicted
# before the next call adds to it.  Fitted to bda,dc->abc's BLAS tiles (see below).
SET_ALIASED_FACTOR = 3.0


def set_aliased(c: Contraction, prims: tuple[int, ...], j: int, l2_bytes: int) -> bool:
    """Whether tensor ``j``'s tile is rows too many for L2 to keep because their stride is
    a multiple of a large power of two: rows ``s`` bytes apart use the sets of one
    ``gcd(s, SET_PERIOD_BYTES)``-byte slice of every way, so L2 holds at most
    ``l2_bytes / gcd`` of them, whatever their length.  A tile of short rows 36 KiB apart
    (bda,dc->abc into a C-order out: 384 rows of 96 bytes) thus falls out of a 1 MiB L2
    between the BLAS calls that accumulate into it: 58 ms against 29 with rows 64 bytes
    further apart, on an AMD EPYC (Zen 4)."""
    ax = c.axes
    isz = c.dtype.itemsize
    for a in prims:
        s = abs(ax[a].strides[j]) * isz
        if s == 0 or ax[a].extent <= 1:
            continue
        g = math.gcd(s, SET_PERIOD_BYTES)
        if g >= 4096 and ax[a].extent * g > l2_bytes:
            return True
    return False


def split_rereads(c: Contraction, ch: Choice, threads: int) -> float:
    """Bytes a tile split across the threads (the executor's run_split: along the longer
    of M and N) reads again: each part reads all of the operand the split does not cut,
    once per part beyond the first.  Measured on ki,kj->ij, k = 2,000,000, i = j = 32,
    float32, 2 threads: the split BRGEMM read in1 twice and ran at 13-18 GFLOP/s where
    the model, without these bytes, put it 8 % ahead of a parallel K split (35)."""
    m, n = extent_at(c.extents, ch.m), extent_at(c.extents, ch.n)
    parts = min(threads, max(m, n))
    whole = 0 if n >= m else 1  # along N the parts share in0; along M, in1
    return float((parts - 1) * c.tensor_elements(whole) * c.dtype.itemsize)


def _split(args: ScheduleArgs) -> Split | None:
    """A large tile of a program without parallel loops is split across the threads
    (the executor's rule, run_split; smaller ones stay on one core); the gain grows with
    the tile, as the parallel region's start-up and each part's BLAS set-up are paid per
    call."""
    if args.tile_flops < BLAS_THREADED_TILE_FLOPS:
        return None
    share = args.tile_flops / (args.tile_flops + BLAS_THREAD_HALF_FLOPS)
    return Split(args.threads, 1 + (args.threads - 1) * share, 0.0,
                 split_rereads(args.c, args.ch, args.threads))


def _read_factor(args: ScheduleArgs, operand: int) -> float:
    return float(panel_rereads(args.c, args.ch, operand, args.params.l2_bytes))


def _out_traffic(args: ScheduleArgs) -> OutTraffic:
    """An output tile larger than L2 makes out_round_trips; one of rows that share their
    cache sets leaves L2 between the calls that add into it, however small it is.  One
    call per tile is not slowed (a 384 x 24 x 384 tile of bda,dc->abc runs as fast with
    such rows), nor is the vector kernel, which streams its rows (bda,dc->abc's 24 rows
    576 KiB apart)."""
    c, ch, l2 = args.c, args.ch, args.params.l2_bytes
    trips = out_round_trips(c, ch)
    if accumulating_calls(c, ch, trips) > 1 and set_aliased(c, ch.prim_axes, 2, l2):
        return OutTraffic(0.0, trips, SET_ALIASED_FACTOR)
    return OutTraffic(float(l2), trips, 1.0)


KIND = TileKind(name="blas", mode=MODE, owns=_owns, describe=_describe, takes=_takes,
                encode=_encode, price=_price, floor_rate=_floor_rate,
                split=_split, read_factor=_read_factor, out_traffic=_out_traffic,
                read_overlap_loss=BLAS_READ_OVERLAP_LOSS)
