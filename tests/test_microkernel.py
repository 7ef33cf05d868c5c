"""The vector GEMM kernel (executor/microkernel.py) and the tiles that run on it.

The kernel is checked on its own against float64 products computed by numpy, for every
micro-tile shape it has (8, 4 and 1 rows; 3, 2 and 1 lines, the last one partial;
6, 4, 2 and 1 rows of 4 lines),
accumulating or not, streaming (non-temporal stores) or not, with the ReLU or not,
prefetching a next tile or not, with nothing written outside its tile; and through TEIR
programs whose tiles the executor gives it (along M and along N, K split over a loop so
that later visits accumulate, an output accumulated into, ReLU, reversed rows, threads,
an output streamed to memory), against numpy.einsum in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan import tiles
from teir_plan.executor.lower import lower
from teir_plan.executor.microkernel import LINES, QUAD_LINES, VECTOR_BYTES, gemm_vec
from teir_plan.tilekinds import table as K
from teir_plan.tilekinds.vec import aliased_k_rows, vec_axis
from teir_plan.tiles import streams_out
from tests.gemm_programs import assert_program_matches, gemm_program, kernel_cases, line_aligned
from tests.strategies import counted, fuzz_settings


@fuzz_settings(default=120, fuzz=20_000)
@given(data=st.data())
@counted
def test_the_kernel_computes_its_tile_and_nothing_else(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    mv = data.draw(st.integers(1, 150), label="vector length")
    n = data.draw(st.integers(1, 21), label="rows")
    k = data.draw(st.integers(0, 40), label="K")
    vpad = data.draw(st.integers(0, 5), label="V row padding")
    s_rows_inner = data.draw(st.booleans(), label="S rows unit stride")
    first = data.draw(st.booleans(), label="first")
    # Streaming: non-temporal stores of whole lines where they are aligned, the first
    # partial line and any unaligned rows with ordinary ones.
    stream = data.draw(st.booleans(), label="stream")
    relu = data.draw(st.booleans(), label="relu")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    lanes = VECTOR_BYTES // np.dtype(dtype).itemsize
    vo, so = (data.draw(st.integers(0, 7), label=f"{t} offset") for t in "VS")
    co = data.draw(st.integers(0, 2 * lanes), label="C offset")
    vk = mv + vpad
    # The next tile's lines, prefetched while this one computes: a second tile after
    # this one in V and in S (prefetches read nothing into the results; the tile stays
    # exact).  S's are prefetched where its rows have unit stride.
    nxt = data.draw(st.sampled_from([0, max(k, 1) * vk]), label="next tile offset")
    V = rng.standard_normal(vo + 2 * max(k, 1) * vk + 3).astype(dtype)
    if s_rows_inner:
        sk, sn = n + 1, 1
    else:
        sk, sn = 1, k + 2
    nxs = data.draw(st.sampled_from([0, max(k, 1) * sk]), label="next tile offset in S")
    S = rng.standard_normal(so + 2 * max(k, 1) * sk + n * sn + 3).astype(dtype)
    cn = mv + data.draw(st.integers(0, 4), label="C row padding")
    if data.draw(st.booleans(), label="C rows whole lines"):
        cn = -(-cn // lanes) * lanes
    C = line_aligned(co + n * cn + 5, dtype)
    C[:] = rng.standard_normal(C.size)
    before = C.copy()
    gemm_vec(V, vo, vk, S, so, sk, sn, C, co, cn, mv, n, k, first, stream, relu, nxt, nxs)

    expected = before.astype(np.float64)
    for r in range(n):
        for v in range(mv):
            acc = sum(float(V[vo + p * vk + v]) * float(S[so + p * sk + r * sn])
                      for p in range(k))
            e = acc if first else expected[co + r * cn + v] + acc
            expected[co + r * cn + v] = max(e, 0.0) if relu else e
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(C, expected, rtol=tol, atol=tol * max(1, k))
    # Outside the tile (row padding, before and after): exactly as before.
    inside = np.zeros(C.size, bool)
    for r in range(n):
        inside[co + r * cn: co + r * cn + mv] = True
    np.testing.assert_array_equal(C[~inside], before[~inside])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lines", [QUAD_LINES, 7, 8, 16])
def test_four_line_axes_and_four_line_remainders(dtype: type, lines: int) -> None:
    # 4 lines along the vector axis run in one 4-line strip of 6 rows, with 4-, 2- and
    # 1-row micro-tiles for the rows left over; the last line may be partial, the
    # output streamed (its first partial line then runs first, leaving 4 lines or
    # not), the next tile prefetched.  Other lengths run in 3-line strips, the last 4
    # lines as 2 + 2 (7 and 16 lines; 5, 8, 9 and 17 do not end so).  Each call against
    # numpy in float64, and nothing outside the tile written.
    rng = np.random.default_rng(lines)
    lanes = VECTOR_BYTES // np.dtype(dtype).itemsize
    calls = 0
    for mv in (lines * lanes, lines * lanes - 3, lines * lanes + 1):
        for n in (6, 7, 9, 10, 11, 12, 13, 20):
            for first, stream, relu, co in ((True, False, False, 0), (False, False, True, 3),
                                            (True, True, False, 0), (True, True, True, 5)):
                k = 1 + (n * mv) % 13
                vo, so = 1, 2
                vk = mv + 2
                nxt = k * vk if n % 2 else 0
                V = rng.standard_normal(vo + 2 * k * vk + 3).astype(dtype)
                sk, sn = 1, k + 1
                S = rng.standard_normal(so + k * sk + n * sn + 3).astype(dtype)
                cn = -(-(mv + 1) // lanes) * lanes
                C = line_aligned(co + n * cn + 5, dtype)
                C[:] = rng.standard_normal(C.size)
                before = C.copy()
                gemm_vec(V, vo, vk, S, so, sk, sn, C, co, cn, mv, n, k, first, stream, relu,
                         nxt, 0)
                calls += 1
                v = V[vo: vo + k * vk].reshape(k, vk)[:, :mv].astype(np.float64)
                s_ = S[so: so + n * sn].reshape(n, sn)[:, :k].astype(np.float64)
                expected = before.astype(np.float64)
                tile = expected[co: co + n * cn].reshape(n, cn)
                prod = s_ @ v + (0 if first else tile[:, :mv])
                tile[:, :mv] = np.maximum(prod, 0) if relu else prod
                tol = 1e-4 if dtype == np.float32 else 1e-12
                np.testing.assert_allclose(C, expected, rtol=tol, atol=tol * k)
                inside = np.zeros(C.size, bool)
                inside[co: co + n * cn].reshape(n, cn)[:, :mv] = True
                np.testing.assert_array_equal(C[~inside], before[~inside])
    assert calls == 3 * 8 * 4


def _program(dtype: str, m: int, n: int, k: int, ksplit: int, along: str,
             first: str = "zero", last: str = "none", parallel: bool = False
             ) -> tuple[tp.TEIR, list[np.ndarray], str]:
    """out = in0 . in1 as a TEIR program whose GEMM tile runs on the vector kernel:
    ``along`` "m" (in0 and out unit-stride along m) or "n" (in1 and out along n); K
    split into an outer loop of ``ksplit`` and a tile; with ``parallel`` the rows split
    into a parallel loop of 2."""
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((k, m) if along == "m" else (m, k)).astype(dtype)   # in0
    b = rng.standard_normal((n, k) if along == "m" else (k, n)).astype(dtype)   # in1
    if along == "m":  # in0[k, m], in1[n, k], out[n, m]
        strides, expr = ((1, m), (1, k), (1, m)), "km,nk->nm"
    else:  # in0[m, k], in1[k, n], out[m, n]
        strides, expr = ((k, 1), (n, 1), (n, 1)), "mk,kn->mn"
    # The rows (the axis across the vector) split in two halves run in parallel.
    row_dim = 2 if along == "m" else 1
    teir = gemm_program(dtype, m, n, k, ksplit, *strides, first, last,
                        row_dim if parallel else None)
    return teir, [a, b], expr


def test_vector_kernel_programs_match_numpy() -> None:
    for dtype, along, ksplit, first, last, parallel in kernel_cases():
        m, n, k = (100, 12, 36) if along == "m" else (20, 200, 24)
        teir, (a, b), expr = _program(dtype, m, n, k, ksplit, along, first, last,
                                      parallel)
        teir.validate()
        low = lower(teir)
        assert low.kind.name == "vec"
        assert low.tile[K.T_SWAP] == int(along == "n")
        assert_program_matches(teir, a, b, expr, first, last,
                               f"{dtype} {along} {ksplit} {first}")


def test_the_planner_uses_the_kernel_and_its_alternatives_are_right() -> None:
    """A block of efbad,cf->abcde's shape (432 x 24 x 36): the plan's tiles run on the
    vector kernel, and every alternative (on the kernel or not) gives numpy's answer."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((36, 432)).astype(np.float32)
    b = rng.standard_normal((24, 36)).astype(np.float32)
    plan = tp.plan("km,nk->nm", a, b)
    assert "vector kernel" in str(plan.explain())
    ref = np.einsum("km,nk->nm", a.astype(np.float64), b.astype(np.float64))
    for alt in plan.alternatives:
        np.testing.assert_allclose(alt(a, b), ref, rtol=1e-4, atol=1e-4)


def test_the_rule() -> None:
    # A long, thin tile along a shared unit stride: the kernel, along M or N.
    assert vec_axis(432, 24, 36, 1, (1, 62208), (1, 36), (1, 20736), 4) == 1
    assert vec_axis(24, 432, 36, 1, (36, 1), (432, 1), (432, 1), 4) == 2
    # One micro-tile long is enough when the tile's K rows follow one another, and two
    # vectors where a micro-tile is longer.
    assert vec_axis(48, 24, 48, 1, (1, 48), (1, 24), (1, 2985984), 4) == 1
    assert vec_axis(24, 48, 48, 1, (48, 1), (48, 1), (2985984, 1), 4) == 2
    two = 2 * VECTOR_BYTES // 4
    assert vec_axis(32, 32, 250, 1, (32, 1), (32, 1), (32, 1), 4) == (2 if two <= 32 else 0)
    assert vec_axis(two, 24, 48, 1, (1, two), (1, 24), (1, 9999), 4) == 1
    # Too few rows, too many rows x K, too short, BRGEMM, out not unit-stride: BLAS.
    assert vec_axis(432, 2, 36, 1, (1, 432), (1, 36), (1, 432), 4) == 0
    assert vec_axis(432, 128, 96, 1, (1, 432), (1, 96), (1, 432), 4) == 0
    micro = LINES * VECTOR_BYTES // 4  # one micro-tile along the vector axis
    assert vec_axis(2 * micro - 4, 24, 36, 1, (1, 6400), (1, 36), (1, 64), 4) == 0
    shortest = min(micro, two)
    assert vec_axis(shortest - 4, 24, 36, 1, (1, shortest - 4), (1, 36), (1, 99), 4) == 0
    assert vec_axis(432, 24, 36, 4, (1, 432), (1, 36), (1, 432), 4) == 0
    assert vec_axis(432, 24, 36, 1, (1, 432), (1, 36), (24, 1), 4) == 0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("first,last", [("zero", "none"), ("none", "relu")])
def test_two_vectors_over_k_rows_in_one_run(dtype, first, last) -> None:
    """A Gram matrix's tiles two vectors wide (shorter than a micro-tile where it has
    three vectors): K rows in one run go to the kernel, on every K block, and agree with
    numpy."""
    width = 2 * VECTOR_BYTES // np.dtype(dtype).itemsize
    rng = np.random.default_rng(7)
    k, m = 960, 24
    a = rng.standard_normal((k, m)).astype(dtype)  # ki
    b = rng.standard_normal((k, width)).astype(dtype)  # kj
    prog = gemm_program(dtype, m, width, k, 4, (1, m), (width, 1), (width, 1), first, last,
                        None)
    assert lower(prog).kind.name == "vec"
    assert_program_matches(prog, a, b, "ki,kj->ij", first, last, f"{dtype} {width}")


def test_the_kernel_can_be_turned_off_for_blas_calibration() -> None:
    """Calibration times BLAS on tiles the kernel would take: lowering them with the
    kernel off gives BLAS tiles that compute the same result."""
    teir, (a, b), expr = _program("float32", 100, 12, 36, 1, "m")
    teir.validate()
    assert lower(teir).kind.name == "vec"
    low = lower(teir, vector_kernel=False)
    assert low.kind.name == "blas"
    from teir_plan.executor.execute import run_lowered

    out = np.zeros((12, 100), np.float32)
    run_lowered(low, [a, b, out])
    ref = np.einsum(expr, a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_a_streamed_output_is_written_with_non_temporal_stores() -> None:
    """ea,ebcd->abcd's shape with an output of 48 MiB (written once, too large for the
    cache to keep): the tiles run on the kernel with non-temporal stores, into the
    plan's own result, into an out= that starts 16 bytes into a line (its first partial
    line with ordinary stores), and with the ReLU applied as the kernel stores.  (K rows
    not a whole number of pages apart: see test_k_rows_a_whole_number_of_pages_apart.)"""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((48, 64)).astype(np.float32)
    b = rng.standard_normal((48, 3, 255, 256)).astype(np.float32)
    expr = "ea,ebcd->abcd"
    ref = np.einsum(expr, a.astype(np.float64), b.astype(np.float64), optimize=True)
    plan = tp.plan(expr, a, b)
    low = lower(plan.teir)
    assert low.kind.name == "vec" and low.tile[K.T_STREAM] == 1
    assert "non-temporal" in str(plan.explain())
    np.testing.assert_allclose(plan(a, b), ref, rtol=1e-4, atol=1e-4)
    raw = line_aligned(ref.size + 4, np.float32)
    out = raw[4:].reshape(ref.shape)  # 16 bytes past a line boundary
    raw[:4] = 7.0
    np.testing.assert_allclose(tp.einsum(expr, a, b, out=out), ref, rtol=1e-4, atol=1e-4)
    assert (raw[:4] == 7.0).all()
    relu = tp.einsum(expr, a, b, epilogue="relu")
    np.testing.assert_allclose(relu, np.maximum(ref, 0), rtol=1e-4, atol=1e-4)


def test_the_rows_times_k_and_span_rules() -> None:
    # Rows x K up to 9216 (96 x 96, 24 x 384) takes the kernel, beyond it BLAS.
    assert vec_axis(432, 96, 96, 1, (1, 432), (1, 96), (1, 432), 4) == 1
    assert vec_axis(432, 24, 384, 1, (1, 432), (1, 384), (1, 432), 4) == 1
    assert vec_axis(432, 192, 96, 1, (1, 432), (1, 96), (1, 432), 4) == 0
    # The broadcast operand's block spread over far-apart rows: BLAS.
    assert vec_axis(24, 8000, 24, 1, (1, 24), (8000, 1), (8000, 1), 4) == 2
    assert vec_axis(240, 8000, 24, 1, (576, 24), (8000, 1), (192000, 1), 4) == 0
    assert streams_out(32 * 2**20, False, True)
    assert not streams_out(32 * 2**20 - 4, False, True)
    assert not streams_out(2**30, True, True)  # a K loop: tiles are visited again
    assert not streams_out(2**30, False, False)  # accumulated into out


def test_k_rows_a_whole_number_of_pages_apart() -> None:
    """ai,abc->ibc with a = b = c = 96 and i = 32: the vector operand's K rows are 36 KiB
    apart.  With 32-byte vectors they alias in L1 and the vector kernel leaves the tile
    to another kind; rows padded off the page, or other widths, keep it.  The result
    matches numpy either way."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((96, 32)).astype(np.float32)
    for pad in (96, 100):
        c = rng.standard_normal((96, 96, pad)).astype(np.float32)[:, :, :96]
        plan = tp.plan("ai,abc->ibc", a, c)
        aliased = pad == 96 and tiles.VEC_BYTES == 32
        assert aliased_k_rows(96, 32, c.strides[0] // 4, 4) == aliased
        assert (lower(plan.teir).kind.name == "vec") == (not aliased)
        want = np.einsum("ai,abc->ibc", a.astype(np.float64), c.astype(np.float64))
        np.testing.assert_allclose(plan(a, c), want, rtol=1e-4, atol=1e-4)
    assert vec_axis(4608, 32, 96, 1, (1, 9216), (1, 96), (1, 9216), 4) == (
        0 if tiles.VEC_BYTES == 32 else 1)
    assert vec_axis(4608, 32, 96, 1, (1, 9600), (1, 96), (1, 9216), 4) == 1


def test_a_long_k_is_read_in_blocks_accumulated_in_cache() -> None:
    """dca,bd->abc-shaped, K = 256: a tile over all of K would read 256 far-apart rows
    at once (lower.VEC_STREAM_K), so the plan splits K into a sequential loop around
    vector-kernel tiles that accumulate; the vector axis is split into cache-sized
    tiles.  The plan and every alternative give numpy's answer.  (Planned as if the
    operands streamed from memory, as a larger problem's do: when all of it fits in the
    last-level cache, cost.fits_llc, both schedules run alike and either may win.  The K
    rows are 48 x 56 elements apart, not a whole number of pages: 32 of them a page
    multiple apart leave 32-byte vector tiles, vec.aliased_k_rows.)"""
    from dataclasses import replace

    from teir_plan.machine import set_machine_params

    rng = np.random.default_rng(7)
    a = rng.standard_normal((256, 48, 56)).astype(np.float32)  # d, c, a
    b = rng.standard_normal((24, 256)).astype(np.float32)  # b, d
    out = np.empty((24, 48, 56), np.float32).transpose(2, 0, 1)  # abc over a bca buffer
    set_machine_params(replace(tp.machine_params(), llc_bytes=1 << 20))
    try:
        plan = tp.plan("dca,bd->abc", a, b, out=out)
    finally:
        set_machine_params(None)
    t = plan.teir
    sched = t.schedule
    k_axes = [i for i, d in enumerate(sched.dim_types) if d is tp.DimType.K]
    assert any(sched.exec_types[i] is tp.ExecType.SEQ for i in k_axes)
    assert all(sched.dim_sizes[i] < 256 for i in k_axes)
    assert "vector kernel" in str(plan.explain())
    ref = np.einsum("dca,bd->abc", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(plan(a, b, out=out), ref, rtol=1e-4, atol=1e-3)
    for alt in plan.alternatives:
        np.testing.assert_allclose(alt(a, b), ref, rtol=1e-4, atol=1e-3)


def _at_page_offset(size: int, dtype: type, offset_bytes: int) -> np.ndarray:
    """A zeroed array of ``size`` elements starting ``offset_bytes`` into a 4 KiB page."""
    isz = np.dtype(dtype).itemsize
    raw = np.zeros(size + 8192 // isz, dtype)
    start = ((offset_bytes - raw.ctypes.data) % 4096) // isz
    out = raw[start:start + size]
    assert out.ctypes.data % 4096 == offset_bytes
    return out


@fuzz_settings(default=40, fuzz=2_000)
@given(data=st.data())
@counted
def test_rows_at_the_same_page_offsets_take_two_strips_at_a_time_exactly(
        data: st.DataObject) -> None:
    # V's K rows and C's rows all start at one offset within a page (rows a multiple of
    # 4 KiB apart): the kernel alternates two strips (see _rows_alias); the tile must be
    # the same products, and nothing outside it written.
    from teir_plan.executor.microkernel import _rows_alias

    dtype = data.draw(st.sampled_from([np.float32, np.float64]), label="dtype")
    isz = np.dtype(dtype).itemsize
    lanes = VECTOR_BYTES // isz
    w = LINES * lanes
    mv = data.draw(st.integers(4 * w, 6 * w + 2 * lanes + 3), label="vector length")
    n = data.draw(st.integers(16, 40), label="rows")
    k = data.draw(st.integers(1, 24), label="K")
    first, stream, relu = (data.draw(st.booleans(), label=x) for x in ("first", "stream",
                                                                         "relu"))
    page = data.draw(st.sampled_from([0, 16, 64, 1040]), label="page offset")
    stride = -(-(mv + 1) * isz // 4096) * 4096 // isz  # rows 4 KiB-multiples apart
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    V = _at_page_offset(k * stride, dtype, page)
    V[:] = rng.standard_normal(V.size)
    C = _at_page_offset(n * stride, dtype, page)
    C[:] = rng.standard_normal(C.size)
    S = rng.standard_normal(k * n).astype(dtype)
    assert _rows_alias(V, 0, stride, k, C, 0, stride, n)
    before = C.copy()
    gemm_vec(V, 0, stride, S, 0, n, 1, C, 0, stride, mv, n, k, first, stream, relu, 0, 0)
    Vm = V.reshape(k, stride)[:, :mv].astype(np.float64)
    Sm = S.reshape(k, n).astype(np.float64)
    expected = before.astype(np.float64).reshape(n, stride)
    acc = Sm.T @ Vm
    expected[:, :mv] = acc if first else expected[:, :mv] + acc
    if relu:
        expected[:, :mv] = np.maximum(expected[:, :mv], 0)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(C.reshape(n, stride), expected, rtol=tol, atol=tol * k)
    np.testing.assert_array_equal(C.reshape(n, stride)[:, mv:], before.reshape(n, stride)[:, mv:])


def test_rows_at_other_page_offsets_do_not_alias() -> None:
    from teir_plan.executor.microkernel import _rows_alias

    V = _at_page_offset(4 * 1024, np.float32, 16)
    C = _at_page_offset(4 * 1024, np.float32, 64)
    assert not _rows_alias(V, 0, 1024, 4, C, 0, 1024, 4)  # 48 bytes apart in a page
    C2 = _at_page_offset(4 * 1024, np.float32, 16)
    assert _rows_alias(V, 0, 1024, 4, C2, 0, 1024, 4)
