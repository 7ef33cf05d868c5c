"""What the explain report says besides its tables (teir_plan/render/notes.py): a program
in words, what an alternative changes, the frontend's notes, the steps as a tree, and the
contraction as the user wrote it.  Each is read from records: the expected texts below
are derived by hand from the programs (spec examples 10.3.6 and 10.3.7, and small hand-
written ones) and from the expressions, never from the code under test.

(tests/test_explain.py checks the spec's GEMM/BRGEMM pair of schedules, that the words
under planned programs name every axis, the pre-reduction and diagonal notes, and a
three-operand tree; here every other kind of change and note, with their exact words.)"""

from __future__ import annotations

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.machine import MachineParams
from teir_plan.planner.copy import plan_copy
from teir_plan.planner.cost import Cost
from teir_plan.planner.pack import Pack
from teir_plan.render.notes import (
    changes,
    describe_program,
    frontend_notes,
    original_contraction,
    step_tree,
)
from teir_plan.schedule.steps import Candidate
from tests import spec_examples as ex

COST = Cost(1.0, 1.0, 0.0, 0.0, 1, 0.0, 0.0, 1, 1, 1, 1.0, 1, 0)
NAMES = ("p", "r", "t", "s", "q", "u")  # the axes of spec examples 10.3.6 and 10.3.7


def _pack(tensor: int, names: tuple[str, ...], shape: tuple[int, ...]) -> Pack:
    copy = plan_copy([("x", 8, 1, 1)], np.dtype(np.float32), MachineParams.reference(), 1)[0]
    return Pack(tensor, shape, names, copy)


def _cand(prog: tp.TEIR, names: tuple[str, ...], packs: tuple[Pack, ...] = ()) -> Candidate:
    return Candidate(prog, names, COST, packs=packs)


# abk,kc->abc with a=2, b=3, k=4, c=5, every tensor row-major: in0 strides a 12, b 4,
# k 1; in1 k 5, c 1; out a 15, b 5, c 1.  a and b compose in in0 (12 = 4 x 3) and out
# (15 = 5 x 3): fused, one M axis `ab` of 6 at b's strides.
def _abk(fused: bool = True, in1: tuple[int, int] = (5, 1), c: int = 5) -> Candidate:
    k_in1, c_in1 = in1
    if fused:
        return _cand(tp.TEIR.from_fields(
            data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
            dim_types=["m", "n", "k"], exec_types=["prim"] * 3, dim_sizes=[6, c, 4],
            strides=[[4, 0, 1], [0, c_in1, k_in1], [5, 1, 0]]), ("ab", "c", "k"))
    return _cand(tp.TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["m", "m", "n", "k"], exec_types=["seq", "prim", "prim", "prim"],
        dim_sizes=[2, 3, c, 4], strides=[[12, 4, 0, 1], [0, 0, c_in1, k_in1], [15, 5, 1, 0]]),
        ("a", "b", "c", "k"))


# ---- the program in words --------------------------------------------------------------

def test_the_spec_brgemm_in_words() -> None:
    text = describe_program(_cand(ex.brgemm_contraction()[0], NAMES))
    # 10.3.7: BRGEMM over t (its first K prim axis: the batch), s (M), q (N), u (K);
    # p and r parallel; no packs; Zero first.
    assert text == (
        "The program is one BRGEMM call per tile: M = `s`, N = `q`, K = `u`, `t` its "
        "batch-reduce axis. Around the calls, `p` is split across the threads (parallel) "
        "and `r` is split across the threads (parallel). `in0` and `in1` are read in "
        "place. The output is zeroed on first access (`prim_first=zero`).")


def test_a_gemm_with_a_fused_axis_a_pack_and_relu_in_words() -> None:
    prog = ex.gemm_contraction()[0]
    p = prog.primitives
    prog = tp.TEIR(tp.Primitives(p.data_type, "none", p.prim_main, "relu"), prog.schedule)
    names = ("p", "r", "t", "sv", "q", "u")
    text = describe_program(_cand(prog, names, (_pack(1, ("p", "q", "t", "u"), (4, 6, 2, 7)),)))
    assert text == (
        "The program is one GEMM call per tile: M = `sv`, N = `q`, K = `u`. An axis named "
        "by several indices (`sv`) is those indices fused into one: their strides compose. "
        "Around the calls, `p` is a sequential loop, `r` is a sequential loop and `t` is a "
        "sequential loop. `in1` is first copied into a contiguous buffer ordered `p q t u` "
        "and `in0` is read in place. The calls add into the output (`prim_first=none`), "
        "and a ReLU is applied after the sum (`prim_last=relu`).")


def test_a_copy_writes_its_output_over_in_words() -> None:
    # A unary program with prim_first=none writes its output, it adds into nothing.
    prog = tp.TEIR.from_fields(data_type="float32", prim_first="none", prim_main="copy",
                               prim_last="none", dim_types=["c", "c"],
                               exec_types=["seq", "prim"], dim_sizes=[3, 4],
                               strides=[[4, 1], [1, 3]])
    text = describe_program(_cand(prog, ("i", "j")))
    assert "write the output over (`prim_first=none`)." in text
    assert "add into" not in text


def test_one_call_over_the_whole_operands_in_words() -> None:
    assert describe_program(_abk()) == (
        "The program is one GEMM call over the whole operands: M = `ab`, N = `c`, K = `k`. "
        "An axis named by several indices (`ab`) is those indices fused into one: their "
        "strides compose. `in0` and `in1` are read in place. The output is zeroed on first "
        "access (`prim_first=zero`).")


# ---- what an alternative changes ---------------------------------------------------------

def test_fusing_is_named_with_the_axis_it_moves() -> None:
    # Unfused, a is a loop and b the M prim axis: the fused program takes a into the
    # primitive as part of `ab`; nothing else differs (the loop list only loses a).
    assert changes(_abk(True), _abk(False)) == ["a moved out of the primitive",
                                                "does not fuse ab"]
    assert changes(_abk(False), _abk(True)) == ["a moved into the primitive", "fuses ab"]


def test_packs_are_named_by_tensor() -> None:
    packed = _cand(_abk().teir, ("ab", "c", "k"), (_pack(1, ("k", "c"), (4, 5)),))
    assert changes(_abk(), packed) == ["packs in1 first"]
    assert changes(packed, _abk()) == ["does not pack in1"]


def test_the_same_axes_with_other_strides_or_sizes() -> None:
    # in1 as c k (k stride 1, c stride 4) instead of k c: only the strides differ.
    assert changes(_abk(), _abk(in1=(1, 4))) == [
        "same axes, different strides (a different tensor layout)"]
    # c of 4 instead of 5, the same strides: only the sizes differ.
    assert changes(_abk(), _abk(c=4)) == ["same axes, different tile sizes"]
    assert changes(_abk(), _abk()) == []


def test_a_new_loop_order_and_an_undone_split() -> None:
    gemm = ex.gemm_contraction()[0]
    s = gemm.schedule
    order = [1, 0, 2, 3, 4, 5]  # r p t s q u
    swapped = tp.TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=[s.dim_types[i] for i in order], exec_types=[s.exec_types[i] for i in order],
        dim_sizes=[s.dim_sizes[i] for i in order],
        strides=[[row[i] for i in order] for row in s.strides])
    names = tuple(NAMES[i] for i in order)
    assert changes(_cand(gemm, NAMES), _cand(swapped, names)) == ["loop order r p t (was p r t)"]
    # p (|p| = 4) split 2 x 2, outer part p^ first: undoing it is named, and the loops
    # common to both keep their order, so no loop order is named.
    split = tp.TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["n", *map(str, s.dim_types)], exec_types=["seq", *map(str, s.exec_types)],
        dim_sizes=[2, 2, *s.dim_sizes[1:]], strides=[[2 * row[0], *row] for row in s.strides])
    assert changes(_cand(split, ("p^", *NAMES)), _cand(gemm, NAMES)) == ["p not split"]


# ---- the frontend's notes ------------------------------------------------------------------

def test_a_broadcast_index_is_noted_with_both_extents() -> None:
    notes = frontend_notes(tp.plan("ij,jk->ik", (4, 1), (5, 3)))
    assert ("operand 0 'ij': index j has extent 1 here and 5 elsewhere: broadcast with "
            "stride 0") in notes


def test_indices_of_extent_1_everywhere_are_noted_as_dropped() -> None:
    notes = frontend_notes(tp.plan("ijk,jk->i", (4, 1, 1), (1, 1)))
    assert ("index j, k of extent 1 dropped from the TEIR programs (it selects one "
            "element everywhere)") in notes
    assert not any("broadcast" in n for n in notes)  # extent 1 in every operand


def test_casts_and_numpy_steps_are_noted_by_step() -> None:
    f32 = np.ones((4, 5), np.float32), np.ones((5, 3), np.float32)
    notes = frontend_notes(tp.plan("ij,jk->ik", *f32, out=np.empty((4, 3))))
    casts = [n for n in notes if "cast" in n]
    assert [n.split(":")[0] for n in casts] == ["step 0", "step 1"]
    assert casts[0].startswith("step 0: cast operand 0") and "float64" in casts[0]
    assert all(n.endswith("before the contraction") for n in casts)
    i32 = np.ones((4, 5), np.int32), np.ones((5, 3), np.int32)
    notes = frontend_notes(tp.plan("ij,jk->ik", *i32))
    assert any(n.startswith("step 0: numpy.einsum('ij,jk->ik') (") and "int32" in n
               for n in notes)


# ---- the steps as a tree -------------------------------------------------------------------

def test_a_pre_reduction_is_a_branch_of_the_tree() -> None:
    # x is summed in operand 1 only: step 0 sums it (jkx -> jk, shape (6, 7)), step 1
    # contracts operand 0 with that sum into out.
    lines = step_tree(tp.plan("iij,jkx->ik", (5, 5, 6), (6, 7, 3)))
    assert len(lines) == 4
    assert lines[0] == "out 'ik' (5, 7)  <- step 1: iij,jk->ik"
    assert lines[1] == "├── operand 0 'iij' (5, 5, 6)"
    assert lines[2].startswith("└── ") and lines[2].endswith("(6, 7)  <- step 0: jkx->jk")
    assert lines[3] == "    └── operand 1 'jkx' (6, 7, 3)"


def test_a_plan_of_one_step_has_no_tree() -> None:
    assert step_tree(tp.plan("ij,jk->ik", (4, 5), (5, 3))) == ()


# ---- the contraction as written -------------------------------------------------------------

def test_the_original_contraction_reads_the_operands_strides() -> None:
    a = np.ones((4, 5))
    b = np.asfortranarray(np.ones((3, 5)))
    c = original_contraction(tp.plan("ij,kj->ik", a, b, order="C"))
    assert c is not None
    # out first, then in0's, then in1's indices; strides in elements from numpy's bytes
    got = [(ax.name, ax.role, ax.extent, ax.strides) for ax in c.axes]
    assert got == [
        ("i", tp.DimType.M, 4, (a.strides[0] // 8, 0, 3)),
        ("k", tp.DimType.N, 3, (0, b.strides[0] // 8, 1)),
        ("j", tp.DimType.K, 5, (a.strides[1] // 8, b.strides[1] // 8, 0)),
    ]
    assert [s // 8 for s in b.strides] == [1, 3]  # Fortran order: k unit stride


@pytest.mark.parametrize(("expr", "shapes"), [
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),  # three operands: no one contraction
    ("ij->ji", [(3, 4)]),  # a view: no contraction
])
def test_no_original_contraction_but_for_two_operands(expr: str, shapes: list) -> None:
    assert original_contraction(tp.plan(expr, *shapes)) is None
