"""The tile table: the integer row that tells the jitted kernels what one tile is.

:mod:`teir_plan.executor.lower` fills a ``tile`` array of ``TILE_LEN`` int64 per program,
indexed by the ``T_*`` slots below; the kernels (copy_kernels, gemm_tiles, walker,
blocked) read it.  Plain constants, no numba: numba freezes them into the code it
compiles.
"""

# Primitive kinds.
KIND_COPY = 0
KIND_RELU = 1
KIND_GEMM = 2
KIND_BRGEMM = 3

# How a GEMM tile runs.
MODE_LOOPS = 0  # strided loops in the kernel (small or BLAS-illegal tiles)
MODE_BLAS = 1  # BLAS ?gemm on the operands in place, packing those it cannot address
# The vector kernel (microkernel.py); T_SWAP: its vector axis is N, not M; T_VEC_T: out
# has its unit stride along the other axis, the rows (transposed_kernel.py).
MODE_VEC = 2
# A scalar tile (m = n = k = 1) with one loop of the program folded in (lower._fold_row):
# T_M elements along strides T_A_M (in0), T_B_N (in1), T_C_M (out; 0: the loop is a K
# loop, summed into one element).  With T_ROW_PAR the folded loop is the innermost
# parallel one, still in the loop table, and T_M is 1: run_chunk walks its iterations
# in runs (any other walker runs the tile one element at a time, the same products).
MODE_ROW = 3
# A GEMM tile with one output column (n 1, and br 1): T_M dot products along K.
MODE_DOT = 4

# Indices into the ``tile`` table.
T_KIND = 0
T_FIRST_ZERO = 1
T_LAST_RELU = 2
T_M = 3
T_N = 4
T_K = 5
T_BR = 6
T_A_M = 7  # in0 stride along M (unary: input stride along the tile's first axis)
T_A_K = 8  # in0 stride along K (unary: input stride along the tile's second axis)
T_B_K = 9
T_B_N = 10
T_C_M = 11  # out stride along M (unary: output stride along the tile's first axis)
T_C_N = 12  # out stride along N (unary: output stride along the tile's second axis)
T_A_BR = 13
T_B_BR = 14
T_MODE = 15
T_SWAP = 16  # BLAS computes C^T = B^T A^T (out has its unit stride along N)
T_TRANSA = 17  # ord('N') / ord('T') for BLAS' first operand, 0 = pack it
T_TRANSB = 18
T_LDA = 19
T_LDB = 20
T_LDC = 21  # 0 = C is not BLAS-addressable: compute into scratch, then add
T_GEMM_FN = 22
T_BLAS_INT = 27  # bytes per BLAS integer: 4 (LP64) or 8 (ILP64)
T_ORIGIN0 = 23
T_ORIGIN1 = 24
T_ORIGIN2 = 25
T_SCRATCH = 26  # scratch elements each worker needs
T_STREAM = 28  # out streams to memory (lower.streams_out): non-temporal stores
T_AHEAD = 29  # vector-kernel tiles prefetch the next tile's lines (lower.prefetch_ahead)
T_ROW_PAR = 30  # MODE_ROW: the folded loop is the innermost parallel loop
# MODE_VEC: out's unit stride is along the rows; the address of the transposed kernel
# compiled for the program's dtype (transposed_kernel.py), called through it; 0: no.
T_VEC_T = 31
# MODE_VEC: the vector operand has its unit stride along K, not along the vector axis;
# each tile first transposes its K x length block into the worker's buffer (rows T_VEC_P
# elements apart) and runs the vector kernel on that; 0: no.
T_VEC_P = 32
# MODE_VEC, not transposed: the address of the vector kernel compiled for the program's
# dtype (microkernel.entry_address), called through it.
T_VEC_FN = 33
# Copy/ReLU, BLAS and packed vector tiles: the address of the tile kind's entry point
# compiled for the program's dtype (tile_entry_address), called through it (_run_tile).
T_TILE_FN = 34
TILE_LEN = 35
