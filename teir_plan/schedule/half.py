"""16-bit floats (numpy's float16, ml_dtypes' bfloat16): the one place that decides how a
plan reads and writes them.

Products and sums accumulate in float32, which is also what their accuracy asks for,
and a 16-bit result is rounded to its type once, at the end.  Per operand, this module
decides whether the plan reads it in place or converts it first
(:func:`plan_operands`):

* **In place**, where the expression is a reduction the reduction kernels run
  (``ij->i``, ``ij->j``, ``ijk->k``, ``ij->``, an operand weighted by a vector along
  summed indices: ``ij,j->i``, ``ji,j->i``, ``i,i->``, and two operands whose indices
  are all the first's, summed over the same indices: ``ij,ij->i``, ``bij,bij->bi``,
  ``bij,ij->bi``, each output a dot product of a run of each, read along both
  operands' unit stride, which must be along the innermost summed index: ``ji,ji->i``
  or a transposed second operand is converted) on operands of one 16-bit type:
  the kernels load the 16-bit elements and widen them to float32 in registers
  (executor/half_bits.py), summing in float32, so the pass over the operands moves half
  the bytes of float32 (the cost model counts 2 bytes an element: planner/reduce.py),
  when predicted cheaper than converting the operands and running the float32 plan.
* **Converted** otherwise: each 16-bit operand once per call (:class:`WidenStep`:
  numpy's cast into a workspace buffer) to the computation's dtype, float32 or what
  numpy's promotion gives with wider operands (float16 with float64 computes in
  float64), and the contraction, or a tree of them, runs on the float32 copies; a tree's
  intermediates are float32 (``memory_limit`` counts elements, and ``plan.peak_bytes``
  counts them at 4 bytes each).
* A 16-bit result is rounded once from a float32 accumulator laid out as the result
  is (:class:`RoundStep`).  ``dtype=np.float32`` or a float32 ``out=`` makes the result
  numpy's float32 type: the accumulator itself, never rounded.

Both conversions are steps of the plan, priced by :func:`convert_seconds`, so the
plan's predicted time includes them and the explain report lists them.  Products that
load 16-bit lines in the vector kernels are to replace the remaining conversions here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from teir_plan.errors import PlanError
from teir_plan.executor.checks import check_reach
from teir_plan.executor.half_bits import ACCUMULATOR
from teir_plan.frontend.contraction import Layout
from teir_plan.frontend.convention import Optimize
from teir_plan.frontend.expression import Expression
from teir_plan.machine.params import MachineParams
from teir_plan.planner.reduce import Reduction, plan_reduction
from teir_plan.schedule.contract import (
    ArraySpec,
    ProgramBuilder,
    c_strides,
    cast_seconds,
    layout_from,
    strides_in_order,
)
from teir_plan.schedule.operands import OperandSpec
from teir_plan.schedule.reduce_run import runnable
from teir_plan.schedule.steps import CastStep, ReduceStep, step_seconds
from teir_plan.schedule.tree_plan import TreeLayouts, plan_tree
from teir_plan.teir.enums import is_half

# numpy's casts between 16-bit floats and float32 are per-element loops, slower than a
# copy of the same bytes.  Measured on an AMD EPYC Zen 4 (numpy 2.4, ml_dtypes 0.7, one
# thread, 4 Ki-1 Mi elements, best of 30): float16 -> float32 1.9-2.1 ns an element,
# float32 -> float16 4.4-4.6, bfloat16 -> float32 0.5-0.7, float32 -> bfloat16 1.1-1.3,
# where a float32 copy took 0.1-0.35.  Seconds per element, by (16-bit type, direction).
CONVERT_ELEMENT_SECONDS = {
    ("float16", "widen"): 2.0e-9,
    ("float16", "round"): 4.5e-9,
    ("bfloat16", "widen"): 0.6e-9,
    ("bfloat16", "round"): 1.2e-9,
}
# The share of the machine's memory bandwidth (both cores') one thread's pass gets, as
# planner/copy.py prices a copy on one thread.
ONE_THREAD_BUS = 0.6


def computation_dtype(result: np.dtype) -> np.dtype:
    """The dtype a plan's steps compute in for a result of ``result``: float32 for a
    16-bit result, else the result's own."""
    return ACCUMULATOR if is_half(result) else result


def convert_seconds(elements: int, half: np.dtype, other: np.dtype, direction: str,
                    params: MachineParams) -> float:
    """A conversion's predicted seconds: one pass of numpy's cast loop on one thread,
    reading ``elements`` of one type and writing them in the other (2 bytes and 4 for
    float32, per element), at the machine's copy rate and its memory bandwidth, or at
    the cast loop's own rate when that is slower (CONVERT_ELEMENT_SECONDS)."""
    nbytes = elements * (half.itemsize + other.itemsize)
    move = nbytes / params.copy_bytes_per_second
    memory = nbytes / (params.first_read_rate(nbytes) * ONE_THREAD_BUS)
    name = "float16" if half.kind == "f" else "bfloat16"
    loop = elements * CONVERT_ELEMENT_SECONDS[(name, direction)]
    return max(move, memory, loop)


def _shape_text(shape: tuple[int, ...]) -> str:
    return " x ".join(str(n) for n in shape) if shape else "a scalar"


@dataclass(frozen=True)
class WidenStep(CastStep):
    """A 16-bit operand converted, once per call, to the dtype the plan computes in."""

    shape: tuple[int, ...] = ()
    source: np.dtype = np.dtype(np.float16)

    def describe(self) -> str:
        return (f"convert {self.label} ({self.source}, {_shape_text(self.shape)}) to "
                f"{self.dtype} once, to compute in {self.dtype} "
                f"(predicted {self.seconds * 1e6:.1f} us)")


@dataclass(frozen=True)
class RoundStep(CastStep):
    """The float32 accumulator rounded, once per call, to the 16-bit result type."""

    shape: tuple[int, ...] = ()

    def run(self, buffers: list[np.ndarray]) -> None:
        # A sum beyond the 16-bit range rounds to infinity, as numpy.einsum's 16-bit
        # result does, without the warning numpy's cast gives.
        with np.errstate(over="ignore"):
            np.copyto(buffers[self.dst], buffers[self.src], casting="unsafe")

    def describe(self) -> str:
        return (f"round {self.label} ({ACCUMULATOR}, {_shape_text(self.shape)}) to "
                f"{self.dtype} once (predicted {self.seconds * 1e6:.1f} us)")


def widen_operand(b: ProgramBuilder, i: int, spec: OperandSpec, dtype: np.dtype,
                  params: MachineParams) -> int:
    """Add operand ``i`` (16-bit) converted to ``dtype`` as a step: the buffer it writes."""
    t = b.temp(f"operand {i} as {dtype}", spec.shape, dtype)
    seconds = convert_seconds(math.prod(spec.shape), spec.dtype, dtype, "widen", params)
    b.steps.append(WidenStep(i, t, f"operand {i}", dtype, seconds, spec.shape, spec.dtype))
    return t


def accumulator(b: ProgramBuilder, result: int) -> int:
    """A float32 buffer for the contraction to write in place of buffer ``result`` (a
    16-bit one), contiguous in ``result``'s memory order, so that rounding it is one
    pass in order."""
    spec = b.specs[result]
    shape = spec.shape
    perm = sorted(range(len(shape)), key=lambda a: -abs(spec.strides[a]))
    strides = strides_in_order(shape, perm)
    return b.temp(f"result as {ACCUMULATOR}", shape, ACCUMULATOR,
                  strides=None if strides == c_strides(shape) else strides)


def round_result(b: ProgramBuilder, acc: int, result: int, params: MachineParams) -> None:
    """Add the rounding of accumulator ``acc`` into the 16-bit buffer ``result``."""
    spec = b.specs[result]
    seconds = convert_seconds(math.prod(spec.shape), spec.dtype, ACCUMULATOR, "round",
                              params)
    b.steps.append(RoundStep(acc, result, "the result", spec.dtype, seconds, spec.shape))


# ---- each operand read in place or converted ------------------------------------------


def convert_operands(b: ProgramBuilder, dtype: np.dtype, params: MachineParams) -> list[int]:
    """The buffers of the operands in ``dtype``, the computation's: an operand of another
    dtype converted once, by a step (a 16-bit one by :func:`widen_operand`)."""
    ids = []
    for i in range(b.n):
        s = b.specs[i]
        if s.dtype == dtype:
            ids.append(i)
        elif is_half(s.dtype):
            ids.append(widen_operand(b, i, s, dtype, params))
        else:
            t = b.temp(f"operand {i} as {dtype}", s.shape, dtype)
            b.steps.append(CastStep(i, t, f"operand {i} ({s.dtype})", dtype,
                                    cast_seconds(s, dtype, params)))
            ids.append(t)
    return ids


def plan_operands(b: ProgramBuilder, expr: Expression, target: int, dtype: np.dtype,
                  opt: Optimize, relu: bool, threads: int, params: MachineParams,
                  block_order: str | None) -> TreeLayouts | None:
    """Add the steps computing buffer ``target`` (of ``dtype``) from the operands: a
    reduction reading its 16-bit operands in place (:func:`in_place_reduction`) where
    predicted cheaper than converting them, else each operand converted to ``dtype``
    (:func:`convert_operands`) and the plan of ``schedule/tree_plan.py`` on the
    converted buffers, whose layouts it returns (None for one step)."""
    red = None if relu or block_order is not None else in_place_reduction(
        b, expr, target, dtype, params, threads)
    if red is None:
        return plan_tree(b, expr, convert_operands(b, dtype, params), target, dtype, opt,
                         relu, threads, params, block_order)
    reduction, order, lays = red
    # The converted plan, in a builder of its own: kept when it is predicted cheaper.
    converted = ProgramBuilder(b.n, [], b.top, b.expansions, b.ceiling)
    converted.specs.update(b.specs)
    converted.buffers.extend(b.buffers)
    converted.steps.extend(b.steps)
    layouts = plan_tree(converted, expr, convert_operands(converted, dtype, params), target,
                        dtype, opt, relu, threads, params)
    seconds = (math.inf if converted.outpriced else
               sum(step_seconds(st) for st in converted.steps[len(b.steps):]))
    if reduction.cost.seconds < min(seconds, b.ceiling):
        _add_in_place_step(b, expr, order, target, reduction, lays)
        return None
    b.specs.update(converted.specs)
    b.buffers[:] = converted.buffers
    b.steps[:] = converted.steps
    b.outpriced = converted.outpriced
    assert converted.pending is not None
    for proof in converted.pending:
        if b.pending is None:
            proof()
        else:
            b.pending.append(proof)
    return layouts


def in_place_reduction(b: ProgramBuilder, expr: Expression, target: int, dtype: np.dtype,
                       params: MachineParams, threads: int
                       ) -> tuple[Reduction, tuple[int, ...], list[Layout]] | None:
    """The reduction computing ``target`` (float32) from the operands read in place, the
    order it takes them in (the operand summed, then the weights) and their layouts, or
    None unless the expression is one the reduction kernels run on 16-bit operands:
    one or two operands of one 16-bit type in native byte order; one summed over some
    of its indices, or one weighted by the other, a vector along summed indices or
    weights along kept ones too where the planner reads them so (planner/reduce.py's
    ``kept_weights``: the inner kernel, both operands' unit stride along the innermost
    summed index; as ``contract_step`` plans them: an index summed in one of two
    operands only is first summed out by a step of its own, which is not read in place
    here).  (float32 and float64 operands keep the plans of schedule/contract.py, whose
    ``ij,ij->i`` is a dot-product program: not offered this route.)"""
    specs = [b.specs[i] for i in range(b.n)]
    first = specs[0].dtype
    if (dtype != ACCUMULATOR or not 1 <= len(specs) <= 2 or not is_half(first)
            or not first.isnative or any(s.dtype != first for s in specs)):
        return None
    terms, out_term = list(expr.inputs), expr.output
    extents: dict[str, int] = {}
    for term, spec in zip([*terms, out_term], [*specs, b.specs[target]]):
        for ch, n in zip(term, spec.shape):
            extents[ch] = max(extents.get(ch, 1), n)
    varies = [{c for c, n in zip(t, s.shape) if n > 1} for t, s in zip(terms, specs)]
    if len(specs) == 2 and any(c not in out_term and c not in varies[1 - j]
                               for j in (0, 1) for c in varies[j]):
        return None  # a pre-reduction first (schedule/contract.py)
    lays = [layout_from(t, s, extents) for t, s in zip(terms, specs)]
    out = layout_from(out_term, b.specs[target], extents)
    for j in range(len(lays)):
        w = lays[1 - j] if len(lays) == 2 else None
        red = plan_reduction(lays[j], out, w, dtype, params, threads, operand=first,
                             kept_weights=True)
        if red is not None:
            order = (j, 1 - j)[:len(lays)]
            return red, order, [*(lays[k] for k in order), out]
    return None


def _add_in_place_step(b: ProgramBuilder, expr: Expression, order: tuple[int, ...],
                       target: int, red: Reduction, lays: Sequence[Layout]) -> None:
    """Add the in-place reduction as a :class:`ReduceStep`, proving (now or with the
    plan's other proofs) that its tables stay inside the buffers, each in elements of
    its own dtype (2 bytes for the operands): the layouts' reach inside each buffer,
    and the tables' offsets spanning exactly the layouts' (the same elements)."""
    sub = ",".join(expr.inputs) + "->" + expr.output
    arrays = [ArraySpec.of(b.specs[i]) for i in (*order, target)]
    tensors = (*range(len(order)), 2)  # (x, the weights, out: Reduction.reach's)

    def prove() -> None:
        for j, array, lay in zip(tensors, arrays, lays):
            check_reach(f"tensor {j}", j, array,  # type: ignore[arg-type]
                        lay.extents, lay.strides)
            axes = [(n, st) for n, st in zip(lay.extents, lay.strides) if n > 1]
            want = (sum(min(0, (n - 1) * st) for n, st in axes),
                    sum(max(0, (n - 1) * st) for n, st in axes))
            if red.reach(j) != want:
                raise PlanError(f"reduction {sub}: tensor {j}'s tables reach offsets "
                                f"{red.reach(j)}, its layout {want}")

    if b.pending is None:
        prove()
    else:
        b.pending.append(prove)
    b.steps.append(ReduceStep(sub, tuple(order), target, runnable(red)))
