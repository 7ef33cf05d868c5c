"""The schemas of the integer tables the jitted kernels read (tilekinds/table.py, the
reductions' in tiles.py, the executor's own in executor/tables.py): each names its
columns once, its index constants are 0..n-1, and each writer fills the named columns
as the readers take them."""

from __future__ import annotations

import itertools
import math
from types import ModuleType

import numpy as np
import pytest

import teir_plan as tp
from teir_plan import tiles
from teir_plan.executor import tables as X
from teir_plan.executor.lower import copy_runs, lower
from teir_plan.executor.partials import add_partials
from teir_plan.executor.reduce import gemv_table, units
from teir_plan.executor.walker import collapsed_offsets, loop_iterations
from teir_plan.frontend.contraction import Layout, describe, with_dtype
from teir_plan.machine import MachineParams
from teir_plan.planner.block import blocking_for
from teir_plan.planner.reduce import plan_reduction, summed_table, vector_row
from teir_plan.schedule.reduce_run import runnable
from teir_plan.tilekinds import table as K

# (module, fields, the prefix of their index constants, the name of their count)
SCHEMAS = [
    (K, K.FIELDS, "T_", "TILE_LEN"),
    (K, K.LOOP_FIELDS, "L_", "LOOP_LEN"),
    (K, K.BLOCK_FIELDS, "B_", "BLOCK_LEN"),
    (tiles, tiles.SPLIT_KEPT_FIELDS, "KEPT_", "SPLIT_KEPT_LEN"),
    (tiles, tiles.SUMMED_FIELDS, "SUMMED_", "SUMMED_LEN"),
    (X, X.CONST_FIELDS, "C_", "CONST_LEN"),
    (X, X.GEMV_FIELDS, "GEMV_", "GEMV_LEN"),
    (X, X.STEP_FIELDS, "S_", "STEP_LEN"),
    (X, X.BUFFER_FIELDS, "BUF_", "BUFFER_LEN"),
    (X, X.PARTIAL_FIELDS, "P_", "PARTIAL_LEN"),
    (X, X.COMBO_FIELDS, "CB_", "COMBO_LEN"),
]


@pytest.mark.parametrize(("module", "fields", "prefix", "count"), SCHEMAS,
                         ids=[s[2] for s in SCHEMAS])
def test_each_schema_names_its_columns_once_and_numbers_them_in_order(
        module: ModuleType, fields: tuple[str, ...], prefix: str, count: str) -> None:
    assert len(set(fields)) == len(fields), fields
    assert getattr(module, count) == len(fields)
    for i, name in enumerate(fields):
        assert getattr(module, prefix + name.upper()) == i, name
    # No index constant of the prefix besides the schema's own.
    ints = {n for n, v in vars(module).items() if n.startswith(prefix)
            and not n.endswith(("_LEN", "_FIELDS", "_SLOT")) and type(v) is int}
    assert ints == {prefix + name.upper() for name in fields}


def test_the_tables_read_by_the_same_helpers_share_their_columns() -> None:
    # walker.collapsed_offsets and loop_iterations read a blocked program's outer table
    # and the loop table alike; reduce_chunk reads kept and run_parallel's copy alike.
    assert K.LOOP_FIELDS[:K.OUTER_LEN] == K.OUTER_FIELDS and "is_k" not in K.OUTER_FIELDS
    assert tiles.SPLIT_KEPT_FIELDS[:tiles.KEPT_LEN] == tiles.KEPT_FIELDS


def test_named_rows_takes_every_field_by_name_and_nothing_else() -> None:
    t = K.named_rows(K.BLOCK_FIELDS, [{"out": 3, "size": 5, "in": 7}])
    assert t.dtype == np.int64 and t.shape == (1, K.BLOCK_LEN)
    assert (t[0, K.B_SIZE], t[0, K.B_IN], t[0, K.B_OUT]) == (5, 7, 3)
    assert K.named_rows(K.LOOP_FIELDS, []).shape == (0, K.LOOP_LEN)
    with pytest.raises(KeyError):
        K.named_rows(K.BLOCK_FIELDS, [{"size": 5, "in": 7}])
    with pytest.raises(KeyError):
        K.named_rows(K.BLOCK_FIELDS, [{"size": 5, "in": 7, "out": 3, "is_k": 0}])


def _blocked_gemm() -> tp.TEIR:
    """out[i][j] = sum_k a[i][k] b[k][j], 32 x 16 x 24: i split io (parallel) x ii,
    k split ko (a sequential K loop) x ki."""
    return tp.TEIR.from_fields(
        data_type="float64", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["m", "k", "m", "n", "k"],
        exec_types=["parallel", "seq", "prim", "prim", "prim"],
        dim_sizes=[4, 3, 8, 16, 8],
        strides=[[192, 8, 24, 0, 1], [0, 128, 0, 1, 16], [128, 0, 16, 1, 0]])


def test_the_loop_table_holds_each_loop_axis_by_name() -> None:
    prog = _blocked_gemm()
    low = lower(prog)
    s = prog.schedule
    loop_axes = [0, 1]  # the parallel row first, then the sequential one
    assert low.loops.shape == (2, K.LOOP_LEN) and low.npar == 1
    assert low.loops[:, K.L_SIZE].tolist() == [s.dim_sizes[i] for i in loop_axes]
    for col, j in ((K.L_IN0, 0), (K.L_IN1, 1), (K.L_OUT, 2)):
        assert low.loops[:, col].tolist() == [s.strides[j][i] for i in loop_axes]
    assert low.loops[:, K.L_IS_K].tolist() == [0, 1]  # ko is a K axis


def test_the_walker_reads_the_loop_table_as_lowering_wrote_it() -> None:
    prog = _blocked_gemm()
    low = lower(prog)
    st = prog.schedule.strides
    tile = low.tile.copy()
    tile[K.T_ORIGIN0], tile[K.T_ORIGIN1], tile[K.T_ORIGIN2] = 1000, 2000, 3000
    assert loop_iterations.py_func(low.loops, 2) == 12
    for it, (io, ko) in enumerate(itertools.product(range(4), range(3))):
        want = tuple(origin + io * st[j][0] + ko * st[j][1]
                     for j, origin in enumerate((1000, 2000, 3000)))
        assert collapsed_offsets.py_func(low.loops, 2, tile, it) == want


def test_a_folded_row_takes_its_loop_s_columns_by_name() -> None:
    """The row kind folds the innermost loop into the tile (tilekinds/row.fold): its
    extent and each operand's stride along it, read from the loop table's columns."""
    prog = tp.TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["c", "c"], exec_types=["seq", "seq"], dim_sizes=[64, 48],
        strides=[[48, 1], [1, 64], [48, 1]])
    low = lower(prog)
    assert low.kind.name == "row"
    assert [K.field(low.tile, f) for f in ("m", "a_m", "b_n", "c_m")] == [48, 1, 64, 1]
    assert low.loops.tolist() == [[64, 48, 1, 48, 0]]  # (size, in0, in1, out, is_k)


def test_a_copy_s_block_table_holds_its_axes_by_name() -> None:
    prog = tp.TEIR.from_fields(
        data_type="float32", prim_first="none", prim_main="copy", prim_last="none",
        dim_types=["c"] * 3, exec_types=["parallel", "prim", "prim"],
        dim_sizes=[20, 20, 20], strides=[[20, 400, 1], [400, 1, 20]])
    runs = copy_runs(prog, [1, 2])
    assert runs is not None and runs.shape == (2, K.BLOCK_LEN)
    # Outermost in out first: axis 2 (out stride 20), then axis 1 (out stride 1).
    assert runs[:, K.B_SIZE].tolist() == [20, 20]
    assert runs[:, K.B_IN].tolist() == [1, 400]
    assert runs[:, K.B_OUT].tolist() == [20, 1]


def test_a_blocking_s_tables_hold_its_loops_and_axes_by_name() -> None:
    c = with_dtype(describe(Layout("ka", (64, 512), (512, 1)),
                            Layout("kb", (64, 256), (256, 1)),
                            Layout("ab", (512, 256), (1, 512))), np.float32)
    b = blocking_for(c, "ba", l2_bytes=256 << 10)
    assert b is not None and b.outer and b.block
    outer, block = b.outer_table, b.block_table
    assert outer.shape == (len(b.outer), K.OUTER_LEN)
    assert outer[:, K.L_SIZE].tolist() == [r.extent for r in b.outer]
    assert outer[:, K.L_IN0].tolist() == [r.in0_stride for r in b.outer]
    assert outer[:, K.L_IN1].tolist() == [r.in1_stride for r in b.outer]
    assert outer[:, K.L_OUT].tolist() == [r.out_stride for r in b.outer]
    assert block.shape == (len(b.block), K.BLOCK_LEN)
    assert block[:, K.B_SIZE].tolist() == [r.extent for r in b.block]
    assert block[:, K.B_IN].tolist() == [r.stage_stride for r in b.block]
    assert block[:, K.B_OUT].tolist() == [r.out_stride for r in b.block]
    assert loop_iterations.py_func(outer, len(outer)) == b.blocks


def test_a_reduction_s_tables_hold_its_axes_by_name() -> None:
    x = Layout("ijk", (5, 6, 7), (42, 7, 1))
    out = Layout("ik", (5, 7), (7, 1))
    w = Layout("j", (6,), (1,))
    red = plan_reduction(x, out, w, np.dtype(np.float32), MachineParams(), 1)
    assert red is not None and red.kind == tiles.KIND_ROWS and red.vector is not None
    kept, vec, summed = red.tables
    assert kept.shape == (len(red.kept), tiles.KEPT_LEN) and vec.shape == (tiles.KEPT_LEN,)
    assert summed.shape == (len(red.summed), tiles.SUMMED_LEN)
    for col, j in ((tiles.KEPT_N, 1), (tiles.KEPT_X, 2), (tiles.KEPT_OUT, 3),
                   (tiles.KEPT_W, 4)):
        assert kept[:, col].tolist() == [a[j] for a in red.kept]
        assert vec[col] == red.vector[j]
    for col, j in ((tiles.SUMMED_N, 1), (tiles.SUMMED_X, 2), (tiles.SUMMED_W, 3)):
        assert summed[:, col].tolist() == [a[j] for a in red.summed]
    assert kept[:, tiles.KEPT_N].tolist() == [5] and vec[tiles.KEPT_N] == 7
    assert summed[:, tiles.SUMMED_W].tolist() == [1]  # the weights' stride along j
    assert kept[:, tiles.KEPT_W].tolist() == [0] and vec[tiles.KEPT_W] == 0  # one vector
    # The kernels' count of output units, read from the tables by name.
    block = tiles.row_block(4)
    assert units.py_func(red.kind, kept, vec, 4) == 5 * -(-7 // block)


def test_weights_along_kept_axes_are_kept_s_w_column_and_the_kernel_reads_them() -> None:
    # bij,ij->bi read in place: the weights step along kept i (not b) and summed j, x
    # reversed along b and i (the planner walks x forwards, the weights' i backwards).
    x = Layout("bij", (3, 5, 40), (-200, -40, 1))
    w = Layout("ij", (5, 40), (40, 1))
    out = Layout("bi", (3, 5), (5, 1))
    f32 = np.dtype(np.float32)
    assert plan_reduction(x, out, w, f32, MachineParams(), 1) is None  # not offered
    red = plan_reduction(x, out, w, f32, MachineParams(), 1, kept_weights=True)
    assert red is not None and red.kind == tiles.KIND_INNER and red.weights_kept
    kept = red.tables[0]
    assert kept.shape == (2, tiles.KEPT_LEN)  # b and i do not fuse: the weights' do not
    for col, j in ((tiles.KEPT_N, 1), (tiles.KEPT_X, 2), (tiles.KEPT_OUT, 3),
                   (tiles.KEPT_W, 4)):
        assert kept[:, col].tolist() == [a[j] for a in red.kept]
    assert kept[:, tiles.KEPT_W].tolist() == [0, -40]
    assert red.origins[:2] == (-2 * 200 - 4 * 40, 4 * 40)
    assert red.reach(1) == (0, 4 * 40 + 39)  # every element of the weights, once
    # The kernel reads the column by name: each output its own run of weights.
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((3, 5, 40)).astype(np.float32)
    ws = rng.standard_normal((5, 40)).astype(np.float32)
    xv = xs[::-1, ::-1]  # the layout above
    y = np.zeros((3, 5), np.float32)
    runnable(red).run(xv, ws, y)
    np.testing.assert_allclose(y, np.einsum("bij,ij->bi", xv, ws), rtol=1e-5, atol=1e-5)
    # Never on ?gemv: rows that run there weighted by one vector (ki,k->i, rows of 24)
    # do not with weights of their own, told or read from the vector axis' w.
    rows, ks = vector_row(("i", 24, 1, 1, 0)), summed_table([("k", 3000, 24, 1)])
    assert tiles.uses_gemv(tiles.KIND_ROWS, rows, ks, True, 4)
    assert not tiles.uses_gemv(tiles.KIND_ROWS, rows, ks, True, 4, weights_kept=True)
    assert not tiles.uses_gemv(tiles.KIND_ROWS, vector_row(("i", 24, 1, 1, 24)), ks, True, 4)


def test_constants_hold_one_and_zero_in_the_program_s_type() -> None:
    for dtype in (np.float32, np.float64, np.complex64, np.complex128):
        c = X.constants(dtype)
        assert c.dtype == dtype and c.shape == (X.CONST_LEN,)
        assert c[X.C_ONE] == 1 and c[X.C_ZERO] == 0


def test_the_gemv_table_holds_its_address_and_integer_width() -> None:
    g = gemv_table(np.dtype(np.float64))
    assert g.dtype == np.int64 and g.shape == (X.GEMV_LEN,)
    assert g[X.GEMV_FN] != 0 and g[X.GEMV_INT_BYTES] in (4, 8)


def _gram(ko: int, ki: int, m: int, n: int) -> tp.TEIR:
    """``ki,kj->ji`` with K split as (ko: parallel, ki: prim)."""
    return tp.TEIR.from_fields(
        data_type="float64", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["k", "m", "n", "k"], exec_types=["parallel", "prim", "prim", "prim"],
        dim_sizes=[ko, m, n, ki],
        strides=[[ki * m, 1, 0, m], [ki * n, 0, 1, n], [0, 1, m, 0]])


def test_the_partials_table_holds_the_layout_s_rows_by_name() -> None:
    low = lower(_gram(4, 8, 3, 5))
    assert low.partials is not None
    p = low.partials
    rows = p.rows
    assert rows.shape == (len(p.layout.rows), X.PARTIAL_LEN)
    assert rows[:, X.P_EXTENT].tolist() == [r[0] for r in p.layout.rows]
    assert rows[:, X.P_OUT].tolist() == [r[1] for r in p.layout.rows]
    assert rows[:, X.P_BLOCK].tolist() == [r[2] for r in p.layout.rows]
    # add_partials reads them as the layout means them: each block element, summed
    # over the workers, lands on out at the layout's output strides.
    nparts, pitch = 3, p.layout.elements + 5
    parts = np.random.default_rng(0).standard_normal(nparts * pitch)
    y = np.full(200, np.nan)
    add_partials.py_func(y, 7, parts, pitch, nparts, rows, True, False)
    want = np.full(200, np.nan)
    for idx in itertools.product(*(range(n) for n, _, _ in p.layout.rows)):
        o = 7 + sum(i * so for i, (_, so, _) in zip(idx, p.layout.rows))
        b = sum(i * sb for i, (_, _, sb) in zip(idx, p.layout.rows))
        want[o] = sum(parts[w * pitch + b] for w in range(nparts))
    np.testing.assert_allclose(y, want)


def test_the_steps_and_buffer_tables_of_a_one_call_plan_hold_them_by_name() -> None:
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal((6, 6)) for _ in range(3)]
    tp.plan_cache.clear()
    plan = tp.plan("ab,bc,cd->ad", *ops, optimize="greedy")
    one = plan._one_call
    assert one is not None and one.whole
    prog = one.segments[0].program
    steps, bufmap = prog.steps, prog.bufmap
    assert steps.shape == (len(steps), X.STEP_LEN) and bufmap.shape[1] == X.BUFFER_LEN
    # Each step's loop rows follow the one before's in the shared loop table.
    nloops = steps[:, X.S_NLOOPS].tolist()
    assert steps[:, X.S_LOOP0].tolist() == [sum(nloops[:s]) for s in range(len(steps))]
    assert sum(nloops) == len(prog.loops) and prog.loops.shape[1] == K.LOOP_LEN
    assert (steps[:, X.S_FN] != 0).all() and (steps[:, X.S_STOP] >= 1).all()
    assert steps[-1, X.S_OUT] == len(ops)  # the plan's out: the buffer after the operands
    # The operands and out are gathered arrays 0..3, whole; a temporary lies in a slot.
    direct = bufmap[:len(ops) + 1]
    assert direct[:, X.BUF_ARRAY].tolist() == list(range(len(ops) + 1))
    assert (direct[:, X.BUF_ELEMENTS] == -1).all() and (direct[:, X.BUF_OFFSET] == 0).all()
    temps = bufmap[len(ops) + 1:]
    assert len(temps) and (temps[:, X.BUF_ELEMENTS] == 36).all()
    assert (temps[:, X.BUF_ARRAY] >= len(ops) + 1).all()
    for s in range(len(steps)):
        assert steps[s, X.S_IN0] < len(bufmap) and steps[s, X.S_IN1] < len(bufmap)
    np.testing.assert_allclose(plan(*ops), np.linalg.multi_dot(ops), rtol=1e-12)
    assert math.isclose(float(prog.consts[X.C_ONE]), 1.0) and prog.consts[X.C_ZERO] == 0
