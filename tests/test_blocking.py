"""The blocking records (teir_plan.isa.Blocking): every register file's micro-tiles fit
it, and the kernels and tile rules compile in the record of the target they run on."""

from __future__ import annotations

import pytest

from teir_plan.errors import PlanError
from teir_plan.isa import _SHAPES, BLOCKING_DTYPES, VectorTarget, blocking, target

TARGETS = [VectorTarget("avx512", 64, 32, "znver4"), VectorTarget("avx2", 32, 16, "znver3"),
           VectorTarget("neon", 16, 32, "neoverse-v1"), VectorTarget("sse", 16, 16, "x86-64")]


@pytest.mark.parametrize("tgt", TARGETS, ids=lambda t: t.name)
@pytest.mark.parametrize("dtype", BLOCKING_DTYPES)
def test_each_micro_tile_fits_the_register_file(tgt: VectorTarget, dtype: str) -> None:
    b = blocking(dtype, tgt)
    sh = b.shapes
    assert all(used <= tgt.registers for used in b.registers_used()), b
    # The wide tile keeps no more accumulators than the main one, in an even number of
    # rows; the ladder ends in one row.
    assert sh.wide_rows * (sh.vectors + 1) <= sh.rows * sh.vectors and sh.wide_rows % 2 == 0
    assert b.row_steps[0] == sh.rows and b.row_steps[-1] == 1
    assert b.lanes * b.itemsize == tgt.vector_bytes
    assert b.full_line_loads == (tgt.name != "avx512")
    # Every micro-tile the kernels dispatch to fits the register file: its accumulators,
    # the vectors one K step loads and a broadcast (the transposed tile: its rows, V's
    # vector and a broadcast), and every strip's rows are covered by the steps.
    assert all(r * v + v + 1 <= tgt.registers for r, v in b.micro_tiles), b.micro_tiles
    assert all(r + 2 <= tgt.registers and r % 4 == 0 for r in b.transposed_row_steps)
    assert {v for _, v in b.micro_tiles} == set(range(1, sh.vectors + 2))
    assert len(set(b.micro_tiles)) == len(b.micro_tiles)
    assert b.wide_row_steps[-1] == 1 and b.transposed_row_steps[0] == sh.transposed_rows


def test_the_register_files_shapes_differ_where_the_registers_do() -> None:
    assert set(_SHAPES) == {16, 32}
    assert _SHAPES[32].rows * _SHAPES[32].vectors > _SHAPES[16].rows * _SHAPES[16].vectors


def test_the_kernels_compile_in_the_record_of_their_target() -> None:
    from teir_plan import tiles
    from teir_plan.executor import micro_ir
    from teir_plan.tilekinds import vec_t

    b = blocking("float32", target())
    assert tiles.BLOCKING == b == blocking("float32")
    sh = b.shapes
    kernels = {"rows": micro_ir.ROWS, "lines": micro_ir.LINES, "wide rows": micro_ir.QUAD_ROWS,
               "wide lines": micro_ir.QUAD_LINES, "full loads": micro_ir.FULL_LINE_LOADS,
               "next lines": micro_ir.NEXT_TILE_LINES, "t rows": vec_t.VEC_T_TILE_ROWS,
               "rows x k": tiles.VEC_MAX_ROWS_TIMES_K, "span": tiles.VEC_MAX_SPAN,
               "stream k": tiles.VEC_STREAM_K, "page": tiles.PAGE_BYTES}
    record = {"rows": sh.rows, "lines": sh.vectors, "wide rows": sh.wide_rows,
              "wide lines": sh.vectors + 1, "full loads": b.full_line_loads,
              "next lines": b.next_tile_lines, "t rows": sh.transposed_rows,
              "rows x k": b.max_rows_times_k, "span": b.max_span_bytes,
              "stream k": b.stream_k, "page": b.page_bytes}
    assert kernels == record
    # The kernels' dispatch is generated from the record's lists of micro-tiles.
    from teir_plan.executor import microkernel, transposed_kernel

    generated = {"micro-tiles": micro_ir.MICRO_TILES, "rows": microkernel.ROW_STEPS,
                 "wide rows": microkernel.QUAD_ROW_STEPS,
                 "transposed rows": transposed_kernel.TRANSPOSED_ROWS}
    assert generated == {"micro-tiles": b.micro_tiles, "rows": b.row_steps,
                         "wide rows": b.wide_row_steps,
                         "transposed rows": b.transposed_row_steps}
    # float64's record differs from float32's in its lanes only.
    d = blocking("float64", target())
    assert d.shapes == b.shapes and d.lanes * 2 == b.lanes


def test_a_dtype_without_a_vector_kernel_has_no_record() -> None:
    with pytest.raises(PlanError, match="int32"):
        blocking("int32")
