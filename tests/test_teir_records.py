"""TEIR records: coercion, immutability, validation rules, text, JSON (ours and etops')."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import teir_plan as tp
from tests import spec_examples
from tests.strategies import counted, fuzz_settings, program_cases


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
@counted
def test_json_round_trip(case):
    prog = case.teir
    assert tp.TEIR.from_json(prog.to_json()) == prog
    assert tp.TEIR.from_json(prog.to_json(indent=None)) == prog
    s = prog.schedule
    parallel_k = [i for i, (r, e, n) in enumerate(zip(s.dim_types, s.exec_types, s.dim_sizes))
                  if r is tp.DimType.K and e is tp.ExecType.PARALLEL and n > 1]
    if parallel_k:  # etops has no parallel K axis: refused, naming the first one
        with pytest.raises(tp.TEIRError, match=f"exec_types\\[{parallel_k[0]}\\]"):
            prog.to_etops_json()
    elif prog.primitives.prim_main is not tp.Prim.RELU:
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


# ---- random invalid programs -----------------------------------------------------------

def _fields(prog: tp.TEIR) -> dict:
    d = json.loads(prog.to_json())
    return {k: d[k] for k in ("data_type", "prim_first", "prim_main", "prim_last",
                              "dim_types", "exec_types", "dim_sizes", "strides")}


def _break(f: dict, rule: str, i: int) -> tuple[dict, str] | None:
    """``f`` with one rule broken at axis ``i`` (None when this program has no such
    axis), and the field the error must name."""
    d = len(f["dim_sizes"])
    binary = len(f["strides"]) == 3
    types, execs = f["dim_types"], f["exec_types"]
    out = len(f["strides"]) - 1
    if rule == "size":
        if d == 0:
            return None
        f["dim_sizes"][i % d] = -abs(f["dim_sizes"][i % d]) if i % 2 else 0
        return f, f"dim_sizes\\[{i % d}\\]"
    if rule == "absent tensor stride":
        # a tensor that does not take part in an axis must have stride 0 there
        spots = [(a, j) for a in range(d) for j in range(len(f["strides"]))
                 if f["strides"][j][a] == 0 and not (types[a] == "c" or
                 (types[a] == "m" and j != 1) or (types[a] == "n" and j != 0) or
                 (types[a] == "k" and j != out))]
        if not binary or not spots:
            return None
        a, j = spots[i % len(spots)]
        f["strides"][j][a] = 1
        return f, f"strides\\[{j}\\]\\[{a}\\]"
    if rule == "output alias":
        spots = [a for a in range(d) if types[a] != "k" and f["dim_sizes"][a] > 1]
        if not spots:
            return None
        f["strides"][out][spots[i % len(spots)]] = 0
        return f, "strides"
    if rule == "lengths":
        if d == 0:
            return None
        f["exec_types"] = execs[:-1]
        return f, "exec_types"
    if rule == "unknown name":
        key = ["prim_main", "data_type", "dim_types"][i % 3]
        if key == "dim_types":
            if d == 0:
                return None
            types[i % d] = "q"
        else:
            f[key] = "fast" if key == "prim_main" else "float8"
        return f, key
    if rule == "unary on non-c":
        if binary or d == 0:
            return None
        types[i % d] = "m"
        return f, "dim_types"
    raise AssertionError(rule)


RULES = ["size", "absent tensor stride", "output alias", "lengths",
         "unknown name", "unary on non-c"]


@fuzz_settings(default=80)
@given(case=program_cases(), rule=st.sampled_from(RULES), i=st.integers(0, 10))
@counted
def test_random_invalid_programs_raise_teir_error(case, rule, i):
    broken = _break(_fields(case.teir), rule, i)
    assume(broken is not None)
    fields, name = broken
    with pytest.raises(tp.TEIRError, match=name) as info:
        tp.TEIR.from_fields(**fields).validate()
    assert isinstance(info.value, ValueError)
    # The executor refuses it too, before touching the arrays.
    if rule not in ("lengths", "unknown name"):
        before = [v.copy() for v in case.views]
        with pytest.raises(tp.TEIRError):
            tp.execute(tp.TEIR.from_fields(**fields), *case.views)
        for v, b in zip(case.views, before):
            np.testing.assert_array_equal(v, b)


# ---- malformed input: a TEIRError naming the field, never a raw exception ---------------

_GOOD = {"data_type": "float32", "prim_first": "none", "prim_main": "copy", "prim_last": "none",
         "dim_types": ["c"], "exec_types": ["prim"], "dim_sizes": [4], "strides": [[1], [1]]}
_ETOPS_LAYOUT = [[1, 0, 2], [0, 1, 0], [3, 1, 0]]


def _nested(**top):
    keys_p = ("data_type", "prim_first", "prim_main", "prim_last")
    return json.dumps({**top, "primitives": {k: _GOOD[k] for k in keys_p},
                       "schedule": {k: v for k, v in _GOOD.items() if k not in keys_p}})


@pytest.mark.parametrize("text,words", [
    ('{"primitives": [1], "schedule": {}}', ["primitives", "object"]),
    (_nested(format="other"), ["format", "other"]),
    (_nested(version=99), ["version", "99"]),
    (json.dumps({**_GOOD, "version": True}), ["version", "True"]),
    (json.dumps({**_GOOD, "version": 1.0}), ["version", "1.0"]),
    (b"\xff\xfe{", ["not valid JSON"]),
    ("[" * 100_000 + "]" * 100_000, ["not valid JSON"]),
    ('{"dim_sizes": [' + "9" * 5000 + "]}", ["not valid JSON"]),
    (None, ["str or bytes", "NoneType"]),
    (json.dumps({**_GOOD, "dim_types": {"c": 1}}), ["dim_types", "list", "dict"]),
    (json.dumps({**_GOOD, "exec_types": ["\u017fprim"]}), ["exec_types[0]"]),
    (json.dumps({**_GOOD, "dim_sizes": [10**20]}), ["dim_sizes[0]", "overflow"]),
    (json.dumps({**_GOOD, "strides": [[10**24], [1]]}), ["strides[0][0]", "overflow"]),
    (json.dumps({**_GOOD, "strides": [5, [1]]}), ["strides[0]", "sequence"]),
    (json.dumps({**_GOOD, "strides": [_ETOPS_LAYOUT, [[0, 0, 0], 5, [0, 0, 0]]]}),
     ["strides[1]", "rows"]),
    (json.dumps({**_GOOD, "strides": [_ETOPS_LAYOUT, [5]]}), ["strides", "one form"]),
])
def test_malformed_json_is_a_teir_error(text, words):
    with pytest.raises(tp.TEIRError) as info:
        tp.TEIR.from_json(text)
    assert isinstance(info.value, ValueError)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    assert tp.TEIR.from_json(_nested()) == tp.TEIR.from_json(json.dumps(_GOOD))


def test_a_set_of_sizes_is_refused_not_reordered():
    with pytest.raises(tp.TEIRError, match="dim_sizes: expected a list, got set"):
        tp.Schedule(["m", "n"], ["seq", "seq"], {3, 1000}, [[1, 1], [1, 1], [1, 1]])
    # numpy arrays and tuples are sequences of values
    s = tp.Schedule(("c",), np.array(["prim"]), np.array([4]), [np.array([1]), (1,)])
    assert s.dim_sizes == (4,)


@pytest.mark.parametrize("names,words", [([1, 2], ["names", "strings", "1"]),
                                         (["i"], ["1 names for 2 axes"]),
                                         ("ijk", ["3 names for 2 axes"]),
                                         (b"ij", ["a list of 2 strings"])])
def test_axis_names_are_checked(names, words):
    from teir_plan.render.pseudocode import pseudocode

    prog = tp.TEIR(tp.Primitives("float32", "none", "copy", "none"),
                   tp.Schedule(["c", "c"], ["seq", "prim"], [2, 3], [[3, 1], [1, 2]]))
    for show in (prog.format, lambda n: pseudocode(prog, n)):
        with pytest.raises(tp.TEIRError) as info:
            show(names)
        for w in words:
            assert w in str(info.value)
    bad = tp.TEIR(tp.Primitives("float32", "none", "copy", "none"),
                  tp.Schedule(["c", "c"], ["seq"], [2, 3, 4], [[3, 1], [1, 2]]))
    with pytest.raises(tp.TEIRError, match="exec_types"):
        pseudocode(bad)


def test_schedule_fields_take_members_and_ints_and_name_what_they_refuse() -> None:
    """Schedule takes enum members and ints as they are (numpy ints and names as their
    values), and names the field of anything else: a bool is not a size, a stride past
    64 bits overflows, a name no member has is refused."""
    s = tp.Schedule(["m", tp.DimType.N], [tp.ExecType.SEQ, "prim"], [np.int64(3), 4],
                    [[4, 1], [0, 1]])
    assert s.dim_types == (tp.DimType.M, tp.DimType.N)
    assert s.exec_types == (tp.ExecType.SEQ, tp.ExecType.PRIM)
    assert s.dim_sizes == (3, 4) and type(s.dim_sizes[0]) is int
    for args, words in [
        ((["m"], ["seq"], [True], [[1]]), ["dim_sizes[0]", "True"]),
        ((["m"], ["seq"], [2], [[1, 2**63]]), ["strides[0][1]", "overflow"]),
        ((["m", "q"], ["seq"], [2], [[1]]), ["dim_types[1]", "'q'"]),
        ((["m"], ["seq", 3], [2], [[1]]), ["exec_types[1]", "3"]),
    ]:
        with pytest.raises(tp.TEIRError) as err:
            tp.Schedule(*args)
        assert all(w in str(err.value) for w in words), str(err.value)
