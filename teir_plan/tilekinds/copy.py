"""Copy and ReLU tiles (executor/copy_kernels.copy_tile): a unary program's tile, its
two axes as m and n, the input's strides in the a_m/a_k slots and out's in c_m/c_n;
copied by jitted loops, transposed a 64-byte line at a time in registers where the
input's unit stride is not out's, large outputs streamed."""

from __future__ import annotations

import numpy as np

from teir_plan.isa import LINE_BYTES
from teir_plan.tilekinds.kind import GemmTile, Lowering, TileKind
from teir_plan.tilekinds.table import (
    KIND_COPY,
    KIND_RELU,
    T_KIND,
    T_SCRATCH,
    T_STREAM,
    set_fields,
)
from teir_plan.tiles import vector_kernel_dtype

# The largest Copy tile (elements) that gets a buffer to assemble its run of out in
# (copy_kernels._copy_transposed_run): it must stay in L1 beside the lines it is read from.
COPY_RUN_BUFFER_ELEMENTS = 4096


def unary_tile(m: int, n: int, x: tuple[int, int], y: tuple[int, int], itemsize: int
               ) -> GemmTile:
    """A unary tile as the registry's tile record: ``m`` x ``n``, the input's strides
    ``x`` (as A's) and the output's ``y`` (as C's) along its two axes."""
    return GemmTile(m, n, 1, 1, x, (0, 0), y, itemsize)


def _encode(table: np.ndarray, t: GemmTile, kind: int, low: Lowering) -> None:
    # Line transposes take real elements; complex128 elements are copied one by one.
    entry = "copy" if vector_kernel_dtype(low.dtype) else "copy_elements"
    set_fields(table, kind=kind, tile_fn=low.entries.address(entry), m=t.m, n=t.n,
               a_m=t.a[0], a_k=t.a[1], c_m=t.c[0], c_n=t.c[1])
    # A copy writes every element once: large outputs stream (ReLU programs do not:
    # their elementwise loop has no line stores).
    if kind == KIND_COPY and low.streamed:
        set_fields(table, stream=1)
        if t.m * t.n <= COPY_RUN_BUFFER_ELEMENTS:
            # A buffer for a tile whose rows form one run of out
            # (copy_kernels._copy_transposed_run), one line longer to match out's
            # offset in a line.
            set_fields(table, scratch=t.m * t.n + LINE_BYTES // t.itemsize)


def _encode_copy(table: np.ndarray, t: GemmTile, axis: int, low: Lowering) -> None:
    _encode(table, t, KIND_COPY, low)


def _encode_relu(table: np.ndarray, t: GemmTile, axis: int, low: Lowering) -> None:
    _encode(table, t, KIND_RELU, low)


def _describe_copy(table: np.ndarray, dtype: np.dtype) -> str:
    if not vector_kernel_dtype(dtype):
        return f"each tile copied by jitted loops, one {np.dtype(dtype)} at a time"
    how = ("each tile copied by jitted loops, transposed a 64-byte line by a line in "
           "registers where the input's unit stride is not out's")
    if table[T_STREAM]:
        how += ", whole lines written to memory with non-temporal stores"
        if table[T_SCRATCH]:
            how += (" (a tile whose rows follow one another in out is assembled in a "
                    "buffer first when out starts inside a line)")
    return how


def _describe_relu(table: np.ndarray, dtype: np.dtype) -> str:
    return "each tile by a jitted strided loop"


def _owns_copy(table: np.ndarray) -> bool:
    return bool(table[T_KIND] == KIND_COPY)


def _owns_relu(table: np.ndarray) -> bool:
    return bool(table[T_KIND] == KIND_RELU)


COPY = TileKind(name="copy", mode=-1, owns=_owns_copy, describe=_describe_copy,
                encode=_encode_copy)
RELU = TileKind(name="relu", mode=-1, owns=_owns_relu, describe=_describe_relu,
                encode=_encode_relu)
