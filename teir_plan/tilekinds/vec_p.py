"""The packed vector tile (executor/gemm_tiles.gemm_vec_packed): the vector kernel on
a tile whose vector operand has its unit stride along K rather than along the vector
axis; each tile first transposes that operand's K x length block, in registers, into
the worker's buffer."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teir_plan.divisors import divisor_near, divisors_between
from teir_plan.isa import LINE_BYTES
from teir_plan.teir.enums import DimType
from teir_plan.tilekinds.kind import (
    GemmTile,
    Lowering,
    Price,
    PriceArgs,
    Reshapes,
    TileKind,
    VariantArgs,
)
from teir_plan.tilekinds.table import T_K, T_M, T_MODE, T_N, T_SWAP, T_VEC_P, set_fields
from teir_plan.tilekinds.vec import MODE, along, stream_factor, streamed_note, vec_efficiency
from teir_plan.tilekinds.vec_variants import row_tile
from teir_plan.tiles import VEC_BYTES, VEC_MAX_ROWS_TIMES_K, VEC_MAX_SPAN, VEC_MIN_ROWS, VEC_ROWS

if TYPE_CHECKING:
    from teir_plan.frontend.contraction import Contraction

# The largest block (bytes) of the vector operand a tile transposes into the worker's
# buffer, which every row block then reads from cache.
VEC_P_MAX_BYTES = 64 * 1024
# The shortest vector axis, in lines (against BLAS' transposed-operand calls:
# docs/decisions.md).
VEC_P_MIN_LINES = 2
# The transpose's rate, bytes read plus written per second on one core (in registers,
# a line by a line; measured about 130 GB/s).
VEC_P_BYTES_PER_SECOND = 120e9


def packed_ld(length: int, itemsize: int) -> int:
    """The buffer's row stride for a vector axis this long: whole lines.  (Rows a
    multiple of 4 KiB apart, which would share L1 sets, would need blocks of at least
    16 x 4 KiB: over VEC_P_MAX_BYTES.)

    >>> packed_ld(20, 4)
    32
    """
    lanes = LINE_BYTES // itemsize
    return -(-length // lanes) * lanes


def vec_p_axis(m: int, n: int, k: int, br: int, a: tuple[int, int], b: tuple[int, int],
               c: tuple[int, int], itemsize: int) -> int:
    """Whether a GEMM tile runs on the vector kernel after transposing its vector
    operand's block into the worker's buffer, and along which axis: 1 along M (out has
    unit stride along M, A along K), 2 along N (out along N, B along K), 0 not at all.
    Asked when the vector kernel's and the transposed kernel's rules say no.

    The vector axis must be at least VEC_P_MIN_LINES lines long, K at least a line, the
    block at most VEC_P_MAX_BYTES, and the rest as for the vector kernel: a plain GEMM,
    at least VEC_MIN_ROWS rows, rows x K at most VEC_MAX_ROWS_TIMES_K, and the other
    operand's block within VEC_MAX_SPAN bytes.

    >>> vec_p_axis(128, 128, 64, 1, (64, 1), (1, 64), (128, 1), 4)  # bhqd,bhkd->bhqk
    2
    >>> vec_p_axis(128, 128, 64, 1, (64, 1), (128, 1), (128, 1), 4)  # B along N: vec's
    0
    """
    if br != 1 or itemsize not in (4, 8) or not VEC_BYTES:
        return 0
    lanes = LINE_BYTES // itemsize

    def fits(length: int, rows: int, s_rows: int, s_k: int) -> bool:
        return (length >= VEC_P_MIN_LINES * lanes and k >= lanes and rows >= VEC_MIN_ROWS
                and rows * k <= VEC_MAX_ROWS_TIMES_K
                and k * packed_ld(length, itemsize) * itemsize <= VEC_P_MAX_BYTES
                and ((rows - 1) * abs(s_rows) + (k - 1) * abs(s_k) + 1) * itemsize
                <= VEC_MAX_SPAN)

    if c[0] == 1 and a[1] == 1 and a[0] != 1 and fits(m, n, b[1], b[0]):
        return 1
    if c[1] == 1 and b[0] == 1 and b[1] != 1 and fits(n, m, a[0], a[1]):
        return 2
    return 0


def _takes(t: GemmTile) -> int:
    return vec_p_axis(*t)


def _may_take(t: GemmTile) -> bool:
    # Out at unit stride along the vector axis, its operand along K, and rows.
    return ((t.c[0] == 1 and t.a[1] == 1 and t.n >= VEC_MIN_ROWS)
            or (t.c[1] == 1 and t.b[0] == 1 and t.m >= VEC_MIN_ROWS))


def _encode(table: np.ndarray, t: GemmTile, axis: int, low: Lowering) -> None:
    length, _ = along(axis, t)
    ld = packed_ld(length, t.itemsize)
    set_fields(table, mode=MODE, vec_fn=low.entries.address("vec"),
               tile_fn=low.entries.address("vec_p"), swap=axis == 2, stream=low.streamed,
               vec_p=ld,
               # The block, from the buffer's first whole line.
               scratch=t.k * ld + LINE_BYTES // t.itemsize)


def _price(t: GemmTile, axis: int, p: PriceArgs) -> Price:
    length, rows = along(axis, t)
    eff = vec_efficiency(length, rows, t.k, t.itemsize, p.params.vec_k_steps)
    per_call = p.flops / (p.params.vec_flops(p.dtype) * eff)
    # The vector operand's block transposed into the worker's buffer first.
    packed = t.k * length * t.itemsize
    repack = 2 * packed / VEC_P_BYTES_PER_SECOND
    per_call += repack
    return Price(per_call, packed_bytes=packed, repack_seconds=repack, streams=p.streamed)


def _owns(table: np.ndarray) -> bool:
    return bool(table[T_MODE] == MODE and table[T_VEC_P])


def _describe(table: np.ndarray, dtype: np.dtype) -> str:
    m, n, k = int(table[T_M]), int(table[T_N]), int(table[T_K])
    vec = 2 if table[T_SWAP] else 1
    axis_name, rows = ("m", n) if vec == 1 else ("n", m)
    return (f"each tile first transposes {'in0' if vec == 1 else 'in1'}'s "
            f"k={k} x {axis_name}={m if vec == 1 else n} block (unit stride along k) "
            f"into the worker's buffer, in registers, then runs the vector kernel "
            f"on it: {rows} rows of outer products along the unit stride of out, "
            f"accumulated in registers (no whole-operand packing){streamed_note(table)}")


def packed_split_variants(args: VariantArgs) -> list[Contraction]:
    """The kind's ``split_variants``: contractions split for the packed vector kernel
    (its rule, :func:`vec_p_axis`): where out has unit stride along an M or N axis whose
    operand has it along a K axis instead, that axis is split so that the operand's K x
    length block fits VEC_P_MAX_BYTES, and the other role's axes into row tiles
    (:func:`packed_rows_split`); a K longer than K_PACKED_TARGET is also offered in
    blocks of about that, accumulated in out.  A loop over the rows inside one over the
    blocks reuses each transposed block (the cost model's rule): ij,kj->ik's 256^2
    product as 64-wide x 32-row tiles ran 119-126 us against BLAS' 154-155 on both
    cores, bi,oi->bo's 256x512 by 512x512 in K blocks of 128, 64-wide x 32-row tiles,
    459-472 against 566."""
    c, reshape = args.c, args.reshapes
    ax = c.axes
    out = []
    for v in ax:
        if v.role not in (DimType.M, DimType.N) or v.strides[2] != 1:
            continue
        op = 0 if v.role is DimType.M else 1
        if v.strides[op] in (0, 1):
            continue
        for ki, k in enumerate(ax):
            if k.role is not DimType.K or k.strides[op] != 1:
                continue
            bases = [c]
            if k.extent > 2 * K_PACKED_TARGET:
                inner = divisor_near(k.extent, K_PACKED_TARGET)
                if inner is not None:
                    bases.append(reshape.split_axis(c, ki, inner))
            for base in bases:
                out += _packed_splits(reshape, base, base.axes.index(v), op)
    return out


# The K block offered to packed vector tiles with a long K (packed_split_variants).
K_PACKED_TARGET = 128


def _packed_splits(reshape: Reshapes, c: Contraction, vi: int, op: int) -> list[Contraction]:
    """``c`` with axis ``vi`` (out's unit stride; unit stride along the innermost K in
    operand ``op``) cut to blocks within VEC_P_MAX_BYTES, and each axis of the other
    role cut to row tiles within the kernel's rules (itself included when it needs no
    cut only if something was cut)."""
    ax = c.axes
    v = ax[vi]
    isz = c.dtype.itemsize
    lanes = LINE_BYTES // isz  # elements of a line
    k = next(a for a in ax if a.role is DimType.K and a.strides[op] == 1)
    most = VEC_P_MAX_BYTES // (k.extent * isz)
    lengths = [d for d in divisors_between(v.extent, VEC_P_MIN_LINES * lanes, most)
               if d % lanes == 0]
    if not lengths:
        return []
    split = reshape.split_axis(c, vi, lengths[-1]) if lengths[-1] < v.extent else c
    out = []
    rows_role = DimType.N if v.role is DimType.M else DimType.M
    for ri, r in enumerate(split.axes):
        if r.role is rows_role:
            inner = packed_rows_split(r.extent, k.extent, abs(r.strides[1 - op]),
                                      abs(k.strides[1 - op]), isz)
            if inner is not None and inner < r.extent:
                out.append(reshape.split_axis(split, ri, inner))
    if split is not c or out:
        out.append(split)
    return out


def packed_rows_split(extent: int, k: int, s_rows: int, s_k: int, itemsize: int) -> int | None:
    """The largest divisor of a row axis ``extent`` that a vector-kernel tile with K ``k``
    takes: rows x K within VEC_MAX_ROWS_TIMES_K and the other operand's rows x K block
    (rows ``s_rows`` apart, K steps ``s_k``) within VEC_MAX_SPAN bytes; a multiple of
    VEC_ROWS where one fits, at least VEC_ROWS; None if none.

    >>> packed_rows_split(256, 128, 512, 1, 4), packed_rows_split(256, 256, 256, 1, 4)
    (32, 32)
    """
    span_rows = ((VEC_MAX_SPAN // itemsize - 1 - (k - 1) * s_k) // s_rows + 1
                 if s_rows else extent)
    return row_tile(extent, VEC_ROWS, min(VEC_MAX_ROWS_TIMES_K // k, span_rows, extent))


KIND = TileKind(name="vec_p", mode=MODE, owns=_owns, describe=_describe, takes=_takes,
                may_take=_may_take, encode=_encode, price=_price, vector=True,
                read_factor=stream_factor, split_variants=packed_split_variants)
