"""What the explain report says about a plan besides its tables: how the executor runs
each tile, what an alternative changes, the frontend's and the planner's notes, and the
steps as a tree.  Each reads what planning recorded in the plan and its steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from teir_plan.frontend.contraction import describe, layout_in
from teir_plan.schedule.half import RoundStep
from teir_plan.schedule.steps import (
    BlockedStep,
    Candidate,
    CastStep,
    CopyStep,
    NumpyStep,
    ReduceStep,
    TEIRStep,
)
from teir_plan.teir.enums import DimType, ExecType, Prim

if TYPE_CHECKING:  # the plan builds this report (Plan.explain): no import back
    from teir_plan.schedule.plan import Plan


def executor_note(teir: Any) -> str:
    """How the executor runs each tile of a program: the description of the tile kind
    its lowered tile runs on (teir_plan/tilekinds: the vector kernels, dot products,
    rows, a BLAS ``?gemm`` call with its flags and leading dimensions, strided loops,
    copies)."""
    from teir_plan.executor.lower import lower

    low = lower(teir)  # the executor's own decision
    if low.copy_runs is not None:
        return ("executor: the block of each parallel iteration gathered a run of out at "
                "a time in cache (out's rows are too short to stream alone), each run "
                "written to memory whole with non-temporal stores")
    note = "executor: " + low.kind.describe(low.tile, low.dtype)
    if low.dtype != teir.primitives.data_type.numpy:  # a complex64 copy on float64 words
        note += f" (each {teir.primitives.data_type} element moved as one {low.dtype})"
    return note


# ---- the chosen program in words --------------------------------------------------------

def _axis(name: str) -> str:
    """An axis in the user's letters: ``rs`` fused, ``pq^`` the outer part of ``pq``."""
    base = f"`{name.rstrip('^')}`"
    return f"the outer part of {base}" if name.endswith("^") else base


def _series(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def describe_program(cand: Candidate) -> str:
    """A step's program in a few sentences, read from its records (the primitive, the
    roles and execution of its axes, its packs, its first and last primitives): the
    README's and getting-started's explanation of their first example is this text,
    generated with the example's output (docs/scripts/generate.py)."""
    teir, names = cand.teir, list(cand.names)
    s, p = teir.schedule, teir.primitives
    prim = [i for i in range(s.num_dims) if s.exec_types[i] is ExecType.PRIM]
    loops = [i for i in range(s.num_dims) if s.exec_types[i] is not ExecType.PRIM]
    main = p.prim_main
    calls = f"one {main.name} call" + (" per tile" if loops else " over the whole operands")
    if main in (Prim.GEMM, Prim.BRGEMM):
        batch = next((i for i in prim if s.dim_types[i] is DimType.K), None)
        if main is not Prim.BRGEMM:
            batch = None
        roles = []
        for role in (DimType.M, DimType.N, DimType.K):
            axes = [_axis(names[i]) for i in prim if s.dim_types[i] is role and i != batch]
            if axes:
                roles.append(f"{role.name} = {' '.join(axes)}")
        if batch is not None:
            roles.append(f"{_axis(names[batch])} its batch-reduce axis")
        text = f"The program is {calls}: {', '.join(roles)}."
    else:
        axes = [_axis(names[i]) for i in prim]
        text = f"The program is {calls} of a {main.name.lower()} primitive over {' '.join(axes)}."
    fused = [names[i].rstrip("^") for i in prim if len(names[i].rstrip("^")) > 1]
    if fused:
        text += (f" An axis named by several indices ({', '.join(f'`{n}`' for n in fused)}) "
                 "is those indices fused into one: their strides compose.")
    if loops:
        said = [f"{_axis(names[i])} is "
                + ("split across the threads (parallel)"
                   if s.exec_types[i] is ExecType.PARALLEL else "a sequential loop")
                for i in loops]
        text += f" Around the calls, {_series(said)}."
    inputs = teir.num_tensors - 1
    tensor_names = ("in0", "in1")[:inputs] if inputs == 2 else ("in0",)
    packed = {pk.tensor: pk for pk in cand.packs}
    before = [f"`{tensor_names[j]}` is first copied into a contiguous buffer ordered "
              f"`{' '.join(packed[j].names)}`" for j in range(len(tensor_names)) if j in packed]
    in_place = [f"`{tensor_names[j]}`" for j in range(len(tensor_names)) if j not in packed]
    if in_place:
        verb = "is" if len(in_place) == 1 else "are"
        before.append(f"{_series(in_place)} {verb} read in place")
    text += f" {_series(before)[0].upper()}{_series(before)[1:]}."
    if p.prim_first is Prim.ZERO:
        text += " The output is zeroed on first access (`prim_first=zero`)"
    elif p.prim_main in (Prim.GEMM, Prim.BRGEMM):
        text += " The calls add into the output (`prim_first=none`)"
    else:  # a unary primitive writes its output over
        text += " The calls write the output over (`prim_first=none`)"
    after = "sum" if p.prim_main in (Prim.GEMM, Prim.BRGEMM) else "copy"
    text += (f", and a ReLU is applied after the {after} (`prim_last=relu`)."
             if p.prim_last is Prim.RELU else ".")
    return text


# ---- what an alternative changes -------------------------------------------------------

def _letters(names: list[str]) -> set[str]:
    return {ch for n in names for ch in n.rstrip("^")}


def _join(xs: Any) -> str:
    return ", ".join(sorted(xs))


def changes(chosen: Candidate, alt: Candidate) -> list[str]:
    """What ``alt`` does differently from ``chosen``, in the user's index letters.

    Axis names come from ``Candidate.names``: fused axes concatenate their letters
    (``pq``), the outer part of a split axis ends with ``^`` (``pq^``)."""
    def parts(c: Candidate) -> dict[str, Any]:
        s = c.teir.schedule
        names = list(c.names)
        return {
            "loops": [names[i] for i in s.loop_axes()],
            "prim": _letters([names[i] for i in s.prim_axes()]),
            "par": {names[i] for i, e in enumerate(s.exec_types) if e is ExecType.PARALLEL},
            "main": str(c.teir.primitives.prim_main).upper(),
            "packs": {p.tensor for p in c.packs},
            "fused": {n.rstrip("^") for n in names if len(n.rstrip("^")) > 1},
            "splits": {n[:-1]: (s.dim_sizes[i], s.dim_sizes[names.index(n[:-1])])
                       for i, n in enumerate(names) if n.endswith("^") and n[:-1] in names},
        }

    a, b = parts(chosen), parts(alt)
    out = []
    if b["prim"] - a["prim"]:
        out.append(f"{_join(b['prim'] - a['prim'])} moved into the primitive")
    if a["prim"] - b["prim"]:
        out.append(f"{_join(a['prim'] - b['prim'])} moved out of the primitive")
    if a["main"] != b["main"]:
        out.append(f"{b['main']} instead of {a['main']}")
    if b["fused"] - a["fused"]:
        out.append(f"fuses {_join(b['fused'] - a['fused'])}")
    if a["fused"] - b["fused"]:
        out.append(f"does not fuse {_join(a['fused'] - b['fused'])}")
    for n, (outer, inner) in sorted(b["splits"].items()):
        if a["splits"].get(n) != (outer, inner):
            out.append(f"{n} split {outer} x {inner}")
    for n in sorted(set(a["splits"]) - set(b["splits"])):
        out.append(f"{n} not split")
    if b["par"] - a["par"]:
        out.append(f"{_join(b['par'] - a['par'])} now parallel")
    if a["par"] - b["par"]:
        out.append(f"{_join(a['par'] - b['par'])} no longer parallel")
    names = ("in0", "in1")
    out += [f"packs {names[t]} first" for t in sorted(b["packs"] - a["packs"])]
    out += [f"does not pack {names[t]}" for t in sorted(a["packs"] - b["packs"])]
    common = [n for n in b["loops"] if n in a["loops"]]
    added = [n for n in b["loops"] if n not in a["loops"]]
    if common != [n for n in a["loops"] if n in b["loops"]] or (
            a["loops"] != b["loops"] and ((added and len(b["loops"]) > 1) or not out)):
        out.append(f"loop order {' '.join(b['loops']) or '(none)'}"
                   + (f" (was {' '.join(a['loops'])})" if a["loops"] else ""))
    if not out and alt.teir != chosen.teir:
        s0, s1 = chosen.teir.schedule, alt.teir.schedule
        if s0.strides != s1.strides:
            out.append("same axes, different strides (a different tensor layout)")
        elif s0.dim_sizes != s1.dim_sizes:
            out.append("same axes, different tile sizes")
    return out


# ---- building the report -----------------------------------------------------------------

def _pre_reduction(st: ReduceStep | TEIRStep, plan: Plan) -> str:
    """The words for a sum that writes a temporary (not the result): a pre-reduction."""
    return ("a pre-reduction: indices summed in one operand only are summed before the "
            "contraction; " if st.dst != len(plan.operands) else "")


def frontend_notes(plan: Plan) -> list[str]:
    """What the frontend does before (and around) the TEIR programs: casts, diagonal
    views, broadcasts, pre-reductions, extent-1 indices, packing, numpy fallbacks."""
    expr = plan.expression
    ext = expr.extent_map
    notes: list[str] = []
    for i, (term, spec) in enumerate(zip(expr.inputs, plan.operands)):
        for ch in dict.fromkeys(term):
            if term.count(ch) > 1:
                notes.append(f"operand {i} '{term}': diagonal view over the repeated index "
                             f"{ch} (one axis whose stride is the sum of the repeated dims' "
                             f"strides; nothing is copied)")
        for ch, n in zip(term, spec.shape):
            if n == 1 and ext.get(ch, 1) > 1:
                notes.append(f"operand {i} '{term}': index {ch} has extent 1 here and "
                             f"{ext[ch]} elsewhere: broadcast with stride 0")
    ones = sorted(ch for ch, n in ext.items() if n == 1)
    if ones:
        notes.append(f"index {_join(ones)} of extent 1 dropped from the TEIR programs "
                     f"(it selects one element everywhere)")
    layouts = plan.info.result_layouts
    if len(layouts) > 1:
        chosen = next(lay for lay in layouts if lay.chosen)
        # A layout whose search found nothing under the best so far carries that
        # ceiling (a lower bound on its cost) instead of a prediction.
        others = "; ".join(
            f"{lay.memory_order} above {lay.seconds * 1e6:.1f} us (its search stopped there)"
            if lay.pruned else f"{lay.memory_order} {lay.seconds * 1e6:.1f} us"
            for lay in layouts if not lay.chosen)
        view = ("row-major" if chosen.memory_order == expr.output else
                f"a permuted view of a buffer in {chosen.memory_order} order")
        notes.append(f"result layout (order={plan.info.order!r}): {view}, "
                     f"predicted {chosen.seconds * 1e6:.1f} us; also costed: {others}")
    staged = any(b.axis_order is not None for b in plan.buffers)
    for k, st in enumerate(plan.steps):
        if isinstance(st, RoundStep):
            notes.append(f"step {k}: {st.describe()}, after the contraction")
        elif isinstance(st, CastStep):
            notes.append(f"step {k}: {st.describe()} before the contraction")
        elif isinstance(st, (NumpyStep, CopyStep)):
            notes.append(f"step {k}: {st.describe()}")
        elif isinstance(st, BlockedStep) and st.blocking is not None:
            bl = st.blocking
            loops = ", ".join(f"{r.name} {r.extent}" for r in bl.outer)
            copy = ", ".join(f"{r.name} {r.extent} (stride {r.out_stride} in out, "
                             f"{r.stage_stride} in the stage)" for r in bl.block)
            notes.append(
                f"step {k}: out's layout would make the contraction transpose an operand, "
                f"so it runs in {bl.blocks} blocks (loops {loops}, split over the threads); "
                f"each block's TEIR program below writes a stage of "
                f"{bl.stage_elements * bl.inner.dtype.itemsize / 1024:.0f} KiB in cache "
                f"(its out strides are the stage's), then one copy with non-temporal "
                f"stores moves the block into out: {copy}")
        elif isinstance(st, ReduceStep):
            ins, out = st.subscripts.split("->")
            notes.append(f"step {k}: {_pre_reduction(st, plan)}the sum over "
                         f"{_join(sorted(set(ins) - set(out) - {','}))} runs on the "
                         f"reduction kernels (one pass over the operand, no TEIR "
                         f"program): {st.reduction.describe()}")
        elif isinstance(st, TEIRStep):
            ins, out = st.subscripts.split("->")
            terms = ins.split(",")
            if st.role == "permute" and staged:
                notes.append(f"step {k}: out's layout would make the contraction transpose "
                             f"an operand, so the result is staged in memory order {ins} "
                             f"and permuted into out's order {out} (one copy of the result)")
            elif st.role == "reduce":
                notes.append(f"step {k}: {_pre_reduction(st, plan)}the sum over "
                             f"{_join(set(terms[0]) - set(out))} runs as a contraction "
                             f"with an added constant in1 of ones (stride 0 on every "
                             f"axis)")
            for p in st.chosen.packs:
                notes.append(f"step {k}: {p.describe()} before the TEIR program runs")
    if plan.numpy_call is not None:
        notes.append(f"calls run step 0 as numpy's {plan.numpy_call} on the operands "
                     "(views, no copy): for a call this small numpy's call costs less "
                     "than the executor's (its checks and flat views); the step below "
                     "is what autotune and explain(measure=True) time")
    free = _free_layout_note(plan)
    if free:
        notes.append(free)
    return notes


def _free_layout_note(plan: Plan) -> str | None:
    """For a plan whose result layout was fixed (``out=``, or ``order`` other than 'K'):
    the layout the planner would choose itself, as recorded while planning
    (schedule.alternatives.FreeLayout), when it is predicted faster by more than the
    planner's own layout margin, and how to get it.  None otherwise."""
    free = plan.info.free_layout
    if (free is None or plan.info.result_layouts or plan.view is not None
            or plan.main_step is None or not plan.info.optimize):
        return None
    fixed, own = plan.predicted_seconds, free.seconds
    if own <= 0 or fixed <= own * free.margin:
        return None
    out_order = "".join(sorted(plan.expression.output,
                               key=lambda ch: -abs(plan.out_spec.strides[
                                   plan.expression.output.index(ch)])))
    return (f"the result's layout is fixed here (memory order {out_order}): predicted "
            f"{fixed * 1e6:.1f} us in all; in the layout the planner would choose itself "
            f"(memory order {free.memory_order}) {own * 1e6:.1f} us, {fixed / own:.2f}x "
            f"faster. To get it, call without out= and with order='K' (the result is then "
            f"a permuted view), or pass an out= of that layout (plan.empty_out() of a plan "
            f"made without out=)")


def step_tree(plan: Plan) -> tuple[str, ...]:
    """The steps as a tree, output at the root: every buffer with its shape."""
    n_ops = len(plan.operands)
    out_id = n_ops
    producer: dict[int, tuple[int, Any]] = {}
    for k, st in enumerate(plan.steps):
        dst = getattr(st, "dst", None)
        if dst is not None:
            producer[dst] = (k, st)
    if sum(isinstance(s, (TEIRStep, NumpyStep, ReduceStep)) for s in plan.steps) < 2:
        return ()
    terms = plan.expression.inputs

    def label(b: int) -> str:
        if b < n_ops:
            return f"operand {b} '{terms[b]}' {plan.operands[b].shape}"
        if b == out_id:
            return f"out '{plan.expression.output}' {plan.shape}"
        spec = plan.buffers[b - n_ops - 1]
        return f"{spec.name} {spec.shape}"

    lines: list[str] = []

    def walk(b: int, prefix: str, last: bool, root: bool, seen: frozenset[int]) -> None:
        conn = "" if root else ("└── " if last else "├── ")
        made = producer.get(b)
        how = ""
        kids: list[int] = []
        if made is not None and b not in seen:
            k, st = made
            if isinstance(st, (TEIRStep, NumpyStep, ReduceStep)):
                how = f"  <- step {k}: {st.subscripts}"
                kids = list(st.inputs)
            elif isinstance(st, (CastStep, CopyStep)):
                how = f"  <- step {k}: {st.kind}"
                kids = [st.src]
        lines.append(prefix + conn + label(b) + how)
        child_prefix = prefix + ("" if root else ("    " if last else "│   "))
        for n, c in enumerate(kids):
            walk(c, child_prefix, n == len(kids) - 1, False, seen | {b})

    walk(out_id, "", True, True, frozenset())
    return tuple(lines)


def original_contraction(plan: Plan):  # type: ignore[no-untyped-def]
    """The contraction as the user wrote it (before fusing), for two-operand plans."""

    step = plan.main_step
    if step is None or len(plan.operands) != 2 or step.inputs != (0, 1):
        return None
    ext = plan.expression.extent_map
    terms = plan.expression.inputs
    lays = [layout_in(t, s.shape, s.strides, ext) for t, s in zip(terms, plan.operands)]
    out = plan.out_spec
    return describe(lays[0], lays[1], layout_in(plan.expression.output, out.shape, out.strides,
                                                ext))
