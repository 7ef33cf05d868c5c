"""Building a plan: expression -> contraction descriptions -> ranked TEIR steps.

Every stage the frontend adds outside TEIR (a cast, a fill for an extent-0
index, a copy into an ``out`` of another dtype, the numpy fallback for dtypes
TEIR does not cover) is a step of its own, so the explain report can show it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import opt_einsum as oe

from teir_plan.errors import DTypeError, EinsumError, PlanError
from teir_plan.executor.checks import _check_reach
from teir_plan.frontend.contraction import Contraction, Layout, describe, with_dtype
from teir_plan.frontend.convention import (
    Casting,
    Optimize,
    check_casting,
    check_path,
    normalize_optimize,
    pairwise,
)
from teir_plan.frontend.expression import Expression, parse
from teir_plan.planner.block import blocked_cost, blocking_for
from teir_plan.planner.copy import plan_copy
from teir_plan.planner.cost import read_factors
from teir_plan.planner.machine import MachineParams
from teir_plan.planner.reduce import Reduction, plan_reduction
from teir_plan.planner.search import plain, rank
from teir_plan.schedule.parts import complex_operand, parts_dtype, parts_letter, parts_spec
from teir_plan.schedule.plan import OperandSpec, Plan
from teir_plan.schedule.steps import (
    BlockedStep,
    BufferSpec,
    Candidate,
    CastStep,
    CopyStep,
    FillStep,
    NumpyStep,
    ReduceStep,
    Step,
    TEIRStep,
    ViewStep,
    step_seconds,
)
from teir_plan.schedule.view import view_for
from teir_plan.teir.records import TEIR
from teir_plan.tiles import vector_kernel_dtype

FLOAT_TYPES = (np.dtype(np.float32), np.dtype(np.float64))
# The result types TEIR programs compute (teir.enums.DataType); others go to numpy.
TEIR_TYPES = (*FLOAT_TYPES, np.dtype(np.complex64), np.dtype(np.complex128))
TOP_CANDIDATES = 8


def c_strides(shape: Sequence[int]) -> tuple[int, ...]:
    if 0 in shape:  # an empty array: as OperandSpec.of, its layout is all zeros
        return (0,) * len(shape)
    out = []
    acc = 1
    for n in reversed(shape):
        out.append(acc if n > 1 else 0)
        acc *= max(n, 1)
    return tuple(reversed(out))


def layout_from(term: str, spec: OperandSpec, extents: dict[str, int]) -> Layout:
    """Layout of an operand: diagonals summed, broadcast and extent-1 dims stride 0."""
    order: list[str] = []
    strides: dict[str, int] = {}
    for ch, n, st in zip(term, spec.shape, spec.strides):
        if ch not in strides:
            order.append(ch)
            strides[ch] = 0
        strides[ch] += st if n > 1 else 0
    return Layout(
        "".join(order), tuple(extents[c] for c in order), tuple(strides[c] for c in order)
    )


@dataclass(frozen=True)
class _ArraySpec:
    """Shape/strides/itemsize of a buffer, for proving a program's reach without an array."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes
    dtype: np.dtype

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @classmethod
    def of(cls, spec: OperandSpec) -> _ArraySpec:
        isz = spec.dtype.itemsize
        return cls(spec.shape, tuple(s * isz for s in spec.strides), spec.dtype)


Proof = Callable[[], None]  # proves a candidate's reach; raises if it leaves a buffer


class _Builder:
    def __init__(self, num_operands: int,
                 pending: list[Proof] | None = None,
                 top: int = TOP_CANDIDATES,
                 expansions: dict | None = None,
                 ceiling: float = math.inf) -> None:
        self.n = num_operands
        self.pending = pending  # proofs to run later (None: run them at once)
        self.top = top  # candidates each TEIR step keeps
        self.expansions = expansions  # search.rank's, shared by one build_plan's searches
        # A cost at which the plan loses to another already made (see build_plan): a
        # searched step with no candidate under it makes the whole plan pointless.
        self.ceiling = ceiling
        self.outpriced = False
        self.steps: list[Step] = []
        self.buffers: list[BufferSpec] = []
        self.specs: dict[int, OperandSpec] = {}

    def temp(self, name: str, shape: tuple[int, ...], dtype: np.dtype, kind: str = "temp",
             fill: float = 0.0, strides: tuple[int, ...] | None = None) -> int:
        """A new buffer: C order, or the contiguous layout of element ``strides``."""
        order = None if strides is None else _outer_first(strides)
        self.buffers.append(BufferSpec(name, shape, dtype, kind, fill, order))
        idx = self.n + len(self.buffers)
        self.specs[idx] = OperandSpec(shape, strides or c_strides(shape), dtype)
        return idx


ORDERS = ("K", "C", "F", "A")
# How much faster (predicted) a permuted result layout or a staged result must be than
# the plain one to be chosen: above the model's error on close calls (a layout predicted
# 4% faster measured 2x slower), below the gaps that pay (dega,gfbc->abcdef and its
# siblings: predicted 1.16-1.19x, measured 1.5-2.2x).
LAYOUT_MARGIN = 1.10


def build_plan(
    subscripts: str,
    specs: Sequence[OperandSpec],
    *,
    out_spec: OperandSpec | None,
    dtype: object,
    optimize: object,
    epilogue: str | None,
    threads: int,
    params: MachineParams,
    order: str = "K",
    casting: object = "safe",
) -> Plan:
    """The plan for ``subscripts`` on operands of ``specs``.

    Without ``out_spec`` the result's memory layout follows ``order``, as in
    numpy.einsum: "C" or "F" order, "A" (F when every operand is F-contiguous, else
    C), or "K" (the default): whichever permutation of the output axes the cost
    model predicts fastest among C order and the layouts that let the primitive
    write its tiles along the operands' own strides.  The result is then a
    permuted view of a contiguous buffer, as numpy.einsum often returns.
    ``optimize`` and ``casting`` take numpy.einsum's values (see
    :mod:`teir_plan.frontend.convention`).
    """
    opt = normalize_optimize(optimize)
    casting = check_casting(casting)
    if epilogue not in (None, "relu"):
        raise PlanError(f"epilogue: expected None or 'relu', got {epilogue!r}")
    if order not in ORDERS:
        raise PlanError(f"order: expected one of 'K', 'C', 'F', 'A', got {order!r}")
    expr = parse(subscripts, [s.shape for s in specs])
    if isinstance(opt.path, tuple):
        check_path(opt.path, len(specs))
    result = _result_dtype(specs, dtype, casting)
    if out_spec is None and epilogue is None:
        view = _view_plan(expr, subscripts, specs, result, order, opt, casting, threads)
        if view is not None:
            return view
    # (result layout, staging layout) pairs to plan; the cheapest predicted wins.
    if out_spec is not None:
        fixed = [out_spec]
    else:
        layouts = result_layouts(expr, specs, order if opt.search else
                                 ("C" if order == "K" else order))
        fixed = [OperandSpec(shape, strides, result) for shape, strides in layouts]
    # (result layout, staging layout, whether the staging runs in blocks) of each plan.
    options: list[tuple[OperandSpec, tuple[int, ...] | None, bool]] = [
        (f, None, False) for f in fixed]
    if opt.search and (out_spec is not None or order != "K"):
        # out= or order= fixes the layout written last, not the one the contraction
        # writes: where that layout would force an operand to be transposed, the
        # contraction may write a staging buffer in a layout that follows the operands,
        # then one permuting copy moves the result into place (the transpose then costs
        # the result's size, not an input's).
        # Staging can also run one cache-sized block at a time (planner/block.py): the
        # result then goes through memory once, not three times.
        final = fixed[0]
        if final.dtype == result:
            for _, strides in result_layouts(expr, specs, "K"):
                if strides != final.strides:
                    options.append((final, strides, False))
                    # (The block copy transposes lines of real elements only.)
                    if len(expr.inputs) == 2 and vector_kernel_dtype(result):
                        options.append((final, strides, True))
    proofs: dict[int, list[Proof]] = {}
    # With several options, each is first planned for its best candidate alone (the
    # search then prunes hardest; its best, and so the comparison, is what a full search
    # finds), and the winner is planned again in full, reusing the search's memos.
    # Proving each candidate's reach is deferred to the plan that wins.
    several = len(options) > 1 and opt.search
    expansions: dict = {}  # the searches' costed schedules, reused by the second search
    # Plans writing another layout than the first option's (C order for order='K', the
    # direct plan for a fixed layout) must be predicted clearly faster: the model's error
    # is larger than a few percent, and a C-ordered result, or no staging copy, is what
    # a caller would pick on a tie.  So a later option can win only below the best score
    # so far over LAYOUT_MARGIN, and its search skips every candidate that cannot
    # (aebf,dfce->abcd: 12 -> 8.8 ms of planning; the same plan).
    plans: list[Plan | None] = []
    scores: list[float] = []  # each option's predicted seconds, x LAYOUT_MARGIN after the first
    ceilings: list[float] = []  # the cost each option's search had to get under
    # A staging layout's whole contraction, predicted (or, its search pruned, the
    # ceiling it could not get under): the least its blocked option can cost (below).
    contract_floor: dict[tuple[int, ...], float] = {}
    for spec, stage, blocked in options:
        pending: list[Proof] = []
        ceiling = min(scores) / LAYOUT_MARGIN if several and scores else math.inf
        ceilings.append(ceiling)
        p = _build(expr, subscripts, specs, spec, dtype, opt, epilogue, threads, params,
                   pending, stage, 1 if several else TOP_CANDIDATES, blocked, casting,
                   expansions, ceiling)
        plans.append(p)
        if stage is not None and not blocked:
            contract_floor[stage] = ceiling if p is None else sum(
                step_seconds(st) for st in p.steps[:-1])
        if p is None:  # no candidate under the ceiling: it cannot win
            scores.append(math.inf)
            continue
        seconds = p.predicted_seconds
        if blocked:
            # Blocks run the same contraction into the same layout, through a stage in
            # cache; they save the staged plan's permute, not its compute or its reads.
            # The block program's traffic is costed apart from its own loops
            # (planner/block.py), which can make it look cheaper than the whole:
            # adec,ebd->abc into C order, blocks predicted 39.0 ms against 47.5 for the
            # unblocked contraction, measured 3-5% slower than writing C order directly.
            seconds = max(seconds, contract_floor.get(stage, 0.0) if stage else 0.0)
        scores.append(seconds * (LAYOUT_MARGIN if scores else 1.0))
        proofs[id(p)] = pending
    i = scores.index(min(scores))
    best = plans[i]  # the first option always has a plan: it is searched without a ceiling
    assert best is not None
    if several:
        spec, stage, blocked = options[i]
        pending = []
        again = _build(expr, subscripts, specs, spec, dtype, opt, epilogue, threads,
                       params, pending, stage, blocked=blocked, casting=casting,
                       expansions=expansions)
        assert again is not None  # searched without a ceiling
        plans[i] = best = again
        proofs[id(best)] = pending
    for proof in proofs[id(best)]:
        proof()
    if out_spec is not None or order != "K":
        return best  # the layout was fixed: staging, if chosen, is a step of its own
    # For the explain report: each layout considered, in memory order, its predicted
    # cost, whether it was chosen, and whether that cost is only the ceiling its search
    # could not get under (a lower bound).
    best.options["order"] = order
    best.options["result_layouts"] = tuple(
        ("".join(expr.output[a] for a in _outer_first(spec.strides)),
         p.predicted_seconds if p is not None else ceiling, p is best, p is None)
        for p, (spec, _, _), ceiling in zip(plans, options, ceilings))
    return best


def _view_plan(expr: Expression, subscripts: str, specs: Sequence[OperandSpec],
               result: np.dtype, order: str, opt: Optimize, casting: Casting,
               threads: int) -> Plan | None:
    """The plan returning a view of the operand, when the expression only rearranges it
    (see :mod:`teir_plan.schedule.view`), the result keeps its dtype, and the view has the
    layout ``order`` asks for (any, for "K")."""
    view = view_for(expr, [s.shape for s in specs])
    # numpy's result type of a non-native operand is native: a view keeps the operand's
    # byte order, as numpy.einsum's does.
    if view is None or specs[0].dtype.newbyteorder("=") != result:
        return None
    strides = view.element_strides(specs[0].strides)
    if order != "K" and result_layouts(expr, specs, order)[0][1] != strides:
        return None
    # What the plan writes when called with out= (a copy of the view): a contiguous
    # layout in the view's memory order, the one empty_out() makes (a diagonal's own
    # strides are no array's a caller could allocate).
    perm = sorted(range(len(strides)), key=lambda a: -abs(strides[a]))
    options = {"dtype": result, "optimize": opt, "casting": casting, "epilogue": None,
               "threads": threads}
    return Plan(expression=expr, subscripts=subscripts, operands=specs,
                out_spec=OperandSpec(view.shape, c_strides(view.shape) if 0 in view.shape
                                     else _strides_in_order(view.shape, perm),
                                     specs[0].dtype),
                steps=(ViewStep(0, len(specs), view),), buffers=(), options=options,
                main=None, view=view)


def result_layouts(expr: Expression, specs: Sequence[OperandSpec],
                   order: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(shape, element strides) of each result layout worth planning for ``order``."""
    extents = expr.extent_map
    shape = tuple(extents[ch] for ch in expr.output)
    if 0 in shape:
        return [(shape, c_strides(shape))]
    c_order = list(range(len(shape)))
    f_order = c_order[::-1]
    if order == "C":
        perms = [c_order]
    elif order == "F":
        perms = [f_order]
    elif order == "A":
        f_all = all(_f_contiguous(s) for s in specs) and not all(
            _c_contiguous(s) for s in specs)
        perms = [f_order if f_all else c_order]
    else:
        perms = [c_order, *_operand_orders(expr, specs)]
    out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for perm in perms:
        layout = (shape, _strides_in_order(shape, perm))
        if layout not in out:
            out.append(layout)
    return out


def _strides_in_order(shape: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a contiguous array of ``shape`` whose axes lie in memory in
    ``perm``'s order, outermost first (0 along extent 1)."""
    strides = [0] * len(shape)
    step = 1
    for ax in reversed(perm):
        strides[ax] = step if shape[ax] > 1 else 0
        step *= shape[ax]
    return tuple(strides)


def _operand_orders(expr: Expression, specs: Sequence[OperandSpec]) -> list[list[int]]:
    """Output axis orders (outermost first) that follow the operands: for one operand
    its own stride order (a copy that streams); for two, the indices both share, then
    one operand's own indices, then the other's, each group in its operand's stride
    order, so that the primitive's output tile runs along an operand's unit stride."""
    if len(expr.inputs) > 2:
        return []

    def stride(i: int, ch: str) -> int:
        term, spec = expr.inputs[i], specs[i]
        return sum(abs(st) for t, st in zip(term, spec.strides) if t == ch)

    out = expr.output
    axes = range(len(out))
    if len(expr.inputs) == 1:
        return [sorted(axes, key=lambda a: -stride(0, out[a]))]
    a_term, b_term = expr.inputs
    both = [a for a in axes if out[a] in a_term and out[a] in b_term]
    only_a = [a for a in axes if out[a] in a_term and out[a] not in b_term]
    only_b = [a for a in axes if out[a] in b_term and out[a] not in a_term]
    by_a = sorted(both, key=lambda a: -stride(0, out[a]))
    by_b = sorted(both, key=lambda a: -stride(1, out[a]))
    own_a = sorted(only_a, key=lambda a: -stride(0, out[a]))
    own_b = sorted(only_b, key=lambda a: -stride(1, out[a]))
    return [by_a + own_b + own_a, by_b + own_a + own_b]


def _outer_first(strides: Sequence[int]) -> tuple[int, ...]:
    """The axes of a contiguous layout, outermost (largest stride) first."""
    return tuple(sorted(range(len(strides)), key=lambda a: -strides[a]))


def _c_contiguous(spec: OperandSpec) -> bool:
    return spec.strides == tuple(
        st if n > 1 else 0 for st, n in zip(c_strides(spec.shape), spec.shape))


def _f_contiguous(spec: OperandSpec) -> bool:
    rev = c_strides(spec.shape[::-1])[::-1]
    return spec.strides == tuple(st if n > 1 else 0 for st, n in zip(rev, spec.shape))


def _build(
    expr: Expression,
    subscripts: str,
    specs: Sequence[OperandSpec],
    out_spec: OperandSpec,
    dtype: object,
    optimize: object,
    epilogue: str | None,
    threads: int,
    params: MachineParams,
    pending: list[Proof] | None = None,
    stage: tuple[int, ...] | None = None,
    top: int = TOP_CANDIDATES,
    blocked: bool = False,
    casting: Casting = "safe",
    expansions: dict | None = None,
    ceiling: float = math.inf,
) -> Plan | None:
    """The plan writing ``out_spec``.  Every candidate program is proven to stay inside
    its buffers, now or, when ``pending`` is given, by the caller from that list.
    ``stage``: element strides of a contiguous layout the contraction writes first, then
    permuted into ``out_spec`` (the same dtype); with ``blocked``, one block at a time
    through a stage in cache instead of a buffer of the result's size.  None when a
    searched step has no candidate cheaper than ``ceiling`` (the plan would cost more)."""
    opt = normalize_optimize(optimize)
    extents = expr.extent_map
    result = _result_dtype(specs, dtype, casting)
    shape = tuple(extents[ch] for ch in expr.output)
    b = _Builder(len(specs), pending, top, expansions, ceiling)
    out_id = len(specs)
    for i, s in enumerate(specs):
        b.specs[i] = s
    if out_spec.shape != shape:
        raise EinsumError(f"out: shape {out_spec.shape} differs from the result's shape {shape}")
    if not np.can_cast(result, out_spec.dtype, casting):
        raise DTypeError(
            f"out: cannot store the {result} result in an array of dtype {out_spec.dtype} "
            f"(numpy's {casting!r} casting)"
        )
    b.specs[out_id] = out_spec
    final_spec = b.specs[out_id]
    # Which machine parameters ranked the candidates (reference, ISA-derived, first-use
    # or calibrated): the explain report shows what planning used, without planning again.
    options = {"dtype": result, "optimize": opt, "casting": casting, "epilogue": epilogue,
               "threads": threads, "machine_params": params.describe_source()}

    target = out_id
    if final_spec.dtype != result:
        target = b.temp("result", shape, result)
    computed = result in TEIR_TYPES and math.prod(shape) > 0 and all(extents.values())
    staged_order = None  # memory order of the staging buffer, when there is one
    block_order = None  # memory order of a blocked contraction's stage
    if stage is not None and blocked:
        block_order = "".join(expr.output[a] for a in _outer_first(stage))
    elif stage is not None and computed and target == out_id:
        staged_order = "".join(expr.output[a] for a in _outer_first(stage))
        target = b.temp(f"result staged in order {staged_order}", shape, result, strides=stage)

    if epilogue is not None and result not in FLOAT_TYPES:
        raise DTypeError(
            f"epilogue: relu is supported for float32 and float64 results, not {result}"
            + (" (complex numbers have no order)" if result.kind == "c" else "")
        )
    if result not in TEIR_TYPES:
        b.steps.append(
            NumpyStep(expr.subscripts, tuple(range(len(specs))), target,
                      f"{result} is not a TEIR data type: computed by numpy")
        )
    elif math.prod(shape) == 0:
        pass  # an empty result: nothing to compute
    elif any(n == 0 for n in extents.values()):
        b.steps.append(FillStep(target, 0.0, "a summed index has extent 0"))
    elif not _contract_parts(b, expr, target, result, opt, threads, params):
        ids = []
        for i, s in enumerate(specs):
            if s.dtype != result:
                t = b.temp(f"operand {i} as {result}", s.shape, result)
                b.steps.append(CastStep(i, t, f"operand {i} ({s.dtype})", result,
                                        cast_seconds(s, result, params)))
                ids.append(t)
            else:
                ids.append(i)
        _contract_all(b, expr, ids, target, result, opt, epilogue == "relu",
                      threads, params, block_order if target == out_id else None)
        if b.outpriced:
            return None
    if staged_order is not None:
        # The staged result, permuted into out's layout by a Copy program.
        out_order = "".join(expr.output[a] for a in _outer_first(final_spec.strides))
        _contract(b, [expr.output], [target], expr.output, out_id, result, True, False,
                  threads, params, label=f"{staged_order}->{out_order}")
    elif target != out_id:
        b.steps.append(CopyStep(target, out_id, f"out has dtype {final_spec.dtype}"))

    main = None
    best = -1.0
    for i, st in enumerate(b.steps):
        if isinstance(st, TEIRStep) and st.chosen.cost.flops >= best:
            best, main = st.chosen.cost.flops, i
    return Plan(
        expression=expr, subscripts=subscripts, operands=specs, out_spec=final_spec,
        steps=b.steps, buffers=b.buffers, options=options, main=main,
    )


def cast_seconds(spec: OperandSpec, dtype: np.dtype, params: MachineParams) -> float:
    """A cast's predicted seconds: one pass of numpy's conversion loop (one thread) reading
    the operand and writing it in ``dtype``, priced at the memory bandwidth (measured on
    the reference machine: 35-100 GB/s in cache, 7-35 from memory)."""
    n = math.prod(spec.shape)
    return n * (spec.dtype.itemsize + np.dtype(dtype).itemsize) / params.dram_bytes_per_second


def _result_dtype(specs: Sequence[OperandSpec], dtype: object, casting: Casting = "safe"
                  ) -> np.dtype:
    """numpy's: ``dtype=``, else the operands' result type; every operand must cast to it
    under ``casting`` (with 'no' or 'equiv', mixed dtypes are an error, as in numpy)."""
    if dtype is None:
        want = np.result_type(*[s.dtype for s in specs])
    else:
        try:
            want = np.dtype(dtype)  # type: ignore[call-overload]
        except TypeError:
            raise DTypeError(f"dtype: {dtype!r} is not a numpy dtype") from None
    for i, s in enumerate(specs):
        if not np.can_cast(s.dtype, want, casting):
            target = f"dtype={want}" if dtype is not None else f"the result type {want}"
            raise DTypeError(
                f"operand {i}: cannot cast {s.dtype} to {target} under numpy's "
                f"{casting!r} rule"
            )
    return want


def _contract_all(b: _Builder, expr: Expression, ids: list[int], target: int, dtype: np.dtype,
                  opt: Optimize, relu: bool, threads: int, params: MachineParams,
                  block_order: str | None = None) -> None:
    extents = expr.extent_map
    optimize = opt.search
    if len(ids) <= 2:
        _contract(b, list(expr.inputs), ids, expr.output, target, dtype, optimize, relu,
                  threads, params, block_order=block_order)
        return
    # Pairwise along opt_einsum's path (its "auto" strategy unless optimize= names
    # another or gives the path); intermediates are row-major in its index order.
    shapes = [tuple(extents[c] for c in t) for t in expr.inputs]
    path, info = oe.contract_path(
        expr.subscripts, *shapes, shapes=True,
        optimize=list(opt.path) if isinstance(opt.path, tuple) else opt.path,
        memory_limit=opt.memory_limit,
    )
    if any(len(step) > 2 for step in path):
        # A step of three or more operands (an explicit path, or a memory limit no pairwise
        # intermediate fits): TEIR contracts two at a time, so left to right.
        _, info = oe.contract_path(expr.subscripts, *shapes, shapes=True,
                                   optimize=list(pairwise(tuple(map(tuple, path)), len(ids))))
    terms = list(expr.inputs)
    bufs = list(ids)
    steps = info.contraction_list
    for s, (inds, _removed, einsum_str, _rest, _blas) in enumerate(steps):
        last = s == len(steps) - 1
        picked = sorted(inds, reverse=True)
        in_terms = [terms.pop(i) for i in picked]
        in_bufs = [bufs.pop(i) for i in picked]
        out_term = einsum_str.split("->")[1]
        if last:
            if out_term != expr.output:
                raise AssertionError("opt_einsum's last step must produce the output")
            dst = target
        else:
            shape = tuple(extents[c] for c in out_term)
            dst = b.temp(f"intermediate {out_term}", shape, dtype)
        # opt_einsum pops from the back: its einsum_str lists the inputs in pop order.
        _contract(b, in_terms, in_bufs, out_term, dst, dtype, optimize, relu and last,
                  threads, params)
        if b.outpriced:
            return  # this step alone costs more than the ceiling: the plan cannot win
        terms.append(out_term)
        bufs.append(dst)


def _contract(b: _Builder, terms: list[str], ids: list[int], out_term: str, dst: int,
              dtype: np.dtype, optimize: bool, relu: bool, threads: int,
              params: MachineParams, label: str | None = None,
              block_order: str | None = None) -> None:
    """Plan one TEIR step computing ``dst`` from ``ids`` (``label`` names it in reports
    instead of its subscripts; ``block_order``: try running a binary contraction in
    blocks through a stage of this memory order, see :mod:`teir_plan.planner.block`)."""
    def extents_of(terms: list[str], ids: list[int]) -> dict[str, int]:
        # The destination's shape counts too: an index broadcast from size 1 in these
        # inputs may have a larger extent in an intermediate (another operand sets it),
        # and every element of the destination must be written.
        ext: dict[str, int] = {}
        for t, i in zip([*terms, out_term], [*ids, dst]):
            for ch, n in zip(t, b.specs[i].shape):
                ext[ch] = max(ext.get(ch, 1), n)
        return ext

    extents = extents_of(terms, ids)
    if len(terms) == 2:
        terms, ids = list(terms), list(ids)
        # Where each operand really varies along an index (size 1: broadcast).
        varies = [{c for c, n in zip(t, b.specs[i].shape) if n > 1} for t, i in zip(terms, ids)]
        for j in (0, 1):
            # An index summed in one operand only is summed first, in a reduction step of
            # its own (a pre-reduction): never more flops than carrying it as a K axis
            # with stride 0 in the other operand (that multiplies the contraction's work
            # by its extent), and the order numpy.einsum(optimize=True) sums in, so that
            # an infinity meeting terms of both signs gives its inf, not inf - inf = NaN.
            own = [c for c in dict.fromkeys(terms[j])
                   if c in varies[j] and c not in varies[1 - j] and c not in out_term]
            if own:
                kept = "".join(c for c in dict.fromkeys(terms[j]) if c not in own)
                size = dict(zip(terms[j], b.specs[ids[j]].shape))
                tmp = b.temp(f"operand {terms[j]} summed over {''.join(own)}",
                             tuple(size[c] for c in kept), dtype)
                _contract(b, [terms[j]], [ids[j]], kept, tmp, dtype, optimize, False,
                          threads, params)
                terms[j], ids[j] = kept, tmp
        # An index the other operand only broadcasts is gone with the pre-reduction.
        extents = extents_of(terms, ids)
    lays = [layout_from(t, b.specs[i], extents) for t, i in zip(terms, ids)]
    out_lay = layout_from(out_term, b.specs[dst], extents)
    sub = label or ",".join(terms) + "->" + out_term
    if len(lays) == 1:
        summed = [c for c in lays[0].indices if c not in out_term and extents[c] > 1]
        if not summed:
            moves = [(ch, n, lays[0].stride(ch), out_lay.stride(ch))
                     for ch, n in zip(out_lay.indices, out_lay.extents)]
            cands = [Candidate(p.teir, p.names, p.cost)
                     for p in plan_copy(moves, dtype, params, threads, relu)]
            _add_teir_step(b, sub, (ids[0],), dst, cands, "permute")
            return
        ones = b.temp("ones", (1,), dtype, kind="const", fill=1.0)
        lays.append(Layout("", (), ()))
        ids = [ids[0], ones]
        role = "reduce"
    else:
        role = "contract"
    c = with_dtype(describe(lays[0], lays[1], out_lay), dtype)
    if block_order is not None and optimize and role == "contract" and _contract_blocked(
            b, sub, ids, dst, c, block_order, relu, threads, params):
        return
    # A sum of one operand, or an operand times a vector along summed indices, may run
    # as a reduction kernel instead (one pass over the operand): whichever is cheaper.
    reduction = None if relu or block_order is not None else _reduction_for(
        lays if role == "contract" else lays[:1], out_lay, dtype, params, threads)
    ranked = rank(c, params, threads, relu_last=relu, top=b.top,
                  expansions=b.expansions, ceiling=b.ceiling) if optimize else [
        plain(c, params, relu_last=relu)
    ]
    if reduction is not None and reduction[0].cost.seconds < min(
            [b.ceiling, *(r.cost.seconds for r in ranked[:1])]):
        red, order = reduction
        if role == "reduce":
            b.buffers.pop()  # the constant of ones, unused
        _add_reduce_step(b, sub, tuple(ids[j] for j in order), dst, red,
                         [lays[j] for j in order], out_lay,
                         ranked[0].cost.seconds if ranked else None)
        return
    if not ranked:  # every candidate would cost more than the ceiling
        b.outpriced = True
        return
    cands = [Candidate(r.teir, r.names, r.cost, r.contraction, r.choice, r.packs)
             for r in ranked]
    _add_teir_step(b, sub, (ids[0], ids[1]), dst, cands, role)


def _contract_blocked(b: _Builder, sub: str, ids: list[int], dst: int, c: Contraction,
                      block_order: str, relu: bool, threads: int,
                      params: MachineParams) -> bool:
    """Add ``c`` as a :class:`BlockedStep`, if it has a blocking; its candidates are the
    block program's, planned on one thread (the blocks are the parallel loop)."""
    blocking = blocking_for(c, block_order, params.l2_bytes)
    if blocking is None:
        return False
    ranked = rank(blocking.inner, params, 1, relu_last=relu, top=b.top, allow_pack=False,
                  expansions=b.expansions)
    cands = [Candidate(r.teir, r.names,
                       blocked_cost(c, blocking, r.cost, params, threads,
                                    read_factors(r.contraction, r.choice)),
                       r.contraction, r.choice)
             for r in ranked]
    cands.sort(key=lambda cand: cand.cost.seconds)
    specs = [_ArraySpec.of(b.specs[i]) for i in (*ids, dst)]
    isz = specs[-1].itemsize
    stage = _ArraySpec((blocking.stage_elements,), (isz,), specs[-1].dtype)
    outer = blocking.outer

    def proof(teir: TEIR) -> Proof:
        def run() -> None:
            # The block program inside its stage; the operands over the outer loops and
            # the block program together; out over the outer loops and the block copy.
            teir.validate()
            s = teir.schedule
            _check_reach("the stage", 2, stage, s.dim_sizes, s.strides[2])  # type: ignore[arg-type]
            sizes = [r[1] for r in outer]
            for j, op_strides in ((0, [r[2] for r in outer]), (1, [r[3] for r in outer])):
                _check_reach(f"tensor {j}", j, specs[j], [*sizes, *s.dim_sizes],  # type: ignore[arg-type]
                             [*op_strides, *s.strides[j]])
            _check_reach("tensor 2", 2, specs[2],  # type: ignore[arg-type]
                         [*sizes, *(r[1] for r in blocking.block)],
                         [*(r[4] for r in outer), *(r[3] for r in blocking.block)])
        return run

    for cand in cands:
        if b.pending is None:
            proof(cand.teir)()
        else:
            b.pending.append(proof(cand.teir))
    b.steps.append(BlockedStep(sub, (ids[0], ids[1]), dst, cands[0], tuple(cands), "contract",
                               blocking))
    return True


def _reduction_for(lays: list[Layout], out: Layout, dtype: np.dtype, params: MachineParams,
                   threads: int) -> tuple[Reduction, tuple[int, ...]] | None:
    """The reduction computing ``out`` (the operand summed first in the order), if the
    expression is one: one operand, or two of which one is a vector along summed
    indices of the other.  The reduction kernels take real elements only (BLAS' ?gemv
    for float32 and float64); complex sums run as TEIR programs."""
    if dtype not in FLOAT_TYPES:
        return None
    if len(lays) == 1:
        red = plan_reduction(lays[0], out, None, dtype, params, threads)
        return None if red is None else (red, (0,))
    for j in (0, 1):
        red = plan_reduction(lays[j], out, lays[1 - j], dtype, params, threads)
        if red is not None:
            return red, (j, 1 - j)
    return None


def _add_reduce_step(b: _Builder, sub: str, inputs: tuple[int, ...], dst: int,
                     red: Reduction, lays: list[Layout], out: Layout,
                     teir_seconds: float | None) -> None:
    """Add a :class:`ReduceStep`, proving (now or with the plan's other proofs) that its
    tables stay inside the buffers: the layouts' reach inside each buffer, and the
    tables' offsets spanning exactly the layouts' (they address the same elements)."""
    arrays = [(_ArraySpec.of(b.specs[i]), lay) for i, lay in zip((*inputs, dst), (*lays, out))]
    tensors = (0, 1, 2)[:len(inputs)] + (2,)

    def run() -> None:
        for j, (spec, lay) in zip(tensors, arrays):
            _check_reach(f"tensor {j}", j, spec, lay.extents, lay.strides)  # type: ignore[arg-type]
            want = _offset_range(lay.extents, lay.strides)
            if red.reach(j) != want:
                raise PlanError(f"reduction {sub}: tensor {j}'s tables reach offsets "
                                f"{red.reach(j)}, its layout {want}")

    if b.pending is None:
        run()
    else:
        b.pending.append(run)
    b.steps.append(ReduceStep(sub, inputs, dst, red, teir_seconds))


def _offset_range(extents: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
    axes = [(n, st) for n, st in zip(extents, strides) if n > 1]
    return (sum(min(0, (n - 1) * st) for n, st in axes),
            sum(max(0, (n - 1) * st) for n, st in axes))


def _contract_parts(b: _Builder, expr: Expression, target: int, result: np.dtype,
                    opt: Optimize, threads: int, params: MachineParams) -> bool:
    """Add a real operand times a complex one as a real contraction over the complex
    tensors' parts (:mod:`teir_plan.schedule.parts`), when that is predicted cheaper than
    casting the real operand and contracting in complex; False when it does not apply
    (then the caller casts)."""
    specs = [b.specs[i] for i in range(len(expr.inputs))]
    z = complex_operand(specs, result)
    terms, out_term = list(expr.inputs), expr.output
    q = parts_letter(terms, out_term)
    if z is None or q is None or any(  # (an index summed in one operand: see _contract)
            c not in out_term and sum(c in t for t in terms) == 1 for t in terms for c in t):
        return False
    ext = expr.extent_map
    real, kept = parts_dtype(result), 1 - z

    def best(c: Contraction, top: int) -> list:
        return rank(c, params, threads, top=top, expansions=b.expansions) if opt.search \
            else [plain(c, params)]

    # The promoted product: the real operand cast into a row-major complex buffer.
    cast = OperandSpec(specs[kept].shape, c_strides(specs[kept].shape), result)
    promoted = [specs[z], cast] if z == 0 else [cast, specs[z]]
    lays = [layout_from(t, s, ext) for t, s in zip(terms, promoted)]
    c = with_dtype(describe(lays[0], lays[1], layout_from(out_term, b.specs[target], ext)),
                   result)
    ranked = best(c, 1)
    promoted_seconds = (cast_seconds(specs[kept], result, params) + ranked[0].cost.seconds
                        if ranked else math.inf)
    views = list(specs) + [parts_spec(b.specs[target])]
    views[z] = parts_spec(specs[z])
    pterms = [t + q if j == z else t for j, t in enumerate(terms)]
    ext = {**ext, q: 2}
    lays = [layout_from(t, s, ext) for t, s in zip([*pterms, out_term + q], views)]
    ranked = best(with_dtype(describe(lays[0], lays[1], lays[2]), real), b.top)
    if not ranked or ranked[0].cost.seconds > promoted_seconds:
        return False
    cands = [Candidate(r.teir, r.names, r.cost, r.contraction, r.choice, r.packs)
             for r in ranked]
    sub = f"{','.join(pterms)}->{out_term + q} ({q}: the parts of complex operand {z})"
    _add_teir_step(b, sub, (0, 1), target, cands, "contract", views)
    return True


def _add_teir_step(b: _Builder, sub: str, inputs: tuple[int, ...], dst: int,
                   cands: list[Candidate], role: str,
                   views: list[OperandSpec] | None = None) -> None:
    """``views``: the layouts the programs address the buffers as, when not the buffers'
    own (a complex buffer's parts: :mod:`teir_plan.schedule.parts`)."""
    # Prove, once, that every candidate stays inside the buffers it will be given.
    def prove(teir: TEIR, arrays: list[_ArraySpec]) -> None:
        if b.pending is None:
            _prove(teir, arrays)
        else:
            b.pending.append(lambda: _prove(teir, arrays))

    for cand in cands:
        specs = [_ArraySpec.of(v) for v in views] if views else [
            _ArraySpec.of(b.specs[i]) for i in (*inputs, dst)]
        for pack in cand.packs:
            packed = _ArraySpec.of(OperandSpec(pack.shape, c_strides(pack.shape), specs[-1].dtype))
            prove(pack.copy.teir, [specs[pack.tensor], packed])
            specs[pack.tensor] = packed
        prove(cand.teir, list(specs))
    b.steps.append(TEIRStep(sub, inputs, dst, cands[0], tuple(cands), role))


def _prove(teir: TEIR, specs: list[_ArraySpec]) -> None:
    """Validate ``teir`` and prove its reach inside buffers of these layouts."""
    teir.validate()
    s = teir.schedule
    for j, spec in enumerate(specs):
        _check_reach(f"tensor {j}", j, spec, s.dim_sizes, s.strides[j])  # type: ignore[arg-type]
