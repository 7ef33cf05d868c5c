"""executor/lower.py: the tables it builds, and its agreement with the cost model on which
tile kind runs each candidate (both ask the registry, teir_plan/tilekinds)."""

from __future__ import annotations

import numpy as np
import pytest

from teir_plan.executor.lower import lower, plain_blas
from teir_plan.machine import MachineParams
from teir_plan.planner import cost
from teir_plan.planner.search import rank, variants
from teir_plan.teir.records import TEIR
from teir_plan.tilekinds import table as K
from tests.test_search import _contraction

# Contractions whose candidates cover the GEMM kinds: vector kernels along M and N,
# the transposed and packed ones, BLAS in every form, dot products and scalar tiles.
CASES = [
    ("efbad,cf->abcde", "a=72,b=24,c=24,d=72,e=24,f=24"),
    ("degc,gfab->abcdef", "a=20,b=20,c=24,d=20,e=20,f=20,g=24"),
    ("bhqd,bhkd->bhqk", "b=2,h=3,q=128,k=128,d=64"),
    ("ij,jk->ik", "i=256,j=256,k=256"),
    ("ij,kj->ik", "i=96,j=64,k=200"),
    ("ij,j->i", "i=512,j=512"),
    ("ij,ij->ij", "i=64,j=48"),
    ("bda,dc->abc", "a=96,b=64,c=24,d=64"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_lowering_runs_the_kind_the_cost_model_priced(case: tuple[str, str]) -> None:
    params = MachineParams.reference()
    c = _contraction(case[0], case[1], 1)
    seen = set()
    for threads in (1, 2):
        for v, _ in variants(c, params, threads):
            for r in rank(v, params, threads, top=8):
                ch = r.choice
                kind, _, _ = cost.tile_kind(r.contraction, ch.m, ch.n, ch.k, ch.br, ch.call)
                low = lower(r.teir)
                # A scalar tile's innermost loop folds into a row tile after lowering
                # (the cost model prices the fold in estimate).
                want = "row" if low.kind.name == "row" else kind.name
                assert low.kind.name == want, (case, r.teir)
                if low.kind.name == "row":
                    assert kind.name == "loops"
                seen.add(low.kind.name)
    assert seen


def _gemm(m: int, n: int, k: int, strides: list[list[int]], exec_types: list[str],
          dim_types: list[str] | None = None) -> TEIR:
    return TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=dim_types or ["m", "n", "k"], exec_types=exec_types,
        dim_sizes=[m, n, k], strides=strides)


def test_the_gemm_tile_fields() -> None:
    # C(64 x 48) = A(64 x 32) B(32 x 48), row-major: BLAS computes C^T = B^T A^T.
    prog = _gemm(64, 48, 32, [[32, 0, 1], [0, 1, 48], [48, 1, 0]], ["prim"] * 3)
    low = lower(prog, vector_kernel=False)
    t = low.tile
    assert low.kind.name == "blas" and low.calls_blas
    assert [K.field(t, f) for f in ("m", "n", "k", "br")] == [64, 48, 32, 1]
    assert [K.field(t, f) for f in ("a_m", "a_k", "b_k", "b_n", "c_m", "c_n")] == [
        32, 1, 48, 1, 48, 1]
    assert K.field(t, "swap") == 1 and K.field(t, "first_zero") == 1
    assert plain_blas(t, low.loops)


def test_a_scalar_program_folds_its_innermost_loop() -> None:
    # ij,ij->ij as scalar tiles: the j loop becomes a row tile of 48 elements.
    prog = TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["c", "c"], exec_types=["seq", "seq"], dim_sizes=[64, 48],
        strides=[[48, 1], [48, 1], [48, 1]])
    low = lower(prog)
    assert low.kind.name == "row" and K.field(low.tile, "m") == 48
    assert low.loops.tolist() == [[64, 48, 48, 48, 0]]
    assert not low.calls_blas


def test_a_copy_program_is_a_copy_tile() -> None:
    prog = TEIR.from_fields(
        data_type="float64", prim_first="none", prim_main="copy", prim_last="none",
        dim_types=["c", "c"], exec_types=["seq", "prim"], dim_sizes=[8, 16],
        strides=[[1, 8], [16, 1]])
    low = lower(prog)
    assert low.kind.name == "copy" and low.copy_runs is None
    assert [K.field(low.tile, f) for f in ("m", "n", "a_m", "c_m")] == [16, 1, 8, 1]
    assert K.field(low.tile, "stream") == 0  # 1 KiB: far below streaming
    np.testing.assert_array_equal(low.loops, [[8, 1, 0, 16, 0]])
