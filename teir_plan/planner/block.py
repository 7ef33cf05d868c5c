"""Blocked write-back: a contraction run block by block through a stage in cache.

When the output's layout is fixed (``out=``, ``order='C'``) its unit-stride index
may be one along which no operand gives the primitive a tile (``efbad,cf->abcde``
into a C-order ``out``: ``e`` is the outermost index of ``efbad``).  Then the
choices are to transpose an operand, to stage the whole result in an
operand-following layout and permute it (the result goes through memory three
times), or to do the staging one cache-sized block at a time: the block's
contraction writes a small stage buffer in an operand-following layout, with
tiles as large as the unconstrained plan's, and a copy moves the block into
``out`` while it is still in cache.  The output is then written once, in whole
cache lines, and nothing else goes through memory twice.

A :class:`Blocking` is that decomposition: the loops around the blocks, the block's
own contraction (planned by :func:`teir_plan.planner.search.rank` like any other,
its output being the stage) and the copy of a block into ``out``.

>>> import numpy as np
>>> from teir_plan.frontend.contraction import Layout, describe, with_dtype
>>> c = with_dtype(describe(Layout("ka", (64, 512), (512, 1)),
...                         Layout("kb", (64, 256), (256, 1)),
...                         Layout("ab", (512, 256), (1, 512))), np.float32)
>>> b = blocking_for(c, "ba", l2_bytes=256 << 10)
>>> b.blocks, b.describe()
(2, 'blocks of b 128 x a 512 (256 KiB stage), 2 blocks')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from teir_plan.divisors import divisors
from teir_plan.frontend.contraction import Axis, Contraction
from teir_plan.isa import LINE_BYTES
from teir_plan.machine.params import MachineParams
from teir_plan.planner.cost import Cost, memory_seconds, total_seconds
from teir_plan.teir.enums import DimType
from teir_plan.tilekinds.table import BLOCK_FIELDS, OUTER_FIELDS, named_rows

# A block writes runs of ``out`` along its unit stride at least this long: the
# output's innermost indices whole, until their run is this many bytes; an index
# that would make the run much longer is cut to whole cache lines.  A run that ends
# inside a cache line leaves it half written, to be finished by another block after
# the line has left the cache: copying blocks whose runs were a third of 3 lines
# wrote 7 GB/s on 2 cores, whole 3-line runs 15 GB/s (the machine's write rate).
GOOD_RUN_BYTES = 512
MAX_RUN_BYTES = 2048
# The stage takes at most this fraction of L2.  Measured on efbad,cf->abcde and two
# siblings into C-order outs: a stage of half of L2 gave tiles too small to run BLAS
# well (64-80 GFLOP/s), all of L2 70-105, twice L2 (spilling to the LLC) 46-66.
STAGE_L2_FRACTION = 1.0
# Copying a block from the stage (in L2) into ``out``, one core, bytes read plus
# written: the reads are gathered from L2, the writes non-temporal.  With this rate
# the predictions of efbad,cf->abcde and ecbfa,fd->abcde into C-order outs are within
# 3% of their measured times (twice the rate made a small case's blocked plan look
# cheaper than the unconstrained one, measured twice as fast).
STAGE_COPY_BYTES_PER_SECOND = 12e9

# Reading an operand from memory in contiguous runs of r bytes costs as if it were
# 1 + SHORT_RUN_BYTES / r times as large: each run starts a new stream the hardware
# prefetchers must discover.  Measured with blocked plans into C-order outs (both
# cores): deca,be->abcd's blocks read its 260 MB operand in runs of 768 bytes and took
# 31 ms to compute against 17 ms for the unblocked plan's runs of 32 KiB;
# efbad,cf->abcde's runs of 1.7 KiB 35 ms against 24.
SHORT_RUN_BYTES = 1024.0

@dataclass(frozen=True)
class OuterLoop:
    """A loop around the blocks: ``extent`` blocks along index ``name`` (marked ``^``
    when a block takes part of the index), each block step moving each tensor by its
    stride."""

    name: str
    extent: int
    in0_stride: int
    in1_stride: int
    out_stride: int


@dataclass(frozen=True)
class BlockAxis:
    """An output index within one block: its extent there, its stride in the stage and
    in ``out`` (the copy of a block into ``out`` walks these)."""

    name: str
    extent: int
    stage_stride: int
    out_stride: int


@dataclass(frozen=True)
class Blocking:
    """Loops around the blocks, the block's contraction and its copy into ``out``."""

    outer: tuple[OuterLoop, ...]  # outermost first; the executor runs them in parallel
    block: tuple[BlockAxis, ...]  # the output axes of one block, outermost in out first
    inner: Contraction  # the block's contraction: its output strides are stage strides
    stage_elements: int
    l2_room: int  # bytes of L2 beside the stage (see lower.prefetch_ahead)

    @property
    def blocks(self) -> int:
        return math.prod(r.extent for r in self.outer)

    @cached_property
    def outer_table(self) -> np.ndarray:
        """The outer loops as the executor's run_blocked reads them (tilekinds.table's
        OUTER_FIELDS: extent, in0's, in1's and out's strides)."""
        return named_rows(OUTER_FIELDS, [
            {"size": r.extent, "in0": r.in0_stride, "in1": r.in1_stride, "out": r.out_stride}
            for r in self.outer])

    @cached_property
    def block_table(self) -> np.ndarray:
        """The block's axes as run_blocked reads them (tilekinds.table's BLOCK_FIELDS:
        extent, the stage's stride as ``in``, out's)."""
        return named_rows(BLOCK_FIELDS, [
            {"size": r.extent, "in": r.stage_stride, "out": r.out_stride} for r in self.block])

    def describe(self) -> str:
        dims = " x ".join(f"{r.name} {r.extent}" for r in self.block)
        kib = self.stage_elements * self.inner.dtype.itemsize / 1024
        return f"blocks of {dims} ({kib:.0f} KiB stage), {self.blocks} blocks"


def blocking_for(c: Contraction, stage_order: str, l2_bytes: int) -> Blocking | None:
    """The blocking of ``c`` (output strides: the real output's) whose stage follows
    ``stage_order`` (output index names, outermost first), or None when no block both
    fits the stage budget and writes runs along the output's unit stride.

    The block holds: every K index (a block is finished when it is copied out); the
    output's innermost indices, enough of them for runs of whole cache lines; then the
    other output indices, innermost in the operands first, while the stage fits.
    """
    ax = c.axes
    isz = c.dtype.itemsize
    free = [i for i, a in enumerate(ax) if a.role is not DimType.K]
    if not free or any(ax[i].strides[2] == 0 for i in free):
        return None
    budget = max(1, int(l2_bytes * STAGE_L2_FRACTION) // isz)
    chunk = {i: 1 for i in free}
    # Runs along out's unit stride: the innermost out indices, each stride continuing
    # the run, until the run is whole lines (or long enough that a partial line at its
    # ends costs little).
    run = 1
    for i in sorted(free, key=lambda i: abs(ax[i].strides[2])):
        if run * isz >= GOOD_RUN_BYTES:
            break
        if run > 1 and abs(ax[i].strides[2]) != run:
            break  # the next index does not continue the run (a strided out)
        chunk[i] = ax[i].extent
        if run * ax[i].extent * isz > MAX_RUN_BYTES:
            cut = [d for d in divisors(ax[i].extent)
                   if run * d * isz >= GOOD_RUN_BYTES and (run * d * isz) % LINE_BYTES == 0]
            if cut:
                chunk[i] = cut[0]
        run *= chunk[i]
    if run > budget:
        return None
    # Fill the stage with the indices that make the tiles: each operand's innermost
    # free index first (the tile's M and N), then the others, innermost in an operand
    # first.
    def place(i: int) -> tuple[int, int, int]:
        ranks = []
        for j in (0, 1):
            st = abs(ax[i].strides[j])
            if st != 0:
                ranks.append((sum(1 for f in free if 0 < abs(ax[f].strides[j]) < st), st))
        if not ranks:  # broadcast in both operands (stride 0): no tile grows along it
            return len(free), 0, -ax[i].extent
        r, st = min(ranks)
        return r, st, -ax[i].extent

    size = run
    for i in sorted(free, key=place):
        grown = [d for d in divisors(ax[i].extent)
                 if d % chunk[i] == 0 and size // chunk[i] * d <= budget]
        best = grown[-1] if grown else chunk[i]
        size = size // chunk[i] * best
        chunk[i] = best
        if best < ax[i].extent:
            break
    blocks = math.prod(ax[i].extent // chunk[i] for i in free)
    if blocks < 2:
        return None  # one block is the whole result: plain staging does that
    # The stage: the block's output indices, compact, in stage_order.
    in_block = [i for i in free if chunk[i] > 1]
    order = sorted(in_block, key=lambda i: stage_order.index(ax[i].name))
    stage_stride = {}
    step = 1
    for i in reversed(order):
        stage_stride[i] = step
        step *= chunk[i]
    inner_axes = []
    for i, a in enumerate(ax):
        if a.role is DimType.K:
            inner_axes.append(a)
        elif chunk[i] > 1:
            inner_axes.append(Axis(a.name, a.role, chunk[i],
                                   (a.strides[0], a.strides[1], stage_stride[i])))
    outer = [OuterLoop(a.name + ("^" if chunk[i] > 1 else ""), a.extent // chunk[i],
                       a.strides[0] * chunk[i], a.strides[1] * chunk[i], a.strides[2] * chunk[i])
             for i, a in enumerate(ax) if i in chunk and chunk[i] < a.extent]
    outer.sort(key=lambda r: -abs(r.out_stride))
    # The copy's rows, outermost in out first (the order the copy loops run in).
    block = tuple(BlockAxis(ax[i].name, chunk[i], stage_stride[i], ax[i].strides[2])
                  for i in sorted(order, key=lambda i: -abs(ax[i].strides[2])))
    return Blocking(tuple(outer), block, Contraction(tuple(inner_axes), c.dtype), step,
                    max(l2_bytes - step * c.dtype.itemsize, 0))


def _contiguous_run(c: Contraction, j: int) -> int:
    """Elements of operand ``j`` that ``c`` reads contiguously: its unit-stride axis,
    times each axis continuing it."""
    run = 1
    while True:
        nxt = next((a for a in c.axes if abs(a.strides[j]) == run and a.extent > 1), None)
        if nxt is None:
            return run
        run *= nxt.extent


def blocked_cost(c: Contraction, b: Blocking, inner: Cost, params: MachineParams,
                 threads: int, read_factors: tuple[float, float] = (1.0, 1.0)) -> Cost:
    """The predicted cost of running ``b`` with the block program costed ``inner``
    (planned on one thread): the blocks' compute and copies spread over the threads,
    each operand read from memory as the loops around the blocks reuse it (times its
    ``read_factors``, the block program's :func:`teir_plan.planner.cost.read_factors`),
    and the output written once, by non-temporal stores (no read for ownership)."""
    isz = c.dtype.itemsize
    blocks = b.blocks
    used = max(1, min(threads, blocks))
    efficiency = blocks / (used * math.ceil(blocks / used))
    copy = 2 * b.stage_elements * isz / STAGE_COPY_BYTES_PER_SECOND
    compute = blocks * (inner.compute_seconds + copy) / (used * efficiency)
    room = max(params.l2_bytes - b.stage_elements * isz, params.l2_bytes / 4)
    dram = 1.0 * c.tensor_elements(2) * isz  # streamed: no read for ownership
    llc = 0.0
    for j in (0, 1):
        traffic = working = float(b.inner.tensor_elements(j) * isz)
        for loop in reversed(b.outer):
            if (loop.in0_stride, loop.in1_stride)[j] == 0:
                if working > room:
                    traffic *= loop.extent
            else:
                traffic *= loop.extent
                working *= loop.extent
        distinct = float(c.tensor_elements(j) * isz)
        traffic = max(traffic, distinct)
        # A block reads an operand in runs no longer than the block's share of its
        # contiguous axes; short runs from memory are paid in latency (see SHORT_RUN_BYTES).
        latency = (1.0 + SHORT_RUN_BYTES / (_contiguous_run(b.inner, j) * isz)) * read_factors[j]
        if distinct <= params.llc_bytes:
            dram += distinct * latency
            llc += traffic - distinct
        else:
            dram += traffic * latency
    memory = memory_seconds(dram, llc, params, used)
    overhead = params.call_seconds + (params.parallel_seconds if used > 1 else 0.0)
    seconds = total_seconds(compute, memory, overhead)
    return Cost(
        seconds=seconds,
        compute_seconds=compute,
        memory_seconds=memory,
        overhead_seconds=overhead,
        flops=c.flops,
        dram_bytes=dram,
        llc_bytes=llc,
        tile_calls=inner.tile_calls * blocks,
        tile_flops=inner.tile_flops,
        parallel_iterations=blocks,
        parallel_efficiency=efficiency,
        threads=used,
        packed_bytes_per_call=inner.packed_bytes_per_call,
        unoverlapped_seconds=seconds - max(compute, memory) - overhead,
    )
