"""Candidates with a parallel K axis, and their price.

Where a contraction's output is short and its K range long (Gram matrices ``ki,kj->ij``
over many samples, weight gradients ``bi,bj->ij`` over a large batch), the output's own
axes cannot keep the cores busy: a parallel M or N loop cuts a 32 x 32 output into
tiles too small for BLAS, and one BLAS call runs on one core.  Splitting K instead lets
each worker run full-size tiles over its share of the samples into a private block, the
blocks added into the output at the end (teir_plan/teir/parallel_k.py, which the
executor runs).  :func:`k_parallel_variants` offers the contraction with a long K axis
split into an outer axis for the workers; :func:`k_parallel_choices` offers a K loop
(that outer axis among them) as the parallel loop; :func:`partial_sums_seconds` prices
the blocks: each worker zeroes its block, and one core adds them all into the output.
The search then ranks these candidates with every other.
"""

from __future__ import annotations

from collections.abc import Iterator

from teir_plan.frontend.contraction import Contraction
from teir_plan.machine.params import MachineParams
from teir_plan.planner.candidates import Choice, loop_orders, split_axis
from teir_plan.teir.axes import NO_AXIS
from teir_plan.teir.enums import DimType
from teir_plan.tilekinds import LibraryCall, wanted_k_blocks

# Outputs up to this many bytes are short enough to be worth a K split: each worker's
# block then stays in its core's L2 (2 MiB on the machines measured) while its tiles add
# into it, and the blocks' sum costs a fraction of the K range's reads.
SHORT_OUTPUT_BYTES = 1 << 20
# A K axis is split for the workers only when each worker's share is at least this long
# (shorter shares are better served by the tiles' own K loop).
MIN_SHARE = 1024
# The parts tried per thread: one share each, or a few each (shares that do not divide
# evenly then balance better, and a worker's tiles are shorter).
PARTS_PER_THREAD = (1, 2, 4)


def short_output(c: Contraction) -> bool:
    """Whether ``c``'s output is short enough for private blocks per worker."""
    return c.tensor_elements(2) * c.dtype.itemsize <= SHORT_OUTPUT_BYTES


def k_parallel_variants(c: Contraction, threads: int) -> list[Contraction]:
    """``c`` with one long K axis split into (parts, share): the outer axis ``name^``
    for the workers, the inner one the tiles' K.  Parts are a small multiple of the
    threads that divides the extent; only for a short output, on more than one thread.
    Also the splits into the K blocks the kinds' tiles take whole
    (tilekinds.wanted_k_blocks), the outer axis then shared among the workers."""
    if threads <= 1 or not short_output(c):
        return []
    out = []
    for i, ax in enumerate(c.axes):
        if ax.role is not DimType.K:
            continue
        for per in PARTS_PER_THREAD:
            parts = threads * per
            if ax.extent % parts == 0 and ax.extent // parts >= MIN_SHARE:
                out.append(split_axis(c, i, ax.extent // parts))
        out += [split_axis(c, i, block) for block in wanted_k_blocks(c, i)
                if ax.extent // block >= threads]
    return out


def k_parallel_choices(c: Contraction, prim: tuple[int, int, int, int], threads: int,
                       call: LibraryCall | None) -> Iterator[Choice]:
    """The schedules of one prim choice with one K loop axis of at least ``threads``
    iterations as the parallel loop (outermost), for a short output; the search adds
    them to :func:`teir_plan.planner.candidates.choices_for`'s, which never make a K
    axis parallel."""
    if threads <= 1 or not short_output(c):
        return
    taken = {a for a in prim if a != NO_AXIS}
    loops = [a for a in range(len(c.axes)) if a not in taken]
    split = [a for a in loops if c.axes[a].role is DimType.K and c.axes[a].extent >= threads
             and _outside(c, a, [p for p in prim[2:] if p != NO_AXIS])]
    for order in loop_orders(c, loops):
        for a in order:
            if a in split:
                rest = tuple(b for b in order if b != a)
                yield Choice((a, *rest), 1, *prim, call)


def _outside(c: Contraction, a: int, inner: list[int]) -> bool:
    """Whether K axis ``a`` steps over the whole range of the tile's K axes ``inner`` in
    both operands, so that a tile reads a contiguous run of K and a worker's share a
    contiguous range of the operands: a parallel K axis inside the tile's K (the inner
    part of a split) hands each tile rows a loop's extent apart, a page or more on long
    rows (ki,kj->ij, k = 100,000 x i = 256: tiles of K 2,500 rows 40 apart ran at 45
    GFLOP/s, contiguous shares at 49-52, both cores; ranked the other way by the model,
    whose BLAS rates do not depend on the leading dimension)."""
    ax = c.axes
    for j in (0, 1):
        span = sum((ax[k].extent - 1) * abs(ax[k].strides[j]) for k in inner)
        if abs(ax[a].strides[j]) <= span:
            return False
    return True


def partial_sums_seconds(c: Contraction, ch: Choice, params: MachineParams,
                         threads: int) -> float:
    """What private blocks add to a schedule whose parallel loops include a K axis (0
    for any other): each worker zeroes a block the output's size (all in parallel),
    then one core reads every block and writes the output, all at the LLC's rate (the
    blocks were just written; the output is short)."""
    ax = c.axes
    if threads <= 1 or not any(ax[a].role is DimType.K for a in ch.parallel):
        return 0.0
    iterations = 1
    for a in ch.parallel:
        iterations *= ax[a].extent
    workers = min(threads, iterations)
    if workers <= 1:
        return 0.0
    block = c.tensor_elements(2) * c.dtype.itemsize
    rate = params.llc_bytes_per_second
    one_core = 0.6 * rate  # one busy core gets 60 % of the aggregate (cost.memory_seconds)
    return workers * block / rate + (workers + 1) * block / one_core
