"""The blocked write-back's copy of one block into ``out`` (executor/blocked.py
``_copy_block``), against an enumeration of the block's indices in numpy.

The copy has several routes (a run assembled in a buffer and written with line-sized
non-temporal stores, with or without a transpose in registers; single-element
non-temporal stores; plain stores when out has no unit stride); the block tables here
are drawn so that each is taken, with out starting at every element offset within a
line (numpy's large arrays are not line-aligned), extents that are and are not
multiples of a line, and buffers too small for the longer runs.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from teir_plan.executor.blocked import _RUN_BUFFER_BYTES, _copy_block
from tests.strategies import counted, fuzz_settings


def _reference(stage: np.ndarray, out: np.ndarray, yo: int, block: np.ndarray) -> None:
    for idx in itertools.product(*(range(int(e)) for e in block[:, 0])):
        s = sum(i * int(r[1]) for i, r in zip(idx, block))
        o = yo + sum(i * int(r[2]) for i, r in zip(idx, block))
        out[o] = stage[s]


def _strides(extents: list[int], order: list[int], pad: list[int]) -> list[int]:
    """Strides of a layout that stores the axes in ``order`` (innermost first), each
    axis' span padded by ``pad`` elements."""
    strides = [0] * len(extents)
    step = 1
    for r, p in zip(order, pad):
        strides[r] = step
        step = step * extents[r] + p
    return strides


@fuzz_settings(default=150, fuzz=20_000)
@given(data=st.data())
@counted
def test_a_block_copy_writes_exactly_the_blocks_elements(data: st.DataObject) -> None:
    nrows = data.draw(st.integers(1, 4), label="rows")
    extents = [data.draw(st.sampled_from([1, 2, 3, 5, 8, 15, 16, 17, 33, 48]),
                         label=f"extent {r}") for r in range(nrows)]
    if np.prod(extents) > 40_000:
        extents[0] = 2
    stage_order = data.draw(st.permutations(range(nrows)), label="stage order")
    out_order = data.draw(st.permutations(range(nrows)), label="out order")
    stage_pad = [data.draw(st.integers(0, 3)) for _ in range(nrows)]
    out_pad = [data.draw(st.integers(0, 3)) for _ in range(nrows)]
    if data.draw(st.booleans(), label="out rows contiguous"):
        out_pad = [0] * nrows
    s_strides = _strides(extents, list(stage_order), stage_pad)
    y_strides = _strides(extents, list(out_order), out_pad)
    if data.draw(st.integers(0, 4), label="no unit stride in out") == 0:
        y_strides = [2 * s for s in y_strides]  # the plain-store route
    block = np.array([[e, s, y] for e, s, y in zip(extents, s_strides, y_strides)],
                     np.int64)
    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    stage_size = 1 + sum((e - 1) * s for e, s in zip(extents, s_strides))
    out_span = 1 + sum((e - 1) * y for e, y in zip(extents, y_strides))
    yo = data.draw(st.integers(0, 17), label="out offset")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    stage = rng.standard_normal(stage_size).astype(dtype)
    out = np.full(yo + out_span + 5, np.nan, dtype)
    expected = out.copy()
    _reference(stage, expected, yo, block)
    buf_bytes = data.draw(st.sampled_from([64, 1024, 4096, _RUN_BUFFER_BYTES]),
                          label="buffer bytes")
    buf = np.empty(buf_bytes // out.itemsize, dtype)
    _copy_block(stage, out, yo, block, buf)
    np.testing.assert_array_equal(out, expected)


def test_a_block_copy_into_a_misaligned_out_of_each_route() -> None:
    """The TCCG shapes' blocks (a transposed run continued by the stage's unit-stride
    axis; a transposed run it does not continue; a run along the stage's own unit
    stride), into out at each element offset of a line."""
    cases = [
        [[3, 36, 2 * 41472], [4, 20736, 1728], [36, 1, 48], [48, 432, 1]],
        [[20, 1, 4608], [2, 96, 2304], [3, 18432, 96], [96, 192, 1]],
        [[40, 1, 97], [33, 40, 1]],
        [[17, 3, 1], [5, 51, 17], [3, 1, 85]],
    ]
    rng = np.random.default_rng(5)
    for rows in cases:
        block = np.array(rows, np.int64)
        for dtype in (np.float32, np.float64):
            stage = rng.standard_normal(
                1 + int(sum((r[0] - 1) * r[1] for r in rows))).astype(dtype)
            span = 1 + int(sum((r[0] - 1) * r[2] for r in rows))
            for yo in range(17):
                out = np.full(yo + span + 3, np.nan, dtype)
                expected = out.copy()
                _reference(stage, expected, yo, block)
                buf = np.empty(_RUN_BUFFER_BYTES // out.itemsize, dtype)
                _copy_block(stage, out, yo, block, buf)
                np.testing.assert_array_equal(out, expected, err_msg=f"{rows} {yo}")


@fuzz_settings(default=100, fuzz=20_000)
@given(data=st.data())
@counted
def test_a_copy_tile_transposing_unit_strides_matches_numpy(data: st.DataObject) -> None:
    """The Copy primitive's tile between x's unit stride and y's (a transpose through
    registers, with overlapping last tiles), and every other tile shape; streaming
    (non-temporal stores of whole, aligned lines, the head and tail where rows start
    inside a line by scalar or, for rows 4 KiB apart, masked vector stores) or not."""
    from teir_plan.executor.copy_kernels import copy_tile

    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    lanes = 64 // np.dtype(dtype).itemsize
    m = data.draw(st.sampled_from([1, 3, 8, 15, 16, 17, 40, 48, 64, 100, 300]), label="m")
    n = data.draw(st.sampled_from([1, 5, 8, 16, 19, 33]), label="n")
    x_m = n + data.draw(st.integers(0, 3), label="x pad")  # x: j unit stride
    y_n = m + data.draw(st.integers(0, 3), label="y pad")  # y: i unit stride
    rows = data.draw(st.sampled_from(["any", "whole lines", "4 KiB apart"]), label="y rows")
    if rows == "whole lines":
        y_n = -(-y_n // lanes) * lanes
    elif rows == "4 KiB apart":  # one L1 set: the partial lines go by masked stores
        page = 4096 // np.dtype(dtype).itemsize
        y_n = -(-y_n // page) * page
    xo = data.draw(st.integers(0, 5), label="x offset")
    yo = data.draw(st.integers(0, 17), label="y offset")
    relu = data.draw(st.booleans(), label="relu")
    stream = data.draw(st.booleans(), label="stream")
    # The worker's scratch (the run buffer of _copy_transposed_run), at any offset in a
    # line of its own, or none.
    buf_at = data.draw(st.one_of(st.none(), st.integers(0, lanes - 1)), label="buffer at")
    x = np.random.default_rng(m * n).standard_normal(xo + m * x_m + 2).astype(dtype)
    y = _line_aligned(yo + n * y_n + 3, dtype)
    y[:] = np.nan
    expected = y.copy()
    for i in range(m):
        for j in range(n):
            v = x[xo + i * x_m + j]
            expected[yo + i + j * y_n] = max(v, 0.0) if relu else v
    if buf_at is None:
        copy_tile(x, xo, y, yo, m, n, x_m, 1, 1, y_n, relu, stream)
    else:
        buf = _line_aligned(buf_at + m * n + lanes, dtype)[buf_at:]
        copy_tile(x, xo, y, yo, m, n, x_m, 1, 1, y_n, relu, stream, buf)
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("m", "n"), [(48, 36), (48, 16), (100, 19), (33, 17)])
def test_a_streamed_transpose_into_contiguous_rows_at_every_line_offset(
        dtype: type, m: int, n: int) -> None:
    """Rows of y that follow one another (the tile's output is one run) and start inside
    a line (a permute into numpy.empty's out): the run is assembled in the worker's
    buffer and written as whole lines, with ordinary stores for its partial first and
    last lines only; every element right, nothing outside the run touched, for every
    offset of y and of the buffer within a line."""
    from teir_plan.executor.copy_kernels import copy_tile

    lanes = 64 // np.dtype(dtype).itemsize
    x_m = n + 2
    x = np.random.default_rng(m + n).standard_normal(m * x_m + 1).astype(dtype)
    for yo in range(lanes + 1):
        for buf_at in (0, 1, lanes - 1):
            y = _line_aligned(yo + n * m + lanes, dtype)
            y[:] = np.nan
            expected = y.copy()
            for j in range(n):
                expected[yo + j * m: yo + (j + 1) * m] = x[1 + j: 1 + j + m * x_m: x_m]
            buf = _line_aligned(buf_at + m * n + lanes, dtype)[buf_at:]
            copy_tile(x, 1, y, yo, m, n, x_m, 1, 1, m, False, True, buf)
            np.testing.assert_array_equal(y, expected, err_msg=f"y at {yo}, buffer at {buf_at}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("m", "n"), [(48, 16), (100, 19), (37, 8)])
def test_a_streamed_transpose_into_rows_4kib_apart_at_every_line_offset(
        dtype: type, m: int, n: int) -> None:
    """Rows of y a multiple of 4 KiB apart and starting inside a line (a staged result
    permuted into numpy's own ``out``): whole lines streamed, the partial lines at both
    ends of every row written by masked stores, nothing outside the tile touched."""
    from teir_plan.executor.copy_kernels import copy_tile

    lanes = 64 // np.dtype(dtype).itemsize
    y_n = 2 * 4096 // np.dtype(dtype).itemsize
    x_m = n + 3
    x = np.random.default_rng(m + n).standard_normal(m * x_m + 1).astype(dtype)
    for yo in range(lanes + 1):
        y = _line_aligned(yo + n * y_n + lanes, dtype)
        y[:] = np.nan
        expected = y.copy()
        for j in range(n):
            expected[yo + j * y_n: yo + j * y_n + m] = x[1 + j: 1 + j + m * x_m: x_m]
        copy_tile(x, 1, y, yo, m, n, x_m, 1, 1, y_n, False, True)
        np.testing.assert_array_equal(y, expected, err_msg=f"y offset {yo}")


@fuzz_settings(default=60, fuzz=10_000)
@given(data=st.data())
@counted
def test_a_streamed_copy_of_unit_stride_runs_matches_numpy(data: st.DataObject) -> None:
    """The Copy primitive's tile along a unit stride in both x and y, streaming: a scalar
    head up to y's next line, whole lines stored non-temporally, a scalar tail."""
    from teir_plan.executor.copy_kernels import copy_tile

    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    m = data.draw(st.integers(1, 120), label="m")
    n = data.draw(st.integers(1, 4), label="n")
    x_n = m + data.draw(st.integers(0, 20), label="x pad")
    y_n = m + data.draw(st.integers(0, 20), label="y pad")
    xo = data.draw(st.integers(0, 17), label="x offset")
    yo = data.draw(st.integers(0, 17), label="y offset")
    x = np.random.default_rng(m * n).standard_normal(xo + n * x_n + 2).astype(dtype)
    y = _line_aligned(yo + n * y_n + 3, dtype)
    y[:] = np.nan
    expected = y.copy()
    for j in range(n):
        expected[yo + j * y_n: yo + j * y_n + m] = x[xo + j * x_n: xo + j * x_n + m]
    copy_tile(x, xo, y, yo, m, n, 1, x_n, 1, y_n, False, True)
    np.testing.assert_array_equal(y, expected)


def _line_aligned(size: int, dtype: type) -> np.ndarray:
    isz = np.dtype(dtype).itemsize
    raw = np.empty(size + 64 // isz, dtype)
    skip = (-raw.ctypes.data % 64) // isz
    return raw[skip: skip + size]


def test_a_run_never_outgrows_the_buffer() -> None:
    """Regression (found by make fuzz): a run continued by the stage's unit-stride axis
    was limited by the L1 budget only, so a smaller buffer overflowed."""
    block = np.array([[16, 16, 1], [16, 1, 16], [8, 256, 256]], np.int64)
    stage = np.arange(2048, dtype=np.float32)
    for yo in (0, 3):
        out = np.full(yo + 2048 + 16, np.nan, np.float32)
        expected = out.copy()
        _reference(stage, expected, yo, block)
        _copy_block(stage, out, yo, block, np.empty(256, np.float32))
        np.testing.assert_array_equal(out, expected)


def test_a_large_permutation_streams_and_matches_numpy() -> None:
    """A permutation with an output of 32 MiB streams (non-temporal stores), into the
    plan's own result and into an out= that starts 16 bytes into a line."""
    import teir_plan as tp
    from teir_plan.executor.lower import lower
    from teir_plan.tilekinds import table as K

    a = np.random.default_rng(3).standard_normal((2048, 4096)).astype(np.float32)
    for expr in ("ab->ba", "ab->ab"):
        ref = np.einsum(expr, a)
        # Planned for a C-order out=: without one, "ab->ab" is a view of ``a``.
        plan = tp.plan(expr, a, out=np.empty(ref.shape, np.float32))
        assert lower(plan.teir).tile[K.T_STREAM] == 1
        np.testing.assert_array_equal(plan(a, out=plan.empty_out()), ref)
        raw = _line_aligned(a.size + 4, np.float32)
        raw[:4] = 7.0
        out = raw[4:].reshape(ref.shape)
        tp.einsum(expr, a, out=out)
        np.testing.assert_array_equal(out, ref)
        assert (raw[:4] == 7.0).all()


@contextlib.contextmanager
def _every_output_streams() -> Iterator[None]:
    """Plans made and run inside treat every output as streaming (small outputs take the
    routes of large ones); lowered programs and plans made inside are forgotten after."""
    import teir_plan as tp
    from teir_plan import tiles
    from teir_plan.executor import lower as lowering

    saved = tiles.STREAM_MIN_BYTES
    tiles.STREAM_MIN_BYTES = 0
    lowering.lower.cache_clear()
    try:
        yield
    finally:
        tiles.STREAM_MIN_BYTES = saved
        lowering.lower.cache_clear()
        tp.plan_cache.clear()


@fuzz_settings(default=40, fuzz=5_000)
@given(data=st.data())
@counted
def test_a_copy_program_assembling_runs_matches_numpy(data: st.DataObject) -> None:
    """A permutation whose output rows are too short to stream on their own runs through
    the block copy (lower.copy_runs), each parallel iteration one block: drawn
    extents, axis orders, strided and reversed inputs and an out= starting at any offset within a
    line, with the streaming threshold lowered so that small outputs take this route;
    the bytes around out stay untouched."""
    import teir_plan as tp

    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    ndim = data.draw(st.integers(3, 4), label="ndim")
    shape = tuple(data.draw(st.lists(st.integers(1, 24), min_size=ndim, max_size=ndim),
                            label="shape"))
    perm = data.draw(st.permutations(range(ndim)), label="perm")
    step = tuple(data.draw(st.lists(st.sampled_from([1, 1, 2, -1]), min_size=ndim,
                                    max_size=ndim), label="input steps"))
    base = np.random.default_rng(sum(shape)).standard_normal(
        [n * abs(k) for n, k in zip(shape, step)]).astype(dtype)
    x = base[tuple(slice(None, None, k) for k in step)].transpose(perm)
    off = data.draw(st.integers(0, 15), label="out offset")
    raw = _line_aligned(off + x.size + 8, dtype)
    raw[:] = -7.0
    out = raw[off: off + x.size].reshape(x.shape)
    letters = "abcd"[:ndim]
    with _every_output_streams():
        plan = tp.plan(f"{letters}->{letters}", x, out=out, optimize=True)
        plan(x, out=out)
    np.testing.assert_array_equal(out, x)
    assert (raw[:off] == -7.0).all() and (raw[off + x.size:] == -7.0).all()


def test_a_permutation_with_short_output_rows_assembles_runs() -> None:
    """dfgb,geac->abcdef's staged result into C order (20-element rows of out) takes
    the block copy, and the answer is numpy's."""
    import teir_plan as tp
    from teir_plan.executor import lower as lowering

    shape, strides = (4, 20, 20, 6, 20, 20), (48000, 1, 2400, 400, 192000, 20)
    base = np.random.default_rng(5).standard_normal(4 * 20 * 20 * 6 * 20 * 20).astype(
        np.float32)
    x = np.lib.stride_tricks.as_strided(base, shape, [s * 4 for s in strides])
    out = np.empty(shape, np.float32)
    with _every_output_streams():
        plan = tp.plan("abcdef->abcdef", x, out=out)
        assert lowering.lower(plan.teir).copy_runs is not None
        plan(x, out=out)
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("apart", ["4 KiB", "other"])
@pytest.mark.parametrize(("m", "n"), [(96, 96), (48, 17), (53, 16)])
def test_streamed_tiles_whose_rows_continue_at_every_line_offset(
        dtype: type, apart: str, m: int, n: int) -> None:
    """Three tiles in a row whose rows continue one another (an outer loop steps out's
    rows on by m, bdca->abcd into numpy.empty's out): each row's last partial line is
    completed with the next tile's first elements and written whole, the next tile
    leaves it alone; the first tile's heads and the last one's tails are written as
    before.  Every element right, nothing outside the rows touched, at every offset of
    out within a line, rows a multiple of 4 KiB apart or not."""
    from teir_plan.executor.copy_kernels import copy_tile

    isz = np.dtype(dtype).itemsize
    lanes = 64 // isz
    seg = 3  # tiles
    y_n = 2 * 4096 // isz if apart == "4 KiB" else -(-(seg * m + 40) // lanes) * lanes
    x_m = n + 3
    x_t = m * x_m + 7  # x offset from one tile's input to the next's
    x = np.random.default_rng(m + n).standard_normal(seg * x_t + 1).astype(dtype)
    buf = np.empty(n * lanes + m * n + lanes, dtype)
    for yo in range(lanes + 1):
        y = _line_aligned(yo + n * y_n + lanes, dtype)
        y[:] = np.nan
        expected = y.copy()
        for tt in range(seg):
            for j in range(n):
                at = yo + tt * m + j * y_n
                expected[at: at + m] = x[1 + tt * x_t + j: 1 + tt * x_t + j + m * x_m: x_m]
        for tt in range(seg):
            prev = yo + (tt - 1) * m if tt > 0 else -1
            nxt_x, nxt_y = (1 + (tt + 1) * x_t, yo + (tt + 1) * m) if tt < seg - 1 else (-1, -1)
            copy_tile(x, 1 + tt * x_t, y, yo + tt * m, m, n, x_m, 1, 1, y_n, False, True,
                       buf, prev, nxt_x, nxt_y)
        np.testing.assert_array_equal(y, expected, err_msg=f"y at {yo}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_permutation_whose_tiles_continue_rows_into_any_out_offset(dtype: type) -> None:
    """bdca->abcd (small, with the streaming threshold lowered): the Copy tiles (d along
    out's unit stride, a along the input's) have their rows continued by the next tile
    of the loop over c, so each worker's walk joins their partial lines; numpy's answer
    into an out= at every offset within a line, the bytes around it untouched."""
    import teir_plan as tp
    from teir_plan.executor import lower as lowering
    from teir_plan.tilekinds import table as K

    lanes = 64 // np.dtype(dtype).itemsize
    x = np.random.default_rng(9).standard_normal((3, 3 * lanes, 5, 2 * lanes)).astype(dtype)
    ref = np.einsum("bdca->abcd", x)
    for off in range(lanes + 1):
        raw = _line_aligned(off + x.size + 8, dtype)
        raw[:] = -7.0
        out = raw[off: off + x.size].reshape(ref.shape)
        with _every_output_streams():
            plan = tp.plan("bdca->abcd", x, out=out)
            low = lowering.lower(plan.teir)
            m = low.tile[K.T_M] if low.tile[K.T_C_M] == 1 else low.tile[K.T_N]
            assert low.tile[K.T_STREAM] == 1
            # an outer loop continues rows
            assert any(r[K.L_OUT] == m for r in low.loops[low.npar:])
            plan(x, out=out)
        np.testing.assert_array_equal(out, ref, err_msg=f"out at {off}")
        assert (raw[:off] == -7.0).all() and (raw[off + x.size:] == -7.0).all()
