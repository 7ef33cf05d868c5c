"""The rules of TEIR (teir_plan/teir/validate.py), read from spec section 10.1 and its
reading notes: each rule broken once, refused with a TEIRError (a ValueError) whose
message starts with the field it names, and the nearest program that keeps the rule
accepted, so that a check which refuses too much fails as well as one which refuses too
little.  The output-injectivity proof is checked against enumerating the addresses.

(tests/test_teir_records.py breaks the rules on one GEMM and one Copy program; here the
role table m(t), the primitive shapes, the output-address rule and the complex types are
walked through in full.)"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.teir.validate import strided_map_is_injective
from tests.strategies import fuzz_settings


def _refused(prog: tp.TEIR, field: str) -> str:
    """Validate ``prog``, which must be refused with a TEIRError naming ``field`` first."""
    with pytest.raises(tp.TEIRError) as info:
        prog.validate()
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert msg.startswith(field + ":"), (field, msg)
    return msg


# ---- the role table m(t): which tensors take part in an axis ---------------------------

# teir-notes.md, 'Axis roles m(t)': (in0, in1, out) for each role of a binary contraction.
ROLE_TABLE = {"c": (1, 1, 1), "m": (1, 0, 1), "n": (0, 1, 1), "k": (1, 1, 0)}


def _with_axis(role: str, strides: Sequence[int]) -> tp.TEIR:
    """A valid m, n, k GEMM tile (sizes 2, 3, 4; in0 m-major 2 x 4, in1 3 x 4, out 2 x 3
    column-major) and a fourth, seq axis of size 2 with ``role`` and ``strides``: past
    every element of the tile in each tensor (in0 spans 8, in1 12, out 6 elements), so
    that the output addresses stay distinct whatever the role."""
    return tp.TEIR.from_fields(
        data_type="float64", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["m", "n", "k", role], exec_types=["prim", "prim", "prim", "seq"],
        dim_sizes=[2, 3, 4, 2],
        strides=[[1, 0, 2, strides[0]], [0, 4, 1, strides[1]], [1, 2, 0, strides[2]]])


FAR = (8, 12, 6)  # each tensor's stride for the fourth axis where it takes part


@pytest.mark.parametrize("role", list(ROLE_TABLE))
def test_strides_follow_the_role_table(role: str) -> None:
    takes = ROLE_TABLE[role]
    _with_axis(role, tuple(FAR[j] if takes[j] else 0 for j in range(3))).validate()
    for j in range(3):
        if takes[j]:
            continue
        # A tensor outside the axis with a nonzero stride along it: strides[j][3].
        strides = [FAR[t] if takes[t] else 0 for t in range(3)]
        strides[j] = 5
        msg = _refused(_with_axis(role, tuple(strides)), f"strides[{j}][3]")
        assert "must be 0" in msg and "got 5" in msg


@pytest.mark.parametrize("role", list(ROLE_TABLE))
def test_an_input_may_broadcast_along_an_axis_it_takes_part_in(role: str) -> None:
    # 'A zero stride where the tensor does take part is not forbidden (it broadcasts)':
    # for the inputs; the output's is the address rule below.
    takes = ROLE_TABLE[role]
    for j in (0, 1):
        if takes[j]:
            strides = [FAR[t] if takes[t] else 0 for t in range(3)]
            strides[j] = 0
            _with_axis(role, tuple(strides)).validate()


def test_a_unary_axis_takes_both_tensors_and_only_role_c() -> None:
    def copy(roles: list[str], strides: list[list[int]]) -> tp.TEIR:
        return tp.TEIR.from_fields(
            data_type="float32", prim_first="none", prim_main="copy", prim_last="none",
            dim_types=roles, exec_types=["seq", "prim"], dim_sizes=[2, 3], strides=strides)

    copy(["c", "c"], [[3, 1], [1, 2]]).validate()
    copy(["c", "c"], [[0, 1], [1, 2]]).validate()  # m(C) = (1, 1): in0 may broadcast
    for i, role in itertools.product((0, 1), "mnk"):
        roles = ["c", "c"]
        roles[i] = role
        _refused(copy(roles, [[3, 1], [1, 2]]), f"dim_types[{i}]")


# ---- operation type: T and the primitives each kind allows -----------------------------

def test_a_unary_program_has_two_stride_rows_and_a_binary_one_three() -> None:
    def prog(main: str, role: str, strides: list[list[int]]) -> tp.TEIR:
        return tp.TEIR.from_fields(
            data_type="float32", prim_first="none", prim_main=main, prim_last="none",
            dim_types=[role], exec_types=["prim"], dim_sizes=[4], strides=strides)

    prog("copy", "c", [[1], [1]]).validate()
    msg = _refused(prog("relu", "c", [[1], [1], [1]]), "strides")
    assert "T=2" in msg and "3 rows" in msg
    prog("gemm", "m", [[1], [0], [1]]).validate()
    msg = _refused(prog("brgemm", "m", [[1], [1]]), "strides")
    assert "T=3" in msg and "2 rows" in msg


@pytest.mark.parametrize(("main", "first", "last", "field"), [
    # binary: prim_first in {none, zero}, prim_last in {none, relu}; every pair allowed
    ("gemm", "none", "none", None), ("gemm", "zero", "relu", None),
    ("brgemm", "zero", "none", None), ("brgemm", "none", "relu", None),
    ("gemm", "copy", "none", "prim_first"), ("brgemm", "gemm", "none", "prim_first"),
    ("gemm", "zero", "copy", "prim_last"), ("brgemm", "none", "brgemm", "prim_last"),
    # unary: both none
    ("copy", "none", "none", None), ("relu", "none", "none", None),
    ("relu", "relu", "none", "prim_first"), ("copy", "none", "zero", "prim_last"),
    # a first or last primitive is no main one
    ("none", "none", "none", "prim_main"), ("zero", "none", "none", "prim_main"),
])
def test_the_primitives_each_operation_allows(main: str, first: str, last: str,
                                              field: str | None) -> None:
    binary = main in ("gemm", "brgemm", "none")
    prog = tp.TEIR.from_fields(
        data_type="float32", prim_first=first, prim_main=main, prim_last=last,
        dim_types=["k"] if binary else ["c"], exec_types=["prim"], dim_sizes=[4],
        strides=[[1], [1], [0]] if binary else [[1], [1]])
    if field is None:
        prog.validate()
    else:
        _refused(prog, field)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_relu_is_refused_on_complex_types_and_nothing_else(dtype: str) -> None:
    # Complex numbers have no order: a ReLU, main or last, is refused naming the field.
    def prog(main: str, last: str, dt: str) -> tp.TEIR:
        unary = main in ("copy", "relu")
        return tp.TEIR.from_fields(
            data_type=dt, prim_first="none", prim_main=main, prim_last=last,
            dim_types=["c" if unary else "m"], exec_types=["prim"], dim_sizes=[3],
            strides=[[1], [1]] if unary else [[1], [0], [1]])

    prog("copy", "none", dtype).validate()
    prog("gemm", "none", dtype).validate()
    assert "complex" in _refused(prog("relu", "none", dtype), "prim_main")
    assert "complex" in _refused(prog("gemm", "relu", dtype), "prim_last")
    real = "float32" if dtype == "complex64" else "float64"
    prog("relu", "none", real).validate()
    prog("gemm", "relu", real).validate()


# ---- what a primitive consumes -----------------------------------------------------------

def _prim_program(main: str, roles: str) -> tp.TEIR:
    """A binary program whose axes have ``roles``, all prim, sizes 2, each tensor's
    strides nested (1, 2, 4, ... over the axes it takes part in): valid but for the
    primitive's shape."""
    strides = []
    for j in range(3):
        row, acc = [], 1
        for r in roles:
            row.append(acc if ROLE_TABLE[r][j] else 0)
            acc *= 2 if ROLE_TABLE[r][j] else 1
        strides.append(row)
    return tp.TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main=main, prim_last="none",
        dim_types=list(roles), exec_types=["prim"] * len(roles), dim_sizes=[2] * len(roles),
        strides=strides)


@pytest.mark.parametrize(("main", "roles", "axis"), [
    # GEMM: at most one M, one N and one K prim axis; BRGEMM: one M, one N, two K (one of
    # them the batch-reduce axis), and at least one K; neither takes a C axis.
    ("gemm", "mnk", None), ("gemm", "", None), ("gemm", "m", None), ("gemm", "nk", None),
    ("gemm", "mnkm", 3), ("gemm", "nmn", 2), ("gemm", "kmnk", 3), ("gemm", "mcn", 1),
    ("brgemm", "kmnk", None), ("brgemm", "k", None), ("brgemm", "mk", None),
    ("brgemm", "kkmnk", 4), ("brgemm", "kmmn", 2), ("brgemm", "knn", 2), ("brgemm", "ck", 0),
    ("brgemm", "mn", -1),  # no K prim axis: the field, with no axis
])
def test_the_prim_axes_each_primitive_consumes(main: str, roles: str, axis: int | None) -> None:
    prog = _prim_program(main, roles)
    if axis is None:
        prog.validate()
    elif axis < 0:
        assert "k prim axis" in _refused(prog, "exec_types")
    else:
        _refused(prog, f"exec_types[{axis}]")


def test_unary_primitives_consume_at_most_two_axes() -> None:
    def relu(execs: list[str]) -> tp.TEIR:
        return tp.TEIR.from_fields(
            data_type="float64", prim_first="none", prim_main="relu", prim_last="none",
            dim_types=["c"] * 3, exec_types=execs, dim_sizes=[2, 3, 4],
            strides=[[12, 4, 1], [1, 2, 6]])

    relu(["seq", "prim", "prim"]).validate()
    relu(["prim", "seq", "prim"]).validate()
    _refused(relu(["prim", "prim", "prim"]), "exec_types[2]")


# ---- the output's addresses ------------------------------------------------------------

def _out_program(roles: str, sizes: list[int], out: list[int]) -> tp.TEIR:
    """A program whose axes are all seq with these roles and sizes, output strides
    ``out`` (0 on K axes), in0 and in1 strides 1 where they take part."""
    ins = [[1 if ROLE_TABLE[r][j] else 0 for r in roles] for j in (0, 1)]
    return tp.TEIR.from_fields(
        data_type="float32", prim_first="none", prim_main="gemm", prim_last="none",
        dim_types=list(roles), exec_types=["seq"] * len(roles), dim_sizes=sizes,
        strides=[*ins, out])


def test_an_output_stride_0_is_refused_only_where_it_merges_elements() -> None:
    _refused(_out_program("mn", [2, 3], [0, 2]), "strides[2][0]")
    _refused(_out_program("cn", [2, 3], [3, 0]), "strides[2][1]")
    # Size 1: one element, nothing to merge; K: not in the output at all.
    _out_program("mn", [1, 3], [0, 1]).validate()
    _out_program("mkn", [2, 5, 3], [1, 0, 2]).validate()


@pytest.mark.parametrize(("sizes", "strides", "distinct"), [
    # Addresses sum(i_k * strides[k]) over the box, by hand:
    ([2, 3], [3, 1], True),       # row-major 2 x 3: 0..5
    ([2, 3], [-3, 1], True),      # a reversed axis: -3..2, still distinct
    ([3, 2], [2, 3], True),       # {0, 2, 4} + {0, 3} = 0, 2, 4, 3, 5, 7: not nested, distinct
    ([3, 2], [2, 4], False),      # {0, 2, 4} + {0, 4}: 4 twice
    ([2, 2], [1, -1], False),     # 0 + 0, 0 - 1, 1 + 0, 1 - 1: 0 twice
    ([4, 3], [1, 4], True),       # column-major 4 x 3
    ([4, 3], [1, 3], False),      # 3 = 3 * 1 + 0 * 3 = 0 * 1 + 1 * 3: a column one short
    ([4, 3], [1, 2], False),      # 2 = 2 * 1 + 0 * 2 = 0 * 1 + 1 * 2
])
def test_output_injectivity_by_hand(sizes: list[int], strides: list[int], distinct: bool) -> None:
    assert strided_map_is_injective(sizes, strides) is distinct
    prog = _out_program("mn", sizes, strides)
    if distinct:
        prog.validate()
    else:
        assert "one address" in _refused(prog, "strides[2]")


@fuzz_settings(default=200)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(-12, 12)), min_size=0, max_size=4))
def test_injectivity_agrees_with_enumerating_the_addresses(axes: list[tuple[int, int]]) -> None:
    sizes = [n for n, _ in axes]
    strides = [s for _, s in axes]
    addresses = [sum(i * s for i, s in zip(idx, strides))
                 for idx in itertools.product(*(range(n) for n in sizes))]
    want = len(set(addresses)) == math.prod(sizes)
    assert strided_map_is_injective(sizes, strides) is want


def test_an_output_too_large_to_enumerate_is_refused_unproven() -> None:
    # 2048 x 2048 elements at strides 2 and 2047: the strides do not nest (2047 is less
    # than the 2 x 2047 the inner axis spans), and 2^22 addresses are more than the proof
    # enumerates (2^21): refused as unproven, not accepted.
    assert strided_map_is_injective([2048, 2048], [2, 2047]) is None
    msg = _refused(_out_program("mn", [2048, 2048], [2, 2047]), "strides[2]")
    assert "cannot prove" in msg
    # The same box with nested strides needs no enumeration.
    _out_program("mn", [2048, 2048], [1, 2048]).validate()
