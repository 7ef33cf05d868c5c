"""A TEIR program as spec-style pseudocode (teir_plan/render/pseudocode.py).  The printed
text is run here as the spec defines its statements (teir-notes.md, 'Primitive shapes':
column-major tiles with leading dimensions, ``C += A * B``, BRGEMM's batch strides, Copy's
``in`` unit stride along m and ``out`` along n, Zero and ReLU on the call's C tile), on
arrays laid out as the program's strides say, and must compute what numpy.einsum computes
in float64: every loop, condition, tile reference and argument it prints is then right.

(tests/test_explain.py compares the spec examples' text with the spec's; here the text is
executed, and the cases the spec's examples do not show are read: two K loops outside the
primitive, accumulation without Zero, a parallel loop listed after a sequential one, a
primitive that consumes fewer axes than its full shape, tiles not in the spec's form.)"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.render.pseudocode import prim_arguments, pseudocode, tensor_dims, tile_ref
from tests import spec_examples as ex

RNG = np.random.default_rng(7)


def _call(code: str) -> dict[str, int]:
    """The integer arguments of the (first) GEMM/BRGEMM call in ``code``."""
    found = re.search(r"\b(?:BR)?GEMM\((.*?)\)", code, re.S)
    assert found is not None
    body = re.sub(r"#[^\n]*", "", found[1])
    return {k: int(v) for k, v in re.findall(r"(\w+) = (-?\d+)\b", body)}


def run_pseudocode(code: str, arrays: dict[str, np.ndarray]) -> None:
    """Execute ``code`` on C-contiguous float64 ``arrays`` (in0, in1, out) whose dimensions
    are each tensor's own, outermost first: a scalar statement indexes them as numpy does,
    a tile reference ``in0[t][r]`` is the flat offset of that element (dimensions left out
    at 0), and each primitive reads and writes the flat memory as the spec's BLAS-style
    call does."""
    flat = {name: a.reshape(-1) for name, a in arrays.items()}
    tile = _call(code) if "GEMM(" in code else {}

    def at(name: str, idx: list[int]) -> tuple[str, int]:
        a = arrays[name]
        return name, sum(i * s // a.itemsize for i, s in zip(idx, a.strides))

    def gemm(A_, B_, C_, m_, n_, k_, ldA_, ldB_, ldC_,  # type: ignore[no-untyped-def]
             brSize_=1, brStrA_=0, brStrB_=0):
        a, b, c = flat[A_[0]], flat[B_[0]], flat[C_[0]]
        for br in range(brSize_):
            for i in range(m_):
                for j in range(n_):
                    c[C_[1] + i + j * ldC_] += sum(
                        a[A_[1] + br * brStrA_ + i + kk * ldA_]
                        * b[B_[1] + br * brStrB_ + kk + j * ldB_] for kk in range(k_))

    def on_c(C_, f):  # type: ignore[no-untyped-def]
        c = flat[C_[0]]
        for i in range(tile["m"]):
            for j in range(tile["n"]):
                c[C_[1] + i + j * tile["ldC"]] = f(c[C_[1] + i + j * tile["ldC"]])

    def copy(in_, out_, m_, n_, ldI_, ldO_, f=lambda v: v):  # type: ignore[no-untyped-def]
        x, y = flat[in_[0]], flat[out_[0]]
        for i in range(m_):
            for j in range(n_):
                y[out_[1] + j + i * ldO_] = f(x[in_[1] + i + j * ldI_])

    def relu(**kw):  # type: ignore[no-untyped-def]
        if "C_" in kw:
            on_c(kw["C_"], lambda v: max(v, 0.0))
        else:
            copy(**kw, f=lambda v: max(v, 0.0))

    lines = []
    for line in code.splitlines():
        if line.lstrip().startswith(("#pragma", "//")):
            continue
        body, _, comment = line.partition("#")
        loop = re.fullmatch(r"(\s*)for (\w+) in \|\w+\|\s*", body)
        if loop:
            size = re.search(r"= (\d+)", comment)
            assert size is not None, line
            body = f"{loop[1]}for {loop[2]} in range({size[1]}):"
        lines.append(body.rstrip())
    src = "\n".join(lines)
    # Inside a call: ``key = value`` -> ``key_=value`` (``in`` is Python's), and a tile
    # reference -> at(tensor, [indices]).
    src = re.sub(r"\b(\w+) = (?!=)", r"\1_=", src)

    def offset(m: re.Match[str]) -> str:
        indices = ", ".join(re.findall(r"\[(\w+)\]", m[2]))
        return f"_=at('{m[1]}', [{indices}])"

    src = re.sub(r"_=(in0|in1|out)((?:\[\w+\])+)", offset, src)
    exec(src, {"at": at, "GEMM": gemm, "BRGEMM": gemm, "Copy": copy, "ReLU": relu,
               "Zero": lambda C_: on_c(C_, lambda v: 0.0), **arrays})


def _check(prog: tp.TEIR, expr: str, names: str | None, shapes: Sequence[tuple[int, ...]],
           out_shape: tuple[int, ...]) -> str:
    """Run ``prog``'s pseudocode on row-major operands of ``expr`` (their dimensions in
    the order the program's strides give) and compare with numpy.einsum."""
    code = pseudocode(prog, list(names) if names is not None else None)
    ins = [RNG.standard_normal(s) for s in shapes]
    out0 = RNG.standard_normal(out_shape)
    arrays = dict(zip(("in0", "in1"), ins), out=out0.copy())
    run_pseudocode(code, arrays)
    p = prog.primitives
    want = np.einsum(expr, *ins)
    if prog.is_unary:  # Copy, or ReLU as the main primitive: out is written
        want = np.maximum(want, 0) if p.prim_main is tp.Prim.RELU else want
    else:  # Zero first, or the calls add into out; then ReLU last
        want = want if p.prim_first is tp.Prim.ZERO else out0 + want
        want = np.maximum(want, 0) if p.prim_last is tp.Prim.RELU else want
    np.testing.assert_allclose(arrays["out"], want, rtol=1e-12, atol=1e-12)
    return code


SPEC_NAMES = {ex.scalar_permutation: "abcd", ex.tiled_permutation: "acdb",
              ex.scalar_batched_gemm: "abcd", ex.scalar_batched_gemm_reordered: "bcda",
              ex.scalar_contraction: "pqrstu", ex.gemm_contraction: "prtsqu",
              ex.brgemm_contraction: "prtsqu"}


@pytest.mark.parametrize("build", ex.ALL, ids=lambda f: f.__name__)
def test_the_spec_examples_pseudocode_computes_their_einsum(build) -> None:  # type: ignore[no-untyped-def]
    prog, expr, shapes, out_shape = build("float64")
    _check(prog, expr, SPEC_NAMES[build], shapes, out_shape)


def _gemm_variant(exec_types: list[str], first: str = "zero", last: str = "none") -> tp.TEIR:
    """Spec example 10.3.6 (axes p r t s q u) with other exec types and primitives."""
    s = ex.gemm_contraction()[0].schedule
    return tp.TEIR.from_fields(
        data_type="float64", prim_first=first, prim_main="gemm", prim_last=last,
        dim_types=[str(t) for t in s.dim_types], exec_types=exec_types,
        dim_sizes=list(s.dim_sizes), strides=[list(r) for r in s.strides])


SHAPES = [(ex.T, ex.R, ex.U, ex.S), (ex.P, ex.Q, ex.T, ex.U)]
OUT = (ex.P, ex.Q, ex.R, ex.S)


def test_two_k_loops_outside_zero_first_and_relu_last() -> None:
    # u leaves the GEMM (which then has no K axis: k = 1) for a loop inside t: the output
    # tile's first access is t == 0 and u == 0, its last t == |t| - 1 and u == |u| - 1.
    prog = _gemm_variant(["seq", "seq", "seq", "prim", "prim", "seq"], last="relu")
    code = _check(prog, "trus,pqtu->pqrs", "prtsqu", SHAPES, OUT)
    assert "if t == 0 and u == 0:" in code
    assert f"if t == {ex.T - 1} and u == {ex.U - 1}:" in code
    assert _call(code)["k"] == 1


def test_without_zero_the_calls_add_into_out() -> None:
    prog = _gemm_variant(["seq", "seq", "seq", "prim", "prim", "prim"], first="none")
    code = _check(prog, "trus,pqtu->pqrs", "prtsqu", SHAPES, OUT)
    assert "Zero" not in code and "if " not in code


def test_a_parallel_loop_listed_after_a_sequential_one_runs_outermost() -> None:
    prog = _gemm_variant(["seq", "parallel", "seq", "prim", "prim", "prim"])
    code = _check(prog, "trus,pqtu->pqrs", "prtsqu", SHAPES, OUT)
    lines = code.splitlines()
    assert lines[:2] == ["// the schedule lists the loops p r t; parallel loops run outermost",
                         "#pragma omp parallel for collapse(1)"]
    assert lines[2].startswith("for r in |r| ") and lines[2].endswith(f"# |r| = {ex.R}")
    assert lines[3].startswith("  for p in |p|") and lines[4].startswith("    for t in |t|")


def test_a_tile_of_a_relu_copy() -> None:
    # 10.3.2's tiled permutation with ReLU as the main primitive.
    prog, expr, shapes, out_shape = ex.tiled_permutation("float64")
    relu = tp.TEIR(tp.Primitives("float64", "none", "relu", "none"), prog.schedule)
    code = _check(relu, expr, "acdb", shapes, out_shape)
    assert "ReLU( in = in0[a][0][c]," in code


# ---- the pieces, by hand -------------------------------------------------------------

def test_tensor_dims_are_largest_stride_first_then_larger_extent_then_axis() -> None:
    prog = tp.TEIR.from_fields(
        data_type="float32", prim_first="none", prim_main="copy", prim_last="none",
        dim_types=["c"] * 4, exec_types=["seq"] * 4, dim_sizes=[2, 3, 2, 5],
        strides=[[1, -1, 4, 0], [15, 5, 30, 1]])
    # in0: |4| first; then |1| twice: axis 1 (extent 3) before axis 0 (extent 2); axis 3
    # has stride 0 and is no dimension of in0.
    assert tensor_dims(prog, 0) == [2, 1, 0]
    assert tensor_dims(prog, 1) == [2, 0, 1, 3]
    # Loops by name, prim axes as 0, trailing zeros dropped, [0] when nothing is left.
    assert tile_ref(prog, 1, list("abcd"), loops=[0, 2]) == "out[c][a]"
    assert tile_ref(prog, 1, list("abcd"), loops=[1]) == "out[0][0][b]"
    assert tile_ref(prog, 1, list("abcd"), loops=[]) == "out[0]"


def test_a_missing_prim_axis_is_extent_1_with_the_smallest_legal_ld() -> None:
    # GEMM over an M axis of 4 only (in0 stride 1, out stride 1): n = k = 1; ldA is the
    # smallest legal for a 4 x 1 A (m = 4), ldB for a 1 x 1 B (k = 1), ldC for 4 x 1 (m).
    prog = tp.TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["k", "m"], exec_types=["seq", "prim"], dim_sizes=[3, 4],
        strides=[[4, 1], [1, 0], [0, 1]])
    assert prim_arguments(prog) == {"m": 4, "n": 1, "k": 1, "ldA": 4, "ldB": 1, "ldC": 4}
    code = pseudocode(prog, ["k", "i"])
    assert re.search(r"n = 1, +# no axis: extent 1", code)
    _check(prog, "ki,k->i", "ki", [(3, 4), (3,)], (4,))


def test_tiles_not_in_the_spec_form_are_noted() -> None:
    # A = in0 stored m-by-k row-major (unit stride along k, not m): transposed.  C = out
    # with stride 2 along m and 8 along n (no unit stride at all): strided.
    prog = tp.TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["m", "n", "k"], exec_types=["prim"] * 3, dim_sizes=[4, 3, 5],
        strides=[[5, 0, 1], [0, 5, 1], [2, 8, 0]])
    code = pseudocode(prog, list("ijl"))
    assert "# A: stride 5 along |i|, not 1 (transposed tile)" in code
    assert "# C: stride 2 along |i|, not 1 (strided tile)" in code
    assert "B:" not in code  # in1 has unit stride along k: the spec's form
