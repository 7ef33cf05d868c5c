"""Scratch memory that outlives one call: packed operands and intermediates.

A fresh large buffer costs a page fault per 4 KiB page the first time it is
written, which is as slow as writing it (about 100 ms for the 430 MB pack of a
TCCG case on the reference machine).  Plans therefore borrow their large
temporaries from a process-wide pool and give them back after the call: the
next call of the same plan (or of another with a buffer of similar size) reuses
memory whose pages are already mapped.

The pool is bounded (``WORKSPACE_LIMIT_BYTES`` of idle buffers; the largest idle
buffers are freed first when it is exceeded) and thread-safe: a buffer is owned
by one call between :meth:`Workspace.borrow` and :meth:`Workspace.give_back`.

>>> ws = Workspace(limit_bytes=1 << 30)
>>> a = ws.borrow((1024, 1024), np.float32)
>>> ws.give_back(a)
>>> b = ws.borrow((1000, 1000), np.float32)  # fits in the idle buffer: reused
>>> np.shares_memory(a, b)
True
"""

from __future__ import annotations

import threading

import numpy as np

# Buffers smaller than this come from numpy each time: malloc reuses them cheaply.
POOL_MIN_BYTES = 1 << 20
# Idle bytes the pool keeps at most.
WORKSPACE_LIMIT_BYTES = 1 << 30
_ALIGN = 64  # bytes: a cache line, more than any dtype needs


class Workspace:
    """A bounded, thread-safe pool of large scratch buffers."""

    def __init__(self, limit_bytes: int = WORKSPACE_LIMIT_BYTES) -> None:
        self.limit_bytes = limit_bytes
        self._idle: list[np.ndarray] = []  # raw uint8 buffers nobody is using
        self._lock = threading.Lock()

    def borrow(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        """An uninitialised C-order array, from an idle buffer if one is big enough
        (and not more than twice the size), else newly allocated."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if nbytes < POOL_MIN_BYTES:
            return np.empty(shape, dt)
        raw = None
        with self._lock:
            fits = [b for b in self._idle if nbytes <= b.nbytes - _ALIGN <= 2 * nbytes]
            if fits:
                raw = min(fits, key=lambda b: b.nbytes)
                self._idle = [b for b in self._idle if b is not raw]
        if raw is None:
            raw = np.empty(nbytes + _ALIGN, np.uint8)
        skip = -raw.ctypes.data % _ALIGN
        return raw[skip: skip + nbytes].view(dt).reshape(shape)

    def give_back(self, arr: np.ndarray) -> None:
        """Return a borrowed array; its memory may be handed to the next borrower."""
        raw = arr.base
        while isinstance(raw, np.ndarray) and raw.base is not None:
            raw = raw.base
        if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.ndim != 1:
            return  # small arrays never came from the pool
        with self._lock:
            if any(b is raw for b in self._idle):
                return
            self._idle.append(raw)
            self._idle.sort(key=lambda b: b.nbytes)
            while self._idle and sum(b.nbytes for b in self._idle) > self.limit_bytes:
                self._idle.pop()  # free the largest

    def idle_bytes(self) -> int:
        with self._lock:
            return sum(b.nbytes for b in self._idle)

    def clear(self) -> None:
        with self._lock:
            self._idle.clear()


workspace = Workspace()
