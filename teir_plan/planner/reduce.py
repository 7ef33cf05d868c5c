"""Planning a reduction (see :mod:`teir_plan.executor.reduce`): an operand's axes sorted
into kept and summed, flipped to positive strides, fused where they compose, the kernel
and the split over the threads chosen, and the cost predicted.

The expressions it covers: one operand with summed indices (``ij->j``, ``ijk->ik``,
``ij->``, any layout), and an operand times a vector whose indices are all summed and
all in that operand (``ki,k->i``, ``ik,k->i``, ``i,i->``): the vector weights each
summed element.  Where the caller asks (``kept_weights``: 16-bit operands read in
place, schedule/half.py), also weights that vary along kept indices too, all of them
in the operand (``ij,ij->i``, ``bij,bij->bi``, ``bij,ij->bi``): each output's run of
the operand times a run of the weights of its own, on the inner kernel only (x's and
the weights' unit stride both along the innermost summed axis; no other layout).

16-bit operands (float16, bfloat16) may be read in place (``operand``): the kernels
widen each element to float32 in registers and sum in float32 (``dtype``), so the reads
are priced at 2 bytes an element and the accumulator, the partial sums and the output
at 4; they never run on BLAS' ?gemv, which has no 16-bit type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from teir_plan import tiles as R
from teir_plan.frontend.contraction import Layout
from teir_plan.isa import LINE_BYTES
from teir_plan.machine.params import MachineParams
from teir_plan.planner.cost import Cost, memory_seconds
from teir_plan.tilekinds.table import named_rows

Axis = tuple[str, int, int, int]  # summed: (name, extent, stride in x, stride in w)
# kept (and the vector axis): (name, extent, stride in x, stride in out, stride in w)
KeptAxis = tuple[str, int, int, int, int]

# Below this many bytes read, one thread: a parallel region costs more than it saves.
PARALLEL_MIN_BYTES = 1 << 18
# What the kernels cost besides their reads, measured on one core (AMD EPYC, float32,
# operand in L2): a vectorized sum streams 60-90 GB/s from cache, each run of
# KIND_INNER costs some 4 ns to start, each row of KIND_ROWS some 1.5 ns (rows of 24
# too: the segment kernel is compiled once per weighting, executor/reduce.py), and each
# unit of KIND_ROWS of one segment some 4 ns (``akj,k->aj`` with k = 4, j = 24: 1e5
# units, 1.6 ms against 1.2 for the reads and rows), unless BLAS' ?gemv takes it
# (uses_gemv) or, unweighted and back to back, flat windows of rows (uses_flat_rows).
# Reads alone, against the calibrated DRAM rate (a copy's bytes read and written over
# its time, one thread): 35-45 GB/s read on one core of the AMD EPYC against a copy's
# 20-25, 60-80 on two in quiet spells.
READ_OVER_COPY = 2.0
SUM_BYTES_PER_SECOND = 60e9
RUN_SECONDS = 4e-9
ROW_SECONDS = 1.5e-9
ROW_UNIT_SECONDS = 4e-9
# Units summed straight into out (tiles.sums_into_out) cost no more than their reads at
# SUM_BYTES_PER_SECOND and some 0.5 ns a row (rows of 24 float32 in L2, one core: 19 us
# for 4,000 units of 4 rows, 30-34 us for 2,000 of 8 and 1,000 of 16, AMD EPYC Zen 5).
DIRECT_ROW_SECONDS = 0.5e-9
# A unit of more rows, or of more than one summed axis, goes through the rows kernel's
# general loop (executor/reduce_rows.py: rows_unit) one unit at a time, some 90 ns a unit
# (``akj,k->aj`` with k = 4 through it: 10 against 1.6 ms on one core, 1e5 units).
ROW_LOOP_SECONDS = 90e-9
# A strided vector axis (rows whose elements lie apart) is read one element at a time,
# each line once per summed element: 0.3 ns an element beyond the reads.  Weighted, with
# a short unit-stride run per output (``iu,u->i``, tiles.uses_gemv), BLAS' ?gemv
# transposed takes it instead: 0.8 ns an output beyond the reads.  Measured on one core
# (AMD EPYC Zen 5, float32, 177k outputs): runs of 8 492 against 231-255 us (numpy's
# own x @ w, threaded, 107-110), runs of 3 190-240 against 111-120.
STRIDED_ELEMENT_SECONDS = 0.3e-9
GEMV_T_OUTPUT_SECONDS = 0.8e-9
# Each ?gemv call (one per unit: a kept row's block of the vector axis) costs some 100 ns
# besides its work: ``u,abefkmu->abefkm`` with u = 8 into an out whose f is outermost,
# 3,696 transposed calls of 12-192 outputs, took 54-102 ns a call more than the same
# outputs in two calls (one thread, AMD EPYC Zen 5, float32), and a tree that wrote that
# intermediate so ran 1.7x slower.
GEMV_CALL_SECONDS = 100e-9
# A reduction step's call from Python, in executor calls (``call_seconds``, a TEIR
# step's): flat views of its three arrays and the dispatch of the kernel's nineteen
# arguments (executor/reduce.py: run_reduction) cost more than one (docs/decisions.md).
# Priced so among a tree's steps (called_from_python); a plan's lone step that is a small
# reduction runs on numpy instead (schedule/tiny.py), at about one call.
REDUCE_CALLS = 3.0

KINDS = {R.KIND_INNER: "inner", R.KIND_ROWS: "rows"}
SPLITS = {R.SPLIT_NONE: "one thread", R.SPLIT_OUTPUTS: "outputs split over the threads",
          R.SPLIT_SUMMED: "summed axis split over the threads, private partial sums"}


@dataclass(frozen=True)
class Reduction:
    """A planned reduction: the kernel (``kind``), its tables and its predicted cost (a
    record: :class:`teir_plan.schedule.reduce_run.RunnableReduction` runs it)."""

    kind: int
    dtype: np.dtype
    kept: tuple[KeptAxis, ...]  # (name, n, stride x, out, w), outer first, vector excluded
    vector: KeptAxis | None  # KIND_ROWS: the kept axis along x's smallest stride
    summed: tuple[Axis, ...]  # (name, n, stride x, stride w), outer first
    origins: tuple[int, int, int]  # element offsets into x, w, out (flipped axes)
    weighted: bool
    split: int
    cost: Cost
    # Predicted on the calling thread alone (the same as cost.seconds when it runs so):
    # a call that finds the worker threads asleep may run it so (schedule/idle.py).
    serial_seconds: float = 0.0
    # x no larger than the last-level cache: short rows run on ?gemv (tiles.uses_gemv).
    cached: bool = False
    # The dtype x and w are stored in, when not ``dtype``: a 16-bit type read in place,
    # each element widened to ``dtype`` (float32) in registers (executor/half_bits.py).
    operand: np.dtype | None = None

    @cached_property
    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kernels' tables: kept, vector and summed (tiles.KEPT_FIELDS and
        SUMMED_FIELDS)."""
        return kept_table(self.kept), vector_row(self.vector), summed_table(self.summed)

    @property
    def weights_kept(self) -> bool:
        """Whether the weights vary along a kept axis: each output its own run of them."""
        return self.weighted and any(a[4] != 0 for a in self.kept)

    def reach(self, j: int) -> tuple[int, int]:
        """The lowest and highest offsets the tables form into x (``j`` 0), w (1) or
        out (2), from each array's first element."""
        axes: list[tuple[int, int]]  # (extent, stride)
        if j == 0:
            axes = [(a[1], a[2]) for a in self.kept] + [(a[1], a[2]) for a in self.summed]
            axes += [(self.vector[1], self.vector[2])] if self.vector else []
        elif j == 1:
            axes = [(a[1], a[3]) for a in self.summed]
            axes += [(a[1], a[4]) for a in self.kept]
            axes += [(self.vector[1], self.vector[4])] if self.vector else []
        else:
            axes = [(a[1], a[3]) for a in self.kept]
            axes += [(self.vector[1], self.vector[3])] if self.vector else []
        o = self.origins[j]
        return (o + sum(min(0, (n - 1) * st) for n, st in axes),
                o + sum(max(0, (n - 1) * st) for n, st in axes))

    def describe(self) -> str:
        """The kernel, its axes and its split, in a line."""
        summed = " ".join(f"{a[0]} {a[1]}" for a in self.summed)
        if self.kind == R.KIND_INNER:
            what = (f"horizontal sums along x's unit-stride axis {self.summed[-1][0]}"
                    if self.summed[-1][2] == 1 else
                    f"sums along x's smallest stride ({self.summed[-1][0]})")
        else:
            assert self.vector is not None
            what = f"whole rows along {self.vector[0]} {self.vector[1]} accumulated"
        weights = (", weighted by in1, a run of its own for each output" if self.weights_kept
                   else ", weighted by in1" if self.weighted else "")
        read = ("" if self.operand is None else
                f"; {self.operand} read in place, summed in {self.dtype}")
        return (f"{KINDS[self.kind]} kernel: {what}{weights}; summed {summed}; "
                f"{SPLITS[self.split]}{read}")


def kept_table(kept: Sequence[Sequence]) -> np.ndarray:
    """Kept axes ``(name, n, stride x, stride out, stride w)`` as the kernels' table."""
    return named_rows(R.KEPT_FIELDS, [{"n": n, "x": sx, "out": so, "w": sw}
                                      for _, n, sx, so, sw in kept])


def vector_row(vector: Sequence | None) -> np.ndarray:
    """The vector axis ``(name, n, stride x, stride out, stride w)`` as the kernels' row
    of kept's fields; without one, an axis of extent 1."""
    _, n, sx, so, sw = vector if vector is not None else ("", 1, 0, 0, 0)
    return named_rows(R.KEPT_FIELDS, [{"n": n, "x": sx, "out": so, "w": sw}]
                      ).reshape(R.KEPT_LEN)


def summed_table(summed: Sequence[Sequence]) -> np.ndarray:
    """Summed axes ``(name, n, stride x, stride w)`` as the kernels' table."""
    return named_rows(R.SUMMED_FIELDS, [{"n": n, "x": sx, "w": sw} for _, n, sx, sw in summed])


def _fuse(axes: list[list], cols: tuple[int, ...]) -> list[list]:
    """Merge neighbours (outer first) whose strides compose in x and in columns
    ``cols`` (out's and w's)."""
    out: list[list] = []
    for a in axes:
        if out:
            o = out[-1]
            if o[2] == a[1] * a[2] and all(o[c] == a[1] * a[c] for c in cols):
                out[-1] = [o[0] + a[0], o[1] * a[1], *a[2:]]
                continue
        out.append(a)
    return out


def plan_reduction(x: Layout, out: Layout, w: Layout | None, dtype: np.dtype,
                   params: MachineParams, threads: int,
                   operand: np.dtype | None = None,
                   kept_weights: bool = False) -> Reduction | None:
    """The reduction computing ``out`` from ``x`` (times ``w``, whose indices are all
    summed, or, with ``kept_weights``, all in x), or None when the expression is not
    one (nothing summed, an index of out or w missing from x) or its weights vary along
    a kept index in a layout the kernels do not read so (see the module's text).
    ``operand``: the dtype x and w are stored in when not ``dtype`` (a 16-bit type,
    summed in float32: see the module's text)."""
    keep = set(out.indices)
    if not keep <= set(x.indices):
        return None
    if w is not None:
        varies = {c for c, n in zip(w.indices, w.extents) if n > 1}
        if not varies <= set(x.indices) or (varies & keep and not kept_weights):
            return None
    origins = [0, 0, 0]
    kept: list[list] = []
    summed: list[list] = []
    for c, n, sx in zip(x.indices, x.extents, x.strides):
        if n <= 1:
            continue
        sw = w.stride(c) if w is not None else 0
        if c in keep:
            so = out.stride(c)
            if sx < 0:  # walk it backwards: every x stride positive, the others follow
                origins[0] += (n - 1) * sx
                origins[2] += (n - 1) * so
                origins[1] += (n - 1) * sw
                sx, so, sw = -sx, -so, -sw
            kept.append([c, n, sx, so, sw])
            continue
        if sx < 0:
            origins[0] += (n - 1) * sx
            origins[1] += (n - 1) * sw
            sx, sw = -sx, -sw
        summed.append([c, n, sx, sw])
    if not summed:
        return None

    def outer_first(a: list) -> tuple[bool, int]:  # broadcast (stride-0) axes outermost
        return (a[2] != 0, -a[2])

    kept = _fuse(sorted(kept, key=outer_first), (3, 4))
    summed = _fuse(sorted(summed, key=outer_first), (3,))
    isz = np.dtype(operand if operand is not None else dtype).itemsize  # (x's and w's)
    sizes = (isz, np.dtype(dtype).itemsize)
    # Sum along x's smallest stride when it is a summed axis long enough to vectorize;
    # else accumulate rows along the kept axis of the smallest stride.
    run = summed[-1]
    kept_step = min((a[2] for a in kept if a[2] != 0), default=None)
    own_weights = any(a[4] != 0 for a in kept)
    inner_run = not kept or (run[2] != 0 and (kept_step is None or run[2] < kept_step)
                             and (run[1] * isz >= LINE_BYTES or own_weights))
    if own_weights and not (inner_run and run[2] == 1 and run[3] == 1):
        # Weights of each output's own: read along the inner kernel's unit-stride runs
        # only, x's and w's alike (executor/reduce_runs.py: paired_runs); the rows
        # kernel weights a row by one element of w.
        return None
    vector = None
    if inner_run or not kept:
        kind = R.KIND_INNER
    else:
        kind = R.KIND_ROWS
        vector = min(kept, key=lambda a: (a[2] == 0, a[2]))
        kept.remove(vector)
    # Whether x can be in the caches when the call starts (tiles.uses_gemv).
    cached = (math.prod(a[1] for a in kept) * (vector[1] if vector else 1)
              * math.prod(a[1] for a in summed) * isz <= params.llc_bytes)
    cost, split = _cost(kind, kept, vector, summed, w is not None, sizes, params, threads,
                        cached)
    serial = (cost if cost.threads == 1 else
              _cost(kind, kept, vector, summed, w is not None, sizes, params, 1, cached)[0])
    return Reduction(kind, np.dtype(dtype), tuple(map(tuple, kept)),  # type: ignore[arg-type]
                     tuple(vector) if vector else None,  # type: ignore[arg-type]
                     tuple(map(tuple, summed)), tuple(origins),  # type: ignore[arg-type]
                     w is not None, split, cost, serial.seconds, cached,
                     None if operand is None else np.dtype(operand))


def called_from_python(red: Reduction, params: MachineParams) -> Reduction:
    """``red`` priced as a step of a tree, called from Python at REDUCE_CALLS executor
    calls (a TEIR step among them may also run in one compiled call with the others)."""
    extra = (REDUCE_CALLS - 1) * params.call_seconds
    return replace(red, cost=replace(red.cost, seconds=red.cost.seconds + extra,
                                     overhead_seconds=red.cost.overhead_seconds + extra),
                   serial_seconds=red.serial_seconds + extra)


def _cost(kind: int, kept: list[list], vector: list | None, summed: list[list], weighted: bool,
          sizes: tuple[int, int], params: MachineParams, threads: int,
          cached: bool) -> tuple[Cost, int]:
    """The predicted cost, and the split over the threads it assumes.  ``sizes``: the
    bytes of an element of x and w, and of the sums (the accumulator, partials, out)."""
    isz, acc = sizes
    nout = math.prod(a[1] for a in kept) * (vector[1] if vector else 1)
    nsum = math.prod(a[1] for a in summed)
    read = nout * nsum * isz
    w_bytes = (nsum if weighted else 0) * isz
    own = weighted and any(a[4] != 0 for a in kept)  # each output its own weights
    if own:  # the weights' elements, each read once, beside x's: a second stream
        w_bytes = math.prod(a[1] for a in (*kept, *summed) if a[-1] != 0) * isz
    if kind == R.KIND_INNER:
        units = math.prod(a[1] for a in kept)
        starts = units * nsum // summed[-1][1] * RUN_SECONDS
    else:
        assert vector is not None
        block = R.row_block(acc)
        units = math.prod(a[1] for a in kept) * -(-vector[1] // block)
        tables = (vector_row(vector), summed_table(summed))
        # (16-bit operands, narrower than their sums, never on ?gemv: it has no 16-bit
        # type; executor/reduce.py's prepare)
        gemv = isz == acc and R.uses_gemv(kind, *tables, weighted, isz, cached, own)
        if R.uses_flat_rows(kind, *tables, weighted):  # rows summed in windows of g
            starts = units * nsum / max(1, R.FLAT_WINDOW // vector[1]) * ROW_SECONDS
        elif gemv and vector[2] != 1:
            starts = nout * GEMV_T_OUTPUT_SECONDS  # a short dot product per output
            starts += units * GEMV_CALL_SECONDS
        else:
            one_segment = len(summed) == 1 and nsum <= R.ROW_GROUP
            if (one_segment and not gemv and vector[1] <= block and kept
                    and R.sums_into_out(vector[2], vector[3], nsum, weighted)):
                starts = units * nsum * DIRECT_ROW_SECONDS
            else:
                per_unit = (GEMV_CALL_SECONDS if gemv else
                            ROW_UNIT_SECONDS if one_segment else ROW_LOOP_SECONDS)
                starts = units * (nsum * ROW_SECONDS + per_unit)
            if vector[2] != 1:  # strided rows: one element at a time
                starts += nout * nsum * STRIDED_ELEMENT_SECONDS
    if threads <= 1 or read + (w_bytes if own else 0) < PARALLEL_MIN_BYTES:
        splits = [R.SPLIT_NONE]
    elif units >= 4 * threads or (units >= threads and nsum < 2 * threads):
        splits = [R.SPLIT_OUTPUTS]
        # One weight vector for a few long runs: split by outputs, each chunk reads all
        # of it; split along it, each chunk reads its share once (executor/reduce.py:
        # whole_runs).
        if kind == R.KIND_INNER and weighted and len(summed) == 1 and nsum >= 2 * threads:
            splits.append(R.SPLIT_SUMMED)
    elif nsum >= 2 * threads:
        splits = [R.SPLIT_SUMMED]
    else:
        splits = [R.SPLIT_NONE]
    if splits[0] != R.SPLIT_NONE:
        # One thread too, where the region's start costs more than the split saves
        # (300 x 300 float32 summed in a loop: 6 us on one thread, 10-18 on two).
        splits.append(R.SPLIT_NONE)
    flops = nout * nsum * (2 if weighted else 1)
    costs = [(_split_cost(split, kind, units, starts, read, w_bytes, nout, flops, sizes,
                          params, threads, own), split) for split in splits]
    return min(costs, key=lambda c: c[0].seconds)


def _split_cost(split: int, kind: int, units: int, starts: float, read: int, w_bytes: int,
                nout: int, flops: int, sizes: tuple[int, int], params: MachineParams,
                threads: int, own: bool = False) -> Cost:
    """The predicted cost of one split of a reduction over the threads (``sizes`` as
    :func:`_cost`'s; ``own``: each output weighted by its own run of ``w_bytes``)."""
    xsz, isz = sizes
    if split == R.SPLIT_NONE:
        workers = 1
    elif split == R.SPLIT_OUTPUTS:
        workers = min(threads, units)
    else:
        workers = threads
    balance = units / (workers * -(-units // workers)) if split == R.SPLIT_OUTPUTS else 1.0
    # The sums run at SUM_BYTES_PER_SECOND of their own type: a 16-bit element, widened
    # to float32 in registers, is summed as a float32 is (half its bytes read).
    streamed = read + (w_bytes if own else 0)  # (one vector of weights: read from L1)
    compute = (streamed * isz / xsz / SUM_BYTES_PER_SECOND + starts) / (workers * balance)
    if split == R.SPLIT_SUMMED:
        compute += nout * workers * isz / SUM_BYTES_PER_SECOND  # the partials, added
    # The inner kernel's chunks of outputs each read all the weights: from memory again
    # when they do not stay in L2 beside the stream; once a call otherwise.
    if (split == R.SPLIT_OUTPUTS and kind == R.KIND_INNER and not own
            and 2 * w_bytes > params.l2_bytes):
        w_bytes *= R.output_chunks(units, threads)
    moved = read + w_bytes + 2 * nout * isz  # out's lines read for ownership, written
    dram = moved if moved > params.llc_bytes else 0.0
    llc = moved - dram
    # The DRAM rate is a copy's (its bytes read and written over its time, one thread):
    # a stream that only reads moves READ_OVER_COPY times as many bytes a second.
    memory = memory_seconds(dram / READ_OVER_COPY, llc, params, workers)
    overhead = params.call_seconds + (params.parallel_seconds if workers > 1 else 0.0)
    return Cost(seconds=max(compute, memory) + overhead, compute_seconds=compute,
                memory_seconds=memory, overhead_seconds=overhead, flops=flops,
                dram_bytes=dram, llc_bytes=llc, tile_calls=units, tile_flops=0,
                parallel_iterations=units, parallel_efficiency=balance, threads=workers,
                packed_bytes_per_call=0)
