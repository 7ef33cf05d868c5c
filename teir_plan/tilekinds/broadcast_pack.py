"""Packing the vector kernel's broadcast operand into blocks, for large GEMM-like tiles
(the vec kind's ``pack_variants``).

The vector kernel (tilekinds/vec.py) reads its broadcast operand's rows x K block once
per micro-tile along the vector axis, so that block must sit in L1: at most
VEC_MAX_ROWS_TIMES_K elements within VEC_MAX_SPAN bytes.  A row-major ``ij,jk->ik``
gives no such block (its rows are a whole row of A apart), so large products went to
BLAS.  This variant copies the broadcast operand once into blocks of R rows x KB K
elements, each block contiguous (K innermost), the blocks in the order the tiles read
them; the product is then tiles of R rows x KB steps of K, the vector axis whole (or in
cache-sized parts), accumulating over the K blocks.

Offered only where this machine's vector kernel is measured well ahead of BLAS
(MachineParams: vec_flops at least BROADCAST_PACK_MIN_ADVANTAGE x gemm_flops): BLAS
packs its operands the same way, and the kernel on these tiles runs at 0.8 of its
calibrated rate with 64-byte vectors and 0.64 with 32-byte ones.  ``ij,jk->ik`` on
1024^3 float32, both cores of an AMD EPYC Zen 5 (AVX-512; numpy's OpenBLAS runs its
AVX2 kernels there, calibrated at half the kernel's rate): 4.9-5.5 ms against BLAS'
8.6-9.0 (R 64, KB 128; R 32-128 and KB 64-256 within 15 % of that).  The same tiles at 32-byte
vectors: 15.1-15.6 ms against BLAS' 12.4 (1152^3), where the calibrated rates are
1.2x apart: not offered.  With equal rates (the reference machine's) the plans stay
BLAS'.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from teir_plan.divisors import largest_divisor
from teir_plan.teir.enums import DimType
from teir_plan.tilekinds.vec_variants import row_tile, vec_k_most
from teir_plan.tiles import VEC_BYTES, vector_kernel_dtype

if TYPE_CHECKING:
    from teir_plan.frontend.contraction import Contraction
    from teir_plan.planner.pack import Pack
    from teir_plan.tilekinds.kind import Reshapes, VariantArgs

BROADCAST_PACK_MIN_ADVANTAGE = 1.4
# The block's rows: the largest divisor of the row axis in [ROWS_LEAST, ROWS_MOST], a
# multiple of VEC_ROWS where one is (measured best at 64 of 32-128).
ROWS_MOST = 64
ROWS_LEAST = 16
# The block's K: the largest divisor of the K axis within vec_variants.vec_k_most for its
# rows (64 x 128 float64 is exactly the span), and at least K_LEAST.  (Not a multiple
# of VEC_ROWS: K = 1000 in blocks of 40 instead of 125 ran 12 % slower.)
K_LEAST = 16
# The vector axis is also offered in parts of about this many elements, when at least
# four times as long: a part's K block of the vector operand then stays in L2.
VECTOR_PART = 512
# The least flops per packed element: each element of the broadcast operand is used
# once per element of the vector axis; a short vector axis does not pay for the copy.
MIN_VECTOR_LENGTH = 256


def broadcast_pack_variants(args: VariantArgs) -> list[tuple[Contraction, Pack]]:
    """The contraction with its broadcast operand packed in rows x K blocks (and the pack), for
    each axis a vector-kernel tile could run along: unit stride in the output and in
    one input (the vector operand), the other input's largest own axis the rows, the
    largest K axis the K.  Empty where the kernel is not well ahead of BLAS here, and
    where the extents have no divisor in range (a prime K keeps BLAS)."""
    c, params, threads, reshape = args
    if (not VEC_BYTES or not vector_kernel_dtype(c.dtype)
            or params.vec_flops(c.dtype) < BROADCAST_PACK_MIN_ADVANTAGE
            * params.gemm_flops(c.dtype)):
        return []
    ax = c.axes
    out = []
    for v, vaxis in enumerate(ax):
        if vaxis.role not in (DimType.M, DimType.N) or vaxis.strides[2] != 1:
            continue
        op = 0 if vaxis.role is DimType.M else 1
        bc = 1 - op
        if vaxis.strides[op] != 1 or vaxis.extent < MIN_VECTOR_LENGTH:
            continue
        own = DimType.N if op == 0 else DimType.M
        rows = [i for i, a in enumerate(ax) if a.role is own]
        ks = [i for i, a in enumerate(ax) if a.role is DimType.K and a.strides[op] != 0
              and a.strides[bc] != 0]
        if not rows or not ks:
            continue
        r = max(rows, key=lambda i: ax[i].extent)
        k = max(ks, key=lambda i: ax[i].extent)
        rb = ax[r].extent if ax[r].extent <= ROWS_MOST else row_tile(ax[r].extent,
                                                                      ROWS_LEAST, ROWS_MOST)
        if rb is None:
            continue
        k_most = vec_k_most(rb, c.dtype.itemsize)
        kb = ax[k].extent if ax[k].extent <= k_most else largest_divisor(
            ax[k].extent, K_LEAST, k_most)
        if kb is None:
            continue
        parts = [0]
        if vaxis.extent >= 4 * VECTOR_PART:
            d = largest_divisor(vaxis.extent, VECTOR_PART // 2, VECTOR_PART)
            if d is not None:
                parts.append(d)
        # Parts for the threads where the row blocks and the other free axes are too few
        # to share out (a batch of 64 rows: one block), which left K, whose partial sums
        # ran 1.3-1.4x slower (bi,ij->bj 64 x 512 x 512 on 2 threads: 131-137 us against
        # 95-101 in parts of 256).  With as many row blocks as threads the row blocks are
        # the faster share (128 x 768 x 768: 336-343 us against 376-386 in parts).
        shared = ax[r].extent // rb * math.prod(
            a.extent for i, a in enumerate(ax)
            if a.role in (DimType.M, DimType.N) and i not in (v, r))
        d = reshape.parallel_part(vaxis.extent, threads) if shared < threads else None
        if d is not None and d not in parts:
            parts.append(d)
        for part in parts:
            split = _split(reshape, c, [(v, part), (r, rb), (k, kb)])
            names = [a.name for a in split.axes]
            # Blocks contiguous, K innermost: the other axes of the operand outside (in
            # its own order), then row blocks, K blocks, rows, K.
            tail = [names.index(ax[r].name + "^") if rb < ax[r].extent else None,
                    names.index(ax[k].name + "^") if kb < ax[k].extent else None,
                    names.index(ax[r].name), names.index(ax[k].name)]
            inner = [i for i in tail if i is not None]
            present = [i for i, a in enumerate(split.axes)
                       if a.strides[bc] != 0 and i not in inner]
            outer = sorted(present, key=lambda i: -abs(split.axes[i].strides[bc]))
            packed = reshape.pack(split, bc, params, threads, outer + inner)
            if packed is not None:
                out.append(packed)
    return out


def _split(reshape: Reshapes, c: Contraction, splits: list[tuple[int, int]]) -> Contraction:
    """``c`` with each (axis index, inner extent) split (inner 0 or the whole extent:
    not), the later axes first so that every index still names its axis; the outer
    parts are named ``name^``, which must be new."""
    names = {a.name for a in c.axes}
    for i, inner in sorted(splits, reverse=True):
        if 0 < inner < c.axes[i].extent:
            assert c.axes[i].extent % inner == 0 and c.axes[i].name + "^" not in names
            c = reshape.split_axis(c, i, inner)
    return c
