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

from teir_plan.divisors import largest_divisor
from teir_plan.frontend.contraction import Contraction
from teir_plan.machine.params import MachineParams
from teir_plan.planner.candidates import (
    Choice,
    loop_orders,
    split_axis,
    vec_k_most,
)
from teir_plan.teir.axes import NO_AXIS
from teir_plan.teir.enums import DimType
from teir_plan.tilekinds import LibraryCall
from teir_plan.tiles import VEC_MAX_SPAN

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
    Also the split into the longest K blocks a vector-kernel tile takes
    (:func:`vec_k_block`), the outer axis then shared among the workers."""
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
        block = vec_k_block(c, i)
        if block is not None and ax.extent // block >= threads:
            out.append(split_axis(c, i, block))
    return out


# The shortest K block vec_k_block offers: shorter ones are candidates.K_SPLIT_TARGET's.
VEC_K_BLOCK_MIN = 64


def vec_k_block(c: Contraction, k: int) -> int | None:
    """The longest K block (a divisor of axis ``k``'s extent, at least VEC_K_BLOCK_MIN)
    a vector-kernel tile of a short output takes: over the one M/N axis across the
    vector axis, K within candidates.vec_k_most, the other operand's rows x K block
    within VEC_MAX_SPAN, and the vector operand's K rows one contiguous run (no streams
    to outnumber the prefetchers).  None without such a block.

    Each K block loads and stores the tile's outputs once, so the longest block pays
    that least: ``ki,kj->ij`` with k = 500,000, i = 64, float32, on the 2 threads of an
    AMD EPYC Zen 5 (AVX-512): the vector kernel on blocks of 40 (K_SPLIT_TARGET's)
    18.3-18.8 ms, on 125 16.3-16.7; i = 32, k = 2,000,000, in turns in one process:
    blocks of 40, 125 and 250 23.7, 20.0 and 19.2 ms with 64-byte vectors, 38.7, 33.8
    and 38.5 with 32-byte ones, hence at most VEC_STREAM_K (128) K steps.

    >>> from teir_plan.frontend.contraction import Layout, describe, with_dtype
    >>> def gram(rows, dtype):
    ...     return with_dtype(describe(Layout("ki", (500000, rows), (rows, 1)),
    ...         Layout("kj", (500000, rows), (rows, 1)), Layout("ij", (rows, rows),
    ...         (rows, 1))), dtype)
    >>> [vec_k_block(gram(r, t), 2) for r, t in ((64, "f4"), (64, "f8"), (32, "f4"))]
    [125, 125, 125]
    """
    ax = c.axes
    isz = c.dtype.itemsize
    best = None
    for a in ax:
        if a.role not in (DimType.M, DimType.N) or a.strides[2] != 1:
            continue
        op = 0 if a.role is DimType.M else 1
        if a.strides[op] != 1 or abs(ax[k].strides[op]) != a.extent:
            continue
        across = [b for b in ax if b.role in (DimType.M, DimType.N) and b.role is not a.role]
        if len(across) != 1:
            continue
        rows = across[0]
        s_rows, s_k = abs(rows.strides[1 - op]), abs(ax[k].strides[1 - op])
        most = vec_k_most(rows.extent, isz)
        if s_k:  # the other operand's block: (rows - 1) s_rows + (K - 1) s_k + 1 elements
            most = min(most, (VEC_MAX_SPAN // isz - 1 - (rows.extent - 1) * s_rows) // s_k + 1)
        d = largest_divisor(ax[k].extent, VEC_K_BLOCK_MIN, most)
        if d is not None and (best is None or d > best):
            best = d
    return best


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
