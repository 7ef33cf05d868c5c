"""Planning one step of a plan (teir_plan/schedule/contract.py): ``contract_step`` on a
``ProgramBuilder`` adds to its table of buffers and steps a contraction, a permutation
or a sum, after summing out first an index that only one operand carries (a
pre-reduction); ``top`` bounds the candidates kept and ``ceiling`` drops a step whose
every candidate would cost more.  The steps a builder makes are run here on their
buffers and checked against numpy.einsum in float64, their structure against what the
module's rules say for each case, worked out by hand; and the layout helpers (C strides,
strides of a memory order, its axes outermost first) against values by hand.

(tests/test_reductions.py checks the reduction kernels and tests/test_complex.py the
complex products through tp.einsum; here the builder itself.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

from teir_plan.machine import MachineParams
from teir_plan.schedule.contract import (
    ProgramBuilder,
    c_strides,
    cast_seconds,
    contract_step,
    outer_first,
    strides_in_order,
)
from teir_plan.schedule.operands import OperandSpec
from teir_plan.schedule.workspace import workspace

PARAMS = MachineParams.reference()
RNG = np.random.default_rng(31)


def _builder(arrays: list[np.ndarray], out: np.ndarray, **kw: object) -> ProgramBuilder:
    b = ProgramBuilder(len(arrays), **kw)  # type: ignore[arg-type]
    for i, a in enumerate([*arrays, out]):
        b.specs[i] = OperandSpec.of(a)
    return b


def _run(b: ProgramBuilder, arrays: list[np.ndarray], out: np.ndarray) -> None:
    """Run the builder's steps on the operands, out, and its buffers (made here)."""
    made = [spec.make() for spec in b.buffers]
    try:
        for step in b.steps:
            step.run([*arrays, out, *made])
    finally:
        for spec, arr in zip(b.buffers, made):
            if spec.kind == "temp":
                workspace.give_back(arr)


def _step(terms: list[str], arrays: list[np.ndarray], out_term: str, relu: bool = False,
          **kw: object) -> tuple[ProgramBuilder, np.ndarray]:
    ext = {ch: n for t, a in zip(terms, arrays) for ch, n in zip(t, a.shape)}
    out = np.full([ext[ch] for ch in out_term], 1e3)  # the steps must write all of it
    b = _builder(arrays, out, **kw)
    contract_step(b, terms, list(range(len(arrays))), out_term, len(arrays),
                  np.dtype(np.float64), True, relu, 1, PARAMS)
    return b, out


def test_a_contraction_is_one_step_of_ranked_candidates() -> None:
    a, c = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    b, out = _step(["ik", "kj"], [a, c], "ij")
    [step] = b.steps
    assert step.kind == "teir" and step.role == "contract"  # type: ignore[attr-defined]
    assert step.subscripts == "ik,kj->ij" and step.inputs == (0, 1) and step.dst == 2  # type: ignore[attr-defined]
    alts = step.alternatives  # type: ignore[attr-defined]
    assert 1 <= len(alts) <= 8 and alts[0] is step.chosen  # type: ignore[attr-defined]
    seconds = [cand.predicted_seconds for cand in alts]
    assert seconds == sorted(seconds)
    _run(b, [a, c], out)
    np.testing.assert_allclose(out, a @ c, rtol=1e-12)
    b1, _ = _step(["ik", "kj"], [a, c], "ij", top=1)
    assert len(b1.steps[0].alternatives) == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(("terms", "shapes", "out_term", "summed", "temp"), [
    # x is summed in operand 0 only: summed first into "ij"
    (["ijx", "jk"], [(3, 4, 5), (4, 2)], "ik", ("ijx->ij", 0), (3, 4)),
    # operand 1 is broadcast along j (extent 1 there): j is summed out of operand 0
    (["ij", "jk"], [(3, 4), (1, 2)], "ik", ("ij->i", 0), (3,)),
    # y in operand 1 only
    (["ij", "jky"], [(3, 4), (4, 2, 3)], "ik", ("jky->jk", 1), (4, 2)),
])
def test_an_index_of_one_operand_is_summed_first(terms: list[str], shapes: list,
                                                 out_term: str, summed: tuple[str, int],
                                                 temp: tuple[int, ...]) -> None:
    arrays = [RNG.standard_normal(s) for s in shapes]
    b, out = _step(terms, arrays, out_term)
    sub, operand = summed
    assert [s.subscripts for s in b.steps][0] == sub  # type: ignore[attr-defined]
    assert b.steps[0].inputs == (operand,)  # type: ignore[attr-defined]
    [buf] = [x for x in b.buffers if x.kind == "temp"]
    assert buf.shape == temp and buf.name.startswith(f"operand {terms[operand]} summed over")
    assert b.steps[-1].dst == len(arrays)  # type: ignore[attr-defined]
    _run(b, arrays, out)
    want = np.einsum(f"{','.join(terms)}->{out_term}", *arrays)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


def test_one_operand_without_a_sum_is_a_permutation() -> None:
    x = RNG.standard_normal((3, 4, 5))
    b, out = _step(["ijk"], [x], "kij")
    [step] = b.steps
    assert step.role == "permute" and step.teir.primitives.prim_main.name == "COPY"  # type: ignore[attr-defined]
    _run(b, [x], out)
    np.testing.assert_array_equal(out, x.transpose(2, 0, 1))


def test_a_sum_with_relu_is_a_product_with_a_constant_of_ones() -> None:
    # ReLU last rules the reduction kernels out: a TEIR program against in1 = ones.
    x = RNG.standard_normal((6, 7))
    b, out = _step(["ij"], [x], "i", relu=True)
    [step] = b.steps
    assert step.role == "reduce" and step.inputs == (0, 2)  # type: ignore[attr-defined]
    [ones] = b.buffers
    assert (ones.kind, ones.shape, ones.fill) == ("const", (1,), 1.0)
    _run(b, [x], out)
    np.testing.assert_allclose(out, np.maximum(x.sum(axis=1), 0), rtol=1e-12)


def test_a_complex_sum_is_the_sums_of_its_parts() -> None:
    z = RNG.standard_normal((4, 6)) + 1j * RNG.standard_normal((4, 6))
    z[1, 2] = complex(np.inf, 1.0)  # inf + 1j: summed as parts, the imaginary part stays
    out = np.full(4, np.nan, np.complex128)
    b = _builder([z], out)
    contract_step(b, ["ij"], [0], "i", 1, np.dtype(np.complex128), True, False, 1, PARAMS)
    [step] = b.steps
    assert "the parts" in step.subscripts  # type: ignore[attr-defined]
    _run(b, [z], out)
    want = z.sum(axis=1)
    np.testing.assert_allclose(out.real, want.real, rtol=1e-12)
    np.testing.assert_allclose(out.imag, want.imag, rtol=1e-12)
    assert out[1].real == np.inf and np.isfinite(out[1].imag)


def test_a_ceiling_under_every_candidate_outprices_the_step() -> None:
    a, c = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    b, _ = _step(["ik", "kj"], [a, c], "ij", ceiling=1e-15)
    assert b.outpriced and b.steps == []
    b, _ = _step(["ik", "kj"], [a, c], "ij", ceiling=math.inf)
    assert not b.outpriced and len(b.steps) == 1


def test_proofs_wait_in_pending_when_asked() -> None:
    a, c = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 4))
    pending: list = []
    b, _ = _step(["ik", "kj"], [a, c], "ij", pending=pending)
    # one proof per candidate kept (each program inside its three buffers)
    assert len(pending) == len(b.steps[0].alternatives) >= 1  # type: ignore[attr-defined]
    for proof in pending:
        proof()


def test_layouts_by_hand() -> None:
    assert c_strides((2, 3, 4)) == (12, 4, 1)
    assert c_strides((2, 1, 3)) == (3, 0, 1)  # an extent-1 axis: stride 0
    assert c_strides((2, 0)) == (0, 0)  # no elements
    # Memory order axis 2, then 0, then 1 (innermost): axis 1 stride 1, axis 0 |1| = 3,
    # axis 2 |0| |1| = 6.
    assert strides_in_order((2, 3, 4), (2, 0, 1)) == (3, 1, 6)
    assert outer_first((3, 1, 6)) == (2, 0, 1)
    assert strides_in_order((2, 3, 4), (0, 1, 2)) == c_strides((2, 3, 4))


def test_a_cast_is_priced_as_one_pass_at_the_memory_rate() -> None:
    spec = OperandSpec((1000, 10), (10, 1), np.dtype(np.float32))
    # 10^4 elements read as 4 bytes and written as 8
    assert cast_seconds(spec, np.dtype(np.float64), PARAMS) == pytest.approx(
        1e4 * 12 / PARAMS.dram_bytes_per_second, rel=1e-12)
