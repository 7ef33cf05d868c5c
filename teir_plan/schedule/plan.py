"""``tp.Plan``: a reusable, inspectable, callable plan for one einsum problem."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from teir_plan.errors import DTypeError, OperandTypeError, PlanError
from teir_plan.executor.checks import arrays_overlap
from teir_plan.executor.execute import run_lowered
from teir_plan.executor.threads import call_threads, free_cores, idle_seconds, mark_busy
from teir_plan.frontend.expression import Expression
from teir_plan.schedule.info import PlanInfo
from teir_plan.schedule.memory import MemoryPlan, memory_plan
from teir_plan.schedule.one_call import OneCall, one_call_program, run_one_call
from teir_plan.schedule.operands import OperandSpec, addressable, as_operand
from teir_plan.schedule.steps import (
    BufferSpec,
    Candidate,
    ReduceStep,
    Step,
    TEIRStep,
    step_seconds,
)
from teir_plan.schedule.tiny import (
    Route,
    Route1,
    RouteInto,
    RouteInto1,
    diagonal_sum_route,
    dot_route,
    einsum_layout,
    multiply_route,
    small_product_route,
    sum_route,
    weighted_sum_route,
)
from teir_plan.schedule.view import View
from teir_plan.schedule.workspace import POOL_MIN_BYTES, workspace
from teir_plan.teir.records import TEIR

if TYPE_CHECKING:
    from teir_plan.schedule.idle import SerialWhenIdle
    from teir_plan.schedule.trials import Outcome, Trials


_SEEN_LIMIT = 8  # array layouts remembered per operand (see Plan._seen)


class Plan:
    """A planned einsum: call it on arrays of the layouts it was made for.

    >>> import numpy as np, teir_plan as tp
    >>> p = tp.plan("ij,jk->ik", (8, 5), (5, 3), dtype=np.float32)
    >>> a, b = np.ones((8, 5), np.float32), np.ones((5, 3), np.float32)
    >>> float(p(a, b)[0, 0])
    5.0
    """

    def __init__(
        self,
        *,
        expression: Expression,
        subscripts: str,
        operands: Sequence[OperandSpec],
        out_spec: OperandSpec,
        steps: Sequence[Step],
        buffers: Sequence[BufferSpec],
        info: PlanInfo,
        main: int | None,
        view: View | None = None,
        dot: bool = True,
        idle: SerialWhenIdle | None = None,
    ) -> None:
        self.expression = expression
        self.subscripts = subscripts
        self.operands = tuple(operands)
        self.out_spec = out_spec
        self.steps = tuple(steps)
        self.buffers = tuple(buffers)
        self.info = info  # what planning recorded (schedule/info.py)
        self._main = main
        # The result as a view of an operand (a permutation, a diagonal), returned by a
        # call without out= instead of running the steps.
        self.view = view
        # Whether a tiny product may run on numpy's dot (schedule/tiny.py): not for the
        # alternatives (with_candidate), which autotune and explain(measure=True) time
        # as the programs they are.
        self._dot = dot
        # How many threads a call that finds the worker threads idle runs on (one when
        # they sleep, the cores left free by other threads; schedule/idle.py); None:
        # every call runs as planned.
        self.idle = idle
        self.measured_seconds: float | None = None
        # While set, calls run the contenders of the plan's trials in turns, or the one
        # they kept (schedule/trials.py); ``choice`` records what the trials found.
        self.trials: Trials | None = None
        self.choice: Outcome | None = None
        self._consts = {i: b.make() for i, b in enumerate(self.buffers) if b.kind == "const"}
        # The usual plan is one TEIR step from the operands into out, without packs or
        # temporaries: run() then calls it directly (a cached 4 x 4 call spent 2 of its
        # 10 us in the general step machinery).
        n = len(self.operands)
        only = self.steps[0] if len(self.steps) == 1 else None
        self._single = only if (
            type(only) is TEIRStep and not only.chosen.packs and not self.buffers
            and only.inputs == tuple(range(n)) and only.dst == n) else None
        # ... or one reduction step (a mid-sized sum: 1 us of some 14).
        self._single_reduce = only.reduction if (
            type(only) is ReduceStep and not self.buffers and only.inputs == tuple(range(n))
            and only.dst == n) else None
        # Per operand, the (shape, byte strides, dtype) of plain arrays already found to
        # match its spec: a repeated call compares those instead of building a spec.
        self._seen: tuple[set[tuple[object, ...]], ...] = tuple(set() for _ in self.operands)
        self._seen_out: set[tuple[object, ...]] = set()  # the same for out= arrays
        # The last two plain arrays a call accepted, as (shape, byte strides, dtype) of
        # each, flat: a two-operand call that repeats them compares one tuple.
        self._last2: tuple[object, ...] | None = None
        self._last1: tuple[object, ...] | None = None  # the same for one operand

    # ---- what the plan is -------------------------------------------------
    @property
    def main_step(self) -> TEIRStep | None:
        return self.steps[self._main] if self._main is not None else None  # type: ignore[return-value]

    @property
    def teir(self) -> TEIR | None:
        """The TEIR program of the main contraction step (None if no TEIR step runs)."""
        step = self.main_step
        return step.teir if step is not None else None

    def format_teir(self) -> str | None:
        """The main step's TEIR program as the TEIR specification's table, each axis named
        by the einsum indices it runs over (``rs``: r and s fused into one axis, ``pq^``:
        the outer part of a split ``pq``); None if no TEIR step runs."""
        step = self.main_step
        return step.teir.format(list(step.chosen.names)) if step is not None else None

    @property
    def predicted_seconds(self) -> float:
        return sum(step_seconds(s) for s in self.steps)

    @property
    def alternatives(self) -> list[Plan]:
        """The ranked candidates of the main step, each a plan of its own (the first is
        this plan's choice)."""
        step = self.main_step
        if step is None:
            if self.numpy_call is None:
                return [self]
            # The plan's own steps on the executor, as autotune and explain(measure=True)
            # time them (and the tests check them), not the tiny call's numpy route.
            return [self._on_executor(self.steps)]
        return [self.with_candidate(c) for c in step.alternatives]

    def with_candidate(self, cand: Candidate, step: int | None = None) -> Plan:
        """This plan with step ``step`` (the main step by default) running ``cand``."""
        i = self._main if step is None else step
        assert i is not None
        steps = list(self.steps)
        steps[i] = steps[i].with_choice(cand)  # type: ignore[attr-defined]
        return self._on_executor(steps)

    def _on_executor(self, steps: Sequence[Step]) -> Plan:
        """This plan with ``steps``, its calls always on the executor (never a tiny
        call's numpy route): what autotune and explain(measure=True) time."""
        return Plan(
            expression=self.expression, subscripts=self.subscripts, operands=self.operands,
            out_spec=self.out_spec, steps=steps, buffers=self.buffers, info=self.info,
            main=self._main, dot=False,
        )

    @property
    def dtype(self) -> np.dtype:
        return self.out_spec.dtype

    @cached_property
    def memory(self) -> MemoryPlan:
        """Where the temporaries live (shared by lifetime) and the scratch bytes a call
        borrows at once (see :mod:`teir_plan.schedule.memory`)."""
        return memory_plan(self.steps, self.buffers, len(self.operands))

    @property
    def peak_bytes(self) -> int:
        """Scratch memory a call holds at once: temporaries and packed operands."""
        return self.memory.peak_bytes

    @property
    def shape(self) -> tuple[int, ...]:
        return self.out_spec.shape

    def __repr__(self) -> str:
        kinds = ", ".join(s.kind for s in self.steps)
        return (
            f"<tp.Plan {self.subscripts} -> {self.shape} {self.dtype}: steps [{kinds}], "
            f"predicted {self.predicted_seconds * 1e6:.1f} us>"
        )

    def explain(self, measure: bool = False, top: int = 5):  # type: ignore[no-untyped-def]
        """A :class:`tp.Report` of what was chosen, why, and what else was considered."""
        from teir_plan.render.report import build_report

        return build_report(self, measure=measure, top=top)

    # ---- running it -------------------------------------------------------
    def __call__(self, *operands: object, out: np.ndarray | None = None) -> np.ndarray:
        if len(operands) == 2:
            # The hot path of a repeated call: the layouts accepted last time, compared
            # as one tuple (an array's shape and strides are new tuples on each read).
            x, y = operands
            if (type(x) is np.ndarray and type(y) is np.ndarray and self._last2 ==
                    (x.shape, x.strides, x.dtype, y.shape, y.strides, y.dtype)):
                if out is None:
                    r = self.run2(x, y)
                elif (type(out) is np.ndarray
                      and (out.shape, out.strides, out.dtype) in self._seen_out):
                    r = self.run2_out(x, y, out)
                else:
                    r = None
                if r is not None:
                    return r
        elif len(operands) == 1 and out is None:
            x = operands[0]
            if type(x) is np.ndarray and self._last1 == (x.shape, x.strides, x.dtype):
                r = self.run1(x)
                if r is not None:
                    return r
        return self.execute(self._check_operands(operands), out)

    def run1(self, x: np.ndarray) -> np.ndarray | None:
        """The result of a call without ``out`` on one plain array of a layout the plan
        was made for (the caller has compared its shape, byte strides and dtype), or
        None, having run nothing, when it is not aligned (the checked path reads a
        copy of it)."""
        route = self._route1
        if route is not None:
            return route[0](x)  # add.reduce reads any array
        if x.flags.aligned:
            return self.execute((x,), None)
        return None

    def run2_out(self, x: np.ndarray, y: np.ndarray, out: np.ndarray) -> np.ndarray | None:
        """``out``, written, for two plain arrays and an ``out`` of layouts the plan was
        made for and writes directly (the caller has compared their shapes, byte strides
        and dtypes), after the checks of an ``out`` of a layout seen before
        (:meth:`_check_out`); or None, having checked and run nothing, when an array is
        not aligned: the caller then takes the checked path."""
        route = self._route
        # dot reads and writes any alignment; the executor's kernels need aligned arrays.
        if route is None and not (out.flags.aligned and x.flags.aligned and y.flags.aligned):
            return None
        if not out.flags.writeable:
            raise PlanError("out: array is read-only")
        for i, arr in enumerate((x, y)):
            if arrays_overlap(out, arr):
                raise PlanError(f"out: overlaps operand {i} in memory")
        if route is not None:
            route[1](x, y, out)
        else:
            self.run((x, y), out)
        return out

    @cached_property
    def run2(self) -> Callable[[np.ndarray, np.ndarray], np.ndarray | None]:
        """The result of a call without ``out`` on two plain arrays of layouts the
        plan was made for (the caller has compared their shapes, byte strides and
        dtypes), or None, having run nothing, when one of them is not aligned: the
        caller then takes the checked path, which reads it through a copy."""
        route = self._route
        if route is not None:
            return route[0]  # dot reads any array

        def run2(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
            if x.flags.aligned and y.flags.aligned:
                return self.execute((x, y), None)
            return None

        return run2

    @cached_property
    def _routable(self) -> bool:
        """Whether the plan is one step from operands of the result's dtype, which a
        tiny call may run on numpy instead (schedule/tiny.py)."""
        return (self._dot and len(self.steps) == 1 and not self.buffers
                and self.view is None
                and all(s.dtype == self.out_spec.dtype for s in self.operands))

    @cached_property
    def _route(self) -> tuple[Route, RouteInto] | None:
        """A tiny two-operand plan run by numpy's dot or multiply (schedule/tiny.py), or
        None."""
        return self._route_named[1] if self._route_named is not None else None

    @cached_property
    def _route_named(self) -> tuple[str, tuple[Route, RouteInto]] | None:
        if not self._routable or len(self.operands) != 2:
            return None
        if self._small_out is not None:  # (None: a result of another layout than C or F)
            dot = dot_route(self.steps[0], self.expression, self._out_order)
            if dot is not None:
                return "dot", dot
        mul = multiply_route(self.steps[0], self.expression, self.empty_out)
        if mul is not None:
            return "multiply", mul
        layout = self._einsum_layout
        summed = weighted_sum_route(self.steps[0], self.expression, self.out_spec.dtype,
                                    self.empty_out, layout)
        if summed is None:
            summed = small_product_route(self.steps[0], self.expression,
                                         self.out_spec.dtype, self.empty_out, layout)
        return ("einsum", summed) if summed is not None else None

    def _einsum_layout(self) -> str:
        """How a route on numpy.einsum's loop gets the plan's result layout (asked only
        of a plan routed there: schedule/tiny.einsum_layout)."""
        return einsum_layout(self.expression.subscripts, self.operands, self.out_spec,
                             self._small_out is not None and self._small_out[1] is None)

    @cached_property
    def _route1(self) -> tuple[Route1, RouteInto1] | None:
        """A tiny one-operand sum run by numpy's einsum or add.reduce (schedule/tiny.py),
        or None."""
        return self._route1_named[1] if self._route1_named is not None else None

    @cached_property
    def _route1_named(self) -> tuple[str, tuple[Route1, RouteInto1]] | None:
        if not self._routable or len(self.operands) != 1:
            return None
        args = (self.steps[0], self.expression, self.out_spec.dtype, self.empty_out)
        summed = sum_route(*args, self._einsum_layout)
        if summed is not None:
            return summed
        diagonal = diagonal_sum_route(*args)
        return ("einsum", diagonal) if diagonal is not None else None

    @property
    def numpy_call(self) -> str | None:
        """The numpy function (``dot``, ``multiply``, ``add.reduce``, ``einsum``) the
        plan's calls run its one step as, instead of the executor (a tiny call:
        schedule/tiny.py), or None."""
        named = self._route1_named or self._route_named
        return named[0] if named is not None else None

    def execute(self, arrays: Sequence[np.ndarray], out: np.ndarray | None) -> np.ndarray:
        """The result for checked ``arrays``: a view of an operand when the plan's result
        is one and no ``out`` is given, else ``out`` (checked here) or a new array,
        written by the steps (or by the contender its trials run or kept)."""
        trials = self.trials
        if trials is not None:
            if out is not None and not self._check_out(out, arrays):
                staged = self.empty_out()  # an out the kernels cannot index: as below
                trials.run(arrays, staged)
                np.copyto(out, staged)
                return out
            return trials.execute(arrays, out)
        return self.execute_planned(arrays, out)

    def execute_planned(self, arrays: Sequence[np.ndarray], out: np.ndarray | None
                        ) -> np.ndarray:
        """:meth:`execute` with the model's choice, whatever the trials run."""
        if out is None:
            if self.view is not None:
                return self.view.of(arrays[self.view.operand])
            result = self.empty_out()
        elif self._check_out(out, arrays):
            result = out
        else:  # an out the kernels cannot index (see addressable): written through a copy
            staged = self.empty_out()
            self.run_planned(arrays, staged)
            np.copyto(out, staged)
            return out
        self.run_planned(arrays, result)
        return result

    def run(self, arrays: Sequence[np.ndarray], out: np.ndarray) -> None:
        """Run on checked arrays (no checks: callers have done them)."""
        trials = self.trials
        if trials is not None:
            trials.run(arrays, out)
        else:
            self.run_planned(arrays, out)

    def run_planned(self, arrays: Sequence[np.ndarray], out: np.ndarray) -> None:
        """:meth:`run` with the model's choice, whatever the trials run."""
        if type(out) is not np.ndarray:  # numpy.matrix's reshape stays 2-D, for one
            out = out.view(np.ndarray)
        idle = self.idle
        if idle is None:
            self._run(arrays, out)
        else:
            n = idle.call_threads(idle_seconds(), free_cores)
            if n < idle.threads:
                with call_threads(n):
                    self._run(arrays, out)
            else:
                self._run(arrays, out)
            mark_busy()

    def _run(self, arrays: Sequence[np.ndarray], out: np.ndarray) -> None:
        route = self._route
        if route is not None:
            route[1](arrays[0], arrays[1], out)
            return
        route1 = self._route1
        if route1 is not None:
            route1[1](arrays[0], out)
            return
        if self._single is not None:
            run_lowered(self._single.chosen.lowered, [*arrays, out])
            return
        red = self._single_reduce
        if red is not None:
            red.run(arrays[0], arrays[1] if len(arrays) > 1 else None, out)
            return
        one = self._one_call
        if one is not None:
            run_one_call(one, self.steps, self.memory, self._consts, arrays, out)
            return
        buffers: list[np.ndarray] = [*arrays, out]
        # The temporaries are views into slots shared by lifetime (schedule/memory.py).
        raws, views = self.memory.borrow()
        try:
            for i, view in enumerate(views):
                buffers.append(self._consts[i] if view is None else view)
            for step in self.steps:
                step.run(buffers)
        finally:
            for raw in raws:
                workspace.give_back(raw)

    def empty_out(self) -> np.ndarray:
        """A new, uninitialised array in the layout this plan writes (``out_spec``): a
        permuted view of a contiguous buffer when the plan chose its result's layout;
        for a plan made for an ``out=`` with gaps or negative strides, an array with
        exactly those strides (the plan's programs are proven for them alone)."""
        small = self._small_out
        if small is not None:  # below the pool's size: np.empty, (shape, axes) precomputed
            mem_shape, axes = small
            buf = np.empty(mem_shape, self.out_spec.dtype)
            return buf if axes is None else buf.transpose(axes)
        spec = self.out_spec
        if not self._out_dense:
            return spec.allocate()
        # A large result borrows pooled memory that returns to the pool when the caller
        # drops it: repeated calls write into mapped pages (see schedule/workspace.py).
        return workspace.lend(spec.shape, spec.dtype, self._out_order)

    @cached_property
    def _one_call(self) -> OneCall | None:
        """Runs of steps in one compiled call each (schedule/one_call.py), or None."""
        specs = [(s.shape, s.strides, s.dtype) for s in (*self.operands, self.out_spec)]
        return one_call_program(self.steps, specs, self.buffers, self._consts, self.memory)

    @cached_property
    def _small_out(self) -> tuple[tuple[int, ...], tuple[int, ...] | None] | None:
        """(memory-order shape, axes of the transpose back to the result's order, None
        for C order) of a result too small for the workspace's pool, else None."""
        spec = self.out_spec
        if not self._out_dense or math.prod(spec.shape) * spec.dtype.itemsize >= POOL_MIN_BYTES:
            return None
        order = list(self._out_order)
        mem_shape = tuple(spec.shape[a] for a in order)
        if order == sorted(order):
            return mem_shape, None
        return mem_shape, tuple(int(a) for a in np.argsort(order))

    @cached_property
    def _out_dense(self) -> bool:
        """Whether ``out_spec`` is a contiguous buffer with its axes in some order (all
        strides positive, no gaps): the layouts the workspace makes."""
        spec = self.out_spec
        step = 1
        for a in reversed(self._out_order):
            if spec.shape[a] > 1 and spec.strides[a] != step:
                return False
            step *= spec.shape[a]
        return True

    @cached_property
    def _out_order(self) -> tuple[int, ...]:
        spec = self.out_spec
        return tuple(sorted(range(len(spec.shape)), key=lambda a: -spec.strides[a]))

    def _check_operands(self, operands: Sequence[object]) -> list[np.ndarray]:
        if len(operands) != len(self.operands):
            raise PlanError(
                f"plan for {self.subscripts!r} takes {len(self.operands)} operand(s), "
                f"got {len(operands)}"
            )
        arrays = []
        for i, (x, spec) in enumerate(zip(operands, self.operands)):
            if type(x) is np.ndarray:
                raw = (x.shape, x.strides, x.dtype)
                if raw in self._seen[i] and x.flags.aligned:
                    arrays.append(x)
                    continue
            arr = as_operand(x, i)
            got = OperandSpec.of(arr)
            if got == spec and arr is x and len(self._seen[i]) < _SEEN_LIMIT:
                self._seen[i].add(raw)
            if got != spec:
                what = (
                    "shape" if got.shape != spec.shape
                    else "dtype" if got.dtype != spec.dtype else "strides"
                )
                raise PlanError(
                    f"operand {i}: this plan was made for shape {spec.shape}, dtype "
                    f"{spec.dtype}, element strides {spec.strides}; got shape {got.shape}, "
                    f"dtype {got.dtype}, strides {got.strides} ({what} differs). "
                    f"Make a new plan with tp.plan for this layout"
                )
            arrays.append(arr)
        if len(arrays) == 1 and arrays[0] is operands[0] and type(arrays[0]) is np.ndarray:
            x = arrays[0]
            self._last1 = (x.shape, x.strides, x.dtype)
        if len(arrays) == 2:
            x, y = operands
            if (arrays[0] is x and arrays[1] is y and type(x) is np.ndarray
                    and type(y) is np.ndarray):
                self._last2 = (x.shape, x.strides, x.dtype, y.shape, y.strides, y.dtype)
        return arrays

    def _check_out(self, out: np.ndarray, arrays: Sequence[np.ndarray]) -> bool:
        """Check ``out`` (raising before anything is written); True if the plan's steps
        write it directly, False if it must be written through a copy of the plan's
        layout (an ``out`` the kernels cannot index, see :func:`addressable`)."""
        spec = self.out_spec
        if (type(out) is np.ndarray and (out.shape, out.strides, out.dtype) in self._seen_out
                and out.flags.aligned):
            # A layout already checked: only what differs between arrays of one layout.
            if not out.flags.writeable:
                raise PlanError("out: array is read-only")
            for i, arr in enumerate(arrays):
                if arrays_overlap(out, arr):
                    raise PlanError(f"out: overlaps operand {i} in memory")
            return True
        if not isinstance(out, np.ndarray):
            raise OperandTypeError(f"out: expected a numpy.ndarray, got {type(out).__name__}")
        if out.shape != spec.shape:
            raise PlanError(f"out: shape {out.shape} differs from the result's shape {spec.shape}")
        if out.dtype != spec.dtype:
            raise DTypeError(
                f"out: dtype {out.dtype} differs from this plan's result dtype {spec.dtype}"
            )
        if not out.flags.writeable:
            raise PlanError("out: array is read-only")
        direct = addressable(out)
        if direct and OperandSpec.of(out) != spec:
            raise PlanError(
                f"out: this plan writes element strides {spec.strides}, out has "
                f"{OperandSpec.of(out).strides}; use plan.empty_out() for a matching array, "
                f"or plan with out= (or order='C') to write this layout"
            )
        for i, arr in enumerate(arrays):
            if arrays_overlap(out, arr):
                raise PlanError(f"out: overlaps operand {i} in memory")
        if direct and type(out) is np.ndarray and len(self._seen_out) < _SEEN_LIMIT:
            self._seen_out.add((out.shape, out.strides, out.dtype))
        return direct
