"""Running a program with parallel K axes (the layout: teir_plan/teir/parallel_k.py):
each worker zeroes its private block and runs its share of the parallel iterations into
it (:func:`run_partials`), then the blocks are added into the output in worker order,
a whole row of the output at a time (:func:`add_partials`).  Numerics: docs/teir.md,
"Numerics of parallel K".
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from teir_plan.executor.elements import relu_value
from teir_plan.executor.entries import call_chunk
from teir_plan.executor.tables import P_BLOCK, P_EXTENT, P_OUT
from teir_plan.executor.walker import loop_iterations, thread_chunk
from teir_plan.teir.parallel_k import PartialLayout

# Each worker's block starts on its own cache line: blocks that shared a line would
# make two workers' stores invalidate each other's copy of it.
_LINE = 64
# The workers' blocks together are kept below this many bytes: a hand-written program
# with a parallel K axis and a large output runs on fewer workers (one: no blocks).
PARTIALS_MAX_BYTES = 1 << 30


def block_pitch(elements: int, itemsize: int) -> int:
    """Elements from one worker's block to the next: a whole number of cache lines."""
    per_line = _LINE // itemsize
    return -(-elements // per_line) * per_line


def workers_for(layout: PartialLayout, iterations: int, threads: int, itemsize: int) -> int:
    """How many workers share the parallel iterations: the threads, at most one per
    iteration, and no more than PARTIALS_MAX_BYTES of blocks allow."""
    room = PARTIALS_MAX_BYTES // max(1, block_pitch(layout.elements, itemsize) * itemsize)
    return max(1, min(threads, iterations, room))


@njit(cache=True, nogil=True, parallel=True)
def run_partials(fn, x0, x1, parts, pitch, loops, npar, tile, consts, nchunks):  # type: ignore[no-untyped-def]
    """Worker ``c`` zeroes its block ``parts[c * pitch:]`` and runs its contiguous share
    of the first ``npar`` loop rows (collapsed) into it, through the chunk runner at
    ``fn`` (walker.chunk_address), whose tile table addresses the block from offset 0."""
    total = loop_iterations(loops, npar)
    for c in prange(nchunks):
        start, stop = thread_chunk(c, total, nchunks)
        mine = parts[c * pitch:(c + 1) * pitch]
        mine[:] = 0
        if start < stop:
            call_chunk(fn, x0, x1, mine, loops, npar, tile, consts, start, stop)


@njit(cache=True, nogil=True)
def add_partials(y, o2, parts, pitch, nparts, rows, zero, relu):  # type: ignore[no-untyped-def]
    """Add the ``nparts`` blocks of ``parts`` (``pitch`` apart) into the output ``y`` at
    offset ``o2``: each output row (the last row of ``rows``, tables.PARTIAL_FIELDS: its
    block stride 1) is summed across the blocks in worker order into a buffer, then
    written over (``zero``) or added to the output, through max(., 0) with ``relu``
    (NaN propagates, as numpy.maximum's does)."""
    nrows = rows.shape[0]
    n = rows[nrows - 1, P_EXTENT] if nrows else 1
    so = rows[nrows - 1, P_OUT] if nrows else 0
    acc = np.empty(n, parts.dtype)
    outer = 1
    for r in range(nrows - 1):
        outer *= rows[r, P_EXTENT]
    for it in range(outer):
        ob = o2
        bb = 0
        rem = it
        for r in range(nrows - 2, -1, -1):
            i = rem % rows[r, P_EXTENT]
            rem //= rows[r, P_EXTENT]
            ob += i * rows[r, P_OUT]
            bb += i * rows[r, P_BLOCK]
        for i in range(n):
            acc[i] = parts[bb + i]
        for w in range(1, nparts):
            base = w * pitch + bb
            for i in range(n):
                acc[i] += parts[base + i]
        if not zero:
            for i in range(n):
                acc[i] += y[ob + i * so]
        if relu:
            for i in range(n):
                # numpy.maximum(v, 0), NaN kept; typed for complex blocks too (elements.py)
                acc[i] = relu_value(acc[i])
        if so == 1:  # a unit-stride row: a plain, vectorized copy
            for i in range(n):
                y[ob + i] = acc[i]
        else:
            for i in range(n):
                y[ob + i * so] = acc[i]
