"""Lowering: a validated TEIR program -> the integer tables the jitted kernels walk.

Everything that depends only on the program (which axes loop, which are
parallel, the primitive's m/n/k and strides, whether BLAS can address each tile
operand in place and with which transpose flag) is decided here, once per
program, and cached.  The kernels then do no decision making beyond the
first/last-access tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np

from teir_plan.executor.checks import prove_partials
from teir_plan.executor.complex_tiles import copy_alias
from teir_plan.executor.kind_entries import Entries
from teir_plan.executor.tables import PARTIAL_FIELDS
from teir_plan.isa import LINE_BYTES
from teir_plan.teir.axes import extent_at, prim_axes_by_role, stride_at
from teir_plan.teir.enums import DimType, ExecType, Prim
from teir_plan.teir.parallel_k import PartialLayout
from teir_plan.teir.parallel_k import split as split_partials
from teir_plan.teir.records import TEIR

# Which kernel a tile runs on is decided by the tile kinds (teir_plan/tilekinds), which
# the planner's cost model asks too; this module only builds the tables.
from teir_plan.tilekinds import GemmTile, TileKind, choose, lowered_kind
from teir_plan.tilekinds import table as K
from teir_plan.tilekinds.blas import KIND as BLAS
from teir_plan.tilekinds.copy import COPY, RELU, unary_tile
from teir_plan.tilekinds.dot import KIND as DOT
from teir_plan.tilekinds.kind import Lowering
from teir_plan.tilekinds.row import fold
from teir_plan.tilekinds.vec import KIND as VEC
from teir_plan.tilekinds.vec import vec_line_bytes
from teir_plan.tiles import (
    BLAS_SERIAL_MNK,
    BLAS_THREADED_TILE_FLOPS,
    COPY_RUN_MIN_LINES,
    DOT_SPLIT_MIN_K,
    streams_out,
    vector_kernel_dtype,
)


@dataclass(frozen=True)
class Lowered:
    """A program as the kernels see it (origins are filled in per call)."""

    loops: np.ndarray  # (L, LOOP_LEN) int64, tilekinds.table.LOOP_FIELDS; parallel rows first
    npar: int
    parallel_iterations: int
    tile: np.ndarray  # (TILE_LEN,) int64
    num_tensors: int
    dtype: np.dtype
    # A Copy program run through the block copy (see copy_runs): per parallel
    # iteration, its other axes (tilekinds.table.BLOCK_FIELDS), outermost in out first.
    copy_runs: np.ndarray | None = None
    plain_blas: bool = False  # see plain_blas()
    # A program with parallel K axes: the tables above are its serial program's (what one
    # worker runs), these the workers' (teir/parallel_k.py).
    partials: Partials | None = None

    @property
    def has_parallel(self) -> bool:
        return self.npar > 0 and self.parallel_iterations > 1

    @cached_property
    def kind(self) -> TileKind:
        """The tile kind the program's tiles run on (kept: the executor asks on every
        call)."""
        return lowered_kind(self.tile)

    @property
    def calls_blas(self) -> bool:
        """Whether the program's tiles call BLAS (else the executor leaves BLAS' thread
        count alone: setting and restoring it costs about 3 us a call)."""
        return self.kind is BLAS

    @cached_property
    def splits_dot(self) -> bool:
        """Whether the program is one dot product long enough to split over the threads
        (walker.run_dot_split): a one-row dot tile, no loops, K at least
        DOT_SPLIT_MIN_K."""
        t = self.tile
        return bool(self.kind is DOT and t[K.T_M] == 1 and t[K.T_N] == 1
                    and len(self.loops) == 0 and t[K.T_K] >= DOT_SPLIT_MIN_K)

    @cached_property
    def serial(self) -> bool:
        """Whether every call runs on the calling thread, whatever the thread count: no
        parallel loop, parallel K or block copy, no dot product to split, and no BLAS
        tile large enough to split over workers.  The executor then skips its per-call
        decisions (a cached 8 x 8 product's call: 3.6 -> 1.5 us), and runs of such
        steps can run in one call (executor/steps_runner.py)."""
        if self.partials is not None or self.copy_runs is not None or self.has_parallel:
            return False
        if self.calls_blas:
            t = self.tile
            flops = 2 * int(t[K.T_M]) * int(t[K.T_N]) * int(t[K.T_K]) * int(t[K.T_BR])
            return flops < BLAS_THREADED_TILE_FLOPS
        return not self.splits_dot

    @cached_property
    def limits_blas(self) -> bool:
        """Whether a serial run must hold BLAS to one thread: its tiles call BLAS, and
        OpenBLAS would thread them (complex ones, or real ones above BLAS_SERIAL_MNK)."""
        if not self.calls_blas:
            return False
        t = self.tile
        return (self.dtype.kind == "c"
                or int(t[K.T_M]) * int(t[K.T_N]) * int(t[K.T_K]) > BLAS_SERIAL_MNK)


@dataclass(frozen=True)
class Partials:
    """How the workers run a program with parallel K axes (teir/parallel_k.py,
    executor/partials.py): the block program, lowered (its first ``npar`` loop rows are
    the workers' range), the layout, and its reduction table for the kernel."""

    block: Lowered
    layout: PartialLayout
    rows: np.ndarray  # (R, PARTIAL_LEN) int64: the layout's rows (tables.PARTIAL_FIELDS)


def prefetch_ahead(low: Lowered, l2_room: int) -> bool:
    """Whether a blocked program's vector-kernel tiles should prefetch the next tile:
    only when this tile's and the next one's lines fit in ``l2_room``, the L2 beside the
    stage.  Otherwise the prefetched lines evict the stage (docs/decisions.md)."""
    t = low.tile
    if low.kind is not VEC:
        return False
    mv = int(t[K.T_N] if t[K.T_SWAP] else t[K.T_M])
    return 2 * vec_line_bytes(int(t[K.T_K]), mv, low.dtype.itemsize) <= l2_room




@lru_cache(maxsize=1024)
def lower(teir: TEIR, vector_kernel: bool = True) -> Lowered:
    """Lower a program that has passed :meth:`TEIR.validate`.  ``vector_kernel=False``
    keeps every GEMM tile on BLAS or loops (calibration measures BLAS with it)."""
    layout = split_partials(teir)
    if layout is not None:  # parallel K axes
        return _lower_partials(teir, layout, vector_kernel)
    s = teir.schedule
    t = teir.num_tensors
    dtype = teir.primitives.data_type.numpy
    if teir.is_unary:
        dtype = copy_alias(dtype) or dtype  # run_lowered views the arrays as this type

    def stride(j: int, i: int) -> int:
        # Unary programs have no in1: its column stays 0 in the loop table.
        if t == 2:
            return s.strides[0][i] if j == 0 else (s.strides[1][i] if j == 2 else 0)
        return s.strides[j][i]

    loop_axes = s.loop_axes()
    par = [i for i in loop_axes if s.exec_types[i] is ExecType.PARALLEL]
    seq = [i for i in loop_axes if s.exec_types[i] is ExecType.SEQ]
    loops = K.named_rows(K.LOOP_FIELDS, [
        {"size": s.dim_sizes[i], "in0": stride(0, i), "in1": stride(1, i), "out": stride(2, i),
         "is_k": int(s.dim_types[i] is DimType.K)}
        for i in par + seq
    ])
    par_iters = int(np.prod([s.dim_sizes[i] for i in par], dtype=object)) if par else 1

    tile = np.zeros(K.TILE_LEN, dtype=np.int64)
    p = teir.primitives
    tile[K.T_FIRST_ZERO] = int(p.prim_first is Prim.ZERO)
    tile[K.T_LAST_RELU] = int(p.prim_last is Prim.RELU)
    if teir.is_unary:
        ax = prim_axes_by_role(teir)
        kind = RELU if p.prim_main is Prim.RELU else COPY
        assert kind.encode is not None
        s_in, s_out = s.strides
        unary = unary_tile(extent_at(s.dim_sizes, ax.m), extent_at(s.dim_sizes, ax.n),
                           (stride_at(s_in, ax.m), stride_at(s_in, ax.n)),
                           (stride_at(s_out, ax.m), stride_at(s_out, ax.n)), dtype.itemsize)
        # (complex128 elements are copied one by one: no line transposes, no streaming)
        kind.encode(tile, unary, 1, Lowering(
            dtype, vector_kernel_dtype(dtype) and streams_out(_out_bytes(teir, dtype), False,
                                                              True), Entries(dtype)))
        if tile[K.T_STREAM]:
            runs = copy_runs(teir, [i for i in range(len(s.dim_sizes)) if i not in par])
            if runs is not None:
                return Lowered(loops, len(par), par_iters, tile, t, dtype, runs)
    else:
        _lower_gemm(teir, tile, dtype, vector_kernel and vector_kernel_dtype(dtype))
        loops = fold(loops, len(par), tile)
        return Lowered(loops, len(par), par_iters, tile, t, dtype,
                       plain_blas=plain_blas(tile, loops))
    return Lowered(loops, len(par), par_iters, tile, t, dtype)


def _lower_partials(teir: TEIR, layout: PartialLayout, vector_kernel: bool) -> Lowered:
    """A program with parallel K axes: its serial program's tables, with the workers'
    block program (teir/parallel_k.py), whose reach is proven here."""
    prove_partials(teir, layout)
    block = lower(layout.block, vector_kernel)
    # A scalar tile takes the innermost loop into itself (_fold_row): if that was one of
    # the workers' rows, they share the rows left.
    npar = min(layout.npar, len(block.loops))
    iterations = math.prod(int(n) for n in block.loops[:npar, K.L_SIZE])
    block = replace(block, npar=npar, parallel_iterations=iterations)
    rows = K.named_rows(PARTIAL_FIELDS, [{"extent": n, "out": so, "block": sb}
                                         for n, so, sb in layout.rows])
    return replace(lower(layout.serial, vector_kernel), partials=Partials(block, layout, rows))


def plain_blas(tile: np.ndarray, loops: np.ndarray) -> bool:
    """Whether every tile of a program is one BLAS call on the operands in place (no
    packing, no scratch output, no batch-reduce) visited once (no K loop, so no
    first/last visits to tell apart) with no ReLU after it: walker.run_blas_tiles runs
    those, from a loop that computes three addresses per tile (through the general loop
    walker a tile cost 0.32 us besides its call, 0.53 us for 32^3 float32; 4096 batched
    16^3 products took 608-622 us against 317-324).  Compiled apart from the general
    walker, it is also all that a first matrix product in a process compiles."""
    return bool(
        tile[K.T_KIND] == K.KIND_GEMM and BLAS.owns(tile)
        and tile[K.T_LAST_RELU] == 0 and tile[K.T_TRANSA] != 0 and tile[K.T_TRANSB] != 0
        and tile[K.T_LDC] != 0 and tile[K.T_BR] == 1
        and not any(r[K.L_IS_K] != 0 and r[K.L_SIZE] > 1 for r in loops)
    )


def copy_runs(teir: TEIR, axes: list[int]) -> np.ndarray | None:
    """The block table (tilekinds.table.BLOCK_FIELDS; outermost in out first) of a Copy
    program's ``axes`` when its output should be assembled a run at a time: out's
    unit-stride axis is shorter than COPY_RUN_MIN_LINES lines, another axis continues
    out's run, and the input has a unit-stride axis to transpose from.  Then each
    parallel iteration goes through the block copy (blocked._copy_block), which
    gathers whole runs of out in cache and writes them with non-temporal stores; the
    tiles alone would write 20-element rows (dfgb,geac's staged result into C order:
    a quarter of each line per store, every line read for ownership first).

    >>> prog = TEIR.from_fields(data_type="float32", prim_first="none", prim_main="copy",
    ...     prim_last="none", dim_types=["c"] * 3, exec_types=["parallel", "prim", "prim"],
    ...     dim_sizes=[20, 20, 20], strides=[[20, 400, 1], [400, 1, 20]])
    >>> copy_runs(prog, [1, 2]).tolist()
    [[20, 1, 20], [20, 400, 1]]
    """
    s = teir.schedule
    lanes = LINE_BYTES // teir.primitives.data_type.numpy.itemsize
    rows = [{"size": s.dim_sizes[i], "in": s.strides[0][i], "out": s.strides[1][i]}
            for i in axes if s.dim_sizes[i] > 1]
    unit = [r for r in rows if r["out"] == 1]
    if (not unit or unit[0]["size"] >= COPY_RUN_MIN_LINES * lanes
            or not any(r["out"] == unit[0]["size"] for r in rows)
            or not any(r["in"] == 1 for r in rows)):
        return None
    rows.sort(key=lambda r: -abs(r["out"]))
    return K.named_rows(K.BLOCK_FIELDS, rows)


def _out_bytes(teir: TEIR, dtype: np.dtype) -> int:
    """Bytes the program's output spans: its extents along the axes it varies with."""
    s = teir.schedule
    out = s.strides[-1]
    size = dtype.itemsize
    for i, n in enumerate(s.dim_sizes):
        if out[i] != 0:
            size *= n
    return size


def _lower_gemm(teir: TEIR, tile: np.ndarray, dtype: np.dtype, vector_kernel: bool) -> None:
    s = teir.schedule
    p = teir.primitives
    ax = prim_axes_by_role(teir)
    t = GemmTile.of_axes(s.dim_sizes, s.strides, ax.m, ax.n, ax.k, ax.br, dtype.itemsize)
    K.set_fields(tile, kind=K.KIND_BRGEMM if p.prim_main is Prim.BRGEMM else K.KIND_GEMM,
                 m=t.m, n=t.n, k=t.k, br=t.br, a_m=t.a[0], a_k=t.a[1], b_k=t.b[0],
                 b_n=t.b[1], c_m=t.c[0], c_n=t.c[1], a_br=stride_at(s.strides[0], ax.br),
                 b_br=stride_at(s.strides[1], ax.br))
    k_loop = any(s.dim_types[i] is DimType.K for i in s.loop_axes())
    streamed = streams_out(_out_bytes(teir, dtype), k_loop, p.prim_first is Prim.ZERO)
    kind, axis = choose(t, vector_kernel)
    assert kind.encode is not None
    kind.encode(tile, t, axis, Lowering(dtype, streamed, Entries(dtype)))
