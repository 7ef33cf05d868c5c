"""The transposed vector kernel (executor/transposed_kernel.py): a tile whose output
has its unit stride along the short axis (the rows) rather than the long one; the sums
are transposed in registers and written as runs along out's unit stride."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teir_plan.isa import LINE_BYTES
from teir_plan.tilekinds.kind import GemmTile, Lowering, Price, PriceArgs, TileKind
from teir_plan.tilekinds.table import T_K, T_M, T_MODE, T_N, T_SWAP, T_VEC_T, set_fields
from teir_plan.tilekinds.vec import MODE, along, k_share, stream_factor, streamed_note
from teir_plan.tiles import (
    BLOCKING,
    VEC_BYTES,
    VEC_K_STEPS,
    VEC_MAX_ROWS_TIMES_K,
    VEC_MAX_SPAN,
    gather_bytes,
)

if TYPE_CHECKING:
    from teir_plan.machine.params import MachineParams

# Rows of the largest micro-tile (the blocking record's transposed shape).
VEC_T_TILE_ROWS = BLOCKING.shapes.transposed_rows
# The most rows it takes: beyond, the output's runs are long enough for other tiles.
VEC_T_MAX_ROWS = 64
# Its extra work per micro-tile, in K steps (the transposes of its sums and the masked
# stores of short runs, on top of the output loads and stores the vector kernel also
# pays, VEC_K_STEPS): set so that the two kernels' predicted rates stand as measured on
# the same tiles (docs/decisions.md).
VEC_T_K_STEPS = 20
# A micro-tile of fewer rows leaves the multiply-add units waiting on their own latency
# (one accumulator per row).
VEC_T_FULL_ROWS = 12
# The shortest vector axis, in lines: its per-call costs (set-up, transposes, the call)
# outweigh shorter tiles.
VEC_T_MIN_LINES = 4
# A tile's fixed cost besides the loop walker's: the call through its address, and its
# buffer's bookkeeping.
VEC_T_CALL_SECONDS = 150e-9


def vec_t_axis(m: int, n: int, k: int, br: int, a: tuple[int, int], b: tuple[int, int],
               c: tuple[int, int], itemsize: int) -> int:
    """Whether a GEMM tile runs on the transposed vector kernel, and along which axis: 1
    along M (A has unit stride along M, out along N: the rows are N), 2 along N (B along
    N, out along M), 0 not at all.  Asked when the vector kernel's rule says no.

    The vector axis must be at least VEC_T_MIN_LINES lines long, the tile a plain GEMM with 2 to
    VEC_T_MAX_ROWS rows and rows x K at most VEC_MAX_ROWS_TIMES_K, the other operand's
    block within VEC_MAX_SPAN bytes (as for the vector kernel), and out's stride along the
    vector axis must not be 0.

    >>> vec_t_axis(9600, 20, 24, 1, (1, 9600), (20, 1), (20, 1), 4)  # degc,gfab->abcdef
    1
    >>> vec_t_axis(9600, 20, 24, 1, (1, 9600), (20, 1), (1, 9600), 4)  # out along M
    0
    """
    if br != 1 or itemsize not in (4, 8) or not VEC_BYTES:
        return 0
    lanes = LINE_BYTES // itemsize

    def fits(length: int, rows: int, s_rows: int, s_k: int, c_vec: int) -> bool:
        return (length >= VEC_T_MIN_LINES * lanes and 2 <= rows <= VEC_T_MAX_ROWS
                and rows * k <= VEC_MAX_ROWS_TIMES_K and c_vec != 0
                and ((rows - 1) * abs(s_rows) + (k - 1) * abs(s_k) + 1) * itemsize
                <= VEC_MAX_SPAN)

    if a[0] == 1 and c[1] == 1 and fits(m, n, b[1], b[0], c[0]):
        return 1
    if b[1] == 1 and c[0] == 1 and fits(n, m, a[0], a[1], c[1]):
        return 2
    return 0


def vec_t_efficiency(length: int, rows: int, k: int, itemsize: int,
                     k_steps: float = VEC_K_STEPS) -> float:
    """The transposed vector kernel's fraction of the vector kernel's rate on a tile
    ``length`` long along its vector axis, of ``rows`` rows and ``k`` K steps: its
    micro-tiles are one line along the vector axis and up to VEC_T_TILE_ROWS rows
    (computed in multiples of 4, fewer than VEC_T_FULL_ROWS waiting on the
    multiply-adds' latency), and each loads and stores its outputs once after the K loop
    (``vec.k_share``, as for the vector kernel) and transposes them
    (K / (K + VEC_T_K_STEPS)).

    A long tile of 20 rows runs at under half the vector kernel's rate (0.41 with
    64-byte vectors, 0.35 with 32-byte ones), a short one of 8 rows at less still:

    >>> 0.3 < vec_t_efficiency(9600, 20, 24, 4) < 0.5
    True
    >>> vec_t_efficiency(100, 8, 24, 4) < vec_t_efficiency(9600, 20, 24, 4)
    True
    """
    lanes = LINE_BYTES // itemsize
    if rows <= 0 or length <= 0:
        return 0.0
    # Whole micro-tiles of VEC_T_TILE_ROWS rows, then one of the rest rounded up to 4.
    full, rest = divmod(rows, VEC_T_TILE_ROWS)
    padded = -(-rest // 4) * 4
    computed = full * VEC_T_TILE_ROWS + padded
    latency = (full * VEC_T_TILE_ROWS * min(1.0, VEC_T_TILE_ROWS / VEC_T_FULL_ROWS)
               + rest * min(1.0, padded / VEC_T_FULL_ROWS))
    return (latency / computed * length / (lanes * -(-length // lanes))
            * k_share(k, k_steps) * k / (k + VEC_T_K_STEPS))


def scratch_elements(rows: int, k: int, itemsize: int) -> int:
    """Elements of the per-worker buffer the kernel (transposed_kernel.gemm_vec_t) needs
    for a tile of ``rows`` rows and ``k`` K steps: one line of the vector axis across
    the rows and a line carried over (a streamed output), then S's rows x K block padded
    to a multiple of 4 rows (S's rows not one element apart, or not a multiple of 4).

    >>> scratch_elements(20, 24, 4)
    816
    """
    lanes = max(VEC_BYTES or 16, LINE_BYTES) // itemsize
    return rows * lanes + lanes + (rows + 3) // 4 * 4 * max(k, 1)


def _takes(t: GemmTile) -> int:
    return vec_t_axis(*t)


def _may_take(t: GemmTile) -> bool:
    # The long operand at unit stride along the vector axis, out along the rows.
    shortest = VEC_T_MIN_LINES * LINE_BYTES // t.itemsize
    return ((t.a[0] == 1 and t.c[1] == 1 and t.m >= shortest)
            or (t.b[1] == 1 and t.c[0] == 1 and t.n >= shortest))


def _out_along(t: GemmTile, axis: int) -> int:
    """Out's stride along the vector axis."""
    return t.c[0] if axis == 1 else t.c[1]


def _encode(table: np.ndarray, t: GemmTile, axis: int, low: Lowering) -> None:
    length, rows = along(axis, t)
    # Its output streams only as one contiguous block: out's stride along the vector
    # axis is the rows' extent (gemm_vec_t; the cost model's rule too).
    set_fields(table, mode=MODE, vec_t=low.entries.address("vec_t"), swap=axis == 2,
               stream=low.streamed and _out_along(t, axis) == rows,
               scratch=scratch_elements(rows, t.k, t.itemsize))


def _price(t: GemmTile, axis: int, p: PriceArgs) -> Price:
    length, rows = along(axis, t)
    isz = t.itemsize
    eff = vec_t_efficiency(length, rows, t.k, isz, p.params.vec_k_steps)
    # Its output streams only as one contiguous block (see _encode); other blocks go
    # through the cache.
    streams = p.streamed and _out_along(t, axis) == rows
    # S, the broadcast operand: its stride along the rows and along K.
    rows_stride, k_stride = (t.b[1], t.b[0]) if axis == 1 else (t.a[0], t.a[1])
    packed = 0
    if rows_stride != 1 or rows % 4:
        # The kernel first copies S's rows x K block, padded, into its buffer.
        packed = rows * t.k * gather_bytes((rows_stride, k_stride), isz)
    per_call = p.flops / (p.params.vec_flops(p.dtype) * eff)
    per_call += VEC_T_CALL_SECONDS + packed / p.params.copy_bytes_per_second
    return Price(per_call, packed_bytes=packed, streams=streams)


def _floor_rate(m: int, n: int, k: int, itemsize: int, params: MachineParams,
                dtype: np.dtype) -> float:
    lanes = LINE_BYTES // itemsize
    if (VEC_BYTES and max(m, n) >= VEC_T_MIN_LINES * lanes
            and 2 <= min(m, n) <= VEC_T_MAX_ROWS):
        steps = params.vec_k_steps
        return params.vec_flops(dtype) * max(vec_t_efficiency(m, n, k, itemsize, steps),
                                             vec_t_efficiency(n, m, k, itemsize, steps))
    return 0.0


def _owns(table: np.ndarray) -> bool:
    return bool(table[T_MODE] == MODE and table[T_VEC_T])


def _describe(table: np.ndarray, dtype: np.dtype) -> str:
    m, n, k = int(table[T_M]), int(table[T_N]), int(table[T_K])
    vec = 2 if table[T_SWAP] else 1
    axis_name, rows = ("m", n) if vec == 1 else ("n", m)
    return (f"each tile runs the transposed vector kernel: "
            f"{axis_name}={m if vec == 1 else n} along the unit stride of "
            f"{'in0' if vec == 1 else 'in1'}, {rows} rows of outer products along the "
            f"unit stride of out, k={k}, accumulated in registers and transposed "
            f"there (no packing){streamed_note(table)}")


KIND = TileKind(name="vec_t", mode=MODE, owns=_owns, describe=_describe, takes=_takes,
                may_take=_may_take, encode=_encode, price=_price, floor_rate=_floor_rate,
                vector=True, read_factor=stream_factor)
