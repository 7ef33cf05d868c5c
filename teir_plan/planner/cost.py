"""The cost model: predicted seconds of a schedule, and where they go.

It models (see docs/cost-model.md):

* compute: each tile call costs its flops at the BLAS rate scaled by BLAS' measured
  efficiency on that tile shape (a calibrated table over m, n, k, interpolated;
  the call's fixed cost is part of it);
  packing a BLAS-illegal operand costs its bytes at the packing rate; tiles that
  BLAS cannot take run as jitted loops at a much lower rate;
* memory: bytes each tensor moves given the loop order: a loop that does not
  index a tensor reuses its tile from cache if the tile's working set fits in
  L2, otherwise it streams again; traffic beyond the tensor's distinct bytes
  comes from the last-level cache when the tensor fits there, else from DRAM;
  a BLAS output tile larger than L2 makes extra round trips to memory (BLAS
  applies beta to the whole tile first, then accumulates each block of K);
* threads: parallel loops split their iterations over the threads (load
  balance = iterations / (threads x ceil(iterations / threads))); without
  parallel loops a large BLAS tile uses BLAS' own threads;
* first/last access: Zero is folded into BLAS (beta = 0); ReLU re-reads and
  writes the output once;
* total: the larger of compute and memory time plus half the smaller (they overlap
  only in part), plus the executor call's overhead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from teir_plan.blaslib import GEMM3M_PASSES, uses_gemm3m
from teir_plan.frontend.contraction import Contraction
from teir_plan.machine.params import MachineParams
from teir_plan.planner.candidates import Choice
from teir_plan.planner.parallel_k import partial_sums_seconds
from teir_plan.teir.axes import NO_AXIS, extent_at
from teir_plan.teir.enums import DimType
from teir_plan.tilekinds import GEMM_KINDS, GemmTile, TileKind
from teir_plan.tilekinds.blas import KIND as BLAS
from teir_plan.tilekinds.blas import BlasPlan
from teir_plan.tilekinds.dot import KIND as DOT
from teir_plan.tilekinds.kind import PriceArgs, no_floor
from teir_plan.tilekinds.loops import KIND as LOOPS
from teir_plan.tilekinds.row import ROW_FLOPS, ROW_GATHER_COST
from teir_plan.tilekinds.vec import vec_line_bytes
from teir_plan.tiles import (
    BLAS_THREADED_TILE_FLOPS,
    DOT_SPLIT_MIN_K,
    NEXT_TILE_PREFETCH_BYTES,
    VEC_STREAM_K,
    flop_factor,
    streams_out,
    vector_kernel_dtype,
)


@dataclass(frozen=True)
class Cost:
    """A prediction and its parts."""

    seconds: float
    compute_seconds: float
    memory_seconds: float
    overhead_seconds: float
    flops: int
    dram_bytes: float
    llc_bytes: float
    tile_calls: int
    tile_flops: int
    parallel_iterations: int
    parallel_efficiency: float
    threads: int
    packed_bytes_per_call: int
    pack_seconds: float = 0.0  # whole-operand packing before the main program
    # The part of the smaller of compute and memory time that does not overlap the
    # larger (OVERLAP_LOSS of it, and for BLAS tiles BLAS_READ_OVERLAP_LOSS of their
    # operands' reads): seconds = max(compute, memory) + this + overhead + packing.
    unoverlapped_seconds: float = 0.0

    @property
    def bound(self) -> str:
        parts = {
            "compute": self.compute_seconds,
            "memory": self.memory_seconds,
            "overhead": self.overhead_seconds,
        }
        return max(parts, key=lambda k: parts[k])

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0


def gemm_tile(c: Contraction, m_ax: int, n_ax: int, k_ax: int, br_ax: int) -> GemmTile:
    """The tile of these prim axes, as the tile kinds see it."""
    return GemmTile.of_axes(c.extents, c.tensor_strides, m_ax, n_ax, k_ax, br_ax,
                            c.dtype.itemsize)


# The GEMM kinds that take complex elements: the vector kernels' lanes are real floats.
_SCALAR_KINDS = tuple(k for k in GEMM_KINDS if not k.vector)


def tile_kind(c: Contraction, m_ax: int, n_ax: int, k_ax: int, br_ax: int,
              blas: BlasPlan | None) -> tuple[TileKind, int, GemmTile]:
    """The kind that runs this prim choice's tiles (the executor's lowering asks the
    same rules, :func:`teir_plan.tilekinds.choose`), its axis, and the tile.  ``blas``:
    the prim choice's BLAS call (candidates.blas_call: the BLAS kind's own rule, mapped
    once per prim choice)."""
    tile = gemm_tile(c, m_ax, n_ax, k_ax, br_ax)
    for kind in GEMM_KINDS if vector_kernel_dtype(c.dtype) else _SCALAR_KINDS:
        if kind is BLAS:
            if blas is not None:
                return kind, 1, tile
            continue
        # A quick necessary condition first: this runs for every prim choice the
        # search considers.
        if kind is not LOOPS and not kind.may_take(tile):
            continue
        axis = kind.takes(tile)
        if axis:
            return kind, axis, tile
    raise AssertionError("the loops kind takes every tile")  # pragma: no cover


def streamed(c: Contraction, k_ax: int, br_ax: int) -> bool:
    """The executor's :func:`teir_plan.tiles.streams_out` for schedules of this prim
    choice: every K axis in the primitive (no K loop), and the search's programs zero
    their output first."""
    k_loop = any(ax.role is DimType.K and i not in (k_ax, br_ax) for i, ax in enumerate(c.axes))
    return streams_out(c._elements[2] * c.dtype.itemsize, k_loop, True)


class TileCost(NamedTuple):
    """One primitive call on one core, as :func:`tile_seconds` predicts it."""

    seconds: float
    flops: int
    packed_bytes: int  # operand bytes gathered into scratch per call
    kind: str  # the tile kind's name (teir_plan.tilekinds)
    vector_operand: int  # a vector kernel's vector operand (0: in0, 1: in1), else -1
    streams: bool  # on a vector kernel, with out streamed to memory (streamed)
    repack_seconds: float = 0.0  # of ``seconds``: a packed vector tile's transpose

    @property
    def blas(self) -> bool:
        """A BLAS call (not a vector kernel, dot products or loops)."""
        return self.kind == BLAS.name


def tile_seconds(c: Contraction, m_ax: int, n_ax: int, k_ax: int, br_ax: int,
                 blas: BlasPlan | None, params: MachineParams) -> TileCost:
    """The cost of one primitive call on one core: its kind's price (each kind's module
    of teir_plan.tilekinds) plus the walker's bookkeeping per tile."""
    kind, axis, tile = tile_kind(c, m_ax, n_ax, k_ax, br_ax, blas)
    flops = 2 * tile.m * tile.n * tile.k * tile.br
    streams = kind.vector and streamed(c, k_ax, br_ax)
    assert kind.price is not None
    # (the kinds' rates are in real flops: a complex multiply-add is flop_factor of them)
    price = kind.price(tile, axis, PriceArgs(params, c.dtype, flops * flop_factor(c.dtype),
                                             streams, blas))
    return TileCost(price.seconds + params.tile_seconds, flops, price.packed_bytes, kind.name,
                    axis - 1 if kind.vector else -1, price.streams, price.repack_seconds)


# The fraction of the smaller of compute and memory time that does not overlap with
# the larger: a core waiting on a miss is not computing, and BLAS packs before it
# computes.  Perfect overlap (0) ties memory-bound candidates at their memory time
# (docs/decisions.md).
OVERLAP_LOSS = 0.5
# BLAS tiles overlap less with the reads of operands that stream from memory: BLAS
# packs its operands before it computes on them, and each call's packing waits on the
# memory (the output's write-back overlaps as for every kernel).  So the smaller of a
# BLAS program's compute time and its operands' memory time adds this much more
# (docs/decisions.md: without it the model ranked BLAS tiles above faster vector ones).
BLAS_READ_OVERLAP_LOSS = 0.5


def total_seconds(compute: float, memory: float, overhead: float) -> float:
    """The model's total: compute and memory overlap only in part (OVERLAP_LOSS)."""
    return max(compute, memory) + OVERLAP_LOSS * min(compute, memory) + overhead


def fits_llc(c: Contraction, params: MachineParams) -> bool:
    """Whether the three tensors together fit in the last-level cache.  Then a call
    that runs again on them (a loop, a layer run every step, a benchmark) finds them
    there, so even their first reads come from the LLC, not DRAM.  Measured on
    bhqd,bhkd->bhqk 8x12x128x64 (13 MB, repeated calls): a schedule predicted
    memory-bound at the DRAM rate (1.1 ms) ran in 0.67 ms, and the plan that packs an
    operand first ran fastest (0.84 ms against 1.1) but ranked sixth."""
    return _tensor_bytes(c) <= params.llc_bytes


def first_read_rate(c: Contraction, params: MachineParams) -> float:
    """Bytes per second of a tensor's first read: the LLC's for a resident problem."""
    return params.first_read_rate(_tensor_bytes(c))


def _tensor_bytes(c: Contraction) -> int:
    e = c._elements
    return c.dtype.itemsize * (e[0] + e[1] + e[2])


def memory_seconds(dram: float, llc: float, params: MachineParams, cores: int) -> float:
    """Seconds to move these bytes; one busy core gets 60 % of the aggregate rates."""
    scale = 1.0 if cores > 1 else 0.6
    return (dram / (params.dram_bytes_per_second * scale)
            + llc / (params.llc_bytes_per_second * scale))


def compute_bound(c: Contraction, prim: tuple[int, int, int, int], blas: BlasPlan | None,
                  params: MachineParams, threads: int, tile: TileCost | None = None
                  ) -> float:
    """A lower bound on :func:`estimate` for every schedule of these prim axes: their
    compute spread perfectly over all threads, each tensor moved from memory once
    (the output twice, once when its stores stream) at the full bandwidth, no parallel
    region.  ``tile``: this prim choice's :func:`tile_seconds`, when the caller has it."""
    m, n, k, br = prim
    tile = tile or tile_seconds(c, m, n, k, br, blas, params)
    # Tiles needed to cover every iteration (all extents' product, the flops / 2).
    calls = c.flops // tile.flops
    per_call = (2 * flop_factor(c.dtype) / ROW_FLOPS if tile.flops == 2
                else tile.seconds)  # see estimate's fold
    compute = calls * per_call / max(1, threads)
    e = c._elements
    # The output is read and written, or only written when its stores stream (as in
    # _traffic: a bound counting it twice there pruned ebad,ce->abcd's best schedule).
    out_moves = 1 if tile.streams else 2
    memory = c.dtype.itemsize * (e[0] + e[1] + out_moves * e[2]) / first_read_rate(c, params)
    # estimate's total grows with both parts (_traffic never counts fewer bytes, nor
    # at a faster rate).
    return total_seconds(compute, memory, params.call_seconds)


# The kinds' floors (search.rank asks floor_bounds of every distinct tile shape).
_FLOORS = tuple(k.floor_rate for k in GEMM_KINDS if k.floor_rate is not no_floor)
# ... and those of the kinds that take complex elements (no vector kernel).
_SCALAR_FLOORS = tuple(k.floor_rate for k in GEMM_KINDS
                       if k.floor_rate is not no_floor and not k.vector)


@lru_cache(maxsize=4096)
def fastest_rate(m: int, n: int, k: int, dtype: np.dtype, params: MachineParams) -> float:
    """The fastest rate (flop/s) any kind reaches on an m x n x k tile of ``dtype`` (the
    kinds' ``floor_rate``).  Memoized: the contractions a plan searches (fused, split,
    staged) share most of their tile shapes, a fifth to a third of them distinct."""
    rate = 0.0
    for floor in _FLOORS if vector_kernel_dtype(dtype) else _SCALAR_FLOORS:
        r = floor(m, n, k, dtype.itemsize, params, dtype)
        if r > rate:
            rate = r
    return rate


def floor_bounds(c: Contraction, tiles: list[tuple[int, int, int, int]],
                 params: MachineParams, threads: int) -> list[float]:
    """Lower bounds on :func:`compute_bound` for prim choices whose tiles have these
    (m, n, k, br) extents, from the extents alone (not the strides, which decide the
    kernel, the BLAS mapping and the packing): each tile at the fastest rate any kernel
    reaches on its shape, plus its bookkeeping, every output element written once.  A
    fraction of a full bound's price, they let the search cost only the prim choices
    that might make the cut (search.rank)."""
    dt = c.dtype
    isz = dt.itemsize
    e = c._elements
    memory = isz * (e[0] + e[1] + e[2]) / first_read_rate(c, params)
    threads = max(1, threads)
    factor = flop_factor(dt)
    out = []
    seen: dict[tuple[int, int, int, int], float] = {}  # many prim choices share extents
    for tile in tiles:
        if tile in seen:
            out.append(seen[tile])
            continue
        m, n, k, br = tile
        flops = 2 * m * n * k * br
        calls = c.flops // flops
        if flops == 2:  # folded into a row (compute_bound: no bookkeeping per element)
            compute = calls * 2 * factor / ROW_FLOPS
        else:
            compute = calls * (flops * factor / fastest_rate(m, n, k, dt, params)
                               + params.tile_seconds)
        seen[tile] = total_seconds(compute / threads, memory, params.call_seconds)
        out.append(seen[tile])
    return out


def estimate(c: Contraction, ch: Choice, params: MachineParams, threads: int,
             tile: TileCost | None = None, runs: Runs | None = None,
             pack_seconds: float = 0.0) -> Cost:
    """The predicted cost of ``ch`` on ``threads`` threads (``tile`` and ``runs``: its
    prim choice's :func:`tile_seconds` and :func:`tile_runs`, when the caller has them;
    ``pack_seconds``: whole-operand packs run before it, added to its total)."""
    ax = c.axes
    factor = flop_factor(c.dtype)
    tile = tile or tile_seconds(c, ch.m, ch.n, ch.k, ch.br, ch.blas, params)
    per_call, tile_flops, packed = tile.seconds, tile.flops, tile.packed_bytes
    calls = 1
    for a in ch.loops:
        calls *= ax[a].extent
    if tile_flops == 2 and ch.loops and ax[ch.loops[-1]].extent > 1:
        # A scalar tile: the executor folds the innermost loop into it (a row tile),
        # whose loop vectorizes only over operands of unit (or no) stride along it.
        inner = ax[ch.loops[-1]].extent
        calls //= inner
        gathers = sum(1 for st in ax[ch.loops[-1]].strides if st not in (0, 1))
        per_call = (inner * 2 * factor / ROW_FLOPS * (1 + ROW_GATHER_COST * gathers)
                    + params.tile_seconds)
    compute = calls * per_call
    if tile.repack_seconds:
        # A packed vector tile whose predecessor on its worker read the same block keeps
        # the buffer (gemm_tiles._gemm_vec_packed): the innermost loops that do not move
        # the vector operand repeat each transpose's use.
        op = tile.vector_operand
        reuse = 1
        for a in reversed(ch.loops):
            if ax[a].strides[op] != 0:
                break
            reuse *= ax[a].extent
        compute -= calls * tile.repack_seconds * (1 - 1 / reuse)

    par_iters = 1
    for a in ch.parallel:
        par_iters *= ax[a].extent
    split_tile = False
    used = 1
    efficiency = 1.0
    overhead = params.call_seconds
    if ch.npar and par_iters > 1 and threads > 1:
        used = min(threads, par_iters)
        efficiency = par_iters / (threads * math.ceil(par_iters / threads))
        compute = compute / (threads * efficiency)
        overhead += params.parallel_seconds
    elif (threads > 1 and not ch.loops and tile.kind == DOT.name
          and tile_flops == 2 * extent_at(c.extents, ch.k) >= 2 * DOT_SPLIT_MIN_K):
        # One long dot product: its K range is split over the threads (run_dot_split).
        used = threads
        compute = compute / threads
        overhead += params.parallel_seconds
    elif (ch.blas is not None and threads > 1 and tile_flops >= BLAS_THREADED_TILE_FLOPS
          and tile.vector_operand < 0):
        # A large tile is split across the threads (the executor's rule, run_split;
        # smaller ones stay on one core); the gain grows with the tile, as the parallel
        # region's start-up and each part's BLAS set-up are paid per call.
        share = tile_flops / (tile_flops + BLAS_THREAD_HALF_FLOPS)
        used = threads
        compute = compute / (1 + (threads - 1) * share)
        split_tile = True

    # A parallel K loop's private blocks: zeroed, then summed into the output.
    overhead += partial_sums_seconds(c, ch, params, threads)
    dram, llc, read_dram = _traffic(c, ch, params, runs, tile)
    if split_tile:
        extra = split_tile_rereads(c, ch, threads)
        if fits_llc(c, params) or extra <= params.llc_bytes:
            llc += extra
        else:
            dram += extra
            read_dram += extra
    mem_seconds = memory_seconds(dram, llc, params, used)
    seconds = total_seconds(compute, mem_seconds, overhead)
    if tile.blas:
        seconds += BLAS_READ_OVERLAP_LOSS * min(
            compute, memory_seconds(read_dram, 0.0, params, used))
    return Cost(
        seconds=seconds + pack_seconds,
        compute_seconds=compute,
        memory_seconds=mem_seconds,
        overhead_seconds=overhead,
        flops=c.flops * factor,
        dram_bytes=dram,
        llc_bytes=llc,
        tile_calls=calls,
        tile_flops=tile_flops * factor,
        parallel_iterations=par_iters,
        parallel_efficiency=efficiency,
        threads=used,
        packed_bytes_per_call=packed,
        pack_seconds=pack_seconds,
        unoverlapped_seconds=seconds - max(compute, mem_seconds) - overhead,
    )


def split_tile_rereads(c: Contraction, ch: Choice, threads: int) -> float:
    """Bytes a tile split across the threads (the executor's run_split: along the longer
    of M and N) reads again: each part reads all of the operand the split does not cut,
    once per part beyond the first.  Measured on ki,kj->ij, k = 2,000,000, i = j = 32,
    float32, 2 threads: the split BRGEMM read in1 twice and ran at 13-18 GFLOP/s where
    the model, without these bytes, put it 8 % ahead of a parallel K split (35)."""
    m, n = extent_at(c.extents, ch.m), extent_at(c.extents, ch.n)
    parts = min(threads, max(m, n))
    whole = 0 if n >= m else 1  # along N the parts share in0; along M, in1
    return float((parts - 1) * c.tensor_elements(whole) * c.dtype.itemsize)


# A threaded BLAS call gets half its threads' ideal speed-up at this many flops.
BLAS_THREAD_HALF_FLOPS = 8e6

# BLAS sums K in blocks of about this many (OpenBLAS' GEMM_Q is 256 to 512 on x86).
BLAS_K_BLOCK = 384


def _blas_out_round_trips(c: Contraction, ch: Choice) -> float:
    """How often one tile's BLAS calls read and write its C tile when the tile does not
    stay in L2: once to apply beta (zeroing it when beta = 0), then once per block of K
    in each call (a BRGEMM tile is one call per batch-reduce member).  ?gemm3m's three
    products are not counted here: priced so, deca,be->abcd in complex128 (C's 24 columns
    12 MB apart, set_aliased) left its 504 x 24 x 84 tiles, which ran at twice the
    speed of the plan the model then preferred first (docs/decisions.md)."""
    k, br = extent_at(c.extents, ch.k), extent_at(c.extents, ch.br)
    return 1.0 + br * math.ceil(k / BLAS_K_BLOCK)


def _gemm3m_passes(c: Contraction, ch: Choice) -> int:
    """How often a BLAS tile's call packs each operand panel: GEMM3M_PASSES on ?gemm3m
    (blaslib.uses_gemm3m, the executor's rule), else once."""
    if ch.blas is None or c.dtype.kind != "c":
        return 1
    m, n, k = (extent_at(c.extents, a) for a in (ch.m, ch.n, ch.k))
    return GEMM3M_PASSES if uses_gemm3m(c.dtype, m, n, k) else 1


def _panel_rereads(c: Contraction, ch: Choice, j: int, l2_bytes: int) -> int:
    """How often operand ``j`` of a BLAS tile is read from beyond L2 per call: on
    ?gemm3m, once per real product (GEMM3M_PASSES) when its panel (the tile's rows of
    one batch-reduce member, K cut to BLAS' block BLAS_K_BLOCK) is larger than L2; else
    once.  Measured on dca,bd->abc in complex64 (both cores): cgemm3m tiles of
    512 x 24 x 384, their A panel 1.5 MiB, 48 GFLOP/s against 62-66 for the same tiles
    with K in blocks of 48 (docs/decisions.md: half of L2 was too little)."""
    passes = _gemm3m_passes(c, ch)
    if passes == 1:
        return 1
    ax = c.axes
    panel = c.dtype.itemsize
    for a in (ch.m, ch.n, ch.k):
        if a != NO_AXIS and ax[a].strides[j] != 0:
            panel *= min(ax[a].extent, BLAS_K_BLOCK) if a == ch.k else ax[a].extent
    return passes if panel > l2_bytes else 1


def _accumulating_calls(c: Contraction, ch: Choice) -> float:
    """How many passes of a BLAS tile's calls add into one output tile: each call's
    blocks of K (:func:`_blas_out_round_trips` less the beta pass), in every iteration
    of its K loops (stride 0 in out)."""
    calls = _blas_out_round_trips(c, ch) - 1.0
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


# Bytes a tile row costs beyond its own: the partly used cache line at its end and the
# start of another stream (prefetch, TLB) for every row of a tile.
ROW_OVERHEAD_BYTES = 64


Runs = tuple[int, int, int]  # each tensor's contiguous run in a tile (0: no short rows)


def tile_runs(c: Contraction, prim_axes: tuple[int, ...]) -> Runs:
    """For each tensor, the contiguous run of its tile (its unit-stride prim axis, with
    the prim axes whose strides continue it) when the tile is several such runs, else 0
    (a gather, or one contiguous block).  Shared by all schedules of a prim choice."""
    ax = c.axes
    out = []
    for j in range(3):
        rest = [(abs(ax[a].strides[j]), ax[a].extent) for a in prim_axes
                if ax[a].strides[j] != 0 and ax[a].extent > 1]
        run = 1
        grew = True
        while grew and rest:
            grew = False
            for i, (st, ext) in enumerate(rest):
                if st == run:
                    run *= ext
                    del rest[i]
                    grew = True
                    break
        out.append(run if run > 1 and rest else 0)
    return out[0], out[1], out[2]


def _short_run_factor(c: Contraction, ch: Choice, j: int, runs: Runs) -> float:
    """How much more than its bytes tensor ``j``'s tile moves when it is many short rows:
    a tile whose contiguous run (``runs``, see :func:`tile_runs`) is a few cache lines
    long pays a row's overhead per run, unless the innermost loop continues the runs.
    Tiles with no unit-stride axis are packed or gathered, costed elsewhere."""
    ax = c.axes
    run = runs[j]
    if run == 0:
        return 1.0
    if ch.loops and abs(ax[ch.loops[-1]].strides[j]) == run:
        # The innermost loop steps exactly one run on: the next tile continues every
        # row, so the rows are long streams (docs/decisions.md).
        return 1.0
    run_bytes = run * c.dtype.itemsize
    return (run_bytes + ROW_OVERHEAD_BYTES) / run_bytes


def _stream_factor(c: Contraction, ch: Choice, op: int) -> float:
    """How much slower than its bytes a vector-kernel tile reads its vector operand when
    it reads more than VEC_STREAM_K K rows at once and is too large for the kernel to
    prefetch as the next tile (NEXT_TILE_PREFETCH_BYTES): more streams than the
    prefetchers follow.  Fitted to dca,bd->abc's tiles at 384 rows (1.7x) and
    bda,dc->abc's (1.2-1.7x).  ``op``: the tile's vector operand (TileCost)."""
    if ch.k == NO_AXIS:
        return 1.0
    k = c.axes[ch.k].extent
    length = c.axes[ch.m if op == 0 else ch.n].extent
    if (k <= VEC_STREAM_K
            or vec_line_bytes(k, length, c.dtype.itemsize) <= NEXT_TILE_PREFETCH_BYTES):
        return 1.0
    return math.sqrt(k / VEC_STREAM_K)


def read_factors(c: Contraction, ch: Choice) -> tuple[float, float]:
    """How much more than their bytes ``ch``'s tiles take to read each operand from
    memory (the vector operand's :func:`_stream_factor`; 1 for the other), for costs
    that count the operands' traffic themselves (the blocked write-back's)."""
    kind, axis, _ = tile_kind(c, ch.m, ch.n, ch.k, ch.br, ch.blas)
    op = axis - 1 if kind.vector else -1
    f = _stream_factor(c, ch, op) if op >= 0 else 1.0
    return (f, 1.0) if op == 0 else (1.0, f)


def _traffic(c: Contraction, ch: Choice, params: MachineParams,
             runs: Runs | None = None, cost: TileCost | None = None
             ) -> tuple[float, float, float]:
    """(DRAM bytes, LLC bytes) all three tensors move under this loop order (``runs``
    and ``cost``: :func:`tile_runs` and :func:`tile_seconds` of its prim axes, when the
    caller has them), and the DRAM bytes of the two operands' reads alone."""
    if cost is None:
        cost = tile_seconds(c, ch.m, ch.n, ch.k, ch.br, ch.blas, params)
    if runs is None:
        runs = tile_runs(c, ch.prim_axes)
    ax = c.axes
    isz = c.dtype.itemsize
    l2 = params.l2_bytes
    prims = ch.prim_axes
    loops = ch.loops[::-1]
    dram = 0.0
    llc = 0.0
    reads = 0.0
    in_llc = fits_llc(c, params)
    for j in range(3):
        if j == 2:
            reads = dram
        tile = isz
        for a in prims:
            if ax[a].strides[j] != 0:
                tile *= ax[a].extent
        traffic = float(tile)
        working = float(tile)
        # A BLAS output tile of rows that share their cache sets leaves L2 between the
        # calls that add into it, however small it is.  One call per tile is not slowed
        # (a 384 x 24 x 384 tile of bda,dc->abc runs as fast with such rows), nor is the
        # vector kernel, which streams its rows (bda,dc->abc's 24 rows 576 KiB apart).
        aliased = (j == 2 and ch.blas is not None and cost.vector_operand < 0
                   and _accumulating_calls(c, ch) > 1 and set_aliased(c, prims, j, l2))
        resident = 0 if aliased else l2
        for a in loops:
            if ax[a].strides[j] == 0:
                if working > resident:
                    traffic *= ax[a].extent
            else:
                traffic *= ax[a].extent
                working *= ax[a].extent
        distinct = float(c.tensor_elements(j) * isz)
        traffic = max(traffic, distinct) * _short_run_factor(c, ch, j, runs)
        if cost.vector_operand >= 0 and j == cost.vector_operand:
            traffic *= _stream_factor(c, ch, cost.vector_operand)
        elif j < 2 and cost.blas:
            traffic *= _panel_rereads(c, ch, j, l2)
        if j == 2 and cost.streams:
            pass  # non-temporal stores: written once, never read for ownership
        elif j == 2:
            traffic *= 2  # the output is read (accumulate) and written
            distinct *= 2
            if ch.blas is not None and tile > resident and cost.vector_operand < 0:
                traffic *= _blas_out_round_trips(c, ch)
            if aliased:
                traffic *= SET_ALIASED_FACTOR
        if in_llc:
            llc += traffic
        elif distinct <= params.llc_bytes:
            dram += distinct
            llc += traffic - distinct
        else:
            dram += traffic
    return dram, llc, reads
