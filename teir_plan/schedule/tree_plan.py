"""Planning an expression of three or more operands as one tree.

The operands are contracted two at a time along a :class:`~teir_plan.planner.tree.
ContractionTree`; each step is a TEIR contraction (or a reduction) planned by
:func:`teir_plan.schedule.contract.contract_step`.  What this module decides is each
intermediate's **memory order**: a step's cost depends on the layouts of the buffers it
reads and the layout it writes (a GEMM tile reads its operands in place only when their
unit strides fall where the tile needs them; otherwise the step packs, that is
transposes, an operand first, or runs on slower strided tiles), so an intermediate is
worth writing in the order its consumer reads best, if its producer can write that
order cheaply.  The choice is dynamic programming over the tree, bottom up:
``best[v][L]``, the least predicted seconds of the subtree under step ``v`` when ``v``
writes layout ``L``, is the minimum over its children's layouts of the step's own
predicted cost (the cost model's, on those layouts) plus its children's ``best``.
Leaves keep their strides; the root writes the layout ``build.py`` chose for the result.

Each intermediate tries at most :data:`MAX_LAYOUTS` memory orders (see
:func:`candidate_orders`), and only steps large enough for the layout to matter try more
than opt_einsum's own order (:data:`MIN_FLOPS`), so that planning a network of hundreds of
small tensors stays about as fast as planning its steps one by one (:data:`MIN_SHARE`
likewise for the small steps of a large tree).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from teir_plan.errors import PlanError
from teir_plan.frontend.convention import Optimize
from teir_plan.frontend.expression import Expression
from teir_plan.machine.params import MachineParams
from teir_plan.planner import tree as tree_search
from teir_plan.planner.handoff import handoff_seconds
from teir_plan.planner.tree import ContractionTree, smallest_tree, tree_for
from teir_plan.progress import announce, seconds_text
from teir_plan.schedule.contract import ProgramBuilder, contract_step, strides_in_order
from teir_plan.schedule.operands import OperandSpec
from teir_plan.schedule.steps import TEIRStep, step_seconds
from teir_plan.teir.records import TEIR
from teir_plan.tiles import flop_factor

# Memory orders tried per intermediate: opt_einsum's, two that its consumer reads in
# place, and those its producer writes in place, the first four distinct ones (a step
# with two intermediate inputs is costed for up to 4^3 combinations).
MAX_LAYOUTS = 4
# Steps of fewer flops keep opt_einsum's order for their result: their cost is mostly
# the call (a few microseconds), not the layout.  2 * 64^3: a 64^3 GEMM.
MIN_FLOPS = 2 * 64**3
# Nor do steps of less than this share of the tree's flops, nor their inputs: planning
# MERA (25 steps, 31 GFLOP) tried 4 orders on every step in 5-12 s, 518 step searches.
MIN_SHARE = 0.01
# A step of fewer real flops than SERIAL_FLOPS (a 128^3 GEMM's; a complex multiply-add
# counts as 4 real ones) runs on one thread (step_threads): its tens of microseconds of
# work are less than a parallel region can cost on a shared machine, where a worker
# descheduled by another process holds the region for a scheduler quantum.  Circuits at
# a load average of 9-10 on the 2 cores: a 12-qubit one (82 steps, 3 planned parallel at
# 18-29 us predicted) took 1-40 ms a call, 0.5-1 ms serial; a 16-qubit amplitude (407
# steps, 26 parallel gate applications of 80-110 us predicted, 4 ms in all) 90-300 ms,
# 33-65 ms serial.
SERIAL_FLOPS = 2 * 128**3


@dataclass(frozen=True)
class StepLayout:
    """One step of the tree as the layout choice saw it: the memory order it writes
    (None: the result's layout) and opt_einsum's order of its indices; its predicted
    seconds and the operands its best program packs (transposes) first, with the
    layouts chosen and with every intermediate in opt_einsum's order."""

    node: int
    subscripts: str
    order: str | None
    term: str
    seconds: float
    packs: int
    default_seconds: float
    default_packs: int
    # Of ``seconds`` (``default_seconds``): waiting for lines of its inputs that other
    # cores wrote (planner/handoff.py).
    handoff: float = 0.0
    default_handoff: float = 0.0


@dataclass(frozen=True)
class TreeLayouts:
    """Each intermediate's memory order (its indices, outermost first), keyed by node,
    the predicted seconds of the whole tree with them and with opt_einsum's, and each
    step's account."""

    orders: tuple[tuple[int, str], ...]
    predicted: float
    predicted_default: float
    steps: tuple[StepLayout, ...] = ()
    tree: ContractionTree | None = field(default=None, compare=False)

    def order(self, node: int) -> str | None:
        return dict(self.orders).get(node)


# Operands up to which a path strategy's tree over memory_limit is searched again for
# the smallest largest intermediate (opt_einsum's dynamic programming, bounded in time by
# planner.tree.SIZE_SEARCH_SECONDS: under a second for 20 operands of a chain or a grid).
SIZE_SEARCH_MAX_OPERANDS = 20


@lru_cache(maxsize=256)
def tree_of(expr: Expression, opt: Optimize) -> ContractionTree:
    """The tree ``optimize=`` asks for.  With a memory limit (opt_einsum's meaning: the
    largest intermediate, in elements) that the strategy's tree breaks (opt_einsum then
    falls back to one step of all the operands, which TEIR runs two at a time), the
    tree whose largest intermediate is smallest (:func:`smallest_tree`: a search bounded
    in time), and an error when that one breaks the limit too.  Cached: a plan asks for
    the tree twice, and a search cut off by time must give both the same tree."""
    tree = tree_for(expr.inputs, expr.output, expr.extent_map, opt.path, opt.memory_limit)
    limit = opt.memory_limit
    if limit is None or _largest(tree) <= limit:
        return tree
    searched = isinstance(opt.path, str) and len(expr.inputs) <= SIZE_SEARCH_MAX_OPERANDS
    proven = False
    if searched:
        smallest, proven = smallest_tree(expr.inputs, expr.output, expr.extent_map)
        if _largest(smallest) <= limit:
            return smallest
        if _largest(smallest) < _largest(tree):
            tree = smallest
    node = max(tree.steps[:-1], key=lambda n: n.size)
    named = "left to right (optimize=False)" if opt.path is False else repr(opt.path)
    which = (f"neither the path {named} nor the path of the smallest intermediates"
             if proven else
             f"neither the path {named} nor the best of the paths searched in "
             f"{tree_search.SIZE_SEARCH_SECONDS:g} s for {len(expr.inputs)} operands"
             if searched else f"the path {named}")
    raise PlanError(
        f"optimize: memory_limit of {limit} elements cannot be met: "
        f"step {node.node - tree.num_operands} "
        f"({','.join(tree.nodes[c].term for c in node.children)}->{node.term}) "
        f"makes an intermediate of {node.size} elements ({which} stays under it)")


def _largest(tree: ContractionTree) -> int:
    """The tree's largest intermediate, in elements (the result is not one)."""
    return max((n.size for n in tree.steps[:-1]), default=0)


def step_threads(tree: ContractionTree, node: int, dtype: np.dtype, threads: int) -> int:
    """The threads a tree's step is planned for: one below SERIAL_FLOPS real flops (see
    there), else ``threads``."""
    return 1 if tree.flops(node) * flop_factor(dtype) < SERIAL_FLOPS else threads


# A tree step's planning, roughly (27 ms on a random 3-regular network, 95 ms on MERA's,
# AMD EPYC Zen 3): a tree planned for longer than a second says so first.
STEP_PLANNING_SECONDS = 0.04
_announced: set[str] = set()  # expressions whose planning was announced in this process


def plan_tree(b: ProgramBuilder, expr: Expression, ids: list[int], target: int, dtype: np.dtype,
              opt: Optimize, relu: bool, threads: int, params: MachineParams,
              block_order: str | None = None) -> TreeLayouts | None:
    """Add the steps computing ``target`` from the operands' buffers ``ids`` to ``b``:
    one step for one or two operands (``block_order``: see ``contract_step``), else a tree's
    pairwise steps with the intermediates' layouts chosen by the cost model (returned;
    None for one step)."""
    if len(ids) <= 2:
        contract_step(b, list(expr.inputs), ids, expr.output, target, dtype, opt.search, relu,
                  threads, params, block_order=block_order)
        return None
    tree = tree_of(expr, opt)
    extents = expr.extent_map
    if opt.search and len(tree.steps) * STEP_PLANNING_SECONDS >= 1.0 \
            and expr.subscripts not in _announced:
        _announced.add(expr.subscripts)  # (once per expression: several layouts plan it)
        announce(f"planning a network of {len(tree.steps) + 1} tensors, "
                 f"{len(tree.steps)} pairwise steps "
                 f"({seconds_text(len(tree.steps) * STEP_PLANNING_SECONDS)}; "
                 f"TEIR_PLAN_QUIET=1 silences this)")
    layouts = choose_layouts(tree, b, ids, target, dtype, threads, params) if opt.search \
        else TreeLayouts((), 0.0, 0.0, tree=tree)
    buf = dict(enumerate(ids))
    b.tree = True  # (a reduction among a tree's steps runs from Python: contract.py)
    for node in tree.steps:
        if node.node == tree.root:
            dst = target
        else:
            order = layouts.order(node.node) or node.term
            shape = tuple(extents[c] for c in node.term)
            dst = b.temp(f"intermediate {node.term}" + (
                "" if order == node.term else f" in order {order}"), shape, dtype,
                strides=_strides(node.term, order, shape))
        last = node.node == tree.root
        contract_step(b, [tree.nodes[c].term for c in node.children],
                  [buf[c] for c in node.children], node.term, dst, dtype, opt.search,
                  relu and last, step_threads(tree, node.node, dtype, threads), params)
        if b.outpriced:
            b.tree = False
            return layouts  # this step alone costs more than the ceiling
        buf[node.node] = dst
    b.tree = False
    return layouts


def _strides(term: str, order: str, shape: Sequence[int]) -> tuple[int, ...]:
    return strides_in_order(shape, [term.index(c) for c in order])


def candidate_orders(tree: ContractionTree, node: int, leaf_orders: dict[int, str],
                     root_order: str | None = None) -> list[str]:
    """Memory orders worth trying for intermediate ``node`` (outermost first), opt_einsum's
    first.  For its consumer ``P`` (reading it beside a sibling ``S`` into ``P``'s result
    ``O``) its indices are *batch* (in ``S`` and ``O``), *free* (in ``O`` only) and *summed*
    (in ``S`` only): batch, free, summed reads it as a row-major GEMM operand with the
    summed indices innermost; batch, summed, free with the free ones innermost (each
    group in the order ``S`` or ``O`` has it, so that the tile's strides compose).  Its
    producer writes in place the orders following its own inputs: the indices both
    share, then one input's own, then the other's, each in its input's order.
    ``root_order``: the result's memory order (``O``'s, when the consumer is the root)."""
    n = tree.nodes[node]
    term = n.term
    out = [term]
    parent = tree.parent(node)
    if parent is not None:
        p = tree.nodes[parent]
        sib = next(c for c in p.children if c != node)
        s_order = leaf_orders.get(sib, tree.nodes[sib].term)
        o_order = root_order if parent == tree.root and root_order else p.term
        batch = [c for c in o_order if c in term and c in s_order]
        free = [c for c in o_order if c in term and c not in s_order]
        summed = [c for c in s_order if c in term and c not in o_order]
        rest = [c for c in term if c not in batch + free + summed]
        out += ["".join(batch + free + summed + rest), "".join(batch + summed + free + rest)]
    out += producer_orders([leaf_orders.get(c, tree.nodes[c].term) for c in n.children], term)
    unique = list(dict.fromkeys(o for o in out if sorted(o) == sorted(term)))
    return unique[:MAX_LAYOUTS]


def producer_orders(orders: Sequence[str], term: str) -> list[str]:
    """The orders of ``term`` a step writes in place from inputs of memory ``orders``
    (two of them): the indices both share, then one input's own, then the other's."""
    out = []
    if len(orders) == 2:
        for a, z in ((0, 1), (1, 0)):
            both = [c for c in orders[a] if c in term and c in orders[z]]
            own_a = [c for c in orders[a] if c in term and c not in orders[z]]
            own_z = [c for c in orders[z] if c in term and c not in orders[a]]
            rest = [c for c in term if c not in both + own_a + own_z]
            out.append("".join(both + own_z + own_a + rest))
    return out


def result_orders(expr: Expression, specs: Sequence[OperandSpec], opt: Optimize
                  ) -> list[list[int]]:
    """Output axis orders (outermost first) worth planning for the result of a tree
    under ``order="K"``: those its last step writes in place from its inputs (an
    intermediate's order taken as opt_einsum's, a leaf's as its strides have it)."""
    tree = tree_of(expr, opt)
    root = tree.nodes[tree.root]
    orders = [_leaf_order(tree.nodes[c].term, specs[c].strides) if tree.nodes[c].is_leaf
              else tree.nodes[c].term for c in root.children]
    return [[expr.output.index(c) for c in o] for o in producer_orders(orders, root.term)
            if sorted(o) == sorted(expr.output)]


def _leaf_order(term: str, strides: Sequence[int]) -> str:
    """A leaf's indices in memory order, outermost first (a repeated index once)."""
    seen: dict[str, int] = {}
    for c, st in zip(term, strides):
        seen[c] = seen.get(c, 0) + abs(st)
    return "".join(sorted(seen, key=lambda c: -seen[c]))


def choose_layouts(tree: ContractionTree, b: ProgramBuilder, ids: list[int], target: int,
                   dtype: np.dtype, threads: int, params: MachineParams) -> TreeLayouts:
    """Each intermediate's memory order, by dynamic programming over ``tree`` (see the
    module's docstring); every step is costed by the planner's own search, keeping its
    best candidate only, on a scratch builder whose steps are thrown away."""
    root_order = _leaf_order(tree.output, b.specs[target].strides)
    leaf_orders = {i: _leaf_order(tree.nodes[i].term, b.specs[ids[i]].strides)
                   for i in range(tree.num_operands)}
    options: dict[int, list[str]] = {}
    floor = max(MIN_FLOPS, MIN_SHARE * sum(tree.flops(n.node) for n in tree.steps))
    for node in tree.steps:
        if node.node == tree.root:
            continue
        parent = tree.parent(node.node)
        assert parent is not None
        big = max(tree.flops(node.node), tree.flops(parent)) >= floor
        options[node.node] = candidate_orders(tree, node.node, leaf_orders, root_order) if big \
            else [node.term]
    # (step, its order, its children's) -> (predicted seconds, or inf when no candidate
    # costs less than the ceiling it was searched under; that ceiling; operands packed;
    # its programs' accesses, see _accesses)
    # Shared by the searches of one build_plan (its result layouts): the root's key
    # holds the layout it writes.
    memo: dict[tuple, tuple[float, float, int, Accesses]] = {} if b.expansions is None \
        else b.expansions.setdefault(("tree layouts",), {})
    where = b.specs[target].strides

    def step_cost(node: int, own: str | None, child_orders: tuple[str, ...],
                  ceiling: float = math.inf) -> float:
        key = (node, own if own is not None else where, child_orders)
        known = memo.get(key)
        if known is not None and (known[0] < math.inf or known[1] >= ceiling):
            return known[0]
        n = tree.nodes[node]
        scratch = ProgramBuilder(b.n, [], 1, b.expansions, ceiling)
        scratch.tree = True
        scratch.specs = dict(b.specs)
        scratch.buffers = list(b.buffers)  # (new buffers' ids follow b's)
        srcs = []
        for c, order in zip(n.children, child_orders):
            if c in leaf_orders:
                srcs.append(ids[c])
            else:
                shape = tree.nodes[c].shape
                srcs.append(scratch.temp("in", shape, dtype, strides=_strides(
                    tree.nodes[c].term, order, shape)))
        dst = target if own is None else scratch.temp(
            "out", n.shape, dtype, strides=_strides(n.term, own, n.shape))
        contract_step(scratch, [tree.nodes[c].term for c in n.children], srcs, n.term, dst,
                  dtype, True, False, step_threads(tree, node, dtype, threads), params)
        seconds = math.inf if scratch.outpriced else sum(step_seconds(s) for s in scratch.steps)
        packs = sum(len(s.chosen.packs) for s in scratch.steps if isinstance(s, TEIRStep))
        memo[key] = (seconds, ceiling, packs, _accesses(
            scratch.steps, dst if own is not None else None, srcs,
            step_threads(tree, node, dtype, threads)))
        return seconds

    def key_of(v: int, own: str | None, kids: tuple[str, ...]) -> tuple:
        return (v, own if own is not None else where, kids)

    def handoff(v: int, own: str | None, kids: tuple[str, ...], default: bool = False
                ) -> float:
        """Seconds step ``v`` (writing ``own`` from children in ``kids``) waits for
        lines its intermediate inputs' producers left in other cores (each producer as
        its best subtree for that order has it; ``default``: as every intermediate in
        opt_einsum's order has it)."""
        known = memo.get(key_of(v, own, kids))
        if known is None or not math.isfinite(known[0]):
            return 0.0
        readers = known[3].readers
        total = 0.0
        for q, (c, o) in enumerate(zip(tree.nodes[v].children, kids)):
            if c in leaf_orders:
                continue
            below = memo.get(key_of(c, o, defaults[c][1] if default else best[c][o][1]))
            writer = below[3].writer if below is not None else None
            if writer is None:
                continue
            for reader, j, reader_threads in readers[q]:
                total += handoff_seconds(writer[0], writer[1], reader, j, reader_threads,
                                         dtype.itemsize, params.l2_bytes,
                                         params.handoff_seconds)
        return total

    # Every intermediate in opt_einsum's order first: the reference, and the first bound.
    defaults = {node.node: (None if node.node == tree.root else node.term, tuple(
        leaf_orders.get(c, tree.nodes[c].term) for c in node.children)) for node in tree.steps}
    default = sum(step_cost(v, own, kids) for v, (own, kids) in defaults.items())
    # best[node][own order] = (seconds of the subtree, the children's orders chosen)
    best: dict[int, dict[str | None, tuple[float, tuple[str, ...]]]] = {}
    for node in tree.steps:
        v = node.node
        owns: list[str | None] = [None] if v == tree.root else list(options[v])
        # Each child's orders, opt_einsum's first, then cheapest subtree first: the best
        # combination so far bounds the search of the next (branch and bound).
        child_choices: list[list[str]] = []
        for c in node.children:
            if c in leaf_orders:
                child_choices.append([leaf_orders[c]])
            else:
                first, *rest = [o for o in best[c] if o is not None]
                child_choices.append([first, *sorted(rest, key=lambda o: best[c][o][0])])
        best[v] = {}
        for own in owns:
            found: tuple[float, tuple[str, ...]] = (math.inf, ())
            for combo in itertools.product(*child_choices):
                below = sum(best[c][o][0] for c, o in zip(node.children, combo)
                            if c not in leaf_orders)
                if below >= found[0]:
                    continue
                total = step_cost(v, own, combo, found[0] - below) + below
                if total < found[0]:
                    total += handoff(v, own, combo)
                if total < found[0]:
                    found = (total, combo)
            best[v][own] = found
    default_handoff = {v: handoff(v, own, kids, default=True)
                       for v, (own, kids) in defaults.items()}
    default += sum(default_handoff.values())
    # Top down: each child's order as its parent's best choice has it.
    chosen: dict[int, str] = {}
    accounts: dict[int, StepLayout] = {}
    todo: list[tuple[int, str | None]] = [(tree.root, None)]
    while todo:
        v, own = todo.pop()
        if own is not None:
            chosen[v] = own
        n = tree.nodes[v]
        kids = best[v][own][1]
        mine = memo[key_of(v, own, kids)]
        dflt = memo[key_of(v, *defaults[v])]
        waits = handoff(v, own, kids)
        dflt_waits = default_handoff[v]
        accounts[v] = StepLayout(
            v, ",".join(tree.nodes[c].term for c in n.children) + "->" + n.term, own,
            n.term, mine[0] + waits, mine[2], dflt[0] + dflt_waits, dflt[2], waits,
            dflt_waits)
        for c, o in zip(n.children, kids):
            if c not in leaf_orders:
                todo.append((c, o))
    return TreeLayouts(tuple(sorted(chosen.items())), best[tree.root][None][0], default,
                       tuple(accounts[n.node] for n in tree.steps), tree)


@dataclass(frozen=True)
class Accesses:
    """What a tree step's programs do with the buffers it shares with its neighbours:
    the program that writes its result (with the threads it runs on; None when no
    single program does: a blocked step, a reduction run from Python) and, for each of
    its inputs, the programs that read it (program, tensor index, threads)."""

    writer: tuple[TEIR, int] | None
    readers: tuple[tuple[tuple[TEIR, int, int], ...], ...]


def _accesses(steps: Sequence[object], dst: int | None, srcs: Sequence[int], threads: int
              ) -> Accesses:
    """The :class:`Accesses` of a step planned as ``steps`` writing buffer ``dst`` (None:
    the result, which no later step reads) from buffers ``srcs``; an operand a program
    packs first is read by its pack's copy."""
    writer = None
    readers: list[list[tuple[TEIR, int, int]]] = [[] for _ in srcs]
    for s in steps:
        if not isinstance(s, TEIRStep):
            continue
        if dst is not None and s.dst == dst and type(s) is TEIRStep:
            writer = (s.teir, threads)
        packed = {p.tensor: p for p in s.chosen.packs}
        for q, src in enumerate(srcs):
            for pos, i in enumerate(s.inputs):
                if i != src:
                    continue
                pack = packed.get(pos)
                readers[q].append((pack.copy.teir, 0, threads) if pack is not None
                                  else (s.teir, pos, threads))
    return Accesses(writer, tuple(tuple(r) for r in readers))
