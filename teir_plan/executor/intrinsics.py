"""LLVM helpers for the executor's intrinsics: vector types of one cache line, the
masked-load/store and FMA declarations, in-register transposes, non-temporal stores
and fences, element addresses.  The vector kernels (microkernel.py,
transposed_kernel.py), the copy kernels and the blocked write-back build their
intrinsics from these.
"""

from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from teir_plan.isa import LINE_BYTES


class VectorOps(NamedTuple):
    """The LLVM intrinsics a vector kernel calls on vectors of one type."""

    fma: ir.Function  # a * b + c, lane by lane
    prefetch: ir.Function  # (address, rw, locality, cache type)
    masked_load: ir.Function  # (pointer, alignment, mask, pass-through)
    masked_store: ir.Function  # (value, pointer, alignment, mask)
    mask_type: ir.VectorType  # one i1 per lane


def vector_ops(builder, vty: ir.VectorType, bits: int) -> VectorOps:  # type: ignore[no-untyped-def]
    """Declarations (once per module) of the intrinsics on ``vty``, a line of floats of
    ``bits`` bits."""
    lanes = vty.count
    i32 = ir.IntType(32)
    mty = ir.VectorType(ir.IntType(1), lanes)
    module = builder.module
    return VectorOps(
        cgutils.get_or_insert_function(module, ir.FunctionType(vty, [vty, vty, vty]),
                                       f"llvm.fma.v{lanes}f{bits}"),
        _prefetch_declaration(module),
        cgutils.get_or_insert_function(
            module, ir.FunctionType(vty, [vty.as_pointer(), i32, mty, vty]),
            f"llvm.masked.load.v{lanes}f{bits}.p0"),
        cgutils.get_or_insert_function(
            module, ir.FunctionType(ir.VoidType(), [vty, vty.as_pointer(), i32, mty]),
            f"llvm.masked.store.v{lanes}f{bits}.p0"),
        mty,
    )


def _prefetch_declaration(module: ir.Module) -> ir.Function:
    """llvm.prefetch (address, read or write, locality, data or instructions), declared
    once per module."""
    i32 = ir.IntType(32)
    return cgutils.get_or_insert_function(
        module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]),
        "llvm.prefetch.p0")


def splat(builder, value, vty: ir.VectorType):  # type: ignore[no-untyped-def]
    """``value`` in every lane of a ``vty``."""
    i32 = ir.IntType(32)
    one = builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(i32, 0))
    return builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined),
                                  ir.Constant(ir.VectorType(i32, vty.count), [0] * vty.count))


def transpose_lines(builder, rows: list) -> list:  # type: ignore[type-arg, no-untyped-def]
    """The L x L block whose row i is ``rows[i]`` (L vectors of L lanes), transposed in
    registers: log2 L rounds of two-input shuffles, each swapping the off-diagonal
    blocks of every 2h x 2h block.  Returns the L transposed rows (a new list)."""
    rows = list(rows)
    lanes = len(rows)
    i32 = ir.IntType(32)
    h = lanes // 2
    while h >= 1:
        lo = ir.Constant(ir.VectorType(i32, lanes),
                         [c if c & h == 0 else lanes + c - h for c in range(lanes)])
        hi = ir.Constant(ir.VectorType(i32, lanes),
                         [c + h if c & h == 0 else lanes + c for c in range(lanes)])
        for i in range(lanes):
            if i & h == 0:
                a_, b_ = rows[i], rows[i + h]
                rows[i] = builder.shuffle_vector(a_, b_, lo)
                rows[i + h] = builder.shuffle_vector(a_, b_, hi)
        h //= 2
    return rows

def as_intp(context, builder, value, ty):  # type: ignore[no-untyped-def]
    """An integer argument of an intrinsic as an intp LLVM value."""
    return context.cast(builder, value, ty, types.intp)


class LineVector(NamedTuple):
    """The LLVM types of one vector of a numba float type."""

    lanes: int  # elements in the vector
    elem: ir.Type  # one element
    vty: ir.VectorType  # the vector
    size: int  # bytes of one element: the alignment of an element-aligned vector access


def line_vector(context, dtype, nbytes: int = LINE_BYTES) -> LineVector:  # type: ignore[no-untyped-def]
    """The :class:`LineVector` of ``nbytes`` (a 64-byte cache line by default: the copy
    kernels move whole lines, which LLVM splits into the target's registers) of numba
    float type ``dtype``."""
    elem = context.get_data_type(dtype)
    lanes = nbytes * 8 // dtype.bitwidth
    return LineVector(lanes, elem, ir.VectorType(elem, lanes),
                      elem.get_abi_size(context.target_data))


def array_data(context, builder, ty, ary):  # type: ignore[no-untyped-def]
    """The LLVM pointer to the first element of array ``ary`` (numba type ``ty``)."""
    return context.make_array(ty)(context, builder, ary).data


def address(context, builder, ary, ty, index, index_ty):  # type: ignore[no-untyped-def]
    """The LLVM pointer to element ``index`` of array ``ary`` (numba type ``ty``)."""
    data = array_data(context, builder, ty, ary)
    return builder.gep(data, [as_intp(context, builder, index, index_ty)])


def store_nontemporal(builder, value, ptr, align: int):  # type: ignore[no-untyped-def]
    """Store ``value`` at ``ptr`` with the non-temporal hint: the line goes to memory
    through a write-combining buffer, neither read for ownership nor kept in cache (a
    whole-line vector store needs ``align`` 64)."""
    st = builder.store(value, ptr, align=align)
    st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))


def keep_rolled(branch) -> None:  # type: ignore[no-untyped-def]
    """Mark the loop whose back edge is ``branch`` as not to be unrolled (LLVM's
    ``llvm.loop.unroll.disable``).  A loop's ID is a node of its own that names itself
    first; ``add_metadata`` would hand two loops the same cached node."""
    module = branch.module
    disable = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    loop_id = ir.values.MDValue(module, [disable], name=str(len(module.metadata)))
    loop_id.operands = (loop_id, disable)
    branch.set_metadata("llvm.loop", loop_id)


@njit(cache=True, nogil=True, inline="always")
def to_next_line(addr, itemsize):  # type: ignore[no-untyped-def]
    """Elements from address ``addr`` (a multiple of ``itemsize``) to the next 64-byte
    line boundary (0 when it is on one)."""
    return ((64 - addr % 64) % 64) // itemsize


@intrinsic
def element_address(typingctx, y, yo):  # type: ignore[no-untyped-def]
    """The address of y[yo], as an integer (for alignment tests)."""
    sig = types.intp(y, yo)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ptr = address(context, builder, args[0], signature.args[0], args[1], signature.args[1])
        return builder.ptrtoint(ptr, context.get_value_type(types.intp))

    return sig, codegen


@intrinsic
def store_line_nt(typingctx, y, yo, b, bo):  # type: ignore[no-untyped-def]
    """y[yo : yo + L] = b[bo : bo + L] as one non-temporal vector store; the caller
    guarantees y's address at yo is 64-byte aligned (the store requires it)."""
    sig = types.void(y, yo, b, bo)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        yty, yoty, bty, boty = signature.args
        line = line_vector(context, yty.dtype)
        vptr, size = line.vty.as_pointer(), line.size
        ya = array_data(context, builder, yty, args[0])
        ba = array_data(context, builder, bty, args[2])
        src = builder.bitcast(builder.gep(ba, [as_intp(context, builder, args[3], boty)]), vptr)
        dst = builder.bitcast(builder.gep(ya, [as_intp(context, builder, args[1], yoty)]), vptr)
        store_nontemporal(builder, builder.load(src, align=size), dst, 64)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def store_fence(typingctx):  # type: ignore[no-untyped-def]
    """A full fence: non-temporal stores are weakly ordered, and must be visible before
    the worker reports its chunk done."""
    sig = types.void()

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch_element(typingctx, y, yo):  # type: ignore[no-untyped-def]
    """A read prefetch of the line holding y[yo] into every cache level (the caller keeps
    ``yo`` within y: a prefetch never faults, but the executor's addresses stay inside
    its arrays)."""
    sig = types.void(y, yo)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ptr = address(context, builder, args[0], signature.args[0], args[1], signature.args[1])
        i32 = ir.IntType(32)
        builder.call(_prefetch_declaration(builder.module),
                     [builder.bitcast(ptr, ir.IntType(8).as_pointer()), ir.Constant(i32, 0),
                      ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen
