"""Scratch memory that outlives one call: packed operands and intermediates.

A fresh large buffer costs a page fault per 4 KiB page the first time it is
written, which is as slow as writing it (about 100 ms for the 430 MB pack of a
TCCG case on the reference machine).  Plans therefore borrow their large
temporaries from a process-wide pool and give them back after the call: the
next call of the same plan (or of another with a buffer of similar size) reuses
memory whose pages are already mapped.

The pool is bounded (``WORKSPACE_LIMIT_BYTES`` of idle buffers; the buffers given
back longest ago are freed first when it is exceeded) and thread-safe: a buffer is owned
by one call between :meth:`Workspace.borrow` and :meth:`Workspace.give_back`.  One
buffer larger than the bound, the one given back most recently, is kept besides, up to
``last_limit_bytes`` (an eighth of physical memory by default): a loop over a result
larger than the bound (a 1.5 GB complex128 TCCG result) would otherwise fault its
pages in again on every call.

Results returned to the caller come from the pool too (:meth:`Workspace.lend`):
such an array's memory goes back to the pool only when the array and every view
of it have been freed, so a loop that computes, uses and drops a large result
writes into memory that is already mapped instead of faulting in (and having
the kernel zero) fresh pages on every call.

>>> ws = Workspace(limit_bytes=1 << 30)
>>> a = ws.borrow((1024, 1024), np.float32)
>>> ws.give_back(a)
>>> b = ws.borrow((1000, 1000), np.float32)  # fits in the idle buffer: reused
>>> np.shares_memory(a, b)
True
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from teir_plan.forks import renew_after_fork

# Buffers smaller than this come from numpy each time: malloc reuses them cheaply.
POOL_MIN_BYTES = 1 << 20
# Idle bytes the pool keeps at most.
WORKSPACE_LIMIT_BYTES = 1 << 30


def _physical_bytes() -> int:
    """The machine's physical memory, or 0 where the OS does not say (not POSIX)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


# One buffer larger than WORKSPACE_LIMIT_BYTES (the newest such) is kept besides, up to
# this size: a fresh 1.5 GB result faulted in on every call of dega,gfbc->abcdef in
# complex128 took 172 ms against 108 into mapped pages (AMD EPYC, 2 threads;
# docs/decisions.md).
LAST_LIMIT_BYTES = max(WORKSPACE_LIMIT_BYTES, _physical_bytes() // 8)
_ALIGN = 64  # bytes: a cache line, more than any dtype needs
LINE = _ALIGN


def carved_bytes(sizes: Sequence[int]) -> int:
    """Bytes of a raw buffer that :func:`carve` cuts arrays of ``sizes`` bytes from."""
    return sum(n + _ALIGN for n in sizes)


def carve(raw: np.ndarray, shapes: Sequence[tuple[int, ...]], dtype: np.dtype) -> list[np.ndarray]:
    """C-order arrays of ``shapes`` cut one after another from the raw uint8 buffer
    ``raw`` (:func:`carved_bytes` long), each on a cache line of its own."""
    at = -raw.__array_interface__["data"][0] % _ALIGN
    out = []
    for shape in shapes:
        out.append(np.ndarray(shape, dtype, raw, at))
        n = math.prod(shape) * dtype.itemsize
        at += n + (-n % _ALIGN)
    return out


class Workspace:
    """A bounded, thread-safe pool of large scratch buffers."""

    def __init__(self, limit_bytes: int = WORKSPACE_LIMIT_BYTES,
                 last_limit_bytes: int | None = None) -> None:
        self.limit_bytes = limit_bytes
        # One idle buffer beyond limit_bytes, up to this size, is kept besides.
        self.last_limit_bytes = (max(limit_bytes, LAST_LIMIT_BYTES)
                                 if last_limit_bytes is None else last_limit_bytes)
        self._idle: list[np.ndarray] = []  # raw uint8 buffers nobody is using
        # Re-entrant: a lent array freed by the garbage collector while this thread
        # holds the lock (any allocation may run a collection) gives its memory back
        # from inside the locked region.
        self._lock = threading.RLock()

    def _take(self, nbytes: int) -> np.ndarray:
        """A raw buffer of at least ``nbytes`` plus alignment: an idle one if one is big
        enough (and not more than twice the size), else newly allocated."""
        raw = None
        with self._lock:
            fits = [b for b in self._idle if nbytes <= b.nbytes - _ALIGN <= 2 * nbytes]
            if fits:
                raw = min(fits, key=lambda b: b.nbytes)
                self._idle = [b for b in self._idle if b is not raw]
        return raw if raw is not None else np.empty(nbytes + _ALIGN, np.uint8)

    def borrow(self, shape: tuple[int, ...], dtype: np.dtype | type,
               axis_order: Sequence[int] | None = None) -> np.ndarray:
        """An uninitialised array for the caller to :meth:`give_back`: C order, or
        contiguous with its axes laid out ``axis_order`` (outermost first)."""
        return self._array(shape, np.dtype(dtype), axis_order, lent=False)

    def lend(self, shape: tuple[int, ...], dtype: np.dtype | type,
             axis_order: Sequence[int] | None = None) -> np.ndarray:
        """Like :meth:`borrow`, for an array the caller keeps: its memory returns to the
        pool by itself once the array and all its views are gone."""
        return self._array(shape, np.dtype(dtype), axis_order, lent=True)

    def _array(self, shape: tuple[int, ...], dt: np.dtype, axis_order: Sequence[int] | None,
               lent: bool) -> np.ndarray:
        if axis_order is not None and list(axis_order) == list(range(len(shape))):
            axis_order = None  # C order: no transposed view needed
        order = list(range(len(shape))) if axis_order is None else list(axis_order)
        mem_shape = tuple(shape[a] for a in order)
        nbytes = math.prod(mem_shape) * dt.itemsize
        if nbytes < POOL_MIN_BYTES:
            buf = np.empty(mem_shape, dt)
        else:
            raw = self._take(nbytes)
            skip = -raw.ctypes.data % _ALIGN
            if lent:
                buf = np.asarray(_Lease(self, raw, skip, mem_shape, dt))
            else:
                buf = raw[skip: skip + nbytes].view(dt).reshape(mem_shape)
        return buf if axis_order is None else buf.transpose(np.argsort(order))

    def give_back(self, arr: np.ndarray) -> None:
        """Return a borrowed array; its memory may be handed to the next borrower."""
        raw = arr.base
        while isinstance(raw, np.ndarray) and raw.base is not None:
            raw = raw.base
        if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.ndim != 1:
            return  # small arrays never came from the pool
        self._put(raw)

    def _put(self, raw: np.ndarray) -> None:
        with self._lock:
            if any(b is raw for b in self._idle):
                return
            # A new list, never one changed in place: a collection inside this block may
            # re-enter through a lent array's release (see ``_lock``).  Oldest first: the
            # buffers given back longest ago are freed first, so the one just given back,
            # the likeliest to be wanted by the next call, stays (freeing the largest
            # first can drop a large result on every call once smaller buffers fill the
            # pool, and each call faults its pages in again: docs/decisions.md).
            self._idle = self._within_limit([*self._idle, raw])

    def _within_limit(self, idle: list[np.ndarray]) -> list[np.ndarray]:
        """The newest of ``idle`` (oldest first) within ``limit_bytes``, and besides them
        the newest buffer larger than ``limit_bytes`` but within ``last_limit_bytes``."""
        large = [b for b in idle if self.limit_bytes < b.nbytes <= self.last_limit_bytes]
        kept_large = large[-1] if large else None
        rest = [b for b in idle if b is not kept_large]
        total = sum(b.nbytes for b in rest)
        while rest and total > self.limit_bytes:
            total -= rest.pop(0).nbytes
        kept = {id(b) for b in rest}
        return [b for b in idle if b is kept_large or id(b) in kept]

    def trim(self) -> None:
        """Free idle buffers (the oldest first) until they are within ``limit_bytes``:
        after the limit was lowered."""
        with self._lock:
            self._idle = self._within_limit(list(self._idle))

    def idle_bytes(self) -> int:
        with self._lock:
            return sum(b.nbytes for b in self._idle)

    def clear(self) -> None:
        with self._lock:
            self._idle.clear()


workspace = Workspace()
renew_after_fork(workspace, "_lock", threading.RLock)


class _Lease:
    """The owner of a lent array's memory (the array's ``base``): numpy frees it when the
    last view of the array goes, and the memory then goes back to the pool."""

    __slots__ = ("__array_interface__", "_pool", "_raw")

    def __init__(self, pool: Workspace, raw: np.ndarray, offset: int,
                 shape: tuple[int, ...], dtype: np.dtype) -> None:
        self._pool = pool
        self._raw = raw
        self.__array_interface__: dict[str, Any] = {
            "shape": shape, "typestr": dtype.str, "version": 3,
            "data": (raw.ctypes.data + offset, False),
        }

    def __del__(self) -> None:
        # At interpreter shutdown the pool may be gone already: then the memory just goes.
        with contextlib.suppress(Exception):
            self._pool._put(self._raw)
