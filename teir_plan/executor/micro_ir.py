"""The vector kernel's micro-tile as LLVM IR, and the vector registers it is generated for.

One call of :func:`micro_tile_ir` is one micro-tile of :mod:`teir_plan.executor.microkernel`:
the K loop with the accumulators as loop-carried vector values (numba has no SIMD types of
its own), masked loads and stores for a partial last line, prefetches of the next lines
and tiles.  The register target (width, micro-tile shapes) is read once from
:mod:`teir_plan.isa` at import: numba freezes it into the compiled code, and
executor/cache.py keys the disk cache on it."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from teir_plan.executor.intrinsics import (
    LineVector,
    array_data,
    as_intp,
    keep_rolled,
    line_vector,
    splat,
    store_nontemporal,
    vector_ops,
)
from teir_plan.isa import LINE_BYTES
from teir_plan.tiles import BLOCKING

# The blocking record the kernels are generated for (teir_plan.isa.Blocking): the
# vectors' width, the micro-tile shapes the register file holds, the load policy.  Read
# once, at import: numba freezes them into the compiled code, and executor/cache.py keys
# the disk cache on the target they come from.
# Without a vector ISA the vector kernels never run (lower.py gives their tiles to BLAS),
# but they are still compiled into the walker: 16-byte vectors are valid everywhere.
VECTOR_BYTES = BLOCKING.vector_bytes or 16
ROWS = BLOCKING.shapes.rows  # output rows of the main micro-tile
LINES = BLOCKING.shapes.vectors  # vector registers along the vector axis of the main one
# A vector axis exactly LINES + 1 vectors long (64 float32 on AVX-512: attention's head
# dimension) runs as one strip of that many vectors in fewer rows (as many accumulators),
# not as a LINES strip and a 1-vector one whose K steps wait on their loads.
QUAD_LINES = LINES + 1
QUAD_ROWS = BLOCKING.shapes.wide_rows
FULL_LINE_LOADS = BLOCKING.full_line_loads
NEXT_TILE_LINES = BLOCKING.next_tile_lines
# The micro-tiles the kernel dispatches to (rows, vector registers), and the key of a
# shape in the dispatch's switch: rows * KEY + registers.
MICRO_TILES = BLOCKING.micro_tiles
KEY = 64


def reg_vector(context, dtype) -> LineVector:  # type: ignore[no-untyped-def]
    """The :class:`LineVector` of one of the target's vector registers (VECTOR_BYTES)."""
    return line_vector(context, dtype, VECTOR_BYTES)


@intrinsic(prefer_literal=True)
def micro_tile_ir(  # type: ignore[no-untyped-def]
    typingctx, rows_ty, lines_ty, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt,
    relu, nf, nfl, sf, sfl,
):
    """An intrinsic computing, for r < rows and v < lines * L (``rows`` x ``lines`` one
    of the blocking record's micro-tiles, MICRO_TILES, constants at the call or not: a
    switch over the shapes they may be; L the elements of one vector register),

        C[co + r*cn + v]  (=, or += unless ``first``)
            sum_{p < K} V[vo + p*vk + v] * S[so + p*sk + r*sn]

    (then max(., 0) as numpy.maximum does, if ``relu``), only the first ``tail``
    elements of the last vector (the others are neither read nor written: masked loads
    and stores), and prefetching the cache lines of V[vo + p*vk + pf + v] for
    v < lines * L into L1, and into L2 in each K step the lines of the next tile: those
    of V[vo + p*vk + nf + j*64 bytes] for j < nfl, then those of
    S[so + p*sk + sf + j*64 bytes] for j < sfl (3 lines at most in all).
    With ``nt`` (only with ``first``; the caller guarantees that every row's first
    vector is 64-byte aligned) whole vectors are written with non-temporal stores:
    straight to memory, without reading them for ownership first."""
    shapes = [(r, v) for r, v in MICRO_TILES
              if _fits(rows_ty, r) and _fits(lines_ty, v)]
    if not shapes or not all(isinstance(t, types.Integer) for t in (rows_ty, lines_ty)):
        return None
    sig = types.void(rows_ty, lines_ty, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf,
                     tail, nt, relu, nf, nfl, sf, sfl)

    def codegen(context, builder, signature, all_args):  # type: ignore[no-untyped-def]
        tys, args = signature.args[2:], all_args[2:]
        rows, lines = (as_intp(context, builder, all_args[i], signature.args[i])
                       for i in (0, 1))
        dispatch(builder, builder.add(builder.mul(rows, ir.Constant(rows.type, KEY)), lines),
                 [(r * KEY + v, partial(_emit_micro_tile, context, builder, r, v, tys, args))
                  for r, v in shapes], "vec.tile")
        return context.get_dummy_value()

    return sig, codegen


def _fits(ty, value: int) -> bool:  # type: ignore[no-untyped-def]
    """Whether an argument of numba type ``ty`` may be ``value`` (a literal: its own)."""
    return not isinstance(ty, types.IntegerLiteral) or ty.literal_value == value


def dispatch(builder: ir.IRBuilder, key: ir.Value,
             cases: list[tuple[int, Callable[[], None]]], name: str) -> None:
    """A switch on ``key`` to each case's code (``emit()`` at a block of its own, which
    may add blocks and must leave the builder at its last), then on; a key of no case
    runs the last case, as the ladders of ifs this replaced did.  One case: its code
    alone (a constant key after inlining folds to that too)."""
    if len(cases) == 1:
        cases[0][1]()
        return
    blocks = [builder.append_basic_block(f"{name}.{value}") for value, _ in cases]
    after = builder.append_basic_block(f"{name}.after")
    switch = builder.switch(key, blocks[-1])
    for (value, emit), block in zip(cases, blocks):
        switch.add_case(ir.Constant(key.type, value), block)
        builder.position_at_end(block)
        emit()
        builder.branch(after)
    builder.position_at_end(after)


def _emit_micro_tile(  # type: ignore[no-untyped-def]
        context, builder, rows: int, lines: int, tys, args) -> None:
    """The code of one ``rows`` x ``lines`` micro-tile (see :func:`micro_tile_ir`) at the
    builder's block; the builder is left at its last."""
    dt = tys[0].dtype
    lanes, elem, vty, size = reg_vector(context, dt)
    line_lanes = LINE_BYTES // size  # elements of one cache line
    v_data, s_data, c_data = (array_data(context, builder, tys[i], args[i])
                              for i in (0, 3, 7))
    vo_, vk_, so_, sk_, sn_, co_, cn_, k_, pf_, tail_ = (
        as_intp(context, builder, args[i], tys[i])
        for i in (1, 2, 4, 5, 6, 8, 9, 10, 12, 13))
    nf_, nfl_, sf_, sfl_ = (as_intp(context, builder, args[i], tys[i])
                            for i in (16, 17, 18, 19))
    first_ = context.cast(builder, args[11], tys[11], types.boolean)
    nt_ = context.cast(builder, args[14], tys[14], types.boolean)
    relu_ = context.cast(builder, args[15], tys[15], types.boolean)
    intp = vo_.type
    i32 = ir.IntType(32)
    i8p = ir.IntType(8).as_pointer()
    fma, prefetch, masked_load, masked_store, mty = vector_ops(builder, vty, dt.bitwidth)
    zero = ir.Constant(vty, [ir.Constant(elem, 0.0)] * lanes)
    # The last line's mask: lanes below ``tail``.
    lane_ids = ir.Constant(ir.VectorType(intp, lanes), list(range(lanes)))
    mask = builder.icmp_signed("<", lane_ids,
                               splat(builder, tail_, ir.VectorType(intp, lanes)))
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


    def const(v: int) -> ir.Constant:
        return ir.Constant(intp, v)

    entry = builder.basic_block
    pick = builder.append_basic_block("vec.pick")
    done = builder.append_basic_block("vec.done")
    builder.cbranch(builder.icmp_signed(">", k_, const(0)), pick, done)

    # The next tile's lines: slot j prefetches V's line j, else S's line j - nfl,
    # else the row's own first line (loaded in this step anyway), one K row further
    # each step.  Each slot's first address and step are chosen here, once: in the
    # loop a slot costs an add and the prefetch (chosen there, the selects' operands
    # made the AVX-512 kernel 20% slower on a 32 x 32 tile).  Selects, not branches,
    # keep one loop body (branches would have LLVM unswitch the loop into copies).
    builder.position_at_end(pick)
    isz = const(dt.bitwidth // 8)
    both = builder.add(nfl_, sfl_)
    vk_bytes, sk_bytes = builder.mul(vk_, isz), builder.mul(sk_, isz)
    slots = []
    for j in range(NEXT_TILE_LINES):
        v_at = builder.add(vo_, builder.add(nf_, const(j * line_lanes)))
        v_ptr = builder.bitcast(builder.gep(v_data, [v_at]), i8p)
        s_at = builder.add(so_, builder.add(sf_, builder.mul(builder.sub(const(j), nfl_),
                                                             const(line_lanes))))
        s_ptr = builder.bitcast(builder.gep(s_data, [s_at]), i8p)
        own = builder.bitcast(builder.gep(v_data, [vo_]), i8p)
        in_v = builder.icmp_signed(">", nfl_, const(j))
        in_s = builder.and_(builder.not_(in_v), builder.icmp_signed(">", both, const(j)))
        start = builder.select(in_v, v_ptr, builder.select(in_s, s_ptr, own))
        slots.append((start, builder.select(in_s, sk_bytes, vk_bytes)))

    def k_loop(next_tile: bool, masked: bool, enter):  # type: ignore[no-untyped-def]
        """The K loop entered from block ``enter``, prefetching the next tile's
        lines or not, its last line's loads masked or whole; returns its first and
        last blocks and the accumulators it leaves."""
        loop = builder.append_basic_block("vec.k.next" if next_tile else "vec.k")
        builder.position_at_end(loop)
        p = builder.phi(intp)
        p.add_incoming(const(0), enter)
        next_ptrs = []
        for start, _ in (slots if next_tile else []):
            ptr = builder.phi(i8p)
            ptr.add_incoming(start, enter)
            next_ptrs.append(ptr)
        acc = []
        for _ in range(rows * lines):
            phi = builder.phi(vty)
            phi.add_incoming(zero, enter)
            acc.append(phi)
        vrow = builder.add(vo_, builder.mul(p, vk_))
        vecs = []
        for j in range(lines):
            ptr = builder.gep(v_data, [builder.add(vrow, const(j * lanes))])
            vecs.append(load(builder.bitcast(ptr, vty.as_pointer()),
                             masked and j == lines - 1))
        for j in range(-(-lines * lanes // line_lanes)):  # each cache line once
            ptr = builder.gep(v_data, [builder.add(builder.add(vrow, pf_),
                                                   const(j * line_lanes))])
            builder.call(prefetch, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0),
                                    ir.Constant(i32, 3), ir.Constant(i32, 1)])
        # The next tile's lines go to L2 only (locality 1): into L1 they would
        # evict this tile's lines (docs/decisions.md).
        for ptr in next_ptrs:
            builder.call(prefetch, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 1),
                                    ir.Constant(i32, 1)])
        srow = builder.add(so_, builder.mul(p, sk_))
        new = []
        for r in range(rows):
            s_off = builder.add(srow, builder.mul(sn_, const(r)))
            s = builder.load(builder.gep(s_data, [s_off]))
            sv = splat(builder, s, vty)
            for j in range(lines):
                new.append(builder.call(fma, [vecs[j], sv, acc[r * lines + j]]))
        p_next = builder.add(p, const(1))
        stepped = [builder.gep(ptr, [step]) for ptr, (_, step) in zip(next_ptrs, slots)]
        tail = builder.basic_block
        p.add_incoming(p_next, tail)
        for ptr, after in zip(next_ptrs, stepped):
            ptr.add_incoming(after, tail)
        for a, b in zip(acc, new):
            a.add_incoming(b, tail)
        back = builder.cbranch(builder.icmp_signed("<", p_next, k_), loop, done)
        if next_tile:
            # Unrolled, the loop with the next tile's pointers spilled accumulators
            # (77 stack moves per two K steps of the 6 x 4 AVX-512 tile): ki,kj->ij
            # with 64 columns, in L2, one thread, 106 -> 194 GFLOP/s rolled; the
            # plain loop and AVX2 width are the same either way (docs/decisions.md).
            keep_rolled(back)
        return loop, tail, new

    # Loop bodies chosen once per micro-tile: the next tile's prefetches cost a K
    # step a few instructions, which tiles with nothing to prefetch (``nfl`` =
    # ``sfl`` = 0: most tiles) would pay for nothing; and where a mask takes a
    # vector register (FULL_LINE_LOADS), a last line that is whole is loaded whole
    # (docs/decisions.md).
    masks = (True, False) if FULL_LINE_LOADS else (True,)
    enters = {}  # (next_tile, masked) -> the block that enters that loop
    loops = []  # (last block, accumulators left) of each loop
    for masked in masks:
        for next_tile in (False, True):
            enter = builder.append_basic_block("vec.enter")
            first_block, tail_block, new = k_loop(next_tile, masked, enter)
            builder.position_at_end(enter)
            builder.branch(first_block)
            enters[next_tile, masked] = enter
            loops.append((tail_block, new))
    builder.position_at_end(pick)
    ahead_ = builder.icmp_signed(">", both, const(0))

    def branch_to_loop(masked: bool) -> None:
        builder.cbranch(ahead_, enters[True, masked], enters[False, masked])

    if FULL_LINE_LOADS:
        whole = builder.icmp_signed("==", tail_, const(lanes))
        pick_m = builder.append_basic_block("vec.pick.masked")
        pick_w = builder.append_basic_block("vec.pick.whole")
        builder.cbranch(whole, pick_w, pick_m)
        builder.position_at_end(pick_w)
        branch_to_loop(False)
        builder.position_at_end(pick_m)
        branch_to_loop(True)
    else:
        branch_to_loop(True)

    builder.position_at_end(done)
    totals = []
    for i in range(rows * lines):  # phis first: LLVM wants them at the block's top
        total = builder.phi(vty)
        total.add_incoming(zero, entry)
        for tail_block, new in loops:
            total.add_incoming(new[i], tail_block)
        totals.append(total)

    def out_ptr(r: int, j: int):  # type: ignore[no-untyped-def]
        c_off = builder.add(builder.add(co_, builder.mul(cn_, const(r))),
                            const(j * lanes))
        return builder.bitcast(builder.gep(c_data, [c_off]), vty.as_pointer())

    def activate(v):  # type: ignore[no-untyped-def]
        # numpy.maximum(v, 0): v where v > 0 or NaN, else +0.0.
        keep = builder.fcmp_unordered(">", v, zero)
        return builder.select(relu_, builder.select(keep, v, zero), v)

    def store_nt(v, ptr):  # type: ignore[no-untyped-def]
        store_nontemporal(builder, v, ptr, VECTOR_BYTES)

    streamed = builder.append_basic_block("vec.nt")
    nt_full = builder.append_basic_block("vec.nt.full")
    nt_part = builder.append_basic_block("vec.nt.part")
    cached = builder.append_basic_block("vec.cached")
    end = builder.append_basic_block("vec.end")
    builder.cbranch(builder.and_(nt_, first_), streamed, cached)

    builder.position_at_end(streamed)  # whole lines straight to memory
    for r in range(rows):
        for j in range(lines - 1):
            store_nt(activate(totals[r * lines + j]), out_ptr(r, j))
    builder.cbranch(builder.icmp_signed("==", tail_, const(lanes)), nt_full, nt_part)
    builder.position_at_end(nt_full)
    for r in range(rows):
        store_nt(activate(totals[r * lines + lines - 1]), out_ptr(r, lines - 1))
    builder.branch(end)
    builder.position_at_end(nt_part)
    for r in range(rows):
        store(activate(totals[r * lines + lines - 1]), out_ptr(r, lines - 1), True)
    builder.branch(end)

    # Written over (``first``): the output is not read (the lines may not be in
    # cache, and a load of each would wait for them); else added to.
    over = builder.append_basic_block("vec.over")
    add = builder.append_basic_block("vec.add")
    builder.position_at_end(cached)
    builder.cbranch(first_, over, add)
    builder.position_at_end(over)
    for r in range(rows):
        for j in range(lines):
            store(activate(totals[r * lines + j]), out_ptr(r, j), j == lines - 1)
    builder.branch(end)
    builder.position_at_end(add)
    for r in range(rows):
        for j in range(lines):
            total = totals[r * lines + j]
            ptr = out_ptr(r, j)
            old = load(ptr, j == lines - 1)
            store(activate(builder.fadd(total, old)), ptr, j == lines - 1)
    builder.branch(end)
    builder.position_at_end(end)


