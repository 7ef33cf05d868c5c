"""The contraction tree of an expression of three or more operands, as a value.

An expression such as ``aib,bjc,ckd->ijk`` is computed two operands at a time; the order
(opt_einsum's *path*) makes a binary tree whose leaves are the operands, whose inner nodes
are the intermediates, and whose root is the result.  :class:`ContractionTree` holds it:
one :class:`TreeNode` per operand and per pairwise step, and the same as a networkx
``DiGraph`` (edges from a node to the step that reads it) for the algorithms that walk
it: the layout choice of :mod:`teir_plan.schedule.tree_plan`, the buffers' lifetimes,
drawing it.  A tree comes from opt_einsum's path strategies or an explicit path (a cotengra
``ContractionTree`` gives one: ``frontend/convention.py``); numpy-free, numba-free.

>>> t = tree_for(("ab", "bc", "cd"), "ad", {"a": 2, "b": 3, "c": 4, "d": 5},
...              path=((0, 1), (0, 1)))
>>> [(n.node, n.term, n.children) for n in t.steps]
[(3, 'ca', (1, 0)), (4, 'ad', (3, 2))]
>>> t.parent(0), t.root
(3, 4)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
import opt_einsum as oe

from teir_plan.errors import PlanError
from teir_plan.frontend.convention import pairwise

Path = tuple[tuple[int, ...], ...]

# The search for the path of the smallest intermediates (when a strategy's path breaks
# a memory limit) stops after this long: opt_einsum's dynamic programming is exponential
# in the operands of a densely connected network (every pair of 12 operands sharing an
# index: 5 s; of 16: no answer in minutes), while chains and grids of 20 take under 1 s.
SIZE_SEARCH_SECONDS = 1.0
# Out of time, the smallest largest intermediate of this many randomized greedy paths
# (opt_einsum's RandomGreedy, seeded by the repeat: the same paths on every run).
SIZE_SEARCH_SAMPLES = 64


@dataclass(frozen=True)
class TreeNode:
    """An operand (a leaf: no ``children``) or a pairwise step's result.

    ``term``: the node's indices (a leaf's as written; a step's in opt_einsum's order,
    which is not a memory order: the planner chooses that); ``children``: the nodes a
    step reads, in the order opt_einsum lists them."""

    node: int
    term: str
    shape: tuple[int, ...]
    children: tuple[int, ...] = ()

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class ContractionTree:
    """Leaves ``0 .. n-1`` (the operands), then one node per step in the order they run;
    the last step's node is the root and writes ``output``."""

    nodes: tuple[TreeNode, ...]
    output: str
    extents: tuple[tuple[str, int], ...]
    path: Path  # the pairwise path, opt_einsum's format (positions in the list left)

    @property
    def num_operands(self) -> int:
        return sum(1 for n in self.nodes if n.is_leaf)

    @property
    def steps(self) -> tuple[TreeNode, ...]:
        return self.nodes[self.num_operands:]

    @property
    def root(self) -> int:
        return self.nodes[-1].node

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The tree as a networkx graph: a node per operand and step (attributes
        ``term``, ``shape``, ``leaf``), an edge from each node to the step reading it
        (attribute ``position``: which input of that step it is)."""
        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.node, term=n.term, shape=n.shape, leaf=n.is_leaf)
        for n in self.steps:
            for pos, child in enumerate(n.children):
                g.add_edge(child, n.node, position=pos)
        return g

    def parent(self, node: int) -> int | None:
        """The step that reads ``node`` (None for the root)."""
        succ = list(self.graph.successors(node))
        return succ[0] if succ else None

    def flops(self, node: int) -> int:
        """Multiply-adds of a step times two (one product and one sum per term):
        every index of its inputs, each once."""
        ext = dict(self.extents)
        n = self.nodes[node]
        indices = set(n.term).union(*(self.nodes[c].term for c in n.children))
        return 2 * math.prod(ext[c] for c in indices)

    def describe(self) -> str:
        return " ; ".join(
            f"{n.node}: {','.join(self.nodes[c].term for c in n.children)}->{n.term}"
            for n in self.steps)


def tree_for(inputs: Sequence[str], output: str, extents: Mapping[str, int],
             path: str | Path | oe.paths.PathOptimizer | bool = "auto",
             memory_limit: int | None = None) -> ContractionTree:
    """The tree contracting ``inputs`` into ``output`` along ``path``: an opt_einsum
    strategy (a name or a path optimizer; with ``memory_limit``: the largest
    intermediate, in elements), an explicit path, whose steps of three or more
    operands are split left to right, or False (numpy's ``optimize=False``: one step of
    all the operands, so left to right)."""
    shapes = [tuple(extents[c] for c in t) for t in inputs]
    subscripts = ",".join(inputs) + "->" + output
    optimize = list(path) if isinstance(path, tuple) else path
    try:
        opt_path, info = oe.contract_path(subscripts, *shapes, shapes=True,
                                          optimize=optimize, memory_limit=memory_limit)
    except RuntimeError:
        if memory_limit is None:
            raise
        # opt_einsum's dynamic programming finds no path under the limit: its path
        # without one (the caller compares the tree's intermediates with the limit).
        opt_path, info = oe.contract_path(subscripts, *shapes, shapes=True,
                                          optimize=optimize)
    if any(len(step) > 2 for step in opt_path):
        # A step of three or more operands (an explicit path, or a memory limit no
        # pairwise intermediate fits): TEIR contracts two at a time, so left to right.
        opt_path = list(pairwise(tuple(map(tuple, opt_path)), len(inputs)))
        _, info = oe.contract_path(subscripts, *shapes, shapes=True, optimize=opt_path)
    nodes = [TreeNode(i, t, shapes[i]) for i, t in enumerate(inputs)]
    left = list(range(len(inputs)))  # node ids of the operands left, in list order
    for s, (inds, _removed, einsum_str, _rest, _library) in enumerate(info.contraction_list):
        # opt_einsum pops from the back: its einsum_str lists the inputs in pop order.
        picked = [left.pop(i) for i in sorted(inds, reverse=True)]
        term = einsum_str.split("->")[1]
        if s == len(info.contraction_list) - 1 and term != output:
            raise PlanError(f"optimize: the path's last step makes {term!r}, not the "
                            f"output {output!r}")
        node = len(nodes)
        nodes.append(TreeNode(node, term, tuple(extents[c] for c in term), tuple(picked)))
        left.append(node)
    return ContractionTree(tuple(nodes), output, tuple(sorted(extents.items())),
                           tuple(tuple(int(x) for x in p) for p in opt_path))


class _OutOfTime(Exception):
    """The dynamic programming ran past its deadline (caught in :func:`smallest_tree`)."""


def smallest_tree(inputs: Sequence[str], output: str, extents: Mapping[str, int],
                  seconds: float | None = None) -> tuple[ContractionTree, bool]:
    """The tree whose largest intermediate is smallest, and whether that is proven:
    opt_einsum's dynamic programming (``minimize="size"``) when it finishes within
    ``seconds`` (default SIZE_SEARCH_SECONDS), else the best of SIZE_SEARCH_SAMPLES
    randomized greedy paths (False: a smaller one may exist)."""
    deadline = time.perf_counter() + (SIZE_SEARCH_SECONDS if seconds is None else seconds)
    try:
        dp = oe.paths.DynamicProgramming(minimize=_size_compare(deadline))  # type: ignore[arg-type]
        return tree_for(inputs, output, extents, dp), True
    except (_OutOfTime, TypeError):
        # (TypeError: an opt_einsum whose dynamic programming calls its cost function
        # otherwise than _size_compare reads it; the sampled search needs no such hook.)
        sampled = oe.RandomGreedy(max_repeats=SIZE_SEARCH_SAMPLES, minimize="size",
                                  parallel=False)
        return tree_for(inputs, output, extents, sampled), False


def _size_compare(deadline: float) -> Callable[..., None]:
    """opt_einsum's ``minimize="size"`` step of the dynamic programming (a candidate
    pairing's cost: the largest intermediate of its sub-tree), as the custom cost
    function opt_einsum accepts, which raises _OutOfTime past ``deadline``."""
    def compare(cost1: int, cost2: int, union: frozenset[int], size: list[int],
                cost_cap: int, s1: int, s2: int, xn: dict[int, tuple[object, int, object]],
                g: int, all_tensors: int, inputs: list[frozenset[int]], shared: frozenset[int],
                memory_limit: int | None, contract1: object, contract2: object) -> None:
        if time.perf_counter() > deadline:
            raise _OutOfTime
        s = s1 | s2
        rest = g & (all_tensors ^ s)  # the sub-graph's tensors outside this pairing
        outside: set[int] = set()
        for j, term in enumerate(inputs):
            if rest >> j & 1:
                outside |= term
        legs = union - (shared - outside)  # what the pairing leaves for the others
        mem = math.prod(size[i] for i in legs)
        cost = max(cost1, cost2, mem)
        if cost <= cost_cap and (s not in xn or cost < xn[s][1]) \
                and (memory_limit is None or mem <= memory_limit):
            xn[s] = (legs, cost, (contract1, contract2))
    return compare
