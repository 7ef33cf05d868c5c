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

from teir_plan.frontend.contraction import Contraction
from teir_plan.isa import LINE_BYTES
from teir_plan.machine.params import MachineParams
from teir_plan.planner.candidates import Choice
from teir_plan.planner.parallel_k import partial_sums_seconds
from teir_plan.tilekinds import (
    BY_NAME,
    FOLD_RATE,
    GEMM_KINDS,
    GemmTile,
    LibraryCall,
    TileKind,
    choose,
)
from teir_plan.tilekinds.kind import PriceArgs, ScheduleArgs, no_floor
from teir_plan.tiles import (
    flop_factor,
    streams_out,
    vector_kernel_dtype,
)


@dataclass(frozen=True, init=False)
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

    def __init__(self, seconds: float, compute_seconds: float, memory_seconds: float,
                 overhead_seconds: float, flops: int, dram_bytes: float, llc_bytes: float,
                 tile_calls: int, tile_flops: int, parallel_iterations: int,
                 parallel_efficiency: float, threads: int, packed_bytes_per_call: int,
                 pack_seconds: float = 0.0, unoverlapped_seconds: float = 0.0) -> None:
        # (one update of the instance's dict: a frozen dataclass' own __init__ sets each
        # of the fifteen fields through object.__setattr__; the search prices a hundred
        # or more schedules a plan)
        self.__dict__.update(
            seconds=seconds, compute_seconds=compute_seconds, memory_seconds=memory_seconds,
            overhead_seconds=overhead_seconds, flops=flops, dram_bytes=dram_bytes,
            llc_bytes=llc_bytes, tile_calls=tile_calls, tile_flops=tile_flops,
            parallel_iterations=parallel_iterations, parallel_efficiency=parallel_efficiency,
            threads=threads, packed_bytes_per_call=packed_bytes_per_call,
            pack_seconds=pack_seconds, unoverlapped_seconds=unoverlapped_seconds)

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


def tile_kind(c: Contraction, m_ax: int, n_ax: int, k_ax: int, br_ax: int,
              call: LibraryCall | None) -> tuple[TileKind, int, GemmTile]:
    """The kind that runs this prim choice's tiles (the executor's lowering asks the
    same rules, :func:`teir_plan.tilekinds.choose`), its axis, and the tile.  ``call``:
    the prim choice's library call (candidates.tile_call: the rule of the kind the
    candidates map per prim choice, tilekinds.MAPPED_PER_CHOICE, mapped once)."""
    tile = gemm_tile(c, m_ax, n_ax, k_ax, br_ax)
    kind, axis = choose(tile, vector_kernel_dtype(c.dtype), mapped=call is not None)
    return kind, axis, tile


def streamed(c: Contraction, k_ax: int, br_ax: int) -> bool:
    """The executor's :func:`teir_plan.tiles.streams_out` for schedules of this prim
    choice: every K axis in the primitive (no K loop), and the search's programs zero
    their output first."""
    k_loop = any(i != k_ax and i != br_ax for i in c.k_axes)
    return streams_out(c.elements[2] * c.dtype.itemsize, k_loop, True)


class TileCost(NamedTuple):
    """One primitive call on one core, as :func:`tile_seconds` predicts it."""

    seconds: float
    flops: int
    packed_bytes: int  # operand bytes gathered into scratch per call
    kind: str  # the tile kind's name (teir_plan.tilekinds)
    vector_operand: int  # a vector kernel's vector operand (0: in0, 1: in1), else -1
    streams: bool  # on a vector kernel, with out streamed to memory (streamed)
    repack_seconds: float = 0.0  # of ``seconds``: its operand's block repacked (Price)

    @property
    def tile_kind(self) -> TileKind:
        return BY_NAME[self.kind]


def tile_seconds(c: Contraction, m_ax: int, n_ax: int, k_ax: int, br_ax: int,
                 call: LibraryCall | None, params: MachineParams) -> TileCost:
    """The cost of one primitive call on one core: its kind's price (each kind's module
    of teir_plan.tilekinds) plus the walker's bookkeeping per tile."""
    return _tile_price(gemm_tile(c, m_ax, n_ax, k_ax, br_ax), c.dtype, call,
                       streamed(c, k_ax, br_ax), params)


# Tile prices remembered (least recently used dropped first): a price depends on the
# tile's extents and strides, not on which contraction it comes from, and a large tree's
# steps, searched in several layouts, price each distinct tile two to three times (the
# 100-tensor network: 5510 prices, 2297 distinct tiles).  An entry is a few hundred bytes.
TILE_PRICES = 4096


@lru_cache(maxsize=TILE_PRICES)
def _tile_price(tile: GemmTile, dtype: np.dtype, call: LibraryCall | None, out_streamed: bool,
                params: MachineParams) -> TileCost:
    kind, axis = choose(tile, vector_kernel_dtype(dtype), mapped=call is not None)
    flops = 2 * tile.m * tile.n * tile.k * tile.br
    streams = kind.vector and out_streamed
    assert kind.price is not None
    # (the kinds' rates are in real flops: a complex multiply-add is flop_factor of them)
    price = kind.price(tile, axis, PriceArgs(params, dtype, flops * flop_factor(dtype),
                                             streams, call))
    return TileCost(price.seconds + params.tile_seconds, flops, price.packed_bytes, kind.name,
                    axis - 1 if kind.vector else -1, price.streams, price.repack_seconds)


def forget_tile_prices() -> None:
    """Drop the remembered tile prices (timing a plan as for a problem never seen)."""
    _tile_price.cache_clear()


# The fraction of the smaller of compute and memory time that does not overlap with
# the larger: a core waiting on a miss is not computing, and BLAS packs before it
# computes.  Perfect overlap (0) ties memory-bound candidates at their memory time
# (docs/decisions.md).
OVERLAP_LOSS = 0.5
# Some kinds overlap less with the reads of operands that stream from memory: the
# smaller of their compute time and their operands' memory time adds their
# ``read_overlap_loss`` more (TileKind).


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
    e = c.elements
    return c.dtype.itemsize * (e[0] + e[1] + e[2])


def memory_seconds(dram: float, llc: float, params: MachineParams, cores: int) -> float:
    """Seconds to move these bytes; one busy core gets 60 % of the aggregate rates."""
    scale = 1.0 if cores > 1 else 0.6
    return (dram / (params.dram_bytes_per_second * scale)
            + llc / (params.llc_bytes_per_second * scale))


def compute_bound(c: Contraction, prim: tuple[int, int, int, int], call: LibraryCall | None,
                  params: MachineParams, threads: int, tile: TileCost | None = None
                  ) -> float:
    """A lower bound on :func:`estimate` for every schedule of these prim axes: their
    compute spread perfectly over all threads, each tensor moved from memory once
    (the output twice, once when its stores stream) at the full bandwidth, no parallel
    region.  ``tile``: this prim choice's :func:`tile_seconds`, when the caller has it."""
    m, n, k, br = prim
    tile = tile or tile_seconds(c, m, n, k, br, call, params)
    # Tiles needed to cover every iteration (all extents' product, the flops / 2).
    calls = c.flops // tile.flops
    fold_rate = tile.tile_kind.fold_rate
    per_call = (2 * flop_factor(c.dtype) / fold_rate if tile.flops == 2 and fold_rate
                else tile.seconds)  # see estimate's fold
    compute = calls * per_call / max(1, threads)
    # estimate's total grows with both parts (_traffic never counts fewer bytes, nor
    # at a faster rate).
    return total_seconds(compute, _memory_floor(c, tile, params), params.call_seconds)


def _memory_floor(c: Contraction, tile: TileCost, params: MachineParams) -> float:
    """The least memory seconds :func:`estimate` counts for a schedule of this tile: each
    tensor moved once at the first-read rate (the output twice unless its stores
    stream)."""
    e = c.elements
    # The output is read and written, or only written when its stores stream (as in
    # _traffic: a bound counting it twice there pruned ebad,ce->abcd's best schedule).
    out_moves = 1 if tile.streams else 2
    return c.dtype.itemsize * (e[0] + e[1] + out_moves * e[2]) / first_read_rate(c, params)


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
    e = c.elements
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
            compute = calls * 2 * factor / FOLD_RATE
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
    tile = tile or tile_seconds(c, ch.m, ch.n, ch.k, ch.br, ch.call, params)
    return _priced(c, ch, params, runs, tile, pack_seconds, _work(c, ch, params, threads, tile))


class Work(NamedTuple):
    """A schedule's compute and overhead, as :func:`estimate` counts them (its price
    without the memory traffic, which is most of the rest of its cost to compute)."""

    compute: float
    overhead: float
    calls: int
    used: int  # threads
    efficiency: float
    par_iters: int
    rereads: float  # bytes a kind's own threads read again
    args: ScheduleArgs


def _work(c: Contraction, ch: Choice, params: MachineParams, threads: int,
          tile: TileCost) -> Work:
    ax = c.axes
    per_call = tile.seconds
    calls = 1
    for a in ch.loops:
        calls *= ax[a].extent
    kind = tile.tile_kind
    args = ScheduleArgs(c, ch, tile.vector_operand + 1 if kind.vector else 1, params,
                        threads, tile.flops)
    fold = kind.fold(args)
    if fold is not None:  # a scalar tile with the innermost loop folded in (one call)
        calls //= fold.calls_divisor
        per_call = fold.per_call
    compute = calls * per_call
    if tile.repack_seconds:
        # A tile that repacks its vector operand's block (its kind's Price.repack_seconds)
        # keeps the buffer when its predecessor on its worker read the same block: the
        # innermost loops that do not move the vector operand repeat each repack's use.
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
    rereads = 0.0
    used = 1
    efficiency = 1.0
    overhead = params.call_seconds
    if ch.npar and par_iters > 1 and threads > 1:
        used = min(threads, par_iters)
        efficiency = par_iters / (threads * math.ceil(par_iters / threads))
        compute = compute / (threads * efficiency)
        overhead += params.parallel_seconds
    elif threads > 1 and (split := kind.split(args)) is not None:
        used = split.threads
        compute = compute / split.speedup
        overhead += split.overhead
        rereads = split.rereads

    # A parallel K loop's private blocks: zeroed, then summed into the output.
    overhead += partial_sums_seconds(c, ch, params, threads)
    return Work(compute, overhead, calls, used, efficiency, par_iters, rereads, args)


def _priced(c: Contraction, ch: Choice, params: MachineParams, runs: Runs | None,
            tile: TileCost, pack_seconds: float, w: Work) -> Cost:
    """:func:`estimate` of a schedule whose :func:`_work` is ``w``."""
    kind = tile.tile_kind
    compute, overhead, used = w.compute, w.overhead, w.used
    dram, llc, read_dram = _traffic(c, ch, params, runs, tile, w.args)
    if w.rereads:
        if fits_llc(c, params) or w.rereads <= params.llc_bytes:
            llc += w.rereads
        else:
            dram += w.rereads
            read_dram += w.rereads
    mem_seconds = memory_seconds(dram, llc, params, used)
    seconds = total_seconds(compute, mem_seconds, overhead)
    if kind.read_overlap_loss:
        seconds += kind.read_overlap_loss * min(
            compute, memory_seconds(read_dram, 0.0, params, used))
    factor = flop_factor(c.dtype)
    return Cost(
        seconds=seconds + pack_seconds,
        compute_seconds=compute,
        memory_seconds=mem_seconds,
        overhead_seconds=overhead,
        flops=c.flops * factor,
        dram_bytes=dram,
        llc_bytes=llc,
        tile_calls=w.calls,
        tile_flops=tile.flops * factor,
        parallel_iterations=w.par_iters,
        parallel_efficiency=w.efficiency,
        threads=used,
        packed_bytes_per_call=tile.packed_bytes,
        pack_seconds=pack_seconds,
        unoverlapped_seconds=seconds - max(compute, mem_seconds) - overhead,
    )


class Schedules:
    """The schedules of one prim choice, priced lazily: each first gets a lower bound on
    its :func:`estimate` (its compute and overhead exactly, its memory traffic at the
    least :func:`compute_bound` counts), and is priced in full only when asked with a
    cutoff above that bound (the traffic is most of a price's cost, and most schedules
    of a search cannot make its cut).  Kept by the search's memo across the searches of
    one plan, so a later search with a higher cutoff prices only what it needs."""

    __slots__ = ("c", "choices", "params", "runs", "tile", "pack_seconds", "_prices")

    def __init__(self, c: Contraction, choices: list[Choice], params: MachineParams,
                 threads: int, tile: TileCost, runs: Runs, pack_seconds: float) -> None:
        self.c = c
        self.choices = choices
        self.params = params
        self.runs = runs
        self.tile = tile
        self.pack_seconds = pack_seconds
        # (a hair under the floor: a traffic that equals it, summed in another order,
        # must not round below the bound)
        floor = _memory_floor(c, tile, params) * (1 - 1e-9) if choices else 0.0
        # Each entry: the Cost, or (the lower bound, the Work it came from).
        self._prices: list[Cost | tuple[float, Work]] = []
        for ch in choices:
            w = _work(c, ch, params, threads, tile)
            self._prices.append(
                (total_seconds(w.compute, floor, w.overhead) + pack_seconds, w))

    def __len__(self) -> int:
        return len(self.choices)

    def below(self, i: int, cutoff: float) -> Cost | float:
        """Schedule ``i``'s Cost, or its lower bound when that is ``cutoff`` or more
        (then the Cost is too, and it is not computed)."""
        p = self._prices[i]
        if isinstance(p, Cost):
            return p
        bound, w = p
        if bound >= cutoff:
            return bound
        cost = _priced(self.c, self.choices[i], self.params, self.runs, self.tile,
                       self.pack_seconds, w)
        self._prices[i] = cost
        return cost


# Bytes a tile row costs beyond its own: the partly used cache line at its end and the
# start of another stream (prefetch, TLB) for every row of a tile.
ROW_OVERHEAD_BYTES = LINE_BYTES


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


def read_factors(c: Contraction, ch: Choice, params: MachineParams) -> tuple[float, float]:
    """How much more than their bytes ``ch``'s tiles take to read each operand from
    memory (their kind's ``read_factor``), for costs that count the operands' traffic
    themselves (the blocked write-back's)."""
    kind, axis, tile = tile_kind(c, ch.m, ch.n, ch.k, ch.br, ch.call)
    args = ScheduleArgs(c, ch, axis, params, 1,
                        2 * tile.m * tile.n * tile.k * tile.br)
    return kind.read_factor(args, 0), kind.read_factor(args, 1)


def _traffic(c: Contraction, ch: Choice, params: MachineParams, runs: Runs | None,
             cost: TileCost, args: ScheduleArgs) -> tuple[float, float, float]:
    """(DRAM bytes, LLC bytes) all three tensors move under this loop order (``runs``
    and ``cost``: :func:`tile_runs` and :func:`tile_seconds` of its prim axes; ``args``
    what its tiles' kind is asked), and the DRAM bytes of the two operands' reads alone."""
    if runs is None:
        runs = tile_runs(c, ch.prim_axes)
    kind = cost.tile_kind
    out = kind.out_traffic(args)
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
        resident = out.resident_bytes if j == 2 else l2
        for a in loops:
            if ax[a].strides[j] == 0:
                if working > resident:
                    traffic *= ax[a].extent
            else:
                traffic *= ax[a].extent
                working *= ax[a].extent
        distinct = float(c.tensor_elements(j) * isz)
        traffic = max(traffic, distinct) * _short_run_factor(c, ch, j, runs)
        if j < 2:
            traffic *= kind.read_factor(args, j)
        if j == 2 and cost.streams:
            pass  # non-temporal stores: written once, never read for ownership
        elif j == 2:
            traffic *= 2  # the output is read (accumulate) and written
            distinct *= 2
            if tile > resident:
                traffic *= out.refill
            traffic *= out.slow
        if in_llc:
            llc += traffic
        elif distinct <= params.llc_bytes:
            dram += distinct
            llc += traffic - distinct
        else:
            dram += traffic
    return dram, llc, reads
