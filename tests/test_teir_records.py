"""TEIR records: coercion, immutability, validation rules, text, JSON (ours and etops')."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given

import teir_plan as tp
from tests import spec_examples
from tests.strategies import fuzz_settings, program_cases


def test_enum_names_are_case_insensitive():
    assert tp.DimType.coerce("M") is tp.DimType.M
    assert tp.ExecType.coerce("Parallel") is tp.ExecType.PARALLEL
    assert tp.ExecType.coerce("shared") is tp.ExecType.PARALLEL  # etops' spelling
    assert tp.Prim.coerce("brGemm") is tp.Prim.BRGEMM
    assert tp.DataType.coerce("FLOAT64") is tp.DataType.FLOAT64
    with pytest.raises(tp.TEIRError, match="dim_types\\[1\\]"):
        tp.Schedule(["c", "x"], ["seq", "seq"], [1, 1], [[0, 0], [0, 0]])


def test_records_are_values():
    a, *_ = spec_examples.gemm_contraction()
    b, *_ = spec_examples.gemm_contraction()
    c, *_ = spec_examples.brgemm_contraction()
    assert a == b and hash(a) == hash(b) and a != c
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.schedule = c.schedule  # type: ignore[misc]
    assert len({a, b, c}) == 2


def test_table_prints_like_the_spec():
    prog, *_ = spec_examples.gemm_contraction()
    lines = prog.format(list("prtsqu")).splitlines()
    assert [ln.split("|")[0].strip() for ln in lines[:7]] == [
        "Dimension ID", "dim_sizes", "dim_types", "exec_types",
        "strides[in0]", "strides[in1]", "strides[out]",
    ]
    cells = [c.strip() for c in lines[4].split("|")]
    u, s, r = spec_examples.U, spec_examples.S, spec_examples.R
    assert cells[1:] == [str(v) for v in (0, u * s, r * u * s, 1, 0, s)]
    assert lines[-1].startswith("primitives: data_type=float32 prim_first=zero prim_main=gemm")


@pytest.mark.parametrize("build", spec_examples.ALL, ids=lambda f: f.__name__)
def test_spec_examples_validate(build):
    build()[0].validate()


def _binary(**over):
    fields = dict(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["m", "n", "k"], exec_types=["prim", "prim", "prim"], dim_sizes=[2, 3, 4],
        strides=[[1, 0, 2], [0, 4, 1], [1, 2, 0]],
    )
    fields.update(over)
    return tp.TEIR.from_fields(**fields)


def _unary(**over):
    fields = dict(
        data_type="float64", prim_first="none", prim_main="copy", prim_last="none",
        dim_types=["c", "c"], exec_types=["seq", "prim"], dim_sizes=[2, 3],
        strides=[[3, 1], [1, 2]],
    )
    fields.update(over)
    return tp.TEIR.from_fields(**fields)


BROKEN = {
    "main not a main primitive": (_binary(prim_main="zero"), "prim_main"),
    "unary prim_first": (_unary(prim_first="zero"), "prim_first"),
    "unary prim_last": (_unary(prim_last="relu"), "prim_last"),
    "binary prim_first": (_binary(prim_first="relu"), "prim_first"),
    "binary prim_last": (_binary(prim_last="zero"), "prim_last"),
    "exec_types length": (_binary(exec_types=["prim", "prim"]), "exec_types"),
    "dim_sizes length": (_binary(dim_sizes=[2, 3]), "dim_sizes"),
    "strides rows (T)": (_binary(strides=[[1, 0, 2], [0, 4, 1]]), "strides"),
    "strides row length": (_binary(strides=[[1, 0, 2], [0, 4], [1, 2, 0]]), "strides\\[1\\]"),
    "positive sizes": (_binary(dim_sizes=[2, 0, 4]), "dim_sizes\\[1\\]"),
    "unary roles": (_unary(dim_types=["c", "m"], strides=[[3, 1], [1, 2]]), "dim_types\\[1\\]"),
    "zero stride where absent": (_binary(strides=[[1, 5, 2], [0, 4, 1], [1, 2, 0]]),
                                 "strides\\[0\\]\\[1\\]"),
    "parallel k": (_binary(exec_types=["prim", "prim", "parallel"]), "exec_types\\[2\\]"),
    "copy takes two prim axes": (
        _unary(dim_types=["c"] * 3, exec_types=["prim"] * 3, dim_sizes=[2, 2, 2],
               strides=[[4, 2, 1], [1, 2, 4]]), "exec_types\\[2\\]"),
    "gemm one m": (_binary(dim_types=["m", "m", "k"], strides=[[1, 2, 4], [0, 0, 1], [1, 2, 0]],
                           exec_types=["prim"] * 3), "exec_types\\[1\\]"),
    "gemm one k": (_binary(dim_types=["m", "k", "k"], strides=[[1, 2, 6], [0, 1, 3], [1, 0, 0]]),
                   "exec_types\\[2\\]"),
    "gemm no c prim": (
        _binary(dim_types=["c", "n", "k"], strides=[[1, 0, 2], [4, 2, 1], [1, 2, 0]]),
        "exec_types\\[0\\]"),
    "brgemm needs k": (_binary(prim_main="brgemm", dim_types=["m", "n", "k"],
                               exec_types=["prim", "prim", "seq"]), "brgemm"),
    "brgemm at most two k": (
        _binary(prim_main="brgemm", dim_types=["k", "k", "k"], exec_types=["prim"] * 3,
                strides=[[1, 2, 6], [1, 2, 6], [0, 0, 0]]), "exec_types\\[2\\]"),
    "output stride 0": (
        _binary(strides=[[1, 0, 2], [0, 4, 1], [0, 2, 0]]), "strides\\[2\\]\\[0\\]"),
    "output aliasing": (_binary(strides=[[1, 0, 2], [0, 4, 1], [1, 1, 0]]), "strides\\[2\\]"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_every_rule_is_enforced(name):
    prog, field = BROKEN[name]
    with pytest.raises(tp.TEIRError, match=field) as info:
        prog.validate()
    assert isinstance(info.value, ValueError)


def test_construction_does_not_check_semantics():
    prog = _binary(dim_sizes=[2, -1, 4])  # constructing is fine
    with pytest.raises(tp.TEIRError, match="dim_sizes\\[1\\]"):
        prog.validate()
    with pytest.raises(tp.TEIRError, match="dim_sizes\\[1\\]"):
        tp.execute(prog, np.zeros(8, np.float32), np.zeros(8, np.float32), np.zeros(8, np.float32))


@fuzz_settings(default=60)
@given(program_cases())
def test_json_round_trip(case):
    prog = case.teir
    assert tp.TEIR.from_json(prog.to_json()) == prog
    assert tp.TEIR.from_json(prog.to_json(indent=None)) == prog
    if prog.primitives.prim_main is not tp.Prim.RELU:
        assert tp.TEIR.from_json(prog.to_etops_json()) == prog


def test_reads_etops_json():
    prog, *_ = spec_examples.brgemm_contraction()
    data = json.loads(prog.to_json())
    etops = dict(data)
    del etops["format"], etops["version"]
    etops["strides"] = [data["strides"]]
    etops["exec_types"] = ["shared", "sfc", "prim", "prim", "prim", "prim"]
    etops["backend"] = "tpp"
    assert tp.TEIR.from_json(json.dumps(etops)) == prog
    etops["strides"] = [data["strides"], [[0] * 6] * 3]  # an all-zero packing level
    assert tp.TEIR.from_json(json.dumps(etops)) == prog
    etops["strides"] = [data["strides"], [[1] * 6] * 3]
    with pytest.raises(tp.TEIRError, match="strides\\[1\\]"):
        tp.TEIR.from_json(json.dumps(etops))


@pytest.mark.parametrize("text,match", [
    ("{", "not valid JSON"), ("[]", "expected an object"),
    ('{"data_type": "float32"}', "missing field"),
    ('{"format": "other"}', "format"),
])
def test_bad_json(text, match):
    with pytest.raises(tp.TEIRError, match=match):
        tp.TEIR.from_json(text)


def test_etops_runs_our_programs():
    etops = pytest.importorskip("etops")
    for build in (spec_examples.gemm_contraction, spec_examples.brgemm_contraction):
        prog, expr, shapes, out_shape = build("float32")
        cfg = etops.TensorOperationConfig.from_json(prog.to_etops_json())
        op = etops.TensorOperation(cfg)
        rng = np.random.default_rng(0)
        ins = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        out = np.zeros(out_shape, np.float32)
        op.execute(*ins, out)
        np.testing.assert_allclose(out, np.einsum(expr, *[x.astype(float) for x in ins]),
                                   rtol=1e-4, atol=1e-4)
