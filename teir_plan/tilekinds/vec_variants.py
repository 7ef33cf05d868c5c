"""The splits the vector kernel's tiles want the search to offer (the vec kind's
``axis_splits``, ``split_variants`` and ``k_blocks``; its broadcast-operand packs are in
:mod:`teir_plan.tilekinds.broadcast_pack`): a row axis cut to the rows a tile takes, a K
axis cut into blocks whose rows the kernel reads as few streams, and the longest K block
of a short output's tiles.  The limits are the kernel's (teir_plan/tiles.py); the
splits themselves are the planner's (:class:`teir_plan.tilekinds.kind.Reshapes`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from teir_plan.divisors import divisor_near, divisors_between, largest_divisor
from teir_plan.teir.enums import DimType
from teir_plan.tiles import VEC_MAX_ROWS_TIMES_K, VEC_MAX_SPAN, VEC_ROWS, VEC_STREAM_K

if TYPE_CHECKING:
    from teir_plan.frontend.contraction import Contraction
    from teir_plan.tilekinds.kind import VariantArgs


def vector_axes(c: Contraction) -> list[int]:
    """The M and N axes along which some operand and the output both have unit stride:
    the axes a vector-kernel tile could run along."""
    return [i for i, a in enumerate(c.axes) if a.role in (DimType.M, DimType.N)
            and a.strides[2] == 1 and 1 in a.strides[:2]]


def axis_splits(c: Contraction, axis: int) -> list[int]:
    """The vec kind's ``axis_splits``: an M or N axis across a vector axis (not one
    itself) in tiles of few enough rows (:func:`vec_rows_split`, for each K axis)."""
    vec = vector_axes(c)
    if not vec or axis in vec:
        return []
    return vec_rows_split(c.axes[axis].extent,
                          [a.extent for a in c.axes if a.role is DimType.K])


# The fewest rows a split for the vector kernel leaves a tile: with a longer K and fewer
# rows, the kernel re-reads its vector operand's many K rows for few output rows, and
# BLAS was faster (cad,dcb->ab on one thread, tiles of 24 rows x K 384: 0.64x;
# adc,bd->abc 0.82-0.95x).
VEC_SPLIT_MIN_ROWS = 32


def vec_rows_split(extent: int, k_extents: Sequence[int]) -> list[int]:
    """Inner extents for a row axis of ``extent`` too long for a vector-kernel tile with
    a K axis of any of ``k_extents`` (rows x K over VEC_MAX_ROWS_TIMES_K): the largest
    divisor that fits, a multiple of the kernel's VEC_ROWS rows where one fits, and not
    below VEC_SPLIT_MIN_ROWS.  Without it such tiles go to BLAS unless the axis happens
    to be split for the threads:
    bhqk,bhkd->bhqd's 128 x 64 x 128 products on one thread ran BLAS tiles at 91-97
    GFLOP/s, the vector kernel on 64 rows at 115-125.

    >>> vec_rows_split(128, [128]), vec_rows_split(96, [96]), vec_rows_split(384, [384])
    ([64], [], [])
    """
    out = []
    for k in k_extents:
        if extent * k <= VEC_MAX_ROWS_TIMES_K:
            continue
        rows = row_tile(extent, VEC_SPLIT_MIN_ROWS, VEC_MAX_ROWS_TIMES_K // k)
        if rows is not None:
            out.append(rows)
    return out


def row_tile(extent: int, least: int, most: int) -> int | None:
    """The largest divisor of ``extent`` in [least, most], a multiple of the vector
    kernel's VEC_ROWS where one is; None if none."""
    fit = divisors_between(extent, least, most)
    whole = [d for d in fit if d % VEC_ROWS == 0]
    return max(whole or fit) if fit else None


# The inner extent tried when splitting a K axis whose rows a vector-kernel tile would
# read as too many streams at once (VEC_STREAM_K): blocks of 48 measured fastest of
# 16-64 on dca,bd->abc.
K_SPLIT_TARGET = 48


def k_split_variants(args: VariantArgs) -> list[Contraction]:
    """The vec kind's ``split_variants``: contractions with a K axis longer than
    VEC_STREAM_K split into blocks of about K_SPLIT_TARGET, for vector-kernel tiles that
    would otherwise read too many rows at once (see :data:`teir_plan.tiles.VEC_STREAM_K`):
    each K block accumulates into an output tile kept in cache, so a long vector axis is
    split too, into cache-sized tiles.  Only when some operand shares a unit-stride axis
    with the output (the vector kernel's condition)."""
    c, reshape = args.c, args.reshapes
    ax = c.axes
    vec = vector_axes(c)
    if not vec:
        return []
    out = []
    for ki, k in enumerate(ax):
        if k.role is not DimType.K or k.extent <= VEC_STREAM_K:
            continue
        inner = divisor_near(k.extent, K_SPLIT_TARGET)
        if inner is None:
            continue
        split = reshape.split_axis(c, ki, inner)
        out.append(split)
        for vi in vec:
            v = split.axes.index(ax[vi])
            out += [reshape.split_axis(split, v, d) for d in reshape.cache_parts(ax[vi].extent)]
    return out


def vec_k_most(rows: int, itemsize: int) -> int:
    """The most K steps a vector-kernel tile of ``rows`` rows reads from a contiguous
    block of its other operand: at most VEC_STREAM_K (the vector operand's K rows are
    streams), rows x K within VEC_MAX_ROWS_TIMES_K elements and VEC_MAX_SPAN bytes.

    >>> vec_k_most(64, 4), vec_k_most(64, 8), vec_k_most(32, 4), vec_k_most(96, 4)
    (128, 128, 128, 96)
    """
    return min(VEC_STREAM_K, min(VEC_MAX_ROWS_TIMES_K, VEC_MAX_SPAN // itemsize) // rows)


# The shortest K block vec_k_block offers: shorter ones are K_SPLIT_TARGET's.
VEC_K_BLOCK_MIN = 64


def k_blocks(c: Contraction, k: int) -> list[int]:
    """The vec kind's ``k_blocks``: :func:`vec_k_block`, if there is one."""
    block = vec_k_block(c, k)
    return [] if block is None else [block]


def vec_k_block(c: Contraction, k: int) -> int | None:
    """The longest K block (a divisor of axis ``k``'s extent, at least VEC_K_BLOCK_MIN)
    a vector-kernel tile of a short output takes: over the one M/N axis across the
    vector axis, K within :func:`vec_k_most`, the other operand's rows x K block within
    VEC_MAX_SPAN, and the vector operand's K rows one contiguous run (no streams to
    outnumber the prefetchers).  None without such a block.

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
