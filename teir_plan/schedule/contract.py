"""Planning one step of a plan: a contraction, a reduction or a permutation of buffers
already in the plan's table, ranked by the cost model and proven to stay inside its
buffers.

:mod:`teir_plan.schedule.build` decides which steps a plan needs (casts, fills, the result's
layout) and :mod:`teir_plan.schedule.tree_plan` which pairwise steps a tree of three or
more operands takes; both add each step through :func:`contract_step` on a :class:`ProgramBuilder`,
the table of buffers and steps being made.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from teir_plan.errors import PlanError
from teir_plan.executor.checks import check_reach
from teir_plan.frontend.contraction import Contraction, Layout, describe, layout_in, with_dtype
from teir_plan.frontend.convention import Optimize, numpy_subscripts
from teir_plan.frontend.expression import Expression
from teir_plan.machine.params import MachineParams
from teir_plan.planner.block import blocked_cost, blocking_for
from teir_plan.planner.copy import plan_copy
from teir_plan.planner.cost import read_factors
from teir_plan.planner.reduce import Reduction, called_from_python, plan_reduction
from teir_plan.planner.search import plain, rank
from teir_plan.schedule.operands import OperandSpec
from teir_plan.schedule.parts import complex_operand, parts_dtype, parts_letter, parts_spec
from teir_plan.schedule.reduce_run import runnable
from teir_plan.schedule.steps import (
    BlockedStep,
    BufferSpec,
    Candidate,
    ExpandStep,
    PartsStep,
    ReduceStep,
    Step,
    TEIRStep,
)
from teir_plan.teir.records import TEIR

TOP_CANDIDATES = 8
# How much faster (predicted) a complex product expanded into a real one must be than the
# complex product itself: the model's error on that comparison.  Against single cgemm3m
# calls of the whole product (aebf,fdec->abcd, eafd,fbec->abcd in complex64) the expansion
# was predicted 1.17-1.41x faster and measured 0.70-0.77x; where it pays (dega,gfbc->abcdef
# and its siblings, ec,abed->abcd) it was predicted 1.7-2.2x and measured 2-3x.
EXPAND_MARGIN = 1.5
FLOAT_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


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
    return layout_in(term, spec.shape, spec.strides, extents)


@dataclass(frozen=True)
class ArraySpec:
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
    def of(cls, spec: OperandSpec) -> ArraySpec:
        isz = spec.dtype.itemsize
        return cls(spec.shape, tuple(s * isz for s in spec.strides), spec.dtype)


Proof = Callable[[], None]  # proves a candidate's reach; raises if it leaves a buffer


class ProgramBuilder:
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
        # Whether the steps being added are a tree's (schedule/tree_plan.py): a
        # reduction among them runs from Python, not on numpy's tiny routes.
        self.tree = False
        self.steps: list[Step] = []
        self.buffers: list[BufferSpec] = []
        self.specs: dict[int, OperandSpec] = {}

    def temp(self, name: str, shape: tuple[int, ...], dtype: np.dtype, kind: str = "temp",
             fill: float = 0.0, strides: tuple[int, ...] | None = None) -> int:
        """A new buffer: C order, or the contiguous layout of element ``strides``."""
        order = None if strides is None else outer_first(strides)
        self.buffers.append(BufferSpec(name, shape, dtype, kind, fill, order))
        idx = self.n + len(self.buffers)
        self.specs[idx] = OperandSpec(shape, strides or c_strides(shape), dtype)
        return idx


def outer_first(strides: Sequence[int]) -> tuple[int, ...]:
    """The axes of a contiguous layout, outermost (largest stride) first."""
    return tuple(sorted(range(len(strides)), key=lambda a: -strides[a]))


def contract_step(b: ProgramBuilder, terms: list[str], ids: list[int], out_term: str, dst: int,
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
                contract_step(b, [terms[j]], [ids[j]], kept, tmp, dtype, optimize, False,
                          threads, params)
                terms[j], ids[j] = kept, tmp
        # An index the other operand only broadcasts is gone with the pre-reduction.
        extents = extents_of(terms, ids)
    lays = [layout_from(t, b.specs[i], extents) for t, i in zip(terms, ids)]
    out_lay = layout_from(out_term, b.specs[dst], extents)
    sub = label or ",".join(terms) + "->" + out_term
    views: list[OperandSpec] | None = None
    if len(lays) == 1:
        summed = [c for c in lays[0].indices if c not in out_term and extents[c] > 1]
        if not summed:
            moves = [(ch, n, lays[0].stride(ch), out_lay.stride(ch))
                     for ch, n in zip(out_lay.indices, out_lay.extents)]
            cands = [Candidate(p.teir, p.names, p.cost)
                     for p in plan_copy(moves, dtype, params, threads, relu)]
            _add_teir_step(b, sub, (ids[0],), dst, cands, "permute")
            return
        q = parts_letter(terms, out_term) if dtype.kind == "c" else None
        if q is not None:
            # A complex sum is the sums of its parts: a real sum over the operand's parts
            # into the result's (schedule/parts.py).  numpy adds complex numbers so, and
            # an infinite part stays inf + 0j; summed as a product with complex ones,
            # inf * (1 + 0j) has the imaginary part inf * 0 = NaN.
            views = [parts_spec(b.specs[ids[0]]), parts_spec(b.specs[dst])]
            ext = {**extents, q: 2}
            lays = [layout_from(terms[0] + q, views[0], ext)]
            out_lay = layout_from(out_term + q, views[1], ext)
            dtype = parts_dtype(dtype)
            sub += f" ({q}: the parts)"
        ones = b.temp("ones", (1,), dtype, kind="const", fill=1.0)
        lays.append(Layout("", (), ()))
        ids = [ids[0], ones]
        if views is not None:
            views.insert(1, b.specs[ones])
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
    if reduction is not None and b.tree:
        reduction = (called_from_python(reduction[0], params), reduction[1])
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
                         ranked[0].cost.seconds if ranked else None,
                         None if views is None else [views[0], views[-1]])
        return
    if not ranked:  # every candidate would cost more than the ceiling
        b.outpriced = True
        return
    cands = [Candidate(r.teir, r.names, r.cost, r.contraction, r.choice, r.packs)
             for r in ranked]
    _add_teir_step(b, sub, (ids[0], ids[1]), dst, cands, role, views)


def _contract_blocked(b: ProgramBuilder, sub: str, ids: list[int], dst: int, c: Contraction,
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
                                    read_factors(r.contraction, r.choice, params)),
                       r.contraction, r.choice)
             for r in ranked]
    cands.sort(key=lambda cand: cand.cost.seconds)
    specs = [ArraySpec.of(b.specs[i]) for i in (*ids, dst)]
    isz = specs[-1].itemsize
    stage = ArraySpec((blocking.stage_elements,), (isz,), specs[-1].dtype)
    outer = blocking.outer

    def proof(teir: TEIR) -> Proof:
        def run() -> None:
            # The block program inside its stage; the operands over the outer loops and
            # the block program together; out over the outer loops and the block copy.
            teir.validate()
            s = teir.schedule
            check_reach("the stage", 2, stage, s.dim_sizes, s.strides[2])  # type: ignore[arg-type]
            sizes = [r.extent for r in outer]
            for j, op_strides in ((0, [r.in0_stride for r in outer]),
                                  (1, [r.in1_stride for r in outer])):
                check_reach(f"tensor {j}", j, specs[j], [*sizes, *s.dim_sizes],  # type: ignore[arg-type]
                             [*op_strides, *s.strides[j]])
            check_reach("tensor 2", 2, specs[2],  # type: ignore[arg-type]
                         [*sizes, *(r.extent for r in blocking.block)],
                         [*(r.out_stride for r in outer),
                          *(r.out_stride for r in blocking.block)])
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


def _add_reduce_step(b: ProgramBuilder, sub: str, inputs: tuple[int, ...], dst: int,
                     red: Reduction, lays: list[Layout], out: Layout,
                     teir_seconds: float | None,
                     views: list[OperandSpec] | None = None) -> None:
    """Add a :class:`ReduceStep`, proving (now or with the plan's other proofs) that its
    tables stay inside the buffers: the layouts' reach inside each buffer, and the
    tables' offsets spanning exactly the layouts' (they address the same elements).
    ``views``: the layouts the tables address the buffers as, when not the buffers' own
    (a complex buffer's parts)."""
    specs = views or [b.specs[i] for i in (*inputs, dst)]
    arrays = [(ArraySpec.of(spec), lay) for spec, lay in zip(specs, (*lays, out))]
    tensors = (0, 1, 2)[:len(inputs)] + (2,)

    def run() -> None:
        for j, (spec, lay) in zip(tensors, arrays):
            check_reach(f"tensor {j}", j, spec, lay.extents, lay.strides)  # type: ignore[arg-type]
            want = _offset_range(lay.extents, lay.strides)
            if red.reach(j) != want:
                raise PlanError(f"reduction {sub}: tensor {j}'s tables reach offsets "
                                f"{red.reach(j)}, its layout {want}")

    if b.pending is None:
        run()
    else:
        b.pending.append(run)
    b.steps.append(ReduceStep(sub, inputs, dst, runnable(red), teir_seconds))


def _offset_range(extents: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
    axes = [(n, st) for n, st in zip(extents, strides) if n > 1]
    return (sum(min(0, (n - 1) * st) for n, st in axes),
            sum(max(0, (n - 1) * st) for n, st in axes))


def cast_seconds(spec: OperandSpec, dtype: np.dtype, params: MachineParams) -> float:
    """A cast's predicted seconds: one pass of numpy's conversion loop (one thread) reading
    the operand and writing it in ``dtype``, priced at the memory bandwidth (measured on
    the reference machine: 35-100 GB/s in cache, 7-35 from memory)."""
    n = math.prod(spec.shape)
    return n * (spec.dtype.itemsize + np.dtype(dtype).itemsize) / params.dram_bytes_per_second


def contract_parts(b: ProgramBuilder, expr: Expression, target: int, result: np.dtype,
                    opt: Optimize, threads: int, params: MachineParams) -> bool:
    """Add a real operand times a complex one as a real contraction over the complex
    tensors' parts (:mod:`teir_plan.schedule.parts`), when that is predicted cheaper than
    casting the real operand and contracting in complex; False when it does not apply
    (then the caller casts)."""
    specs = [b.specs[i] for i in range(len(expr.inputs))]
    z = complex_operand(specs, result)
    terms, out_term = list(expr.inputs), expr.output
    q = parts_letter(terms, out_term)
    if q is None or any(  # (an index summed in one operand: see contract_step)
            c not in out_term and sum(c in t for t in terms) == 1 for t in terms for c in t):
        return False
    if z is None:
        return _contract_expanded(b, expr, target, result, opt, threads, params)
    # (numpy computes the product where the complex operand has an infinite or NaN
    # part: PartsStep.)
    numpy_sub = numpy_subscripts(f"{','.join(terms)}->{out_term}")
    if numpy_sub is None:
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
    # Guarded against infinite and NaN parts, where numpy's promoted product differs.
    st = b.steps[-1]
    assert type(st) is TEIRStep
    b.steps[-1] = PartsStep(st.subscripts, st.inputs, st.dst, st.chosen, st.alternatives,
                            st.role, z, numpy_sub)
    return True


def _contract_expanded(b: ProgramBuilder, expr: Expression, target: int, result: np.dtype,
                       opt: Optimize, threads: int, params: MachineParams) -> bool:
    """Add a product of two complex operands as a real contraction, when predicted cheaper
    than the complex one: one operand expanded into its elements' real 2 x 2 matrices
    (:func:`teir_plan.executor.complex_tiles.expand_parts`, a step of its own), the other
    and the result taken as their parts (:mod:`teir_plan.schedule.parts`).  The real
    product has the complex one's 4 real multiply-adds per complex one, on the real
    kernels: the vector kernel and its streamed output, which BLAS' cgemm/zgemm tiles of
    a short K lack (``dega,gfbc->abcdef`` complex64: 250-370 GFLOP/s against 90-130 for
    the cgemm plan and 100-150 for numpy, loaded).  False when it does not apply or is
    not predicted cheaper (then the caller plans the complex product)."""
    specs = [b.specs[i] for i in range(len(expr.inputs))]
    terms, out_term = list(expr.inputs), expr.output
    if len(specs) != 2 or result.kind != "c" or any(s.dtype != result for s in specs):
        return False
    q = parts_letter(terms, out_term)
    r = parts_letter([*terms, q or ""], out_term)
    if q is None or r is None:
        return False
    ext = expr.extent_map

    def best(c: Contraction, top: int) -> list:
        return rank(c, params, threads, top=top, expansions=b.expansions) if opt.search \
            else [plain(c, params)]

    lays = [layout_from(t, s, ext) for t, s in zip(terms, specs)]
    c = with_dtype(describe(lays[0], lays[1], layout_from(out_term, b.specs[target], ext)),
                   result)
    ranked = best(c, 1)
    seconds = ranked[0].cost.seconds if ranked else math.inf
    real = parts_dtype(result)
    out_view = parts_spec(b.specs[target])
    chosen = None
    # The operand expanded (the other is read as its parts), and the expansion's memory
    # order: C order, or its matrices' rows outermost (the parts summed as the outermost
    # K axis; ga,gb->ab packed the C-order expansion again into g r b q order).
    for w, rows_first in ((0, False), (0, True), (1, False), (1, True)):
        n = len(specs[w].shape)
        shape = (*specs[w].shape, 2, 2)
        expanded = OperandSpec(shape, strides_in_order(
            shape, (n, *range(n), n + 1) if rows_first else range(n + 2)), real)
        views = [expanded if j == w else parts_spec(specs[j]) for j in (0, 1)]
        pterms = [t + r + q if j == w else t + r for j, t in enumerate(terms)]
        pext = {**ext, q: 2, r: 2}
        lays = [layout_from(t, v, pext) for t, v in zip([*pterms, out_term + q],
                                                        [*views, out_view])]
        ranked = best(with_dtype(describe(lays[0], lays[1], lays[2]), real), b.top)
        if not ranked:
            continue
        expand = expand_seconds(specs[w], params)
        if (expand + ranked[0].cost.seconds) * EXPAND_MARGIN < seconds:
            seconds = (expand + ranked[0].cost.seconds) * EXPAND_MARGIN
            chosen = (w, expanded, views, pterms, ranked, expand)
    if chosen is None:
        return False
    w, expanded, views, pterms, ranked, expand = chosen
    e = b.temp(f"operand {w} expanded", expanded.shape, real, strides=expanded.strides)
    b.steps.append(ExpandStep(w, e, f"operand {w}", real, expand))
    cands = [Candidate(x.teir, x.names, x.cost, x.contraction, x.choice, x.packs)
             for x in ranked]
    sub = (f"{','.join(pterms)}->{out_term + q} ({r}, {q}: operand {w}'s 2 x 2 real "
           f"matrices; {r}: the parts of operand {1 - w}, {q}: the result's)")
    _add_teir_step(b, sub, (e, 1) if w == 0 else (0, e), target, cands, "contract",
                   [*views, out_view])
    return True


def expand_seconds(spec: OperandSpec, params: MachineParams) -> float:
    """:func:`teir_plan.executor.complex_tiles.expand_parts`' predicted seconds: three
    numpy passes, each reading the operand and writing over the lines of the expansion
    (twice the operand's bytes), priced at the memory bandwidth as a cast."""
    return 3 * 3 * math.prod(spec.shape) * spec.dtype.itemsize / params.dram_bytes_per_second


def _add_teir_step(b: ProgramBuilder, sub: str, inputs: tuple[int, ...], dst: int,
                   cands: list[Candidate], role: str,
                   views: list[OperandSpec] | None = None) -> None:
    """``views``: the layouts the programs address the buffers as, when not the buffers'
    own (a complex buffer's parts: :mod:`teir_plan.schedule.parts`)."""
    # Prove, once, that every candidate stays inside the buffers it will be given.
    def prove(teir: TEIR, arrays: list[ArraySpec]) -> None:
        if b.pending is None:
            _prove(teir, arrays)
        else:
            b.pending.append(lambda: _prove(teir, arrays))

    for cand in cands:
        specs = [ArraySpec.of(v) for v in views] if views else [
            ArraySpec.of(b.specs[i]) for i in (*inputs, dst)]
        for pack in cand.packs:
            packed = ArraySpec.of(OperandSpec(pack.shape, c_strides(pack.shape), specs[-1].dtype))
            prove(pack.copy.teir, [specs[pack.tensor], packed])
            specs[pack.tensor] = packed
        prove(cand.teir, list(specs))
    b.steps.append(TEIRStep(sub, inputs, dst, cands[0], tuple(cands), role))


def _prove(teir: TEIR, specs: list[ArraySpec]) -> None:
    """Validate ``teir`` and prove its reach inside buffers of these layouts."""
    teir.validate()
    s = teir.schedule
    for j, spec in enumerate(specs):
        check_reach(f"tensor {j}", j, spec, s.dim_sizes, s.strides[j])  # type: ignore[arg-type]


def strides_in_order(shape: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a contiguous array of ``shape`` whose axes lie in memory in
    ``perm``'s order, outermost first (0 along extent 1)."""
    strides = [0] * len(shape)
    step = 1
    for ax in reversed(perm):
        strides[ax] = step if shape[ax] > 1 else 0
        step *= shape[ax]
    return tuple(strides)
