"""The steps of a plan: every stage a call runs, each a value that can be shown.

A plan works on a table of buffers: the operands first, then the output, then
temporaries and constants.  Every step reads and writes buffers by index, so a
plan made once runs again on new arrays of the same layouts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import opt_einsum as oe

from teir_plan.executor.complex_tiles import expand_parts
from teir_plan.executor.execute import run_blocked, run_lowered
from teir_plan.executor.lower import Lowered, lower
from teir_plan.frontend.contraction import Contraction
from teir_plan.frontend.convention import numpy_subscripts
from teir_plan.planner.block import Blocking
from teir_plan.planner.candidates import Choice
from teir_plan.planner.cost import Cost
from teir_plan.planner.pack import Pack
from teir_plan.schedule.reduce_run import RunnableReduction
from teir_plan.schedule.view import View
from teir_plan.schedule.workspace import carve, carved_bytes, workspace
from teir_plan.teir.records import TEIR


@dataclass(frozen=True)
class BufferSpec:
    """A buffer the plan allocates (``kind`` temp) or holds (``kind`` const)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    kind: str  # "temp" or "const"
    fill: float = 0.0
    # Memory order of a temp's axes, outermost first (None: C order).  A result staged
    # in another layout than ``out`` is a permuted view of a contiguous buffer.
    axis_order: tuple[int, ...] | None = None

    def make(self) -> np.ndarray:
        """A const buffer, filled; a temp buffer borrowed from the workspace (the caller
        gives it back)."""
        if self.kind == "const":
            return np.full(self.shape, self.fill, dtype=self.dtype)
        return workspace.borrow(self.shape, self.dtype, self.axis_order)


@dataclass(frozen=True)
class Candidate:
    """One ranked schedule of a TEIR step: its program, its axis names, its cost."""

    teir: TEIR
    names: tuple[str, ...]
    cost: Cost
    contraction: Contraction | None = None
    choice: Choice | None = None
    packs: tuple[Pack, ...] = ()  # inputs copied into packed buffers before ``teir`` runs

    @property
    def predicted_seconds(self) -> float:
        return self.cost.seconds

    @cached_property
    def lowered(self) -> Lowered:
        """The program's loop and tile tables (kept: a cached plan's call does not hash
        its program to find them)."""
        return lower(self.teir)

    @cached_property
    def lowered_packs(self) -> tuple[Lowered, ...]:
        return tuple(lower(p.copy.teir) for p in self.packs)


@dataclass(frozen=True)
class Step:
    """Base of all steps: ``run(buffers)`` and a one-line ``describe()``."""

    def run(self, buffers: list[np.ndarray]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def kind(self) -> str:
        return type(self).__name__.removesuffix("Step").lower()


@dataclass(frozen=True)
class CastStep(Step):
    """Convert an operand to the computation's dtype (numpy's result type)."""

    src: int
    dst: int
    label: str
    dtype: np.dtype
    seconds: float = 0.0  # predicted (schedule.build.cast_seconds)

    def run(self, buffers: list[np.ndarray]) -> None:
        np.copyto(buffers[self.dst], buffers[self.src], casting="unsafe")

    def describe(self) -> str:
        predicted = f" (predicted {self.seconds * 1e6:.1f} us)" if self.seconds else ""
        return f"cast {self.label} to {self.dtype}{predicted}"


@dataclass(frozen=True)
class ExpandStep(CastStep):
    """A complex operand written as the real matrices of its elements
    (:func:`teir_plan.executor.complex_tiles.expand_parts`): the other operand of a complex
    product then meets it in a real contraction."""

    def run(self, buffers: list[np.ndarray]) -> None:
        expand_parts(buffers[self.src], buffers[self.dst])

    def describe(self) -> str:
        predicted = f" (predicted {self.seconds * 1e6:.1f} us)" if self.seconds else ""
        return (f"expand {self.label} into its elements' 2 x 2 real matrices "
                f"({self.dtype}){predicted}")


@dataclass(frozen=True)
class FillStep(Step):
    """Fill a buffer with a constant (a contraction over an extent-0 index is 0)."""

    dst: int
    value: float
    reason: str

    def run(self, buffers: list[np.ndarray]) -> None:
        buffers[self.dst].fill(self.value)

    def describe(self) -> str:
        return f"fill output with {self.value} ({self.reason})"


@dataclass(frozen=True)
class CopyStep(Step):
    """Copy a buffer into another of the same shape (e.g. into ``out`` of another dtype)."""

    src: int
    dst: int
    reason: str

    def run(self, buffers: list[np.ndarray]) -> None:
        np.copyto(buffers[self.dst], buffers[self.src], casting="unsafe")

    def describe(self) -> str:
        return f"copy result into output ({self.reason})"


@dataclass(frozen=True)
class ViewStep(Step):
    """The result is a view of an operand (see :mod:`teir_plan.schedule.view`): a call
    without ``out`` returns the view and runs nothing; this step runs only for a plan
    called with ``out=``, copying the view into it."""

    src: int
    dst: int
    view: View

    def run(self, buffers: list[np.ndarray]) -> None:
        np.copyto(buffers[self.dst], self.view.of(buffers[self.src]))

    def describe(self) -> str:
        return f"{self.view.describe()}; with out=, copied into out"


@dataclass(frozen=True)
class NumpyStep(Step):
    """Compute with numpy.einsum: dtypes TEIR does not cover (integers, complex, ...)."""

    subscripts: str
    inputs: tuple[int, ...]
    dst: int
    reason: str

    def run(self, buffers: list[np.ndarray]) -> None:
        # Operands in the result dtype first: numpy's optimize=True path may otherwise sum
        # a bool operand alone (as logical or) before mixing it with integers.
        dt = buffers[self.dst].dtype
        ops = [np.asarray(buffers[i], dtype=dt) for i in self.inputs]
        # numpy takes only its 52 letters: the indices renamed to them, or, with more,
        # opt_einsum's pairwise steps, each renamed (checked when planned:
        # frontend.convention.check_numpy_indices).
        sub = numpy_subscripts(self.subscripts)
        if sub is not None:
            res = np.einsum(sub, *ops, optimize=True)
        else:
            res = oe.contract(self.subscripts, *ops, backend="numpy")
        np.copyto(buffers[self.dst], res, casting="unsafe")

    def describe(self) -> str:
        return f"numpy.einsum({self.subscripts!r}) ({self.reason})"


@dataclass(frozen=True)
class TEIRStep(Step):
    """Run a TEIR program on buffers: the contraction itself, a permutation, a reduction."""

    subscripts: str
    inputs: tuple[int, ...]
    dst: int
    chosen: Candidate
    alternatives: tuple[Candidate, ...] = field(default=(), compare=False)
    role: str = "contract"  # contract, permute, reduce

    @property
    def teir(self) -> TEIR:
        return self.chosen.teir

    def run(self, buffers: list[np.ndarray]) -> None:
        if not self.chosen.packs:  # (most steps: no list of borrowed buffers to keep)
            if len(self.inputs) == 2:
                run_lowered(self.chosen.lowered,
                            (buffers[self.inputs[0]], buffers[self.inputs[1]],
                             buffers[self.dst]))
            else:
                run_lowered(self.chosen.lowered,
                            [*(buffers[i] for i in self.inputs), buffers[self.dst]])
            return
        arrays = [buffers[i] for i in (*self.inputs, self.dst)]
        # One borrowed buffer for all of them: a call's peak memory is then its slots
        # and the largest step's packs, whether steps run one by one or in one call.
        dtype = np.dtype(self.teir.primitives.data_type.numpy)
        raw = workspace.borrow((self.pack_bytes,), np.uint8)
        try:
            packed = carve(raw, [p.shape for p in self.chosen.packs], dtype)
            for pack, low, buf in zip(self.chosen.packs, self.chosen.lowered_packs, packed):
                run_lowered(low, [arrays[pack.tensor], buf])
                arrays[pack.tensor] = buf
            run_lowered(self.chosen.lowered, arrays)
        finally:
            workspace.give_back(raw)

    @property
    def pack_bytes(self) -> int:
        """Bytes the step borrows for its packed operands while it runs."""
        isz = np.dtype(self.teir.primitives.data_type.numpy).itemsize
        return carved_bytes([math.prod(p.shape) * isz for p in self.chosen.packs])

    def describe(self, packs: bool = True) -> str:
        c = self.chosen.cost
        packs_text = "".join(f"; {p.describe()}" for p in self.chosen.packs) if packs else ""
        return (
            f"{self.role} {self.subscripts} with TEIR {self.teir.primitives.prim_main} "
            f"(predicted {c.seconds * 1e6:.1f} us){packs_text}"
        )

    def with_choice(self, cand: Candidate) -> TEIRStep:
        return TEIRStep(self.subscripts, self.inputs, self.dst, cand, self.alternatives, self.role)


@dataclass(frozen=True)
class ReduceStep(Step):
    """Sum axes of an operand in one pass over it, weighted by a second input when there
    is one, a vector along them (or, 16-bit operands read in place, weights along kept
    axes too: ``ij,ij->i``; see :mod:`teir_plan.planner.reduce`): a kernel of its own,
    not a TEIR program."""

    subscripts: str
    inputs: tuple[int, ...]  # the operand summed, then the weights if any
    dst: int
    reduction: RunnableReduction
    # The best TEIR program's predicted seconds for the same step (None: none was under
    # the plan's ceiling), for reports.
    teir_seconds: float | None = field(default=None, compare=False)

    @property
    def cost(self) -> Cost:
        return self.reduction.cost

    def run(self, buffers: list[np.ndarray]) -> None:
        w = buffers[self.inputs[1]] if len(self.inputs) > 1 else None
        self.reduction.run(buffers[self.inputs[0]], w, buffers[self.dst])

    def describe(self) -> str:
        teir = ("" if self.teir_seconds is None else
                f"; the best TEIR program {self.teir_seconds * 1e6:.1f} us")
        return (f"reduce {self.subscripts} with the {self.reduction.describe()} "
                f"(predicted {self.cost.seconds * 1e6:.1f} us{teir})")


def step_seconds(step: Step) -> float:
    """A step's predicted seconds (0 for the steps the cost model does not price)."""
    if isinstance(step, TEIRStep):
        return step.chosen.cost.seconds
    if isinstance(step, ReduceStep):
        return step.cost.seconds
    if isinstance(step, CastStep):
        return step.seconds
    return 0.0


@dataclass(frozen=True)
class BlockedStep(TEIRStep):
    """A contraction run block by block (see :mod:`teir_plan.planner.block`): the TEIR
    program computes one block into a stage buffer in cache, each block is copied into
    the output while it is still there.  ``teir`` is the block's program (its output is
    the stage); the loops around it and the copy are ``blocking``'s tables."""

    blocking: Blocking | None = None

    def run(self, buffers: list[np.ndarray]) -> None:
        b = self.blocking
        assert b is not None
        arrays = [buffers[i] for i in (*self.inputs, self.dst)]
        run_blocked(self.chosen.lowered, b.outer_table, b.block_table, b.stage_elements, arrays,
                    b.l2_room)

    def describe(self, packs: bool = True) -> str:
        assert self.blocking is not None
        c = self.chosen.cost
        return (
            f"{self.role} {self.subscripts} in {self.blocking.describe()}, each block by "
            f"TEIR {self.teir.primitives.prim_main} into a stage in cache, then copied "
            f"into out (predicted {c.seconds * 1e6:.1f} us)"
        )

    def with_choice(self, cand: Candidate) -> BlockedStep:
        return BlockedStep(self.subscripts, self.inputs, self.dst, cand, self.alternatives,
                           self.role, self.blocking)


@dataclass(frozen=True)
class PartsStep(TEIRStep):
    """A real operand times a complex one as a real contraction over the complex tensors'
    parts (:mod:`teir_plan.schedule.parts`), where no part of the complex operand is
    infinite or NaN.  numpy promotes the real operand to ``x + 0j``: its product's real
    part is ``x a - 0 b`` and its imaginary part ``x b + 0 a``, NaN where ``b`` (or
    ``a``) is infinite or NaN, where the parts product's ``x a`` (``x b``) is not.  So
    the step first sums the complex operand (one pass over it, no temporary: the sum is
    finite unless a part is infinite or NaN, or it overflows) and, when the sum is not
    finite, computes the promoted product with numpy.einsum itself (numpy's numbers; the
    same as the parts product's wherever the sum only overflowed)."""

    complex_input: int = 0  # which of ``inputs`` is the complex operand
    promoted: str = ""  # the step's expression in numpy's letters, without the parts

    def run(self, buffers: list[np.ndarray]) -> None:
        z = buffers[self.inputs[self.complex_input]]
        if np.isfinite(np.sum(z)):
            super().run(buffers)
            return
        ops = [buffers[i] for i in self.inputs]
        ops[1 - self.complex_input] = ops[1 - self.complex_input].astype(z.dtype)
        with np.errstate(invalid="ignore", over="ignore"):  # (numpy's NaNs are the point)
            np.einsum(self.promoted, *ops, out=buffers[self.dst])

    def describe(self, packs: bool = True) -> str:
        return (super().describe(packs) + "; the promoted product instead where the "
                "complex operand has an infinite or NaN part")

    def with_choice(self, cand: Candidate) -> PartsStep:
        return PartsStep(self.subscripts, self.inputs, self.dst, cand, self.alternatives,
                         self.role, self.complex_input, self.promoted)


def buffer_names(num_operands: int, specs: Sequence[BufferSpec]) -> list[str]:
    return [f"operand {i}" for i in range(num_operands)] + ["out"] + [s.name for s in specs]
