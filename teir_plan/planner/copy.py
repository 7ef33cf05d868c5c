"""Schedules for Copy/ReLU programs: permutations, diagonal extraction, operand packing.

A copy is planned over named axes ``(name, extent, stride_in, stride_out)``:
axes whose strides compose in both tensors are fused, the tile takes the axis
with the output's smallest stride and the one with the input's smallest stride
(a blocked transpose when they differ); the outer loops are ordered by the
output's strides or by the input's (whichever wastes fewer partly used cache
lines, see :func:`_line_waste`) and run in parallel when the copy is large enough
to pay for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, NamedTuple

import numpy as np

from teir_plan.divisors import smallest_divisor
from teir_plan.isa import LINE_BYTES
from teir_plan.machine.params import MachineParams
from teir_plan.planner.cost import Cost
from teir_plan.teir.enums import DimType, ExecType, Prim
from teir_plan.teir.records import TEIR, Primitives, Schedule
from teir_plan.tiles import COPY_RUN_MIN_LINES, PAGE_BYTES, streams_out

# Copies smaller than this run on one thread: a parallel region costs more.
PARALLEL_COPY_BYTES = 1 << 16
# Level-1 data cache assumed for the input lines a gathering copy reuses.
L1_BYTES = 32 * 1024
# A transposing copy whose output has its unit stride along an axis shorter than
# COPY_RUN_MIN_LINES lines takes this many times the time of a copy of long runs: each
# run of out is gathered from as many far-apart places in the input as it has elements
# (docs/decisions.md: 1.6-4.4x the unfactored model on five permutations).
SHORT_RUN_COPY_FACTOR = 2.2


class CopyAxis(NamedTuple):
    """One axis of a copy: its name, extent, and stride in the input and in out."""

    name: str
    extent: int
    in_stride: int
    out_stride: int


@dataclass(frozen=True)
class CopyPlan:
    """A ranked Copy/ReLU schedule; its TEIR program is built when first asked for
    (planning ranks many schedules and keeps one or a few)."""

    axes: tuple[CopyAxis, ...]
    order: tuple[int, ...]  # indices into ``axes``: loops outermost first, then prims
    parallel: int  # how many leading loops run in parallel
    prims: int  # how many trailing axes the tile takes
    dtype: str
    relu: bool
    cost: Cost

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.axes[i].name for i in self.order)

    @cached_property
    def teir(self) -> TEIR:
        ax, order = self.axes, self.order
        loops = len(order) - self.prims
        return TEIR(
            Primitives(self.dtype, Prim.NONE, Prim.RELU if self.relu else Prim.COPY,
                       Prim.NONE),
            Schedule(
                [DimType.C] * len(order),
                [ExecType.PARALLEL] * self.parallel + [ExecType.SEQ] * (loops - self.parallel)
                + [ExecType.PRIM] * self.prims,
                [ax[i].extent for i in order],
                [[ax[i].in_stride for i in order], [ax[i].out_stride for i in order]],
            ),
        )


def fuse_copy_axes(axes: Sequence[tuple[str, int, int, int]]) -> list[CopyAxis]:
    """The axes of extent above 1, each pair whose strides compose in both tensors fused
    into one (named by both)."""
    work: list[list[Any]] = [list(a) for a in axes if a[1] > 1]
    changed = True
    while changed:
        changed = False
        for x in work:
            for y in work:
                if x is not y and x[2] == y[2] * y[1] and x[3] == y[3] * y[1]:
                    y[0], y[1] = x[0] + y[0], x[1] * y[1]
                    work.remove(x)
                    changed = True
                    break
            if changed:
                break
    return [CopyAxis(*a) for a in work]


def plan_copy(
    axes: Sequence[tuple[str, int, int, int]],
    dtype: np.dtype,
    params: MachineParams,
    threads: int,
    relu: bool = False,
) -> tuple[CopyPlan, ...]:
    """Ranked Copy (or ReLU) schedules moving ``axes`` (name, extent, stride in in0,
    stride in out) from in0's strides to out's."""
    return ranked_copies(tuple(tuple(a) for a in axes), str(np.dtype(dtype)), params,  # type: ignore[misc]
                      threads, relu)


@lru_cache(maxsize=1024)
def ranked_copies(
    axes: tuple[tuple[str, int, int, int], ...],
    dtype: str,
    params: MachineParams,
    threads: int,
    relu: bool,
) -> tuple[CopyPlan, ...]:
    # Cached: a pack is the same copy in every result layout an order-K plan weighs.
    ax = fuse_copy_axes(axes)
    isz = np.dtype(dtype).itemsize
    elements = math.prod(a.extent for a in ax) if ax else 1
    if threads > 1 and elements * isz >= PARALLEL_COPY_BYTES:
        ax = _split_for_threads(ax, 4 * threads)
    variants: list[tuple[int, ...]] = []
    if ax:
        a0 = min(range(len(ax)), key=lambda i: abs(ax[i].out_stride))
        rest = [i for i in range(len(ax)) if i != a0]
        if rest:
            variants += [
                (a0, min(rest, key=lambda i: abs(ax[i].in_stride))),
                (a0, min(rest, key=lambda i: abs(ax[i].out_stride))),
                (a0,),
            ]
        else:
            variants.append((a0,))
    else:
        variants.append(())
    out = []
    seen = set()
    for prim in variants:
        if prim in seen:
            continue
        seen.add(prim)
        rest = [i for i in range(len(ax)) if i not in prim]
        # Input order first: of two orders the model ranks equal, the one whose inner
        # loops continue the reads' streams measured faster (efbad,cf's staged permute:
        # 18 vs 9 GB/s); writes do not stall the core as reads do.
        orders = [sorted(rest, key=lambda i: (-abs(ax[i].in_stride), -abs(ax[i].out_stride))),
                  sorted(rest, key=lambda i: (-abs(ax[i].out_stride), -abs(ax[i].in_stride)))]
        for loops in orders[: 1 if orders[0] == orders[1] else 2]:
            for parallel in (True, False):
                npar = 0
                iters = 1
                if parallel and threads > 1 and elements * isz >= PARALLEL_COPY_BYTES:
                    while npar < len(loops) and iters < 4 * threads:
                        iters *= ax[loops[npar]].extent
                        npar += 1
                if parallel and npar == 0:
                    continue
                out.append(_costed_copy(ax, prim, loops, npar, iters, elements, isz, dtype,
                                      params, threads, relu))
    out.sort(key=lambda c: c.cost.seconds)
    return tuple(out)


def _split_for_threads(ax: list[CopyAxis], want: int) -> list[CopyAxis]:
    """Split the largest axis into an outer loop of at least ``want`` iterations and an
    inner part, when the copy has at most two axes (both of which a tile may take, leaving
    nothing to run in parallel).  Only exact divisors: TEIR axes have one extent."""
    if len(ax) > 2 or not ax:
        return ax
    i = max(range(len(ax)), key=lambda j: ax[j].extent)
    name, ext, s_in, s_out = ax[i]
    outer = smallest_divisor(ext, want, ext // 2)
    if outer is None:
        return ax
    inner = ext // outer
    return [*ax[:i], CopyAxis(name + "^", outer, s_in * inner, s_out * inner),
            CopyAxis(name, inner, s_in, s_out), *ax[i + 1:]]


def _line_waste(ax: Sequence[CopyAxis], prim: Sequence[int],
                loops: Sequence[int], side: int, isz: int) -> float:
    """Bytes moved per useful byte on one side (2: input, 3: output) from cache lines
    that a tile uses only in part.  A tile's contiguous run that is not a whole number
    of lines leaves its first and last lines partly used, unless the innermost loop
    steps exactly one run on, so that the next tile uses the rest of them."""
    stride = [abs(a.in_stride) if side == 2 else abs(a.out_stride) for a in ax]
    run = 1
    for i in sorted(prim, key=lambda i: stride[i]):
        if stride[i] != run:
            break
        run *= ax[i].extent
    if run == 1 or (loops and stride[loops[-1]] == run):
        return 1.0
    run_bytes = run * isz
    return (math.ceil(run_bytes / LINE_BYTES) + 1) * LINE_BYTES / run_bytes


def _short_out_runs(ax: Sequence[CopyAxis], isz: int) -> bool:
    """Whether a copy over (fused) axes ``ax`` gathers runs of out shorter than
    COPY_RUN_MIN_LINES lines from far apart in the input: out's unit-stride axis is
    short, is not the input's unit-stride axis, and steps at least a page in the input
    (see SHORT_RUN_COPY_FACTOR).  Steps within a page gather each run from one block of
    the input: the staged result of dfgb,geac->abcdef in order e a c d f b (f steps 80
    bytes) copies into C order at 23 GB/s, in order d f b e a c (f steps 750 KiB) at 12.

    >>> A = CopyAxis
    >>> _short_out_runs([A("c", 20, 1 << 22, 1), A("b", 2048, 2048, 20), A("a", 2048, 1, 40960)], 4)
    True
    >>> _short_out_runs([A("f", 20, 20, 1), A("b", 20, 1, 192000), A("e", 20, 4608000, 20)], 4)
    False
    >>> _short_out_runs([A("b", 2048, 1, 2048), A("a", 2048, 2048, 1)], 4)
    False
    """
    out_unit = [a for a in ax if abs(a.out_stride) == 1]
    in_unit = [a for a in ax if abs(a.in_stride) == 1]
    return bool(out_unit and in_unit and out_unit[0] is not in_unit[0]
                and out_unit[0].extent * isz < COPY_RUN_MIN_LINES * LINE_BYTES
                and abs(out_unit[0].in_stride) * isz >= PAGE_BYTES)


def _costed_copy(ax: list[CopyAxis], prim: tuple[int, ...], loops: list[int], npar: int,
                 iters: int, elements: int, isz: int, dtype: str, params: MachineParams,
                 threads: int, relu: bool) -> CopyPlan:
    """One schedule (``prim``: the tile's axes, ``loops``: the loops outermost first, the
    first ``npar`` parallel) with its predicted cost."""
    order = list(loops) + list(prim)
    tile = math.prod(ax[i].extent for i in prim) if prim else 1
    calls = elements // tile
    # The input's unit-stride axis as the innermost loop reuses the tile's input lines
    # on the next tile when they stay in L1, as the blocked transpose inside a tile does
    # (lines kept only in L2 measured 5x slower: ab->ba with 3008-element tiles).
    src_unit = min(range(len(ax)), key=lambda i: abs(ax[i].in_stride)) if ax else None
    reuse = bool(loops) and src_unit == loops[-1] and tile * LINE_BYTES <= L1_BYTES
    unit_in = any(abs(ax[i].in_stride) == 1 for i in prim) or reuse
    # Reads along a strided axis touch a cache line per element.
    read_scale = 1.0 if unit_in else min(16.0, LINE_BYTES / isz) / 4
    transpose = ((len(prim) == 2 and abs(ax[prim[1]].in_stride) < abs(ax[prim[0]].in_stride))
                 or reuse)
    rate = params.copy_bytes_per_second * (0.7 if transpose else 1.0) / read_scale
    # Only from memory: an input in the LLC is gathered at cache latency (dcba->abcd of
    # 24 x 24 x 24 x 576, 32 MB: 2.8 ms, within 15% of the model without the factor).
    short = _short_out_runs(ax, isz) and elements * isz > params.llc_bytes
    if short:
        rate /= SHORT_RUN_COPY_FACTOR
    used = min(threads, iters) if npar else 1
    waste = _line_waste(ax, prim, loops, 2, isz) + _line_waste(ax, prim, loops, 3, isz)
    move = waste * elements * isz / (rate * used)
    # Source and destination that fit in the LLC together are found there by a call
    # that runs again (as cost.fits_llc): a 3 MiB pack measured 172 us, its DRAM-rate
    # prediction 281.
    bus = params.first_read_rate(2 * elements * isz)
    mem = 2 * elements * isz / (bus * (1.0 if used > 1 else 0.6))
    if not relu and streams_out(elements * isz, False, True):
        # Non-temporal stores (the executor's rule): no read for ownership, so the bus
        # moves 2 bytes per byte copied instead of 3 (the calibrated bandwidth is a
        # plain copy's, 2 bytes counted per byte copied).
        mem /= 1.5
    if short:
        mem *= SHORT_RUN_COPY_FACTOR
    compute = calls * params.tile_seconds / used + move
    overhead = params.call_seconds + (params.parallel_seconds if npar else 0.0)
    cost = Cost(
        seconds=max(compute, mem) + overhead, compute_seconds=compute, memory_seconds=mem,
        overhead_seconds=overhead, flops=0, dram_bytes=2.0 * elements * isz, llc_bytes=0.0,
        tile_calls=calls, tile_flops=0, parallel_iterations=iters if npar else 1,
        parallel_efficiency=1.0, threads=used, packed_bytes_per_call=0,
    )
    return CopyPlan(tuple(ax), tuple(order), npar, len(prim), dtype, relu, cost)
