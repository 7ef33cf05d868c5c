"""JSON forms of a TEIR program (teir_plan/teir/serialize.py): teir_plan's own (the spec's
field names, one object, strides T x D) and einsum_ir/etops' (``TensorOperationConfig``:
strides nested once more as [level][tensor][dim], parallel spelled ``shared``, a
``backend``).  What is written is checked field by field against the spec's example
10.3.7 written out by hand; what is read back is the same program; what etops cannot
express is refused naming the field; malformed text is a TEIRError, never a raw
exception.

(tests/test_teir_records.py round-trips random programs and reads malformed JSON of many
shapes; here the written forms themselves and the limits of etops' form.)"""

from __future__ import annotations

import json

import pytest

import teir_plan as tp
from teir_plan.teir.serialize import FORMAT_NAME, FORMAT_VERSION, from_dict, to_dict

# Spec example 10.3.7 (BRGEMM over t, s, q, u; p and r parallel), its tables written out:
# sizes |p| |r| |t| |s| |q| |u| = 4 3 2 5 6 7; in0 is t r u s, in1 p q t u, out p q r s,
# all row-major, so a stride is the product of the extents after it in its tensor.
SIZES = [4, 3, 2, 5, 6, 7]
STRIDES = [
    [0, 7 * 5, 3 * 7 * 5, 1, 0, 5],           # in0 t r u s: r = |u||s|, t = |r||u||s|
    [6 * 2 * 7, 0, 7, 0, 2 * 7, 1],           # in1 p q t u: p = |q||t||u|, q = |t||u|
    [6 * 3 * 5, 5, 0, 1, 3 * 5, 0],           # out p q r s: p = |q||r||s|, q = |r||s|
]
FIELDS = dict(
    data_type="float32", prim_first="zero", prim_main="brgemm", prim_last="none",
    dim_types=["n", "m", "k", "m", "n", "k"],
    exec_types=["parallel", "parallel", "prim", "prim", "prim", "prim"],
    dim_sizes=SIZES, strides=STRIDES,
)


def _prog(**over: object) -> tp.TEIR:
    return tp.TEIR.from_fields(**{**FIELDS, **over})  # type: ignore[arg-type]


def test_our_form_is_the_spec_fields_in_one_object() -> None:
    data = json.loads(_prog().to_json())
    assert data == {"format": "teir", "version": 1, **FIELDS}
    assert (FORMAT_NAME, FORMAT_VERSION) == ("teir", 1)
    assert to_dict(_prog()) == data
    # indent=None: one line; the default indents by two
    assert "\n" not in _prog().to_json(indent=None)
    assert _prog().to_json().splitlines()[1].startswith('  "format"')


def test_etops_form_nests_the_strides_and_spells_parallel_shared() -> None:
    data = json.loads(_prog().to_etops_json())
    assert data == {
        "data_type": "float32", "prim_first": "zero", "prim_main": "brgemm",
        "prim_last": "none", "dim_types": ["n", "m", "k", "m", "n", "k"],
        "exec_types": ["shared", "shared", "prim", "prim", "prim", "prim"],
        "dim_sizes": SIZES, "strides": [STRIDES], "backend": "tpp",
    }


@pytest.mark.parametrize("write", ["to_json", "to_etops_json"])
@pytest.mark.parametrize("over", [
    {},
    dict(data_type="float64", prim_first="none", prim_last="relu", prim_main="gemm",
         exec_types=["seq", "parallel", "seq", "prim", "prim", "prim"]),
    dict(dim_types=["c"] * 2, exec_types=["seq", "prim"], dim_sizes=[3, 4],
         strides=[[4, 1], [1, 3]], prim_main="copy", prim_first="none"),
])
def test_each_form_reads_back_as_the_same_program(write: str, over: dict) -> None:
    prog = _prog(**over)
    text = getattr(prog, write)()
    assert tp.TEIR.from_json(text) == prog
    assert tp.TEIR.from_json(text.encode()) == prog
    assert tp.TEIR.from_json(bytearray(text.encode())) == prog  # type: ignore[arg-type]
    assert from_dict(json.loads(text)) == prog


def test_names_are_read_in_any_case_and_sfc_is_parallel() -> None:
    data = json.loads(_prog().to_etops_json())
    data.update(prim_main="BRGEMM", data_type="Float32", dim_types=[t.upper() for t in
                                                                     data["dim_types"]],
                exec_types=["sfc", "SHARED", "Prim", "prim", "prim", "prim"])
    assert tp.TEIR.from_json(json.dumps(data)) == _prog()


def test_a_packing_level_of_zeros_is_dropped_and_any_other_refused() -> None:
    zeros = [[0] * 6 for _ in range(3)]
    data = json.loads(_prog().to_etops_json())
    data["strides"] = [STRIDES, zeros, zeros]
    assert tp.TEIR.from_json(json.dumps(data)) == _prog()
    packed = [row[:] for row in zeros]
    packed[2][5] = 1  # one nonzero entry in level 2
    data["strides"] = [STRIDES, zeros, packed]
    with pytest.raises(tp.TEIRError, match=r"^strides\[2\]: .*packs operands"):
        tp.TEIR.from_json(json.dumps(data))


# ---- what etops' form cannot hold ------------------------------------------------------

def test_etops_refuses_a_parallel_k_axis_of_more_than_one_step() -> None:
    # etops' shared axes have no private partial sums: axis 2 (t, K, size 2) parallel.
    par_k = _prog(exec_types=["parallel", "parallel", "parallel", "prim", "prim", "prim"],
                  prim_main="gemm")
    with pytest.raises(tp.TEIRError, match=r"^exec_types\[2\]: etops has no parallel k"):
        par_k.to_etops_json()
    assert tp.TEIR.from_json(par_k.to_json()) == par_k  # our form keeps it
    # A K axis of one step sums nothing in parallel: exported.
    one = _prog(exec_types=["parallel", "parallel", "parallel", "prim", "prim", "prim"],
                prim_main="gemm", dim_sizes=[4, 3, 1, 5, 6, 7])
    assert json.loads(one.to_etops_json())["exec_types"][2] == "shared"


def test_etops_refuses_unary_relu_and_complex_types() -> None:
    relu = _prog(dim_types=["c"], exec_types=["prim"], dim_sizes=[4], strides=[[1], [1]],
                 prim_main="relu", prim_first="none")
    with pytest.raises(tp.TEIRError, match=r"^prim_main: etops has no unary relu"):
        relu.to_etops_json()
    assert tp.TEIR.from_json(relu.to_json()) == relu
    for dt in ("complex64", "complex128"):
        prog = _prog(data_type=dt)
        with pytest.raises(tp.TEIRError, match=rf"^data_type: .*{dt}"):
            prog.to_etops_json()
        assert tp.TEIR.from_json(prog.to_json()) == prog


def test_etops_export_validates_first_and_ours_does_not() -> None:
    # Output stride 0 along p (N, size 4): two output elements at one address.
    bad = _prog(strides=[STRIDES[0], STRIDES[1], [0, *STRIDES[2][1:]]])
    with pytest.raises(tp.TEIRError, match=r"^strides\[2\]\[0\]"):
        bad.to_etops_json()
    # Our form writes what it is given, and reads it back for validate to refuse.
    back = tp.TEIR.from_json(bad.to_json())
    assert back == bad
    with pytest.raises(tp.TEIRError, match=r"^strides\[2\]\[0\]"):
        back.validate()


# ---- malformed input -----------------------------------------------------------------

@pytest.mark.parametrize(("data", "pattern"), [
    ({**FIELDS, "format": "teir", "version": 2}, r"^version: .*reads version 1, got 2"),
    ({**FIELDS, "version": "1"}, r"^version: .*got '1'"),
    ({**FIELDS, "format": "etops"}, r"^format: expected 'teir', got 'etops'"),
    ({k: v for k, v in FIELDS.items() if k not in ("dim_sizes", "strides")},
     r"missing field\(s\) dim_sizes, strides$"),
    ({**FIELDS, "strides": []}, r"^strides: expected a non-empty list"),
    ({**FIELDS, "strides": "1, 2"}, r"^strides: expected a non-empty list"),
    ({**FIELDS, "strides": [STRIDES, [[0] * 6, 7, [0] * 6]]}, r"^strides\[1\]: expected a list"),
    ({**FIELDS, "strides": [STRIDES[0], STRIDES]}, r"^strides: mixes"),
    ({"primitives": {}, "schedule": 3}, r"^schedule: expected an object, got int"),
    ({**FIELDS, "dim_types": ["n", "m", "k", "m", "n", "x"]}, r"^dim_types\[5\]"),
    ({**FIELDS, "data_type": "int8"}, r"^data_type"),
    (["not", "an", "object"], r"expected an object, got list"),
])
def test_malformed_programs_name_the_field(data: object, pattern: str) -> None:
    with pytest.raises(tp.TEIRError, match=pattern) as info:
        tp.TEIR.from_json(json.dumps(data))
    assert isinstance(info.value, ValueError)


def test_the_nested_form_reads_as_the_flat_one() -> None:
    prim = {k: FIELDS[k] for k in ("data_type", "prim_first", "prim_main", "prim_last")}
    sched = {k: v for k, v in FIELDS.items() if k not in prim}
    nested = {"format": "teir", "version": 1, "primitives": prim, "schedule": sched}
    assert tp.TEIR.from_json(json.dumps(nested)) == _prog()
    with pytest.raises(tp.TEIRError, match=r"^version"):
        tp.TEIR.from_json(json.dumps({**nested, "version": 3}))
