"""The vector GEMM kernel: GEMM tiles that are long along one axis and short along the
others, computed as outer products in registers.

BLAS is at its best on large square-ish tiles; on a tile such as m = 432, n = 24,
k = 36 (a block of ``efbad,cf->abcde``) it spends as long packing and unpacking as
computing (92 GFLOP/s on a 2-core AVX-512 Xeon).  When one operand and the output
share a unit-stride axis (the *vector axis*, M or N), no packing is needed at all:
each step of the K loop loads a few vector registers of that operand along the vector axis,
broadcasts one element of the other operand per output row, and adds their products
into accumulators that stay in registers for the whole K loop; the output tile is
written once at the end (measured: the same blocks at 149 GFLOP/s).

:func:`gemm_vec` walks a tile in micro-tiles of ``rows x (lines x L)`` output elements
(``L`` elements per vector register: 16 float32 with AVX-512, 8 with AVX2, 4 with NEON;
the shape ``rows x lines`` is the target's, :mod:`teir_plan.isa`); each micro-tile is one call of
an intrinsic that emits the K loop as LLVM IR with the accumulators as loop-carried
vector values (numba has no SIMD types of its own).  A vector axis that ends in a
partial line ends in a micro-tile whose last line is read and written with masked loads
and stores (the elements past the tile are not touched).  The lines of the next
micro-tile along the vector axis are prefetched while the first row block computes (the
K rows are far apart in memory, too many streams for the hardware prefetchers); when the
executor says where the next tile reads and the tile is small, the next tile's lines are
prefetched into L2 over the whole of this one, so that its reads from memory overlap this
tile's arithmetic.

Every element read or written is one the tile's own loops would touch: the same proofs
of reach as for any GEMM tile cover it.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic

from teir_plan.executor.entries import compiled_address
from teir_plan.executor.intrinsics import (
    LineVector,
    array_data,
    as_intp,
    element_address,
    keep_rolled,
    line_vector,
    splat,
    store_fence,
    store_nontemporal,
    to_next_line,
    vector_ops,
)
from teir_plan.isa import LINE_BYTES, target

# Tile rules' constants the planner also reads (its prefetch and 4K-aliasing rules).
from teir_plan.tiles import NEXT_TILE_PREFETCH_BYTES, PAGE_BYTES

# The vector registers the kernels are generated for (teir_plan.isa): their width and
# the micro-tile shapes the register file holds.  Read once, at import: numba freezes
# them into the compiled code, and executor/cache.py keys the disk cache on them.
_TARGET = target()
# Without a vector ISA the vector kernels never run (lower.py gives their tiles to BLAS),
# but they are still compiled into the walker: 16-byte vectors are valid everywhere.
VECTOR_BYTES = _TARGET.vector_bytes or 16
ROWS = _TARGET.rows  # output rows of the main micro-tile
LINES = _TARGET.vectors  # vector registers along the vector axis of the main micro-tile
# A vector axis exactly LINES + 1 vectors long (64 float32 on AVX-512: attention's head
# dimension) runs as one strip of that many vectors in fewer rows (as many accumulators),
# not as a LINES strip and a 1-vector one whose K steps wait on their loads.
QUAD_LINES = LINES + 1
QUAD_ROWS = _TARGET.wide_rows
# A masked load of a whole vector costs where the mask takes a vector register (AVX2,
# NEON, SSE: no mask registers): at AVX2 width a 64-wide Gram tile in L2 ran at 91
# GFLOP/s with its strips' last lines masked, 111 loaded whole.  With AVX-512's mask
# registers the two ran alike, and one loop body fewer compiles faster.
FULL_LINE_LOADS = _TARGET.name != "avx512"


def reg_vector(context, dtype) -> LineVector:  # type: ignore[no-untyped-def]
    """The :class:`LineVector` of one of the target's vector registers (VECTOR_BYTES)."""
    return line_vector(context, dtype, VECTOR_BYTES)


@intrinsic
def _micro(  # type: ignore[no-untyped-def]
    typingctx, rows_ty, lines_ty, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt,
    relu, nf, nfl, sf, sfl,
):
    """An intrinsic computing, for r < rows and v < lines * L (``rows`` and ``lines``
    integer constants at the call; L the elements of one vector register),

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
    if not (isinstance(rows_ty, types.IntegerLiteral)
            and isinstance(lines_ty, types.IntegerLiteral)):
        return None  # typed again with the constants as literals
    rows, lines = rows_ty.literal_value, lines_ty.literal_value
    sig = types.void(rows_ty, lines_ty, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf,
                     tail, nt, relu, nf, nfl, sf, sfl)

    def codegen(context, builder, signature, all_args):  # type: ignore[no-untyped-def]
        tys = signature.args[2:]
        args = all_args[2:]
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
        return context.get_dummy_value()

    return sig, codegen


NEXT_TILE_LINES = 3  # cache lines of the next tile a micro-tile call prefetches at most


@njit(cache=True, nogil=True, inline="always")
def _row_step(n):  # type: ignore[no-untyped-def]
    """The rows of the next main micro-tile when ``n`` rows are left: ROWS, then 4, 2, 1."""
    if n >= ROWS:
        return ROWS
    if n >= 4:
        return 4
    return 2 if n >= 2 else 1


@njit(cache=True, nogil=True, inline="always")
def _row_calls(n):  # type: ignore[no-untyped-def]
    """How many micro-tiles of :func:`_row_step` rows cover ``n`` rows."""
    calls = 0
    r = 0
    while r < n:
        r += _row_step(n - r)
        calls += 1
    return calls


@njit(cache=True, nogil=True, inline="always")
def _micro_tile(  # type: ignore[no-untyped-def]
    rows, lines, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu, nf, nfl,
    sf, sfl,
):
    """The micro-tile of ``rows`` rows (ROWS, 4, 2 or 1) and ``lines`` vectors (LINES
    or fewer; LINES is 2 or 3)."""
    if rows == ROWS:
        if lines == 3:
            _micro(ROWS, 3, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt,
                   relu, nf, nfl, sf, sfl)
        elif lines == 2:
            _micro(ROWS, 2, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt,
                   relu, nf, nfl, sf, sfl)
        else:
            _micro(ROWS, 1, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt,
                   relu, nf, nfl, sf, sfl)
    elif rows == 4:
        if lines == 3:
            _micro(4, 3, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu,
                   nf, nfl, sf, sfl)
        elif lines == 2:
            _micro(4, 2, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu,
                   nf, nfl, sf, sfl)
        else:
            _micro(4, 1, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu,
                   nf, nfl, sf, sfl)
    elif rows == 2:
        if lines == 3:
            _micro(2, 3, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu,
                   nf, nfl, sf, sfl)
        elif lines == 2:
            _micro(2, 2, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu,
                   nf, nfl, sf, sfl)
        else:
            _micro(2, 1, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu,
                   nf, nfl, sf, sfl)
    elif lines == 3:
        _micro(1, 3, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu, nf,
               nfl, sf, sfl)
    elif lines == 2:
        _micro(1, 2, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu, nf,
               nfl, sf, sfl)
    else:
        _micro(1, 1, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu, nf,
               nfl, sf, sfl)


@njit(cache=True, nogil=True, inline="always")
def _quad_tile(  # type: ignore[no-untyped-def]
    rows, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt, relu, nf, nfl, sf,
    sfl,
):
    """The QUAD_LINES-vector micro-tile of ``rows`` rows (QUAD_ROWS, 4, 2 or 1)."""
    if rows == QUAD_ROWS:
        _micro(QUAD_ROWS, QUAD_LINES, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf,
               tail, nt, relu, nf, nfl, sf, sfl)
    elif rows == 4:
        _micro(4, QUAD_LINES, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt,
               relu, nf, nfl, sf, sfl)
    elif rows == 2:
        _micro(2, QUAD_LINES, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt,
               relu, nf, nfl, sf, sfl)
    else:
        _micro(1, QUAD_LINES, V, vo, vk, S, so, sk, sn, C, co, cn, K, first, pf, tail, nt,
               relu, nf, nfl, sf, sfl)


@njit(cache=True, nogil=True, inline="always")
def _quad_rows(n):  # type: ignore[no-untyped-def]
    """The rows of the next QUAD_LINES-vector micro-tile when ``n`` rows are left."""
    if n >= QUAD_ROWS:
        return QUAD_ROWS
    if n >= 4:
        return 4
    return 2 if n >= 2 else 1




@njit(cache=True, nogil=True)
def _rows_alias(V, vo, vk, K, C, co, cn, n):  # type: ignore[no-untyped-def]
    """Whether some K row of V (from V[vo], ``vk`` apart) starts at the same offset
    within a page as some row of C (from C[co], ``cn`` apart), to the cache line."""
    isz = C.itemsize
    lines = PAGE_BYTES // 64
    d = element_address(V, vo) - element_address(C, co)
    if d % 64 != 0:
        return False  # the rows' lines straddle each other's: no exact match
    seen = 0  # bit i: a row of V starts in line i of a page (64 lines a page)
    for p in range(min(K, lines)):
        seen |= 1 << (((d + p * vk * isz) % PAGE_BYTES) // 64)
    hit = 0
    for r in range(min(n, lines)):
        hit |= 1 << (((r * cn * isz) % PAGE_BYTES) // 64)
    return (seen & hit) != 0


@njit(cache=True, nogil=True, inline="always")
def _next_tile_share(call, calls, nl, nxt, ns, nxs, line, v, r):  # type: ignore[no-untyped-def]
    """(nf, nfl, sf, sfl) for micro-tile call ``call`` of ``calls`` at vector offset
    ``v`` and row ``r``: an even share of the next tile's lines in each K row, its ``nl``
    lines of V (from V offset ``nxt``) then its ``ns`` lines of S (from S offset
    ``nxs``).  The call prefetches ``nfl`` lines of V from ``nf`` and ``sfl`` of S from
    ``sf``, offsets relative to its own in V and S; (0, 0, 0, 0) without calls."""
    if calls == 0:
        return 0, 0, 0, 0
    total = nl + ns
    l0 = call * total // calls
    l1 = (call + 1) * total // calls
    vl = max(min(l1, nl) - l0, 0)
    s0 = max(l0, nl)
    return nxt + l0 * line - v, vl, nxs + (s0 - nl) * line - r, max(l1 - s0, 0)


@njit(cache=True, nogil=True, inline="always")  # compiled once, in its entry
def gemm_vec(V, vo, vk, S, so, sk, sn, C, co, cn, mv, n, K, first, stream=False, relu=False,  # type: ignore[no-untyped-def]
             nxt=0, nxs=0):
    """C[co + r*cn + v] = (or +=, unless ``first``) sum_{p < K} V[vo + p*vk + v] *
    S[so + p*sk + r*sn] for v < mv (the vector axis: unit stride in V and C) and
    r < n; then max(., 0) if ``relu``.

    ``stream``: the tile is written once and not read again soon (the executor's rule,
    :func:`teir_plan.executor.lower.streams_out`): whole lines go to memory with
    non-temporal stores.  Those need 64-byte aligned lines: a vector axis that starts
    inside a line runs its first partial line with ordinary stores, and a row stride
    that is not a whole number of lines keeps them all ordinary.

    ``nxt``, ``nxs``: the offsets in V and S of the tile that runs next, from ``vo`` and
    ``so`` (0: unknown, or the same lines); its lines are prefetched while this tile
    computes.  The caller passes them only for a tile that really runs next, so every
    prefetched line is one that tile reads."""
    lanes = VECTOR_BYTES // C.itemsize  # elements of one vector register
    line = LINE_BYTES // C.itemsize  # ... of one cache line
    w = LINES * lanes
    nt = False
    v = 0
    # Streaming whole lines needs strips of whole lines (with 16-byte vectors and two
    # of them a strip is half a line: its halves would leave the write-combining buffer
    # apart, as partial writes).
    if stream and first and mv >= line and w * C.itemsize >= LINE_BYTES:
        # Whole lines need every row to start at the same offset within a line.
        addr = element_address(C, co)
        if addr % C.itemsize == 0 and (n == 1 or (cn * C.itemsize) % LINE_BYTES == 0):
            nt = True
            v = to_next_line(addr, C.itemsize)
            pre = 0
            while pre < v:  # the first partial line, up to the next line boundary
                r = 0
                while r < n:
                    rows = _row_step(n - r)
                    _micro_tile(rows, 1, V, vo + pre, vk, S, so + r * sn, sk, sn, C,
                                co + r * cn + pre, cn, K, first, 0, min(lanes, v - pre),
                                False, relu, 0, 0, 0, 0)
                    r += rows
                pre += lanes
    # Each micro-tile's first row block prefetches the lines of a later micro-tile
    # along the vector axis (the K rows are far apart: too many streams for the hardware
    # prefetchers).  With two full row blocks or more, two on: one on arrives too late
    # when the operand streams from memory (docs/decisions.md); the first column's
    # second row block then fetches the second column.
    ahead = 2 if n >= 2 * ROWS else 1
    start = v
    # The next tile's lines (``nxt``, ``nxs``: its V and S offsets from this one's; 0 =
    # none or the same lines) are prefetched into L2 spread evenly over this tile's
    # micro-tile calls, so that its reads from memory overlap this tile's arithmetic:
    # V's lines, and S's where its rows are contiguous (the broadcast operand of a Gram
    # matrix's K x n rows).  Only for small tiles: two large tiles' lines in L2 at once
    # evict each other.  S's lines, as V's, went from memory or L3 while the tile
    # computed, not at its start: ki,kj->ij over 64,000 x 32 float32 in L3, one thread,
    # 65 -> 88 GFLOP/s at AVX2 width and 147 -> 170 at AVX-512 (docs/decisions.md).
    nl = (mv + line - 1) // line if nxt != 0 else 0
    if K * nl * LINE_BYTES > NEXT_TILE_PREFETCH_BYTES:  # lower.vec_line_bytes
        nl = 0
    ns = (n + line - 1) // line if nxs != 0 and sn == 1 else 0
    if K * (nl + ns) * LINE_BYTES > NEXT_TILE_PREFETCH_BYTES:
        ns = 0
    calls = 0
    if nl + ns > 0:
        calls = ((mv - v + w - 1) // w) * _row_calls(n)
    call = 0
    left_lines = (mv - v + lanes - 1) // lanes
    if n >= QUAD_ROWS and left_lines == QUAD_LINES:
        if calls > 0:
            calls = 0
            r = 0
            while r < n:
                r += _quad_rows(n - r)
                calls += 1
        tail = mv - v - (QUAD_LINES - 1) * lanes
        r = 0
        while r < n:
            rows = _quad_rows(n - r)
            nf, nfl, sf, sfl = _next_tile_share(call, calls, nl, nxt, ns, nxs, line, v, r)
            call += 1
            _quad_tile(rows, V, vo + v, vk, S, so + r * sn, sk, sn, C, co + r * cn + v, cn,
                       K, first, 0, tail, nt, relu, nf, nfl, sf, sfl)
            r += rows
        if nt:
            store_fence()
        return
    paired = n >= 2 * ROWS and v + 4 * w <= mv and _rows_alias(V, vo + v, vk, K, C,
                                                                co + v, cn, n)
    while paired and v + 2 * w <= mv:
        # Two full strips at a time, alternating row block by row block: the loads that
        # follow a micro-tile's stores then read the other strip's columns, 192 bytes
        # from the stored ones (see _rows_alias).
        r = 0
        while r < n:
            rows = _row_step(n - r)
            for half in range(2):
                vv = v + half * w
                # The first row block fetches this strip's successor in the next pair.
                pf = 2 * w if r == 0 and vv + 3 * w <= mv else 0
                nf, nfl, sf, sfl = _next_tile_share(call, calls, nl, nxt, ns, nxs, line,
                                                    vv, r)
                call += 1
                _micro_tile(rows, LINES, V, vo + vv, vk, S, so + r * sn, sk, sn, C,
                            co + r * cn + vv, cn, K, first, pf, lanes, nt, relu, nf, nfl,
                            sf, sfl)
            r += rows
        v += 2 * w
    while v < mv:
        left = mv - v
        left_lines = (left + lanes - 1) // lanes
        lines = min(LINES, left_lines)
        if left_lines == 4 and LINES == 3:
            # 2 + 2 vectors, not 3 + 1: a 1-vector strip's K steps wait on nine loads for
            # eight products (docs/decisions.md).
            lines = 2
        tail = min(lanes, left - (lines - 1) * lanes)
        far = ahead * w if v + (ahead + 1) * w <= mv else 0
        near = w if v + 2 * w <= mv else 0
        r = 0
        while r < n:
            rows = _row_step(n - r)
            pf = 0
            if rows == ROWS:
                if r == 0:
                    pf = near if v == start else far
                elif r == ROWS and v == start and ahead == 2:
                    pf = far
            nf, nfl, sf, sfl = _next_tile_share(call, calls, nl, nxt, ns, nxs, line, v, r)
            call += 1
            _micro_tile(rows, lines, V, vo + v, vk, S, so + r * sn, sk, sn, C,
                        co + r * cn + v, cn, K, first, pf, tail, nt, relu, nf, nfl, sf, sfl)
            r += rows
        v += lines * lanes
    if nt:
        store_fence()


def _entry(vp, vn, vo, vk, sp, sn_, so, sk, sn, cp, cn_, co, cn, mv, n, k, flags, bp, bn,  # type: ignore[no-untyped-def]
           nxt, nxs):
    """gemm_vec on arrays given as (pointer, size); ``flags``: first (1), stream (2),
    relu (4); ``nxt``, ``nxs`` the next tile's offsets in V and S; the buffer unused."""
    gemm_vec(carray(vp, (vn,)), vo, vk, carray(sp, (sn_,)), so, sk, sn, carray(cp, (cn_,)),
             co, cn, mv, n, k, (flags & 1) != 0, (flags & 2) != 0, (flags & 4) != 0, nxt,
             nxs)


def entry_address(dtype: np.dtype) -> int:
    """The address of the compiled :func:`gemm_vec` for arrays of ``dtype`` (float32 or
    float64), for :func:`teir_plan.executor.entries.call_entry` (linked into the walker,
    its micro-tiles were compiled into every runner on a cold first call)."""
    return compiled_address(_entry, dtype)
