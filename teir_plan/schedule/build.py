"""Building a plan: expression -> contraction descriptions -> ranked TEIR steps.

Every stage the frontend adds outside TEIR (a cast, a fill for an extent-0
index, a copy into an ``out`` of another dtype, the numpy fallback for dtypes
TEIR does not cover) is a step of its own, so the explain report can show it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from teir_plan.errors import DTypeError, EinsumError, PlanError
from teir_plan.frontend.convention import (
    Casting,
    Optimize,
    check_casting,
    check_numpy_indices,
    check_path,
    normalize_optimize,
    result_dtype,
)
from teir_plan.frontend.expression import Expression, parse
from teir_plan.machine.params import MachineParams
from teir_plan.schedule.alternatives import FreeLayout, LayoutOption, free_layout
from teir_plan.schedule.contract import (
    EXPAND_MARGIN,
    FLOAT_TYPES,
    TOP_CANDIDATES,
    ProgramBuilder,
    Proof,
    c_strides,
    contract_parts,
    contract_step,
    outer_first,
    strides_in_order,
)
from teir_plan.schedule.contract import layout_from as layout_from  # (report.py's import)
from teir_plan.schedule.half import accumulator, computation_dtype, plan_operands, round_result
from teir_plan.schedule.idle import serial_when_idle
from teir_plan.schedule.info import PlanInfo
from teir_plan.schedule.operands import OperandSpec
from teir_plan.schedule.plan import Plan
from teir_plan.schedule.steps import (
    CopyStep,
    ExpandStep,
    FillStep,
    NumpyStep,
    TEIRStep,
    ViewStep,
    step_seconds,
)
from teir_plan.schedule.tree_plan import result_orders
from teir_plan.schedule.view import view_for
from teir_plan.tiles import vector_kernel_dtype

# The result types TEIR programs compute (teir.enums.DataType); others go to numpy.
TEIR_TYPES = (*FLOAT_TYPES, np.dtype(np.complex64), np.dtype(np.complex128))
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
    result = _result_dtype(specs, dtype, casting, out_spec)
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
        shape = layouts[0][0]
        if len(expr.inputs) > 2 and order == "K" and opt.search and 0 not in shape and \
                len(layouts) == 1:
            # a tree: the layouts its last step writes in place (schedule/tree_plan.py)
            layouts += [(shape, strides_in_order(shape, perm))
                        for perm in result_orders(expr, specs, opt)]
            layouts = list(dict.fromkeys(layouts))
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
        # (A 16-bit result is rounded from a float32 accumulator in one pass into out's
        # layout: no staging of its own.)
        if final.dtype == result == computation_dtype(result):
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
    # (a quarter of the planning time saved, the same plan: docs/decisions.md).
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
        if any(isinstance(st, ExpandStep) for st in p.steps):
            # Against the complex product in every layout, not only its own, and without
            # the first layout's advantage: a change of form, not only of layout.
            seconds *= EXPAND_MARGIN * (1.0 if scores else LAYOUT_MARGIN)
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
        # For the explain report: the layout order='K' would choose, from the
        # contractions just planned into each of its layouts.
        best.info = replace(best.info, free_layout=_free_layout(
            expr, subscripts, specs, result, opt, casting, threads, epilogue, options, plans))
        return best  # the layout was fixed: staging, if chosen, is a step of its own
    # For the explain report: each layout considered (schedule/alternatives.py).
    best.info = replace(best.info, order=order, result_layouts=tuple(
        LayoutOption("".join(expr.output[a] for a in outer_first(spec.strides)),
                     p.predicted_seconds if p is not None else ceiling, p is best, p is None)
        for p, (spec, _, _), ceiling in zip(plans, options, ceilings)))
    return best


def _free_layout(expr: Expression, subscripts: str, specs: Sequence[OperandSpec],
                 result: np.dtype, opt: Optimize, casting: Casting, threads: int,
                 epilogue: str | None,
                 options: Sequence[tuple[OperandSpec, tuple[int, ...] | None, bool]],
                 plans: Sequence[Plan | None]) -> FreeLayout | None:
    """The fixed-layout plan's record of order='K''s choice: each of its layouts' cost is
    the direct plan's (the fixed layout) or a staged plan's contraction (its steps before
    the permuting copy); unknown when order='K' would return a view."""
    if epilogue is None and _view_plan(expr, subscripts, specs, result, "K", opt, casting,
                                       threads) is not None:
        return None
    costs: list[tuple[str, float | None]] = []
    for _, strides in result_layouts(expr, specs, "K"):
        seconds = None
        for (spec, stage, blocked), p in zip(options, plans):
            if p is not None and not blocked and (stage or spec.strides) == strides:
                seconds = sum(step_seconds(st) for st in (p.steps[:-1] if stage else p.steps))
        costs.append(("".join(expr.output[a] for a in outer_first(strides)), seconds))
    return free_layout(costs, LAYOUT_MARGIN)


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
    info = PlanInfo(result, opt, casting, None, threads)
    return Plan(expression=expr, subscripts=subscripts, operands=specs,
                out_spec=OperandSpec(view.shape, c_strides(view.shape) if 0 in view.shape
                                     else strides_in_order(view.shape, perm),
                                     specs[0].dtype),
                steps=(ViewStep(0, len(specs), view),), buffers=(), info=info,
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
        layout = (shape, strides_in_order(shape, perm))
        if layout not in out:
            out.append(layout)
    return out


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
    result = _result_dtype(specs, dtype, casting, out_spec)
    shape = tuple(extents[ch] for ch in expr.output)
    b = ProgramBuilder(len(specs), pending, top, expansions, ceiling)
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
    info = PlanInfo(result, opt, casting, epilogue, threads,
                    machine_params=params.describe_source())

    # The dtype the steps compute in: float32 for a 16-bit result (schedule/half.py).
    compute = computation_dtype(result)
    target = out_id
    if final_spec.dtype != result:
        target = b.temp("result", shape, result)
    computed = compute in TEIR_TYPES and math.prod(shape) > 0 and all(extents.values())
    staged_order = None  # memory order of the staging buffer, when there is one
    block_order = None  # memory order of a blocked contraction's stage
    if stage is not None and blocked:
        block_order = "".join(expr.output[a] for a in outer_first(stage))
    elif stage is not None and computed and target == out_id:
        staged_order = "".join(expr.output[a] for a in outer_first(stage))
        target = b.temp(f"result staged in order {staged_order}", shape, result, strides=stage)

    if epilogue is not None and compute not in FLOAT_TYPES:
        raise DTypeError(
            f"epilogue: relu is supported for float32 and float64 results, not {result}"
            + (" (complex numbers have no order)" if result.kind == "c" else "")
        )
    if compute not in TEIR_TYPES:
        check_numpy_indices(expr.inputs, expr.output, extents, result)
        b.steps.append(
            NumpyStep(expr.subscripts, tuple(range(len(specs))), target,
                      f"{result} is not a TEIR data type: computed by numpy")
        )
    elif math.prod(shape) == 0:
        pass  # an empty result: nothing to compute
    elif any(n == 0 for n in extents.values()):
        b.steps.append(FillStep(target, 0.0, "a summed index has extent 0"))
    elif not contract_parts(b, expr, target, compute, opt, threads, params):
        # A 16-bit result: the steps write a float32 accumulator, rounded once at the end.
        rounded = target if compute != result else None
        if rounded is not None:
            target = accumulator(b, rounded)
        # Each operand read in place or converted to the computation's dtype first
        # (schedule/half.py), then one step or a tree (schedule/tree_plan.py).
        layouts = plan_operands(b, expr, target, compute, opt, epilogue == "relu",
                                threads, params, block_order if target == out_id else None)
        if layouts is not None:  # for the explain report
            info = replace(info, tree_layouts=layouts)
        if b.outpriced:
            return None
        if rounded is not None:
            round_result(b, target, rounded, params)
            target = rounded
    if staged_order is not None:
        # The staged result, permuted into out's layout by a Copy program.
        out_order = "".join(expr.output[a] for a in outer_first(final_spec.strides))
        contract_step(b, [expr.output], [target], expr.output, out_id, result, True, False,
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
        steps=b.steps, buffers=b.buffers, info=info, main=main,
        idle=serial_when_idle(b.steps, params, threads),
    )


def _result_dtype(specs: Sequence[OperandSpec], dtype: object, casting: Casting = "safe",
                  out_spec: OperandSpec | None = None) -> np.dtype:
    """numpy's computation type for these operands and ``out``
    (frontend.convention.result_dtype)."""
    return result_dtype([s.dtype for s in specs], dtype, casting,
                        None if out_spec is None else out_spec.dtype)
