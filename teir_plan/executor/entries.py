"""Vector kernels compiled on demand and called through an address.

The executor's loop walker calls the vector kernels through an address, as it calls
BLAS: linked into the walker, every kernel's micro-tiles would be compiled again into
every runner that contains the walker (serial, parallel, blocked), on the first call
of a process with a cold numba cache, whether its program uses them or not.  As C
callbacks, each kernel is compiled once per dtype, when a program first needs it, and
cached on disk like the rest (executor/cache.py).

Two C signatures serve every entry point, each array passed as (data pointer, size):
the vector kernels' (three arrays around the scalars of a vector-kernel tile, then a
buffer and two more integers whose meaning is the kernel's: :func:`call_entry`), and the
tile kinds' (the loop walker's own arguments: :func:`call_tile`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import numba
import numpy as np
from llvmlite import ir
from numba import cfunc, njit, types
from numba.extending import intrinsic

from teir_plan.forks import renew_after_fork

# The compiled entry points, per (kernel, dtype): kept here so that their code lives as
# long as the process (plans hold only the address), made under a lock so that
# concurrent first plans compile once.
_COMPILED: dict[tuple[str, np.dtype], object] = {}
_COMPILE_LOCK = threading.Lock()
renew_after_fork(sys.modules[__name__], "_COMPILE_LOCK", threading.Lock)


def _vector_signature(dtype: np.dtype):  # type: ignore[no-untyped-def]
    ptr = types.CPointer(numba.from_dtype(dtype))
    i = types.int64
    return types.void(ptr, i, i, i, ptr, i, i, i, i, ptr, i, i, i, i, i, i, i, ptr, i, i, i)


def _tile_signature(dtype: np.dtype):  # type: ignore[no-untyped-def]
    ptr = types.CPointer(numba.from_dtype(dtype))
    iptr = types.CPointer(types.int64)
    i = types.int64
    return types.void(ptr, i, i, ptr, i, i, ptr, i, i, iptr, i, i, i, ptr, i, iptr, i, ptr, i,
                      i, i, i)


def _chunk_signature(dtype: np.dtype):  # type: ignore[no-untyped-def]
    ptr = types.CPointer(numba.from_dtype(dtype))
    iptr = types.CPointer(types.int64)
    i = types.int64
    return types.void(ptr, i, ptr, i, ptr, i, iptr, i, i, iptr, i, ptr, i, i, i)


def _blocked_signature(dtype: np.dtype):  # type: ignore[no-untyped-def]
    ptr = types.CPointer(numba.from_dtype(dtype))
    iptr = types.CPointer(types.int64)
    i = types.int64
    return types.void(ptr, i, ptr, i, ptr, i, iptr, i, iptr, i, iptr, i, iptr, i, i, ptr, i,
                      i, i)


_SIGNATURES = {"vector": _vector_signature, "tile": _tile_signature,
               "chunk": _chunk_signature, "blocked": _blocked_signature}
# Addresses already compiled, read without the lock (the executor asks on every call).
# Keyed by the function and dtype as given: the executor asks on every call, and building
# the compile key (a formatted name, a normalized dtype) each time would cost more.
_ADDRESSES: dict[tuple[Callable[..., None], object], int] = {}


def compiled_address(entry: Callable[..., None], dtype: np.dtype, abi: str = "vector"
                     ) -> int:
    """The address of ``entry`` (a plain Python function of the arguments that
    :func:`call_entry`, :func:`call_tile`, :func:`call_chunk` or :func:`call_blocked`
    passes, as ``abi`` says) compiled for arrays of ``dtype`` (float32 or float64)."""
    address = _ADDRESSES.get((entry, dtype))
    if address is not None:
        return address
    given = (entry, dtype)
    dtype = np.dtype(dtype)
    key = (f"{entry.__module__}.{entry.__qualname__}", dtype)
    with _COMPILE_LOCK:
        compiled = _COMPILED.get(key)
        if compiled is None:
            from teir_plan.executor.cache import announce_if_cold

            announce_if_cold(entry)
            compiled = _COMPILED[key] = cfunc(_SIGNATURES[abi](dtype), cache=True)(entry)
        address = int(compiled.address)  # type: ignore[attr-defined]
        assert address, "a compiled C callback has an address"
        _ADDRESSES[given] = address
    return address


def call_codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
    """Call the function at address args[0] with each array as its data pointer and
    size, every other argument as an int64."""
    tys = signature.args
    i64 = ir.IntType(64)
    i8p = ir.IntType(8).as_pointer()
    values = []
    for a, ty in zip(args[1:], tys[1:]):
        if isinstance(ty, types.Array):
            ary = context.make_array(ty)(context, builder, a)
            values += [builder.bitcast(ary.data, i8p), builder.extract_value(
                ary.shape, 0)]
        else:
            values.append(context.cast(builder, a, ty, types.int64))
    fnty = ir.FunctionType(ir.VoidType(), [v.type for v in values])
    address = context.cast(builder, args[0], tys[0], types.intp)
    fptr = builder.inttoptr(address, fnty.as_pointer())
    assert all(v.type in (i64, i8p) for v in values)
    builder.call(fptr, values)
    return context.get_dummy_value()


@intrinsic
def _call(typingctx, fn, v, vo, vk, s, so, sk, sn, c, co, cv, mv, n, k, flags, b, extra,  # type: ignore[no-untyped-def]
          extra2):
    sig = types.void(fn, v, vo, vk, s, so, sk, sn, c, co, cv, mv, n, k, flags, b, extra,
                     extra2)
    return sig, call_codegen


@intrinsic
def _call_tile(typingctx, fn, x0, o0, x1, o1, y, o2, tile, first, last, scratch, iparams,  # type: ignore[no-untyped-def]
               consts, n0, n1, p2):
    sig = types.void(fn, x0, o0, x1, o1, y, o2, tile, first, last, scratch, iparams, consts,
                     n0, n1, p2)
    return sig, call_codegen


@njit(cache=True, nogil=True, inline="always")
def call_tile(fn, x0, o0, x1, o1, y, o2, tile, first, last, scratch, iparams, consts, n0, n1,  # type: ignore[no-untyped-def]
              p2):
    """The tile kernel at address ``fn`` (:func:`compiled_address`, ``abi="tile"``) on
    the tile at offsets o0, o1, o2: the loop walker's own arguments (see
    walker._run_tile); ``first`` and ``last`` as 0/1."""
    _call_tile(fn, x0, o0, x1, o1, y, o2, tile, 1 if first else 0, 1 if last else 0, scratch,
               iparams, consts, n0, n1, p2)


@njit(cache=True, nogil=True, inline="always")
def call_entry(fn, V, vo, vk, S, so, sk, sn, C, co, cv, mv, n, K, first, stream, relu, buf,  # type: ignore[no-untyped-def]
               extra, extra2):
    """The vector kernel at address ``fn`` (:func:`compiled_address` of the arrays'
    dtype) on a tile: V (the operand along the vector axis, ``mv`` long) from ``vo``,
    K rows ``vk`` apart; S (the broadcast operand) from ``so``, K rows ``sk`` apart and
    ``n`` rows ``sn`` apart; C from ``co``, its stride ``cv`` the kernel's (rows for
    the vector kernel, the vector axis for the transposed one); ``buf`` a per-worker
    buffer, ``extra`` and ``extra2`` the kernel's own integers."""
    flags = (1 if first else 0) + (2 if stream else 0) + (4 if relu else 0)
    _call(fn, V, vo, vk, S, so, sk, sn, C, co, cv, mv, n, K, flags, buf, extra, extra2)


@intrinsic
def _call_chunk(typingctx, fn, x0, x1, y, loops, npar, tile, consts, start, stop):  # type: ignore[no-untyped-def]
    sig = types.void(fn, x0, x1, y, loops, npar, tile, consts, start, stop)
    return sig, call_codegen


@njit(cache=True, nogil=True, inline="always")
def call_chunk(fn, x0, x1, y, loops, npar, tile, consts, start, stop):  # type: ignore[no-untyped-def]
    """The chunk runner at address ``fn`` (walker.chunk_address): iterations [start,
    stop) of a program's first ``npar`` loop rows (``loops``: rows of 5)."""
    _call_chunk(fn, x0, x1, y, loops, npar, tile, consts, start, stop)


@intrinsic
def _call_blocked(typingctx, fn, x0, x1, y, outer, inner, tile, block, stage_elements,  # type: ignore[no-untyped-def]
                  consts, start, stop):
    sig = types.void(fn, x0, x1, y, outer, inner, tile, block, stage_elements, consts, start,
                     stop)
    return sig, call_codegen


@njit(cache=True, nogil=True, inline="always")
def call_blocked(fn, x0, x1, y, outer, inner, tile, block, stage_elements, consts, start,  # type: ignore[no-untyped-def]
                 stop):
    """The blocked chunk runner at address ``fn`` (blocked.blocked_address): blocks
    [start, stop) (``outer``: rows of 4, ``inner``: rows of 5, ``block``: rows of 3)."""
    _call_blocked(fn, x0, x1, y, outer, inner, tile, block, stage_elements, consts, start,
                  stop)
