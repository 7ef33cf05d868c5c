"""The tile-kind registry (teir_plan/tilekinds): each kind's rule, its quick check, its
encoding into the tile table and back, its price; lowering and the cost model agree
because both loop over the same kinds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teir_plan.machine import MachineParams
from teir_plan.machine.tables import avx2_blas_gemm_efficiency
from teir_plan.tilekinds import BY_NAME, GEMM_KINDS, KINDS, GemmTile, choose, lowered_kind
from teir_plan.tilekinds import table as K
from teir_plan.tilekinds.blas import blas_call
from teir_plan.tilekinds.copy import COPY, RELU, unary_tile
from teir_plan.tilekinds.dot import DOT_MIN_K, dot_tile
from teir_plan.tilekinds.kind import Lowering, PriceArgs
from teir_plan.tilekinds.row import fold
from teir_plan.tilekinds.vec import vec_axis
from teir_plan.tilekinds.vec_p import packed_ld, vec_p_axis
from teir_plan.tilekinds.vec_t import vec_t_axis
from teir_plan.tiles import VEC_BYTES


class FakeEntries:
    """Entry points as numbers that name them, so a test can see which one a kind took."""

    ADDRESSES = {"vec": 101, "vec_t": 102, "vec_p": 103, "blas": 104, "copy": 105}

    def address(self, name: str) -> int:
        return self.ADDRESSES[name]

    def gemm(self, three_m: bool = False) -> tuple[int, int]:
        return 201, 8


_extent = st.sampled_from([1, 2, 3, 4, 8, 12, 16, 20, 24, 48, 64, 96, 100, 128, 256, 512, 9600])
_stride = st.sampled_from([0, 1, 2, 16, 20, 24, 64, 96, 128, 256, 4096, -1])


@st.composite
def gemm_tiles(draw: st.DrawFn) -> GemmTile:
    m, n, k = draw(_extent), draw(_extent), draw(_extent)
    br = draw(st.sampled_from([1, 1, 1, 2]))
    # Mostly the layouts real programs have (a unit stride along one axis of each tensor,
    # the other its partner's extent), sometimes anything.
    def pair(r: int, c: int) -> tuple[int, int]:
        if draw(st.booleans()):
            return draw(_stride), draw(_stride)
        return (1, r) if draw(st.booleans()) else (c, 1)
    return GemmTile(m, n, k, br, pair(m, k), pair(k, n), pair(m, n),
                    draw(st.sampled_from([4, 8])))


@settings(max_examples=400, deadline=None)
@given(gemm_tiles())
def test_each_kinds_quick_check_is_a_necessary_condition_of_its_rule(t: GemmTile) -> None:
    # The cost model skips a kind whose quick check fails: it must never skip one whose
    # rule would take the tile (else the cost model and lowering would disagree).
    for kind in GEMM_KINDS:
        if kind.takes(t):
            assert kind.may_take(t), kind.name


@settings(max_examples=300, deadline=None)
@given(gemm_tiles())
def test_a_chosen_kind_encodes_a_table_that_reads_back_as_that_kind(t: GemmTile) -> None:
    for vector_kernel in (True, False):
        kind, axis = choose(t, vector_kernel)
        assert kind.takes(t) == axis != 0
        assert vector_kernel or not kind.vector
        # The kinds before it in the registry's order all said no.
        for earlier in GEMM_KINDS[:GEMM_KINDS.index(kind)]:
            assert not earlier.takes(t) or (earlier.vector and not vector_kernel)
        table = np.zeros(K.TILE_LEN, np.int64)
        K.set_fields(table, kind=K.KIND_GEMM, m=t.m, n=t.n, k=t.k, br=t.br)
        assert kind.encode is not None
        kind.encode(table, t, axis, Lowering(np.dtype(np.float32), False, FakeEntries()))
        assert lowered_kind(table) is kind
        assert kind.describe(table, np.dtype(np.float32 if t.itemsize == 4 else np.float64))


@settings(max_examples=200, deadline=None)
@given(gemm_tiles())
def test_every_kind_that_takes_a_tile_prices_it(t: GemmTile) -> None:
    params = MachineParams.reference()
    dtype = np.dtype(np.float32 if t.itemsize == 4 else np.float64)
    flops = 2 * t.m * t.n * t.k * t.br
    for kind in GEMM_KINDS:
        axis = kind.takes(t)
        if not axis:
            continue
        assert kind.price is not None
        blas = blas_call(t.m, t.n, t.k, t.a, t.b, t.c)
        price = kind.price(t, axis, PriceArgs(params, dtype, flops, True, blas))
        assert 0 < price.seconds < float("inf")
        assert price.repack_seconds <= price.seconds and price.packed_bytes >= 0
        assert not price.streams or kind.vector
        # Its floor is at least the rate it prices the tile at (the search's bound).
        rate = kind.floor_rate(t.m, t.n, t.k, t.itemsize, params, dtype)
        if kind.name in ("vec", "dot", "blas", "loops"):
            assert flops / price.seconds <= rate * (1 + 1e-9)


def test_the_rules_on_known_tiles() -> None:
    if not VEC_BYTES:
        pytest.skip("no vector target: the vector kinds take nothing")
    # efbad,cf->abcde's blocks: along M, unit stride in A and C.
    assert vec_axis(432, 24, 36, 1, (1, 62208), (1, 36), (1, 20736), 4) == 1
    # The same along N; a BRGEMM tile never.
    assert vec_axis(24, 432, 36, 1, (36, 1), (432, 1), (432, 1), 4) == 2
    assert vec_axis(432, 24, 36, 2, (1, 62208), (1, 36), (1, 20736), 4) == 0
    # degc,gfab->abcdef into C order: out along the rows.
    assert vec_t_axis(9600, 20, 24, 1, (1, 9600), (20, 1), (20, 1), 4) == 1
    # bhqd,bhkd->bhqk: B along K, out along N.
    assert vec_p_axis(128, 128, 64, 1, (64, 1), (1, 64), (128, 1), 4) == 2
    assert packed_ld(20, 4) == 32 and packed_ld(16, 8) == 16
    t = GemmTile(432, 24, 36, 1, (1, 62208), (1, 36), (1, 20736), 4)
    assert choose(t)[0].name == "vec" and choose(t, vector_kernel=False)[0].name == "blas"


def test_dot_blas_and_loops_rules() -> None:
    assert dot_tile(4096, 1, DOT_MIN_K, 1, (4096, 1), (1, 0))
    assert not dot_tile(4096, 1, DOT_MIN_K - 1, 1, (4096, 1), (1, 0))
    assert not dot_tile(4096, 1, 64, 1, (1, 4096), (1, 0))  # K not unit stride in A
    small = GemmTile(4, 4, 4, 1, (4, 1), (4, 1), (4, 1), 4)  # 64 multiply-adds
    assert choose(small, vector_kernel=False)[0].name == "loops"
    huge = GemmTile(2**31, 2, 2, 1, (1, 2**31), (2, 1), (1, 2**31), 4)
    assert blas_call(*huge[:3], huge.a, huge.b, huge.c) is None
    assert choose(huge, vector_kernel=False)[0].name == "loops"
    table = np.zeros(K.TILE_LEN, np.int64)
    K.set_fields(table, kind=K.KIND_GEMM, m=huge.m, n=2, k=2, a_m=1, a_k=2**31, b_k=2, b_n=1,
                 c_m=1, c_n=2**31)
    assert "32-bit" in BY_NAME["loops"].describe(table, np.dtype(np.float32))


def test_blas_encodes_its_call() -> None:
    t = GemmTile(64, 48, 32, 1, (32, 1), (48, 1), (48, 1), 8)  # row-major: out along N
    kind, axis = choose(t, vector_kernel=False)
    table = np.zeros(K.TILE_LEN, np.int64)
    kind.encode(table, t, axis, Lowering(np.dtype(np.float64), False, FakeEntries()))  # type: ignore[misc]
    assert kind.name == "blas" and K.field(table, "swap") == 1
    assert (K.field(table, "gemm_fn"), K.field(table, "blas_int")) == (201, 8)
    assert K.field(table, "tile_fn") == FakeEntries.ADDRESSES["blas"]
    assert K.field(table, "scratch") == 0  # every operand addressable in place
    K.set_fields(table, kind=K.KIND_GEMM, m=64, n=48, k=32, a_m=32, a_k=1, b_k=48, b_n=1,
                 c_m=48, c_n=1)
    assert "dgemm(transA=" in kind.describe(table, np.dtype(np.float64))


def test_copy_and_relu_kinds() -> None:
    t = unary_tile(64, 32, (1, 64), (32, 1), 4)
    for kind, streamed in ((COPY, True), (RELU, True), (COPY, False)):
        table = np.zeros(K.TILE_LEN, np.int64)
        assert kind.encode is not None
        kind.encode(table, t, 1, Lowering(np.dtype(np.float32), streamed, FakeEntries()))
        assert lowered_kind(table) is kind
        # ReLU programs never stream (their loop has no line stores); a streamed copy
        # tile this small gets a buffer of its elements and a line.
        assert K.field(table, "stream") == int(kind is COPY and streamed)
        assert K.field(table, "scratch") == (64 * 32 + 16 if kind is COPY and streamed else 0)


def test_row_fold() -> None:
    table = np.zeros(K.TILE_LEN, np.int64)
    K.set_fields(table, kind=K.KIND_GEMM, m=1, n=1, k=1, br=1)
    loops = np.array([[8, 0, 0, 0, 0], [100, 3, 5, 7, 0]])  # parallel, then sequential
    folded = fold(loops, 1, table)
    assert folded.tolist() == [[8, 0, 0, 0, 0]]
    assert lowered_kind(table).name == "row"
    assert [K.field(table, f) for f in ("m", "a_m", "b_n", "c_m")] == [100, 3, 5, 7]
    # A K loop summed into one element folds too; one that writes out (stride != 0) as
    # a K loop does not.
    table[:] = 0
    K.set_fields(table, kind=K.KIND_GEMM, m=1, n=1, k=1, br=1)
    assert fold(np.array([[100, 1, 1, 5, 1]]), 0, table).shape == (1, 5)
    assert lowered_kind(table).name == "loops"


def test_the_table_schema() -> None:
    assert len(set(K.FIELDS)) == len(K.FIELDS) == K.TILE_LEN
    assert sorted(K.SLOT.values()) == list(range(K.TILE_LEN))
    with pytest.raises(KeyError):
        K.set_fields(np.zeros(K.TILE_LEN, np.int64), no_such_field=1)
    # Every kind is registered once, by a unique name, and GEMM kinds have unique modes
    # except the three vector kernels, told apart by their fields.
    assert len(BY_NAME) == len(KINDS)
    modes = [k.mode for k in GEMM_KINDS if not k.vector]
    assert len(set(modes)) == len(modes)


def test_a_blas_tile_whose_c_columns_are_shorter_than_a_line_pays_a_line_each() -> None:
    """hfgm,mf->hgm's tiles (hg 64 x f 8, one column): into a C of stride 1000 each of
    BLAS' 64 columns of one element is a line of its own, read for ownership and
    written back; into a contiguous C the 64 elements are 4 lines.  (With the efficiency
    table of 32-byte BLAS kernels, which rates 1 x 64 x 8 and 64 x 1 x 8 alike.)"""
    params = dataclasses.replace(MachineParams.reference(),
                                 gemm_efficiency=avx2_blas_gemm_efficiency())
    dtype = np.dtype(np.float32)
    blas_kind = BY_NAME["blas"]
    assert blas_kind.price is not None

    def seconds(c: tuple[int, int]) -> float:
        t = GemmTile(64, 1, 8, 1, (1, 64), (1, 0), c, 4)
        blas = blas_call(t.m, t.n, t.k, t.a, t.b, t.c)
        assert blas is not None
        return blas_kind.price(t, 1, PriceArgs(params, dtype, 2 * 64 * 8, True, blas)).seconds

    lines = 2 * (64 - 4) * 64 / params.llc_bytes_per_second
    assert seconds((1000, 0)) - seconds((1, 0)) >= 0.99 * lines
