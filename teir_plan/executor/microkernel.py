"""The vector GEMM kernel: GEMM tiles that are long along one axis and short along the
others, computed as outer products in registers.

BLAS is at its best on large square-ish tiles; on a tile such as m = 432, n = 24,
k = 36 (a block of ``efbad,cf->abcde``) it spends as long packing and unpacking as
computing (92 GFLOP/s on this machine's two cores).  When one operand and the output
share a unit-stride axis (the *vector axis*, M or N), no packing is needed at all:
each step of the K loop loads a few 64-byte lines of that operand along the vector axis,
broadcasts one element of the other operand per output row, and adds their products
into accumulators that stay in registers for the whole K loop; the output tile is
written once at the end (measured: the same blocks at 149 GFLOP/s).

:func:`gemm_vec` walks a tile in micro-tiles of ``rows x (lines x L)`` output elements
(``L`` elements per 64-byte line: 16 float32, 8 float64); each micro-tile is one call of
an intrinsic that emits the K loop as LLVM IR with the accumulators as loop-carried
vector values (numba has no SIMD types of its own).  A vector axis that ends in a
partial line ends in a micro-tile whose last line is read and written with masked loads
and stores (the elements past the tile are not touched).  The lines of the next
micro-tile along the vector axis are prefetched while the first row block computes (the
K rows are far apart in memory, too many streams for the hardware prefetchers).

Every element read or written is one the tile's own loops would touch: the same proofs
of reach as for any GEMM tile cover it.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


# Helpers for intrinsics (executor/kernels.py's use them too).
def as_intp(context, builder, value, ty):  # type: ignore[no-untyped-def]
    """An integer argument of an intrinsic as an intp LLVM value."""
    return context.cast(builder, value, ty, types.intp)


def line_lanes(dtype) -> int:  # type: ignore[no-untyped-def]
    """Elements of a numba float type in one 64-byte line (a zmm register)."""
    return 512 // dtype.bitwidth


def _micro(rows: int, lines: int):  # type: ignore[no-untyped-def]
    """An intrinsic computing, for r < rows and v < lines * L,

        C[co + r*cn + v]  (=, or += unless ``first``)
            sum_{p < K} V[vo + p*vk + v] * S[so + p*sk + r*sn]

    only the first ``tail`` elements of the last line (the others are neither read nor
    written: masked loads and stores), and prefetching V[vo + p*vk + pf + j*L] for
    j < lines in each K step."""

    @intrinsic
    def micro(typingctx, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail):  # type: ignore[no-untyped-def]
        sig = types.void(V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            tys = signature.args
            dt = tys[0].dtype
            lanes = line_lanes(dt)
            elem = context.get_data_type(dt)
            vty = ir.VectorType(elem, lanes)
            size = elem.get_abi_size(context.target_data)
            v_data = context.make_array(tys[0])(context, builder, args[0]).data
            s_data = context.make_array(tys[3])(context, builder, args[3]).data
            c_data = context.make_array(tys[7])(context, builder, args[7]).data
            vo_, vk_, so_, sk_, sn_, co_, cn_, k_, pf_, tail_ = (
                as_intp(context, builder, args[i], tys[i])
                for i in (1, 2, 4, 5, 6, 8, 9, 10, 12, 13))
            first_ = context.cast(builder, args[11], tys[11], types.boolean)
            intp = vo_.type
            i32 = ir.IntType(32)
            i8p = ir.IntType(8).as_pointer()
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vty, [vty, vty, vty]),
                f"llvm.fma.v{lanes}f{dt.bitwidth}")
            prefetch = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                "llvm.prefetch.p0")
            mty = ir.VectorType(ir.IntType(1), lanes)
            masked_load = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vty, [vty.as_pointer(), i32, mty, vty]),
                f"llvm.masked.load.v{lanes}f{dt.bitwidth}.p0")
            masked_store = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [vty, vty.as_pointer(), i32, mty]),
                f"llvm.masked.store.v{lanes}f{dt.bitwidth}.p0")
            zero = ir.Constant(vty, [ir.Constant(elem, 0.0)] * lanes)
            # The last line's mask: lanes below ``tail``.
            lane_ids = ir.Constant(ir.VectorType(intp, lanes), list(range(lanes)))
            tail_v = builder.insert_element(ir.Constant(ir.VectorType(intp, lanes), ir.Undefined),
                                            tail_, ir.Constant(i32, 0))
            tail_v = builder.shuffle_vector(tail_v, ir.Constant(ir.VectorType(intp, lanes),
                                                                ir.Undefined),
                                            ir.Constant(ir.VectorType(i32, lanes), [0] * lanes))
            mask = builder.icmp_signed("<", lane_ids, tail_v)
            align = ir.Constant(i32, size)

            def load(ptr, last):  # type: ignore[no-untyped-def]
                if last:
                    return builder.call(masked_load, [ptr, align, mask, zero])
                return builder.load(ptr, align=size)

            def store(val, ptr, last):  # type: ignore[no-untyped-def]
                if last:
                    builder.call(masked_store, [val, ptr, align, mask])
                else:
                    builder.store(val, ptr, align=size)

            undef = ir.Constant(vty, ir.Undefined)
            splat = ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)

            def const(v: int) -> ir.Constant:
                return ir.Constant(intp, v)

            entry = builder.basic_block
            loop = builder.append_basic_block("vec.k")
            done = builder.append_basic_block("vec.done")
            builder.cbranch(builder.icmp_signed(">", k_, const(0)), loop, done)

            builder.position_at_end(loop)
            p = builder.phi(intp)
            p.add_incoming(const(0), entry)
            acc = []
            for _ in range(rows * lines):
                phi = builder.phi(vty)
                phi.add_incoming(zero, entry)
                acc.append(phi)
            vrow = builder.add(vo_, builder.mul(p, vk_))
            vecs = []
            for j in range(lines):
                ptr = builder.gep(v_data, [builder.add(vrow, const(j * lanes))])
                vecs.append(load(builder.bitcast(ptr, vty.as_pointer()), j == lines - 1))
            for j in range(lines):
                ptr = builder.gep(v_data, [builder.add(builder.add(vrow, pf_), const(j * lanes))])
                builder.call(prefetch, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0),
                                        ir.Constant(i32, 3), ir.Constant(i32, 1)])
            srow = builder.add(so_, builder.mul(p, sk_))
            new = []
            for r in range(rows):
                s_off = builder.add(srow, builder.mul(sn_, const(r)))
                s = builder.load(builder.gep(s_data, [s_off]))
                sv = builder.shuffle_vector(builder.insert_element(undef, s, ir.Constant(i32, 0)),
                                            undef, splat)
                for j in range(lines):
                    new.append(builder.call(fma, [vecs[j], sv, acc[r * lines + j]]))
            p_next = builder.add(p, const(1))
            tail = builder.basic_block
            p.add_incoming(p_next, tail)
            for a, b in zip(acc, new):
                a.add_incoming(b, tail)
            builder.cbranch(builder.icmp_signed("<", p_next, k_), loop, done)

            builder.position_at_end(done)
            totals = []
            for i in range(rows * lines):  # phis first: LLVM wants them at the block's top
                total = builder.phi(vty)
                total.add_incoming(zero, entry)
                total.add_incoming(new[i], tail)
                totals.append(total)
            for r in range(rows):
                crow = builder.add(co_, builder.mul(cn_, const(r)))
                for j in range(lines):
                    total = totals[r * lines + j]
                    c_off = builder.add(crow, const(j * lanes))
                    ptr = builder.bitcast(builder.gep(c_data, [c_off]), vty.as_pointer())
                    old = load(ptr, j == lines - 1)
                    store(builder.select(first_, total, builder.fadd(total, old)), ptr,
                          j == lines - 1)
            return context.get_dummy_value()

        return sig, codegen

    return micro


# Micro-tiles: 8 rows x 3 lines (24 accumulators of the 32 vector registers; measured
# the fastest of 6x4, 8x3, 12x2 and 24x1 on the skinny TCCG tiles), and the shapes the
# edges of a tile need: fewer rows, and a vector axis ending in a partial line.
_m8x3 = _micro(8, 3)
_m4x3 = _micro(4, 3)
_m1x3 = _micro(1, 3)
_m8x2 = _micro(8, 2)
_m4x2 = _micro(4, 2)
_m1x2 = _micro(1, 2)
_m8x1 = _micro(8, 1)
_m4x1 = _micro(4, 1)
_m1x1 = _micro(1, 1)

LINES = 3  # lines along the vector axis of the main micro-tile
ROWS = 8  # output rows of the main micro-tile


@njit(cache=True, nogil=True, inline="always")
def _micro_tile(rows, lines, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail):  # type: ignore[no-untyped-def]
    """The micro-tile intrinsic of this many rows (8, 4 or 1) and lines (3, 2 or 1)."""
    if rows == 8:
        if lines == 3:
            _m8x3(V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail)
        elif lines == 2:
            _m8x2(V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail)
        else:
            _m8x1(V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail)
    elif rows == 4:
        if lines == 3:
            _m4x3(V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail)
        elif lines == 2:
            _m4x2(V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail)
        else:
            _m4x1(V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail)
    elif lines == 3:
        _m1x3(V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail)
    elif lines == 2:
        _m1x2(V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail)
    else:
        _m1x1(V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail)


@njit(cache=True, nogil=True)
def gemm_vec(V, vo, vk, S, so, sk, sn, C, co, cn, mv, n, K, first):  # type: ignore[no-untyped-def]
    """C[co + r*cn + v] = (or +=, unless ``first``) sum_{p < K} V[vo + p*vk + v] *
    S[so + p*sk + r*sn] for v < mv (the vector axis: unit stride in V and C) and
    r < n."""
    lanes = 64 // C.itemsize
    w = LINES * lanes
    v = 0
    while v < mv:
        left = mv - v
        lines = min(LINES, (left + lanes - 1) // lanes)
        tail = min(lanes, left - (lines - 1) * lanes)
        # Prefetch the next micro-tile's lines while the first row block computes.
        pf = w if v + 2 * w <= mv else 0
        r = 0
        while r < n:
            rows = ROWS if r + ROWS <= n else (4 if r + 4 <= n else 1)
            _micro_tile(rows, lines, V, vo + v, vk, S, so + r * sn, sk, sn, C,
                        co + r * cn + v, cn, K, first,
                        pf if r == 0 and rows == ROWS else 0, tail)
            r += rows
        v += lines * lanes
