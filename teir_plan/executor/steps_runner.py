"""A plan's TEIR steps run in one compiled call: the per-step overhead of small trees.

A tree of small tensors (bonds of 2-16) spends most of a call between its steps: each
step's Python dispatch (flat views of its arrays, the branches of ``run_lowered``, a
call into numba, whose arguments are checked one by one) costs microseconds, more than
the step's own arithmetic.  When every step of a plan is a TEIR program that runs on the
calling thread with nothing set around it (``Lowered.serial``), the plan is run here
instead: the buffers' data pointers gathered once per call (:func:`gather`, eight arrays
a call), then one compiled loop over a table of steps that calls each step's chunk
runner through its address, as the parallel runners do.

Every step's tables are exactly those ``run_lowered`` would pass, and each buffer is the
same flat span (:func:`teir_plan.executor.checks.flat_view`), so the proofs of reach
made at lowering hold unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from teir_plan.executor.blas_control import blas_threads
from teir_plan.executor.entries import call_codegen
from teir_plan.executor.lower import Lowered
from teir_plan.executor.tables import (
    BUF_ARRAY,
    BUF_ELEMENTS,
    BUF_OFFSET,
    S_FN,
    S_IN0,
    S_IN1,
    S_LOOP0,
    S_NLOOPS,
    S_NPAR,
    S_OUT,
    S_STOP,
    STEP_FIELDS,
    constants,
)
from teir_plan.executor.walker import blas_chunk_address, chunk_address
from teir_plan.isa import LINE_BYTES
from teir_plan.tilekinds import table as K

GATHER = 8  # arrays per gather call (a fixed arity: one compiled version per dtype)
LINE = LINE_BYTES  # a temporary's offset in its slot: the slot's first cache line (memory._ALIGN)
# A step's row: tables.STEP_FIELDS; the buffer map's: tables.BUFFER_FIELDS.


@intrinsic
def _call_chunk_raw(typingctx, fn, x0p, x0n, x1p, x1n, yp, yn, lp, ln, npar, tp, tn, cp,  # type: ignore[no-untyped-def]
                    cn, start, stop):
    sig = types.void(fn, x0p, x0n, x1p, x1n, yp, yn, lp, ln, npar, tp, tn, cp, cn, start,
                     stop)
    return sig, call_codegen


@njit(cache=True, nogil=True)
def gather(ptrs, sizes, at, a0, a1, a2, a3, a4, a5, a6, a7):  # type: ignore[no-untyped-def]
    """ptrs[at + j], sizes[at + j] = the data pointer and length of 1-D array aj."""
    ptrs[at], sizes[at] = a0.ctypes.data, a0.shape[0]
    ptrs[at + 1], sizes[at + 1] = a1.ctypes.data, a1.shape[0]
    ptrs[at + 2], sizes[at + 2] = a2.ctypes.data, a2.shape[0]
    ptrs[at + 3], sizes[at + 3] = a3.ctypes.data, a3.shape[0]
    ptrs[at + 4], sizes[at + 4] = a4.ctypes.data, a4.shape[0]
    ptrs[at + 5], sizes[at + 5] = a5.ctypes.data, a5.shape[0]
    ptrs[at + 6], sizes[at + 6] = a6.ctypes.data, a6.shape[0]
    ptrs[at + 7], sizes[at + 7] = a7.ctypes.data, a7.shape[0]


@njit(cache=True, nogil=True)
def run_steps(gp, gs, bufmap, origins, steps, loops, tiles, consts):  # type: ignore[no-untyped-def]
    """Run each step of ``steps`` (rows of tables.STEP_FIELDS) in order.  Buffer b is
    gathered array ``bufmap[b, BUF_ARRAY]`` (pointers ``gp``, lengths ``gs``) when
    ``bufmap[b, BUF_ELEMENTS]`` < 0, else that many elements ``bufmap[b, BUF_OFFSET]``
    bytes after the first cache line of that gathered buffer (a temporary in its slot,
    or a pack: schedule/one_call.py); its first element at ``origins[b]``."""
    nb = bufmap.shape[0]
    ptrs = np.empty(nb, np.int64)
    sizes = np.empty(nb, np.int64)
    for b in range(nb):
        p = gp[bufmap[b, BUF_ARRAY]]
        if bufmap[b, BUF_ELEMENTS] < 0:
            ptrs[b], sizes[b] = p, gs[bufmap[b, BUF_ARRAY]]
        else:
            ptrs[b], sizes[b] = (p + (-p) % LINE + bufmap[b, BUF_OFFSET],
                                 bufmap[b, BUF_ELEMENTS])
    tile = np.empty(tiles.shape[1], np.int64)
    tp = tile.ctypes.data
    lbase = loops.ctypes.data
    cp = consts.ctypes.data
    for s in range(steps.shape[0]):
        row = steps[s]
        i0, i1, io = row[S_IN0], row[S_IN1], row[S_OUT]
        tile[:] = tiles[s]
        tile[K.T_ORIGIN0] = origins[i0]
        tile[K.T_ORIGIN1] = origins[i1]
        tile[K.T_ORIGIN2] = origins[io]
        _call_chunk_raw(row[S_FN], ptrs[i0], sizes[i0], ptrs[i1], sizes[i1], ptrs[io],
                        sizes[io], lbase + row[S_LOOP0] * K.LOOP_LEN * 8, row[S_NLOOPS],
                        row[S_NPAR], tp, tile.shape[0], cp, consts.shape[0], 0, row[S_STOP])


def run_program(prog: StepsProgram, direct: list[np.ndarray], raws: list[np.ndarray]
                ) -> None:
    """Run ``prog`` on the flat views ``direct`` (of its dtype: the operands, out, the
    constants, in the order of ``prog.bufmap``'s direct rows) and the slots ``raws``."""
    n = len(direct)
    total = n + len(raws)
    gp = np.empty(total + GATHER, np.int64)
    gs = np.empty(total + GATHER, np.int64)
    for group, at in ((direct, 0), (raws, n)):
        for i in range(0, len(group), GATHER):
            part = group[i:i + GATHER]
            part += [part[-1]] * (GATHER - len(part))
            gather(gp, gs, at + i, *part)
    if prog.limits_blas:
        with blas_threads(1):
            run_steps(gp, gs, prog.bufmap, prog.origins, prog.steps, prog.loops, prog.tiles,
                      prog.consts)
    else:
        run_steps(gp, gs, prog.bufmap, prog.origins, prog.steps, prog.loops, prog.tiles,
                  prog.consts)


@dataclass(frozen=True)
class StepsProgram:
    """The tables of a plan's steps for :func:`run_steps`: ``steps`` rows index the
    plan's buffer table (operands, out, then its temporaries and constants)."""

    steps: np.ndarray  # (S, STEP_LEN) int64: tables.STEP_FIELDS
    loops: np.ndarray  # (L, LOOP_LEN) int64: every step's loop rows, one after another
    tiles: np.ndarray  # (S, TILE_LEN) int64
    bufmap: np.ndarray  # (B, BUFFER_LEN) int64: tables.BUFFER_FIELDS, see run_steps
    origins: np.ndarray  # (B,) int64
    consts: np.ndarray  # the constants (tables.CONST_FIELDS) in the dtype
    limits_blas: bool  # a program's BLAS tiles must run with BLAS on one thread

    def __repr__(self) -> str:
        return (f"StepsProgram({len(self.steps)} programs, {len(self.bufmap)} buffers, "
                f"{self.consts.dtype})")


def steps_program(programs: list[tuple[Lowered, tuple[int, ...], int]], bufmap: np.ndarray,
                  origins: np.ndarray) -> StepsProgram | None:
    """The tables for running ``programs`` (each a lowered program, its input buffers and
    its output buffer) in one call, or None unless each is serial, of one dtype."""
    if not programs:
        return None
    dtype = programs[0][0].dtype
    rows, loops, tiles = [], [], []
    at = 0
    for low, inputs, out in programs:
        if not low.serial or low.dtype != dtype or len(inputs) != low.num_tensors - 1:
            return None
        plain = low.plain_blas
        fn = blas_chunk_address(dtype) if plain else chunk_address(dtype, low.kind)
        if not plain and low.tile[K.T_ROW_PAR]:  # parallel rows walked in runs
            npar, stop = low.npar, low.parallel_iterations
        else:
            npar, stop = 0, 1
        in1 = inputs[1] if len(inputs) > 1 else inputs[0]
        rows.append({"fn": fn, "in0": inputs[0], "in1": in1, "out": out, "loop0": at,
                     "nloops": len(low.loops), "npar": npar, "stop": stop})
        loops.append(low.loops)
        tiles.append(low.tile)
        at += len(low.loops)
    table = np.concatenate(loops) if at else np.zeros((0, K.LOOP_LEN), np.int64)
    return StepsProgram(K.named_rows(STEP_FIELDS, rows), np.ascontiguousarray(table, np.int64),
                        np.array(tiles, np.int64), np.ascontiguousarray(bufmap, np.int64),
                        np.ascontiguousarray(origins, np.int64), constants(dtype),
                        any(low.limits_blas for low, _, _ in programs))
