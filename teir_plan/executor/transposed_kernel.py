"""The vector kernel with a transposed output: GEMM tiles whose output has its unit
stride along the short axis of the tile, not the long one.

The vector kernel (:mod:`teir_plan.executor.microkernel`) needs the output and one
operand to share a unit-stride axis.  In a fixed output layout the output's innermost
index often comes from the *other* operand: ``degc,gfab->abcdef`` into a C-order
result has ``f`` (20, from ``gfab``) innermost, then ``e`` and ``d`` (from ``degc``).
With both operands packed, a tile is ``out[cde, f] = sum_g A[g, cde] B[g, f]``: ``cde``
is long and unit-stride in A, ``f`` is short and unit-stride in out, and the tile's
9600 x 20 outputs are one contiguous block.  BLAS runs it at 20 x 24 panels per call
and writes the block with ordinary stores (97-111 GFLOP/s on both cores, against 230-270
for the same contraction into the layout that follows the operands).

This kernel takes such tiles as the vector kernel does: each K step loads one 64-byte
line of the vector operand V (L elements along the long axis) and multiplies it by one
broadcast element of S per row, into one accumulator per row; after the K loop the
rows x L accumulators are transposed in registers, L rows at a time, so that each
element of the line becomes a run along out's unit stride, and stored with masked
stores.  A micro-tile has up to 24 rows (24 accumulators of the 32 vector registers);
fewer rows reuse the last row's address and are not stored.

When the tile's output is one contiguous block (out's stride along the long axis equals
the number of rows) and it streams to memory, the transposed runs go to a per-worker
buffer in L1 first and leave it as whole 64-byte lines written with non-temporal stores
(straight to memory, not read for ownership); the elements before the block's first line
boundary and after its last one are written with ordinary stores, so no line is written
both ways, wherever the block starts (numpy's own arrays start 16 bytes into a line).

Every element read or written is one the tile's own loops would touch: the same proofs of
reach as for any GEMM tile cover it.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic

from teir_plan.executor.entries import compiled_address
from teir_plan.executor.intrinsics import (
    array_data,
    as_intp,
    element_address,
    splat,
    store_line_nt,
    to_next_line,
    transpose_lines,
    vector_ops,
)
from teir_plan.executor.micro_ir import VECTOR_BYTES, dispatch, reg_vector
from teir_plan.isa import LINE_BYTES

# The largest micro-tile's rows: the tile rules' constant, so that the cost model prices
# the tiles this kernel runs without importing it.
from teir_plan.tilekinds.vec_t import VEC_T_TILE_ROWS as MAX_ROWS
from teir_plan.tiles import BLOCKING


@intrinsic(prefer_literal=True)
def micro_t_ir(  # type: ignore[no-untyped-def]
    typingctx, rows_ty, V, vo, vk, S, so, sk, C, co, cv, K, first, pf, tail, nrows, relu,
):
    """An intrinsic computing, for r < nrows (at most ``rows``: one of the blocking
    record's TRANSPOSED_ROWS, a constant at the call or not, a switch over those it may
    be) and v < tail (at most L, the elements of one vector register),

        C[co + v*cv + r]  (=, or += unless ``first``)
            sum_{p < K} V[vo + p*vk + v] * S[so + p*sk + r]

    then max(., 0) as numpy.maximum does, if ``relu``; prefetching V[vo + p*vk + pf]
    into L1 in each K step.  S's rows are one element apart, and all ``rows`` of them are
    read (the caller pads S when ``nrows`` is fewer); rows nrows..rows-1 are not stored.
    Lanes tail..L-1 of V are not read."""
    shapes = [r for r in TRANSPOSED_ROWS
              if not isinstance(rows_ty, types.IntegerLiteral) or rows_ty.literal_value == r]
    if not shapes or not isinstance(rows_ty, types.Integer):
        return None
    sig = types.void(rows_ty, V, vo, vk, S, so, sk, C, co, cv, K, first, pf, tail, nrows, relu)

    def codegen(context, builder, signature, all_args):  # type: ignore[no-untyped-def]
        tys, args = signature.args[1:], all_args[1:]
        rows = as_intp(context, builder, all_args[0], signature.args[0])
        dispatch(builder, rows, [(r, partial(_emit_t, context, builder, r, tys, args))
                                 for r in shapes], "vt.tile")
        return context.get_dummy_value()

    return sig, codegen


def _emit_t(context, builder, rmax: int, tys, args) -> None:  # type: ignore[no-untyped-def]
    """The code of one micro-tile of ``rmax`` rows (see :func:`micro_t_ir`) at the
    builder's block; the builder is left at its last."""
    dt = tys[0].dtype
    lanes, elem, vty, size = reg_vector(context, dt)
    v_data, s_data, c_data = (array_data(context, builder, tys[i], args[i])
                              for i in (0, 3, 6))
    vo_, vk_, so_, sk_, co_, cv_, k_, pf_, tail_, nrows_ = (
        as_intp(context, builder, args[i], tys[i])
        for i in (1, 2, 4, 5, 7, 8, 9, 11, 12, 13))
    first_ = context.cast(builder, args[10], tys[10], types.boolean)
    relu_ = context.cast(builder, args[14], tys[14], types.boolean)
    intp = vo_.type
    i32 = ir.IntType(32)
    i8p = ir.IntType(8).as_pointer()
    fma, prefetch, masked_load, masked_store, mty = vector_ops(builder, vty, dt.bitwidth)
    zero = ir.Constant(vty, [ir.Constant(elem, 0.0)] * lanes)
    undef = ir.Constant(vty, ir.Undefined)
    ivty = ir.VectorType(intp, lanes)
    lane_ids = ir.Constant(ivty, list(range(lanes)))

    def const(v: int) -> ir.Constant:
        return ir.Constant(intp, v)

    def splat_int(x):  # type: ignore[no-untyped-def]
        return splat(builder, x, ivty)

    # V's lanes below ``tail``; each row block's rows below ``nrows``.
    vmask = builder.icmp_signed("<", lane_ids, splat_int(tail_))
    align = ir.Constant(i32, size)
    entry = builder.basic_block
    loop = builder.append_basic_block("vt.k")
    done = builder.append_basic_block("vt.done")
    builder.cbranch(builder.icmp_signed(">", k_, const(0)), loop, done)

    builder.position_at_end(loop)
    p = builder.phi(intp)
    p.add_incoming(const(0), entry)
    acc = []
    for _ in range(rmax):
        phi = builder.phi(vty)
        phi.add_incoming(zero, entry)
        acc.append(phi)
    vrow = builder.add(vo_, builder.mul(p, vk_))
    vptr = builder.bitcast(builder.gep(v_data, [vrow]), vty.as_pointer())
    vec = builder.call(masked_load, [vptr, align, vmask, zero])
    ptr = builder.gep(v_data, [builder.add(vrow, pf_)])
    builder.call(prefetch, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0),
                            ir.Constant(i32, 3), ir.Constant(i32, 1)])
    # Row r's element is r past the step's first: an addressing mode's displacement
    # (an offset per row at run time took 20 registers the loop does not have: 125
    # against 160 GFLOP/s on one core).
    srow = builder.add(so_, builder.mul(p, sk_))
    new = []
    for r in range(rmax):
        s = builder.load(builder.gep(s_data, [builder.add(srow, const(r))]))
        sv = splat(builder, s, vty)
        new.append(builder.call(fma, [vec, sv, acc[r]]))
    p_next = builder.add(p, const(1))
    tail_block = builder.basic_block
    p.add_incoming(p_next, tail_block)
    for a, b in zip(acc, new):
        a.add_incoming(b, tail_block)
    builder.cbranch(builder.icmp_signed("<", p_next, k_), loop, done)

    builder.position_at_end(done)
    totals = []
    for i in range(rmax):  # phis first: LLVM wants them at the block's top
        total = builder.phi(vty)
        total.add_incoming(zero, entry)
        total.add_incoming(new[i], tail_block)
        totals.append(total)

    def activate(v):  # type: ignore[no-untyped-def]
        # numpy.maximum(v, 0): v where v > 0 or NaN, else +0.0.
        keep = builder.fcmp_unordered(">", v, zero)
        return builder.select(relu_, builder.select(keep, v, zero), v)

    # L rows at a time: transpose the block in registers (log2 L rounds of
    # two-input shuffles, each swapping the off-diagonal blocks of every 2h x 2h
    # block), so that row i of the result holds element i of every row, then
    # store each of the first ``tail`` results as a run of out, masked to the
    # block's real rows.
    for b0 in range(0, rmax, lanes):
        in_block = builder.icmp_signed(">", nrows_, const(b0))
        with builder.if_then(in_block):
            rows = transpose_lines(builder, [
                totals[b0 + i] if b0 + i < rmax else undef for i in range(lanes)])
            rmask = builder.icmp_signed(
                "<", builder.add(lane_ids, ir.Constant(ivty, [b0] * lanes)),
                splat_int(nrows_))
            # Runs past ``tail`` have empty masks and touch nothing (masks, not a
            # branch per run: less code to compile).
            none = ir.Constant(mty, [ir.Constant(ir.IntType(1), 0)] * lanes)
            masks, ptrs = [], []
            for v in range(lanes):
                masks.append(builder.select(builder.icmp_signed("<", const(v), tail_),
                                            rmask, none))
                off = builder.add(builder.add(co_, builder.mul(cv_, const(v))),
                                  const(b0))
                ptrs.append(builder.bitcast(builder.gep(c_data, [off]),
                                            vty.as_pointer()))
            with builder.if_else(first_) as (over, add):
                with over:  # written over: the output is not read
                    for v in range(lanes):
                        builder.call(masked_store,
                                     [activate(rows[v]), ptrs[v], align, masks[v]])
                with add:
                    for v in range(lanes):
                        old = builder.call(masked_load, [ptrs[v], align, masks[v], zero])
                        builder.call(masked_store,
                                     [activate(builder.fadd(rows[v], old)), ptrs[v],
                                      align, masks[v]])


# Micro-tiles of 4 to 24 rows (on 32 registers) in steps of 4: the K loop is bound by its
# multiply-adds, so rows computed and not stored cost their share (20 rows in a 24-row
# micro-tile ran at 81 GFLOP/s on one core, in a 20-row one at 99).
TRANSPOSED_ROWS = BLOCKING.transposed_row_steps


@njit(cache=True, nogil=True, inline="always")
def _line_t(V, vo, vk, S, so, sk, C, co, cv, n, K, first, pf, tail, relu):  # type: ignore[no-untyped-def]
    """One line of the vector axis (``tail`` elements) across ``n`` rows, in micro-tiles
    of at most MAX_ROWS rows; S's rows are one element apart and padded to a multiple
    of 4."""
    r = 0
    while r < n:
        real = min(MAX_ROWS, n - r)
        micro_t_ir((real + 3) // 4 * 4, V, vo, vk, S, so + r, sk, C, co + r, cv, K, first, pf,
                   tail, real, relu)
        r += real


@njit(cache=True, nogil=True, inline="always")  # compiled once, in its entry
def gemm_vec_t(V, vo, vk, S, so, sk, sn, C, co, cv, mv, n, K, first, stream, relu, buf):  # type: ignore[no-untyped-def]
    """C[co + v*cv + r] = (or +=, unless ``first``) sum_{p < K} V[vo + p*vk + v] *
    S[so + p*sk + r*sn] for v < mv (the vector axis: unit stride in V) and r < n (the
    rows: unit stride in C); then max(., 0) if ``relu``.  ``buf``: a buffer of
    :func:`teir_plan.tilekinds.vec_t.scratch_elements` elements.

    When S's rows are not one element apart, or not a multiple of 4, S's block is first
    copied into ``buf``, rows padded with zeros to a multiple of 4 (the micro-tiles read
    every row of theirs at a constant distance from the first).

    ``stream``: the tile is written once and not read again soon (the executor's rule,
    :func:`teir_plan.executor.lower.streams_out`).  When the tile's output is one
    contiguous block (``cv == n``) and written over (``first``), each line of the vector
    axis is computed into ``buf`` and the block's whole lines are written from there with
    non-temporal stores, in order; the elements before its first line boundary and after
    its last are written with ordinary stores.  Those stores are weakly ordered: the
    caller runs :func:`~teir_plan.executor.intrinsics.store_fence` before another
    thread reads the output."""
    lanes = VECTOR_BYTES // C.itemsize  # the vector axis' step: one vector register
    line = LINE_BYTES // C.itemsize  # non-temporal stores: one cache line
    region = mv * n
    # buf[:staged]: the streamed output's vectors and up to a line carried over
    staged = n * max(lanes, line) + max(lanes, line)
    if sn != 1 or n % 4 != 0:
        npad = (n + 3) // 4 * 4
        for p in range(K):
            for r in range(npad):
                buf[staged + p * npad + r] = S[so + p * sk + r * sn] if r < n else 0.0
        S = buf
        so = staged
        sk = npad
    if not (stream and first and cv == n and region >= 2 * lanes):
        v = 0
        while v < mv:
            tail = min(lanes, mv - v)
            pf = 2 * lanes if v + 3 * lanes <= mv else 0
            _line_t(V, vo + v, vk, S, so, sk, C, co + v * cv, cv, n, K, first, pf, tail, relu)
            v += lanes
        return
    # Streamed through buf: buf[i] holds the block's element held + i; ``done`` elements
    # of the block are written.  The first ``head`` elements share a line with what
    # precedes the block: ordinary stores; from there on whole lines, non-temporally.
    head = 0
    addr = element_address(C, co)
    if addr % C.itemsize == 0:
        head = to_next_line(addr, C.itemsize)
    else:
        head = region  # not element-aligned: every element by ordinary stores
    held = 0
    done = 0
    v = 0
    while v < mv:
        tail = min(lanes, mv - v)
        pf = 2 * lanes if v + 3 * lanes <= mv else 0
        _line_t(V, vo + v, vk, S, so, sk, buf, v * n - held, n, n, K, first, pf, tail, relu)
        end = (v + tail) * n
        while done < head and done < end:
            C[co + done] = buf[done - held]
            done += 1
        if done >= head:
            while done + line <= end:
                store_line_nt(C, co + done, buf, done - held)
                done += line
        for i in range(end - done):  # the rest of a line: to the front of buf
            buf[i] = buf[done - held + i]
        held = done
        v += lanes
    for i in range(region - done):
        C[co + done + i] = buf[done - held + i]
    # No fence here: the caller fences once its tiles are done (walker.run_chunk), not
    # after every tile; a fence waits for the lines in flight to reach memory (tiles of
    # 20 x 20 x 24: a fence each made them 4x slower).


# --- Compiled on demand (executor/entries.py) ------------------------------------------
# Linked into the walker, the kernel's micro-tiles would be compiled into every runner on
# every cold first call, whether its program uses them or not (docs/decisions.md).


def _entry(vp, vn, vo, vk, sp, sn_, so, sk, sn, cp, cn_, co, cv, mv, n, k, flags, bp, bn,  # type: ignore[no-untyped-def]
           extra, extra2):
    """gemm_vec_t on arrays given as (pointer, size); ``flags``: first (1), stream (2),
    relu (4); ``extra`` and ``extra2`` unused."""
    gemm_vec_t(carray(vp, (vn,)), vo, vk, carray(sp, (sn_,)), so, sk, sn, carray(cp, (cn_,)),
               co, cv, mv, n, k, (flags & 1) != 0, (flags & 2) != 0, (flags & 4) != 0,
               carray(bp, (bn,)))


def entry_address(dtype: np.dtype) -> int:
    """The address of the compiled :func:`gemm_vec_t` for arrays of ``dtype`` (float32
    or float64), for :func:`teir_plan.executor.entries.call_entry`."""
    return compiled_address(_entry, dtype)
