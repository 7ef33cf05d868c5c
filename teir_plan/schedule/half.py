"""16-bit floats (numpy's float16, ml_dtypes' bfloat16) run as float32 plans: the one
place that decides how a plan reads and writes them.

The executor's kernels are float32 and float64 (and complex) only, so a plan with 16-bit
operands or a 16-bit result computes in float32, which is also what its accuracy asks
for: products and sums accumulate in float32 and the result is rounded to its 16-bit
type once, at the end.

* Each 16-bit operand is converted once per call (:class:`WidenStep`: numpy's cast into
  a workspace buffer) to the computation's dtype: float32, or what numpy's promotion
  gives with wider operands (float16 with float64 computes in float64).
* The contraction, or a tree of them, runs on the float32 copies; a tree's
  intermediates are float32 (``memory_limit`` counts elements, and ``plan.peak_bytes``
  counts them at 4 bytes each).
* A 16-bit result is rounded once from a float32 accumulator laid out as the result
  is (:class:`RoundStep`).  ``dtype=np.float32`` or a float32 ``out=`` makes the result
  numpy's float32 type: the accumulator itself, never rounded.

Both conversions are steps of the plan, priced by :func:`convert_seconds`, so the
plan's predicted time includes them and the explain report lists them.  Kernels that
load 16-bit lines and convert in registers are to replace these steps here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from teir_plan.machine.params import MachineParams
from teir_plan.schedule.contract import ProgramBuilder, c_strides, strides_in_order
from teir_plan.schedule.operands import OperandSpec
from teir_plan.schedule.steps import CastStep
from teir_plan.teir.enums import is_half

ACCUMULATOR = np.dtype(np.float32)
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
