"""The vector kernel (executor/microkernel.py): a tile whose output and one operand
have unit stride along a long axis (the vector axis), the other operand broadcast one
element per row, rows x vectors of sums accumulated in registers; no packing."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from teir_plan.isa import LINE_BYTES, target
from teir_plan.teir.axes import NO_AXIS
from teir_plan.tilekinds.broadcast_pack import broadcast_pack_variants
from teir_plan.tilekinds.kind import (
    GemmTile,
    Lowering,
    Price,
    PriceArgs,
    ScheduleArgs,
    TileKind,
)
from teir_plan.tilekinds.table import (
    T_K,
    T_M,
    T_MODE,
    T_N,
    T_STREAM,
    T_SWAP,
    T_VEC_P,
    T_VEC_T,
    set_fields,
)
from teir_plan.tilekinds.vec_variants import axis_splits, k_blocks, k_split_variants
from teir_plan.tiles import (
    NEXT_TILE_PREFETCH_BYTES,
    VEC_BYTES,
    VEC_K_STEPS,
    VEC_LINES,
    VEC_LONG_K,
    VEC_MAX_ROWS_TIMES_K,
    VEC_MAX_SPAN,
    VEC_MIN_ROWS,
    VEC_ROWS,
    VEC_SHORT_K,
    VEC_STREAM_K,
)

if TYPE_CHECKING:
    from teir_plan.machine.params import MachineParams

MODE = 2  # the vector kernels' mode in the tile table (vec_t and vec_p share it)


def vec_axis(m: int, n: int, k: int, br: int, a: tuple[int, int], b: tuple[int, int],
             c: tuple[int, int], itemsize: int) -> int:
    """Whether a GEMM tile runs on the vector kernel, and along which axis: 1 along M
    (A and C have unit stride along M), 2 along N (B and C along N), 0 not at all.

    The vector axis must be at least two micro-tiles long (two vectors when the vector
    operand's K rows follow one another), the tile a plain GEMM (BRGEMM stays with BLAS), with at
    least VEC_MIN_ROWS rows (the other of M and N) and rows x K at most
    VEC_MAX_ROWS_TIMES_K, and the other operand's block of rows x K elements within
    VEC_MAX_SPAN bytes.

    >>> vec_axis(432, 24, 36, 1, (1, 62208), (1, 36), (1, 20736), 4)
    1
    >>> vec_axis(512, 512, 512, 1, (1, 512), (1, 512), (1, 512), 4)
    0
    """
    if br != 1 or itemsize not in (4, 8):
        return 0
    # Two micro-tiles at least, the first prefetching the second's lines; two vectors
    # when the tile's K rows follow one another (one contiguous run, which the next
    # tile's prefetch covers): see docs/decisions.md.
    if not VEC_BYTES:
        return 0
    micro = VEC_LINES * VEC_BYTES // itemsize

    def long_enough(length: int, s_k: int) -> bool:
        if abs(s_k) == length:  # one contiguous run: two vectors are enough
            return length >= _shortest(itemsize)
        return length >= 2 * micro

    most = VEC_MAX_ROWS_TIMES_K  # rows x K

    def close(rows: int, s_rows: int, s_k: int) -> bool:
        # The broadcast operand's rows x K block is read again for every micro-tile
        # along the vector axis: it must stay in L1, which a block spread over far-apart
        # rows does not.
        return ((rows - 1) * abs(s_rows) + (k - 1) * abs(s_k) + 1) * itemsize <= VEC_MAX_SPAN

    if (a[0] == 1 and c[0] == 1 and long_enough(m, a[1]) and n >= VEC_MIN_ROWS and n * k <= most
            and close(n, b[1], b[0]) and not aliased_k_rows(k, n, a[1], itemsize)):
        return 1
    if (b[1] == 1 and c[1] == 1 and long_enough(n, b[0]) and m >= VEC_MIN_ROWS and m * k <= most
            and close(m, a[0], a[1]) and not aliased_k_rows(k, m, b[0], itemsize)):
        return 2
    return 0


# The vector operand's K rows a whole number of 4 KiB pages apart share one L1 set: with
# more of them than a set has ways, every pass of a row block over them reloads them
# from L2.  ``ai,abc->ibc`` (a = b = c = 96, i = 32: K rows 36 KiB apart) with 32-byte
# vectors on 2 threads of an AMD EPYC Zen 5: 0.36-0.42 ms against 0.31-0.33 with the
# rows padded off the page, and BLAS' sgemm, which packs, 0.28; with 64-byte vectors
# (fewer row blocks, more work per line) 0.14-0.15 either way (docs/decisions.md).  Such
# tiles then run on another kind (BLAS, or the program the planner ranks next).  16
# rows: past the ways of any x86 L1 set (8 on Zen 3, 12 on Zen 5 and recent Intel
# cores).  Measured with 32-byte vectors only: 16-byte ones (NEON: other L1 geometries)
# keep such tiles.
ALIASED_K_ROWS = 16


def aliased_k_rows(k: int, rows: int, k_stride: int, itemsize: int,
                   vector_bytes: int = VEC_BYTES) -> bool:
    """Whether a vector tile's K rows alias in L1 (see ALIASED_K_ROWS): more than
    ALIASED_K_ROWS of them, a multiple of 4 KiB apart, read by more than one row block,
    with 32-byte vectors.

    >>> aliased_k_rows(96, 32, 9216, 4, 32), aliased_k_rows(96, 32, 9216, 4, 64)
    (True, False)
    >>> aliased_k_rows(96, 32, 9600, 4, 32), aliased_k_rows(96, 6, 9216, 4, 32)
    (False, False)
    """
    return bool(vector_bytes == 32 and k > ALIASED_K_ROWS and rows > VEC_ROWS
                and k_stride != 0 and (k_stride * itemsize) % 4096 == 0)


def k_share(k: int, k_steps: float = VEC_K_STEPS) -> float:
    """The share of a micro-tile's time that goes to its ``k`` K steps: each loads and
    stores its outputs once, ``k_steps`` K steps' worth (the machine's,
    MachineParams.vec_k_steps) from VEC_LONG_K on; VEC_K_STEPS up to VEC_SHORT_K, where
    the kernel runs at a third of its rate or less on every machine measured; a blend
    between.

    >>> round(k_share(32, 2.5), 3), round(k_share(8, 2.5), 3), round(k_share(12, 2.5), 3)
    (0.928, 0.5, 0.696)
    """
    if k >= VEC_LONG_K or k_steps >= VEC_K_STEPS:
        steps = k_steps
    else:
        short = min(1.0, (VEC_LONG_K - k) / (VEC_LONG_K - VEC_SHORT_K))
        steps = k_steps + (VEC_K_STEPS - k_steps) * short
    return k / (k + steps)


def vec_efficiency(length: int, rows: int, k: int, itemsize: int,
                   k_steps: float = VEC_K_STEPS) -> float:
    """The vector kernel's fraction of its rate on a tile ``length`` long along the
    vector axis, of ``rows`` rows and ``k`` K steps.  Full micro-tiles have VEC_ROWS
    rows, and a row costs about as many loads as a micro-tile's products, so short and
    left-over row blocks run at their share of the rows; a partial last line computes
    its whole line; and each micro-tile loads and stores its outputs once
    (:func:`k_share`, ``k_steps`` the machine's).

    A long tile of whole micro-tiles runs at the kernel's rate; a short one of 4 rows
    (fewer than one micro-tile's, at every vector width) well below it (0.43 of it with
    64-byte vectors and 8-row micro-tiles, 0.63 with 32-byte ones and 6 rows):

    >>> round(vec_efficiency(4096, 24, 1000, 4), 2)
    0.99
    >>> vec_efficiency(84, 4, 1000, 4) < 0.7
    True
    """
    lanes = max(VEC_BYTES, 16) // itemsize
    return (rows / (VEC_ROWS * -(-rows // VEC_ROWS)) * length / (lanes * -(-length // lanes))
            * k_share(k, k_steps))


def vec_strips(length: int, itemsize: int, vector_bytes: int = VEC_BYTES,
               lines: int = VEC_LINES) -> int:
    """The strips of micro-tiles a vector tile ``length`` long runs along its vector
    axis: ``lines`` vectors each, the last shorter.

    >>> vec_strips(432, 4, 64, 3), vec_strips(64, 4, 64, 3), vec_strips(64, 4, 32, 2)
    (9, 2, 4)
    """
    lanes = max(vector_bytes, 16) // itemsize
    vectors = -(-length // lanes)
    return -(-vectors // lines)


def vec_overhead_seconds(length: int, itemsize: int, tile_seconds: float,
                         strip_seconds: float) -> float:
    """A vector tile's set-up beyond the walker's bookkeeping: ``tile_seconds`` per tile
    and ``strip_seconds`` per strip (MachineParams.vec_tile_seconds and
    vec_strip_seconds, which the calibrations measure).  Its share grows as tiles
    shrink: on an AMD EPYC Zen 5 with AVX-512 code (one thread, operands in cache) a
    64 x 8 x 64 tile took 301 ns and a 64 x 96 x 64 one 3090, 48 ns a tile more than
    the rate; at 432 long (9 strips against 2) 84-96 ns.  Unpriced, it put FCTN's
    middle step on 8-row tiles (24,000 of them, predicted 4.7 ms, measured 9.3) over
    60-row ones (5.4 predicted, 5.2 measured)."""
    return tile_seconds + strip_seconds * vec_strips(length, itemsize)


def vec_line_bytes(k: int, length: int, itemsize: int) -> int:
    """The bytes of lines a vector-kernel tile reads from its vector operand: K rows of
    ``length`` elements, each a whole number of 64-byte lines (the kernel prefetches a
    next tile only up to tiles.NEXT_TILE_PREFETCH_BYTES of them).

    >>> vec_line_bytes(96, 96, 4)
    36864
    """
    return k * -(-length * itemsize // LINE_BYTES) * LINE_BYTES


def along(axis: int, tile: GemmTile) -> tuple[int, int]:
    """(length, rows) of a vector tile: its extent along the vector axis (``axis`` 1:
    M, 2: N) and across it."""
    return (tile.m, tile.n) if axis == 1 else (tile.n, tile.m)


def streamed_note(table: np.ndarray) -> str:
    """The end of every vector kind's description: its stores and the target."""
    streamed = (", written to memory with non-temporal stores (out is written once and "
                "too large for the cache to keep)") if table[T_STREAM] else ""
    return streamed + f"; kernels generated for {target().describe()}"


def _takes(t: GemmTile) -> int:
    return vec_axis(*t)


def _may_take(t: GemmTile) -> bool:
    # vec_axis needs the vector operand and out at unit stride along a vector axis of at
    # least two vectors, and VEC_MIN_ROWS rows across it.
    least = _shortest(t.itemsize)
    return ((t.a[0] == 1 and t.c[0] == 1 and t.m >= least and t.n >= VEC_MIN_ROWS)
            or (t.b[1] == 1 and t.c[1] == 1 and t.n >= least and t.m >= VEC_MIN_ROWS))


def _shortest(itemsize: int) -> int:
    """The shortest vector axis vec_axis takes: two vectors (K rows in one run), or a
    micro-tile if that is shorter."""
    return min(VEC_LINES * VEC_BYTES // itemsize, 2 * VEC_BYTES // itemsize)


def _encode(table: np.ndarray, t: GemmTile, axis: int, low: Lowering) -> None:
    set_fields(table, mode=MODE, vec_fn=low.entries.address("vec"), swap=axis == 2,
               stream=low.streamed,
               ahead=1)  # see lower.prefetch_ahead for blocked programs


def _price(t: GemmTile, axis: int, p: PriceArgs) -> Price:
    length, rows = along(axis, t)
    eff = vec_efficiency(length, rows, t.k, t.itemsize, p.params.vec_k_steps)
    overhead = vec_overhead_seconds(length, t.itemsize, p.params.vec_tile_seconds,
                                    p.params.vec_strip_seconds)
    return Price(p.flops / (p.params.vec_flops(p.dtype) * eff) + overhead,
                 streams=p.streamed)


def _floor_rate(m: int, n: int, k: int, itemsize: int, params: MachineParams,
                dtype: np.dtype) -> float:
    if VEC_BYTES and max(m, n) >= _shortest(itemsize) and min(m, n) >= VEC_MIN_ROWS:
        steps = params.vec_k_steps
        return params.vec_flops(dtype) * max(vec_efficiency(m, n, k, itemsize, steps),
                                             vec_efficiency(n, m, k, itemsize, steps))
    return 0.0


def _owns(table: np.ndarray) -> bool:
    return bool(table[T_MODE] == MODE and not table[T_VEC_T] and not table[T_VEC_P])


def _describe(table: np.ndarray, dtype: np.dtype) -> str:
    m, n, k = int(table[T_M]), int(table[T_N]), int(table[T_K])
    vec = 2 if table[T_SWAP] else 1
    axis_name, rows = ("m", n) if vec == 1 else ("n", m)
    return (f"each tile runs the vector kernel: {axis_name}={m if vec == 1 else n} "
            f"along the unit stride of {'in0' if vec == 1 else 'in1'} and out, "
            f"{rows} rows of outer products, k={k}, accumulated in registers "
            f"(no packing){streamed_note(table)}")



def stream_factor(args: ScheduleArgs, operand: int) -> float:
    """How much slower than its bytes a vector-kernel tile reads its vector operand (the
    tile's ``axis`` - 1) when it reads more than VEC_STREAM_K K rows at once and is too
    large for the kernel to prefetch as the next tile (NEXT_TILE_PREFETCH_BYTES): more
    streams than the prefetchers follow.  Fitted to dca,bd->abc's tiles at 384 rows
    (1.7x) and bda,dc->abc's (1.2-1.7x).  The other operand moves at its bytes."""
    c, ch = args.c, args.ch
    if operand != args.axis - 1 or ch.k == NO_AXIS:
        return 1.0
    k = c.axes[ch.k].extent
    length = c.axes[ch.m if operand == 0 else ch.n].extent
    if (k <= VEC_STREAM_K
            or vec_line_bytes(k, length, c.dtype.itemsize) <= NEXT_TILE_PREFETCH_BYTES):
        return 1.0
    return math.sqrt(k / VEC_STREAM_K)

KIND = TileKind(name="vec", mode=MODE, owns=_owns, describe=_describe, takes=_takes,
                may_take=_may_take, encode=_encode, price=_price, floor_rate=_floor_rate,
                vector=True, read_factor=stream_factor,
                pack_variants=broadcast_pack_variants, split_variants=k_split_variants,
                axis_splits=axis_splits, k_blocks=k_blocks)
