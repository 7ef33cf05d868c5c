"""Handing an intermediate from one step of a tree to the next: the lines its consumer
reads that another core wrote.

A step's workers each write their share of its output, which stays in their own caches
(modified) when it fits in L2.  The next step's workers read their shares of it as its
input; when the two steps split the work differently, a worker reads lines another
core holds, and each such line is a transfer between cores.  A read that the hardware
prefetchers follow (runs that continue within a 4 KiB page) hides the transfer; a read
of short runs each on its own page (a BLAS tile's operand rows 36 KiB apart, which BLAS
packs run by run) waits for it.

Measured on a 2-core AMD EPYC (Zen 5) virtual machine, whose cores reach a line the
other one wrote in 136-141 ns (a line in the reader's own L3: 87):
``abc,ai,bj,ck->ijk`` (32^3 core, rank 96), its last step ``icj,ck->ijk`` on one
thread after the other core wrote ``icj`` (1.2 MB): 503-534 us with ``icj`` stored
``ijc`` (BLAS tiles of 96 x 32 x 32 reading 128-byte runs 36 KiB apart) against 252
when the same core wrote it, and 250-254 against 248-250 stored ``icj`` (the vector
kernel streams it).  In the tree, after the step that writes ``icj`` on both threads,
the first ran 95 us slower than alone and the second no slower: the model put the
first 5.6% ahead, and it ran 0.77-0.94x as fast.

:func:`handoff_seconds` prices this: the exposed transfers of the reader's most
delayed worker (a run that starts a new page: one; a page of a streamed read: one)
times the machine's cross-core latency (``MachineParams.handoff_seconds``, measured by
both calibrations), over the transfers a core keeps in flight (HANDOFF_IN_FLIGHT).
Which worker touches which line follows the executor's split (``run_lowered``): the
parallel iterations in contiguous chunks, chunk ``c`` on worker ``c``, the calling
thread worker 0, which also runs every program without parallel loops and adds a
parallel K split's partial sums.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from teir_plan.isa import LINE_BYTES
from teir_plan.teir.enums import ExecType
from teir_plan.teir.records import TEIR

PAGE_BYTES = 4096  # the hardware prefetchers follow a stream within a page
# Transfers a core waits for at once when its reads are not prefetched: on the case in the
# module's docstring, 9216 runs read from the other core (85% of them still in its L2)
# cost 250-280 us at 140 ns each, about 4 at a time.
HANDOFF_IN_FLIGHT = 4
# Iterations x tile elements enumerated per program at most; a larger program's shares
# are not worked out (no handoff is priced): its intermediate is far past the L2s.
MAX_TOUCHES = 1 << 22


class Shares(NamedTuple):
    """Which lines of a tensor each worker of a program touches (:func:`_shares`)."""

    ranges: list[tuple[int, int, int]]  # (worker, first, end iteration), in order
    base: np.ndarray  # each parallel iteration's first element (offset)
    tile: np.ndarray  # the offsets the rest of the loops add to it
    lanes: int  # elements a line
    from_place: dict[int, np.ndarray]  # the tile's lines from each place, as found

    def lines(self, first: int, end: int) -> list[np.ndarray]:
        """The lines iterations [first, end) touch, in parts (a line may repeat).  The
        lines an iteration touches are its first line plus those the tile's offsets
        reach from its first element's place in its line, one of ``lanes`` places: so
        the tile's distinct lines are found once per place, not once per iteration (a
        tile of runs of whole lines touches a lane's worth fewer lines than elements)."""
        base = self.base[first:end]
        lanes = self.lanes
        place = base % lanes
        out = []
        for r in np.flatnonzero(np.bincount(place, minlength=lanes)).tolist():
            from_r = self.from_place.get(r)
            if from_r is None:
                from_r = self.from_place[r] = _distinct((r + self.tile) // lanes)
            starts = base if r == place[0] and (place == r).all() else base[place == r]
            out.append((starts // lanes)[:, None] + from_r[None, :])
        return [o.ravel() for o in out]


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values`` (small non-negative integers), ascending:
    np.unique's, from a table of their range instead of a sort."""
    seen = np.zeros(int(values.max()) + 1, np.bool_)
    seen[values] = True
    return np.flatnonzero(seen)


def _shares(prog: TEIR, j: int, threads: int, lanes: int) -> Shares | None:
    """The lines of tensor ``j`` that each parallel iteration of ``prog`` touches, for
    ``threads`` workers with ``lanes`` elements a line, or None when not worked out
    (negative strides, or more than MAX_TOUCHES).  Each worker's iterations are one
    block, so that the callers work a worker at a time instead of on a (worker, line)
    pair per touch."""
    s = prog.schedule
    strides = s.strides[j]
    if any(st < 0 for st in strides):
        return None
    par = [i for i, e in enumerate(s.exec_types) if e is ExecType.PARALLEL]
    rest = [i for i in range(s.num_dims)
            if i not in par and strides[i] != 0 and s.dim_sizes[i] > 1]
    total = math.prod(s.dim_sizes[i] for i in par)
    inner = math.prod(s.dim_sizes[i] for i in rest)
    if total * inner > MAX_TOUCHES or total == 0 or inner == 0:
        return None
    base = np.zeros(1, np.int64)
    for i in par:
        base = (base[:, None] + np.arange(s.dim_sizes[i], dtype=np.int64) * strides[i]).ravel()
    tile = np.zeros(1, np.int64)
    for i in rest:
        tile = (tile[:, None] + np.arange(s.dim_sizes[i], dtype=np.int64) * strides[i]).ravel()
    chunks = min(total, threads) if par else 1
    if j == len(s.strides) - 1 and any(strides[i] == 0 for i in par):
        chunks = 1  # a parallel K split: the caller adds the workers' partial sums
    # Chunk c holds iterations [c * total // chunks, (c + 1) * total // chunks), on worker c.
    bounds = [c * total // chunks for c in range(chunks)] + [total]
    ranges = ([(c, bounds[c], bounds[c + 1]) for c in range(chunks)] if chunks > 0
              else [(-1, 0, total)])  # (no worker: as the executor's split would say)
    return Shares(ranges, base, tile, lanes, {})


# Writers whose line owners are remembered: a tree step's best program for a layout is
# the writer every layout of its consumer is priced against.  An entry holds a number a
# line of the writer's output (at most MAX_TOUCHES / lanes lines: 2 MiB).
OWNERS = 8


@lru_cache(maxsize=OWNERS)
def _owners(writer: TEIR, threads: int, lanes: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The worker that writes each line of ``writer``'s output (-1: none) and the lines
    each worker writes, or None (see :func:`_shares`).  A line several workers write is
    the last one's."""
    shares = _shares(writer, len(writer.schedule.strides) - 1, threads, lanes)
    if shares is None:
        return None
    parts = [(w, shares.lines(first, end)) for w, first, end in shares.ranges]
    owner = np.full(max(int(p.max()) for _, ps in parts for p in ps) + 1, -1, np.int64)
    for w, ps in parts:
        for p in ps:
            owner[p] = w
    written = np.bincount(owner[owner >= 0], minlength=max(threads, 1))
    owner.flags.writeable = written.flags.writeable = False  # (shared by the memo)
    return owner, written


def _read_pairs(shares: Shares, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(worker, line) of each distinct line below ``size`` each worker reads, by worker,
    then line: a table of the lines per worker, not a sort of every touch."""
    who, line = [], []
    for w, first, end in shares.ranges:
        parts = shares.lines(first, end)
        seen = np.zeros(max(size, *(int(p.max()) + 1 for p in parts)), np.bool_)
        for p in parts:
            seen[p] = True
        read = np.flatnonzero(seen[:size])
        who.append(np.full(read.size, w, np.int64))
        line.append(read)
    return np.concatenate(who), np.concatenate(line)


def run_lines(prog: TEIR, j: int, itemsize: int) -> tuple[int, bool]:
    """(lines per contiguous run of tensor ``j``'s tile in ``prog``, whether successive
    runs are a page or more apart): the tile's unit-stride prim axis, grown by the prim
    axes whose strides continue it, as the tile rows a kernel or a BLAS pack reads one
    after another.

    >>> t = TEIR.from_fields(data_type="float32", prim_first="zero", prim_main="gemm",
    ...     prim_last="none", dim_types=["m", "m", "n", "k"],
    ...     exec_types=["parallel", "prim", "prim", "prim"], dim_sizes=[288, 32, 96, 32],
    ...     strides=[[32, 9216, 0, 1], [0, 0, 1, 96], [96, 27648, 1, 0]])
    >>> run_lines(t, 0, 4), run_lines(t, 1, 4)
    ((2, True), (192, False))
    """
    s = prog.schedule
    dims = [(s.strides[j][i], s.dim_sizes[i]) for i in s.prim_axes()
            if s.strides[j][i] != 0 and s.dim_sizes[i] > 1]
    run = 1
    grew = True
    while grew and dims:
        grew = False
        for k, (st, ext) in enumerate(dims):
            if abs(st) == run:
                run *= ext
                del dims[k]
                grew = True
                break
    lines = max(1, -(-run * itemsize // LINE_BYTES))
    if not dims:  # one contiguous block
        return lines, False
    step = min(abs(st) for st, _ in dims) * itemsize
    return lines, step >= PAGE_BYTES


@lru_cache(maxsize=1024)
def remote_transfers(writer: TEIR, writer_threads: int, reader: TEIR, j: int,
                     reader_threads: int, itemsize: int, l2_bytes: int) -> float:
    """The exposed cross-core transfers of the reader's most delayed worker when
    ``reader`` reads tensor ``j`` after ``writer`` wrote it (the same buffer, the same
    strides): lines another worker wrote, still in its L2 (the share of its writes that
    fits), per run when the reader's runs each start a page, else per page.

    >>> def gemm(sizes, par, a, b, c):
    ...     return TEIR.from_fields(data_type="float32", prim_first="zero",
    ...         prim_main="gemm", prim_last="none", dim_types=["m", "m", "n", "k"],
    ...         exec_types=[par, "prim", "prim", "prim"], dim_sizes=sizes,
    ...         strides=[a, b, c])
    >>> w = gemm([2, 64, 64, 64], "parallel", [4096, 64, 0, 1], [0, 0, 1, 64],
    ...          [4096, 64, 1, 0])  # each worker writes one half of out
    >>> same = gemm([2, 64, 64, 64], "parallel", [4096, 64, 0, 1], [0, 0, 1, 64],
    ...             [4096, 64, 1, 0])
    >>> remote_transfers(w, 2, same, 0, 2, 4, 1 << 20)  # read by the worker that wrote it
    0.0
    >>> remote_transfers(w, 2, same, 0, 1, 4, 1 << 20)  # one worker: half from the other
    4.0

    (256 lines from the other core, read in 4 KiB streams: one exposed transfer a page.)
    """
    lanes = max(1, LINE_BYTES // itemsize)
    owners = _owners(writer, writer_threads, lanes)
    shares = _shares(reader, j, reader_threads, lanes)
    if owners is None or shares is None:
        return 0.0
    owner, written = owners
    who, line = _read_pairs(shares, owner.size)
    by = owner[line]
    remote = (by >= 0) & (by != who)
    if not remote.any():
        return 0.0
    # The share of a writer's lines still in its L2 when the reader runs (the last written).
    resident = np.minimum(1.0, l2_bytes / np.maximum(written * LINE_BYTES, 1))
    weight = resident[by[remote]]
    per_worker = np.bincount(who[remote], weights=weight)
    run, paged = run_lines(reader, j, itemsize)
    per = run if paged else PAGE_BYTES // LINE_BYTES
    return float(per_worker.max()) / per


def forget_handoffs() -> None:
    """Drop the remembered counts and writers' line owners (timing a plan as for a
    problem never seen)."""
    remote_transfers.cache_clear()
    _owners.cache_clear()


def _one_worker(prog: TEIR, threads: int) -> bool:
    """Whether worker 0 alone runs ``prog`` (:func:`_shares`' split: one chunk)."""
    return threads == 1 or ExecType.PARALLEL not in prog.schedule.exec_types


def handoff_seconds(writer: TEIR, writer_threads: int, reader: TEIR, j: int,
                    reader_threads: int, itemsize: int, l2_bytes: int,
                    latency: float) -> float:
    """Seconds the reader's workers wait for lines of tensor ``j`` that other cores
    wrote (see the module's docstring); 0 when the machine's ``latency`` is."""
    if latency <= 0 or (_one_worker(writer, writer_threads)
                        and _one_worker(reader, reader_threads)):
        return 0.0  # (one worker writes every line and reads them all: nothing remote)
    transfers = remote_transfers(writer, writer_threads, reader, j, reader_threads,
                                 itemsize, l2_bytes)
    return transfers * latency / HANDOFF_IN_FLIGHT
