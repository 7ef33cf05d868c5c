"""Lowering: a validated TEIR program -> the integer tables the jitted kernels walk.

Everything that depends only on the program (which axes loop, which are
parallel, the primitive's m/n/k and strides, whether BLAS can address each tile
operand in place and with which transpose flag) is decided here, once per
program, and cached.  The kernels then do no decision making beyond the
first/last-access tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from teir_plan.executor import table as K
from teir_plan.executor.blas import gemm_address
from teir_plan.executor.complex_tiles import copy_alias
from teir_plan.executor.microkernel import entry_address as vec_entry_address
from teir_plan.executor.transposed_kernel import entry_address, scratch_elements
from teir_plan.executor.walker import tile_entry_address
from teir_plan.teir.enums import DimType, ExecType, Prim
from teir_plan.teir.records import TEIR

# Which kernel a tile runs on is decided by the tile rules, which the planner's cost model
# asks too; this module only builds the tables.
from teir_plan.tiles import (
    COPY_RUN_MIN_LINES,
    SMALL_TILE_FLOPS,
    blas_plan,
    dot_tile,
    packed_ld,
    streams_out,
    vec_axis,
    vec_line_bytes,
    vec_p_axis,
    vec_t_axis,
    vector_kernel_dtype,
)


@dataclass(frozen=True)
class Lowered:
    """A program as the kernels see it (origins are filled in per call)."""

    loops: np.ndarray  # (L, 5) int64: size, stride in0, in1, out, is_k; parallel rows first
    npar: int
    parallel_iterations: int
    tile: np.ndarray  # (TILE_LEN,) int64
    num_tensors: int
    dtype: np.dtype
    # A Copy program run through the block copy (see copy_runs): per parallel
    # iteration, (size, in stride, out stride) of its other axes, outermost in out first.
    copy_runs: np.ndarray | None = None
    plain_blas: bool = False  # see plain_blas()

    @property
    def has_parallel(self) -> bool:
        return self.npar > 0 and self.parallel_iterations > 1

    @property
    def calls_blas(self) -> bool:
        """Whether the program's tiles call BLAS (else the executor leaves BLAS' thread
        count alone: setting and restoring it costs about 3 us a call)."""
        t = self.tile
        return (int(t[K.T_KIND]) in (K.KIND_GEMM, K.KIND_BRGEMM)
                and int(t[K.T_MODE]) == K.MODE_BLAS)


def prefetch_ahead(low: Lowered, l2_room: int) -> bool:
    """Whether a blocked program's vector-kernel tiles should prefetch the next tile:
    only when this tile's and the next one's lines fit in ``l2_room``, the L2 beside the
    stage.  Otherwise the prefetched lines evict the stage (measured: dbea,ec->abcd's
    blocks, 72 KiB of lines beside a 1728 KiB stage, 118 -> 150 GFLOP/s; efbad,cf's,
    121 KiB beside 1944 KiB, 102 -> 80)."""
    t = low.tile
    if (t[K.T_KIND] not in (K.KIND_GEMM, K.KIND_BRGEMM) or t[K.T_MODE] != K.MODE_VEC
            or t[K.T_VEC_T] or t[K.T_VEC_P]):
        return False
    mv = int(t[K.T_N] if t[K.T_SWAP] else t[K.T_M])
    return 2 * vec_line_bytes(int(t[K.T_K]), mv, low.dtype.itemsize) <= l2_room




@lru_cache(maxsize=1024)
def lower(teir: TEIR, vector_kernel: bool = True) -> Lowered:
    """Lower a program that has passed :meth:`TEIR.validate`.  ``vector_kernel=False``
    keeps every GEMM tile on BLAS or loops (calibration measures BLAS with it)."""
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
    rows = [
        (s.dim_sizes[i], stride(0, i), stride(1, i), stride(2, i), int(s.dim_types[i] is DimType.K))
        for i in par + seq
    ]
    loops = np.array(rows, dtype=np.int64).reshape(len(rows), 5)
    par_iters = int(np.prod([s.dim_sizes[i] for i in par], dtype=object)) if par else 1

    tile = np.zeros(K.TILE_LEN, dtype=np.int64)
    p = teir.primitives
    tile[K.T_FIRST_ZERO] = int(p.prim_first is Prim.ZERO)
    tile[K.T_LAST_RELU] = int(p.prim_last is Prim.RELU)
    prim = s.prim_axes()
    if teir.is_unary:
        tile[K.T_KIND] = K.KIND_RELU if p.prim_main is Prim.RELU else K.KIND_COPY
        lines = vector_kernel_dtype(dtype)  # else complex128 elements, copied one by one
        tile[K.T_TILE_FN] = tile_entry_address("copy" if lines else "copy_elements", dtype)
        a0 = prim[0] if len(prim) > 0 else None
        a1 = prim[1] if len(prim) > 1 else None
        tile[K.T_M] = s.dim_sizes[a0] if a0 is not None else 1
        tile[K.T_N] = s.dim_sizes[a1] if a1 is not None else 1
        tile[K.T_A_M] = s.strides[0][a0] if a0 is not None else 0
        tile[K.T_A_K] = s.strides[0][a1] if a1 is not None else 0
        tile[K.T_C_M] = s.strides[1][a0] if a0 is not None else 0
        tile[K.T_C_N] = s.strides[1][a1] if a1 is not None else 0
        # A copy writes every element once: large outputs stream (ReLU programs do not:
        # their elementwise loop has no line stores).
        tile[K.T_STREAM] = int(p.prim_main is Prim.COPY and lines
                               and streams_out(_out_bytes(teir, dtype), False, True))
        if tile[K.T_STREAM] and tile[K.T_M] * tile[K.T_N] <= COPY_RUN_BUFFER_ELEMENTS:
            # A buffer for a tile whose rows form one run of out (kernels.
            # _copy_transposed_run), one line longer to match out's offset in a line.
            tile[K.T_SCRATCH] = tile[K.T_M] * tile[K.T_N] + 64 // dtype.itemsize
        if tile[K.T_STREAM]:
            runs = copy_runs(teir, [i for i in range(len(s.dim_sizes)) if i not in par])
            if runs is not None:
                return Lowered(loops, len(par), par_iters, tile, t, dtype, runs)
    else:
        _lower_gemm(teir, tile, dtype, vector_kernel and vector_kernel_dtype(dtype))
        loops = _fold_row(loops, len(par), tile)
        return Lowered(loops, len(par), par_iters, tile, t, dtype,
                       plain_blas=plain_blas(tile, loops))
    return Lowered(loops, len(par), par_iters, tile, t, dtype)


def plain_blas(tile: np.ndarray, loops: np.ndarray) -> bool:
    """Whether every tile of a program is one BLAS call on the operands in place (no
    packing, no scratch output, no batch-reduce) visited once (no K loop, so no
    first/last visits to tell apart) with no ReLU after it: walker.run_blas_tiles runs
    those, from a loop that computes three addresses per tile (through the general loop
    walker a tile cost 0.32 us besides its call, 0.53 us for 32^3 float32; 4096 batched
    16^3 products took 608-622 us against 317-324).  Compiled apart from the general
    walker, it is also all that a first matrix product in a process compiles."""
    return bool(
        tile[K.T_KIND] == K.KIND_GEMM and tile[K.T_MODE] == K.MODE_BLAS
        and tile[K.T_LAST_RELU] == 0 and tile[K.T_TRANSA] != 0 and tile[K.T_TRANSB] != 0
        and tile[K.T_LDC] != 0 and tile[K.T_BR] == 1
        and not any(r[4] != 0 and r[0] > 1 for r in loops)
    )


def _fold_row(loops: np.ndarray, npar: int, tile: np.ndarray) -> np.ndarray:
    """A scalar product tile (m = n = k = br = 1: elementwise products, dot products and
    the spec's scalar schedules) takes the program's innermost loop into itself: a row
    tile (table.MODE_ROW) multiplies a whole row per call, in a vectorized loop,
    instead of one element per call of the loop walker (which costs some 50 ns each:
    ``ij,ij->ij`` on 2048 x 2048 float32 took 218 ms against numpy's 2).  Returns the
    loop table without a folded sequential loop; a parallel loop stays in the table
    (``T_ROW_PAR``: the parallel runner walks it in runs).

    >>> loops = np.array([[4, 1, 1, 1, 0]])  # one parallel C loop
    >>> tile = np.zeros(K.TILE_LEN, np.int64)
    >>> tile[[K.T_M, K.T_N, K.T_K, K.T_BR]] = 1
    >>> _fold_row(loops, 1, tile).tolist(), int(tile[K.T_MODE] == K.MODE_ROW)
    ([[4, 1, 1, 1, 0]], 1)
    """
    if (tile[K.T_MODE] != K.MODE_LOOPS or len(loops) == 0
            or any(tile[f] != 1 for f in (K.T_M, K.T_N, K.T_K, K.T_BR))):
        return loops
    size, s0, s1, s2, is_k = (int(v) for v in loops[-1])
    # A K loop sums into one element (out stride 0); any other loop writes a new
    # element each step.  A loop of one step gains nothing.
    if size <= 1 or (s2 == 0) != bool(is_k):
        return loops
    tile[K.T_MODE] = K.MODE_ROW
    tile[K.T_A_M], tile[K.T_B_N], tile[K.T_C_M] = s0, s1, s2
    if len(loops) > npar:  # the innermost sequential loop: folded into the tile
        tile[K.T_M] = size
        return loops[:-1]
    tile[K.T_ROW_PAR] = 1  # the innermost parallel loop: walked in runs by run_chunk
    return loops




# The largest Copy tile (elements) that gets a buffer to assemble its run of out in
# (copy_kernels._copy_transposed_run): it must stay in L1 beside the lines it is read from.
COPY_RUN_BUFFER_ELEMENTS = 4096


def copy_runs(teir: TEIR, axes: list[int]) -> np.ndarray | None:
    """The block table (size, in stride, out stride; outermost in out first) of a Copy
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
    lanes = 64 // teir.primitives.data_type.numpy.itemsize
    rows = [(s.dim_sizes[i], s.strides[0][i], s.strides[1][i]) for i in axes
            if s.dim_sizes[i] > 1]
    unit = [r for r in rows if r[2] == 1]
    if (not unit or unit[0][0] >= COPY_RUN_MIN_LINES * lanes
            or not any(r[2] == unit[0][0] for r in rows)
            or not any(r[1] == 1 for r in rows)):
        return None
    rows.sort(key=lambda r: -abs(r[2]))
    return np.array(rows, dtype=np.int64).reshape(len(rows), 3)


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
    prim = s.prim_axes()
    m_ax = next((i for i in prim if s.dim_types[i] is DimType.M), None)
    n_ax = next((i for i in prim if s.dim_types[i] is DimType.N), None)
    k_axes = [i for i in prim if s.dim_types[i] is DimType.K]
    br_ax = None
    if p.prim_main is Prim.BRGEMM:
        br_ax = k_axes.pop(0)  # the first K prim axis is the batch-reduce axis
    k_ax = k_axes[0] if k_axes else None

    def size(ax: int | None) -> int:
        return s.dim_sizes[ax] if ax is not None else 1

    def st(j: int, ax: int | None) -> int:
        return s.strides[j][ax] if ax is not None else 0

    m, n, k, br = size(m_ax), size(n_ax), size(k_ax), size(br_ax)
    tile[K.T_KIND] = K.KIND_BRGEMM if p.prim_main is Prim.BRGEMM else K.KIND_GEMM
    tile[K.T_M], tile[K.T_N], tile[K.T_K], tile[K.T_BR] = m, n, k, br
    tile[K.T_A_M], tile[K.T_A_K] = st(0, m_ax), st(0, k_ax)
    tile[K.T_B_K], tile[K.T_B_N] = st(1, k_ax), st(1, n_ax)
    tile[K.T_C_M], tile[K.T_C_N] = st(2, m_ax), st(2, n_ax)
    tile[K.T_A_BR], tile[K.T_B_BR] = st(0, br_ax), st(1, br_ax)

    a, b, c = (st(0, m_ax), st(0, k_ax)), (st(1, k_ax), st(1, n_ax)), (st(2, m_ax), st(2, n_ax))
    k_loop = any(s.dim_types[i] is DimType.K for i in s.loop_axes())
    streamed = streams_out(_out_bytes(teir, dtype), k_loop, p.prim_first is Prim.ZERO)
    vec = vec_axis(m, n, k, br, a, b, c, dtype.itemsize) if vector_kernel else 0
    if vec:
        tile[K.T_MODE] = K.MODE_VEC
        tile[K.T_VEC_FN] = vec_entry_address(dtype)
        tile[K.T_SWAP] = int(vec == 2)
        tile[K.T_STREAM] = int(streamed)
        tile[K.T_AHEAD] = 1  # see prefetch_ahead for blocked programs
        return
    vec = vec_t_axis(m, n, k, br, a, b, c, dtype.itemsize) if vector_kernel else 0
    if vec:
        tile[K.T_MODE] = K.MODE_VEC
        tile[K.T_VEC_T] = entry_address(dtype)
        rows, c_vec = (n, c[0]) if vec == 1 else (m, c[1])
        tile[K.T_SWAP] = int(vec == 2)
        # Its output streams only as one contiguous block: out's stride along the
        # vector axis is the rows' extent (gemm_vec_t; the cost model's rule too).
        tile[K.T_STREAM] = int(streamed and c_vec == rows)
        tile[K.T_SCRATCH] = scratch_elements(rows, k, dtype.itemsize)
        return
    vec = vec_p_axis(m, n, k, br, a, b, c, dtype.itemsize) if vector_kernel else 0
    if vec:
        tile[K.T_MODE] = K.MODE_VEC
        tile[K.T_VEC_FN] = vec_entry_address(dtype)
        tile[K.T_TILE_FN] = tile_entry_address("packed", dtype)
        tile[K.T_SWAP] = int(vec == 2)
        tile[K.T_STREAM] = int(streamed)
        length = n if vec == 2 else m
        tile[K.T_VEC_P] = packed_ld(length, dtype.itemsize)
        # The block, from the buffer's first whole line.
        tile[K.T_SCRATCH] = k * int(tile[K.T_VEC_P]) + 64 // dtype.itemsize
        return
    if dot_tile(m, n, k, br, a, b):
        tile[K.T_MODE] = K.MODE_DOT
        tile[K.T_SWAP] = int(m == 1 and n > 1)
        return
    plan = blas_plan(m, n, k, a, b, c)
    if m * n * k < SMALL_TILE_FLOPS or plan is None:
        tile[K.T_MODE] = K.MODE_LOOPS
        return
    tile[K.T_MODE] = K.MODE_BLAS
    tile[K.T_TILE_FN] = tile_entry_address("blas", dtype)
    tile[K.T_SWAP] = int(plan.swap)
    tile[K.T_TRANSA], tile[K.T_LDA] = plan.transa, plan.lda
    tile[K.T_TRANSB], tile[K.T_LDB] = plan.transb, plan.ldb
    tile[K.T_LDC] = plan.ldc
    tile[K.T_GEMM_FN], tile[K.T_BLAS_INT] = gemm_address(dtype)
    if plan.needs_scratch:
        mm, nn = (n, m) if plan.swap else (m, n)
        tile[K.T_SCRATCH] = mm * k + k * nn + mm * nn


