"""tp.einsum on dask arrays: a plan of blockwise steps, then the dask graph it builds.

An expression of three or more operands is contracted pairwise along a path (opt_einsum's,
or the one given with ``optimize=``), one blockwise stage per step, rather than in one
blockwise over all its indices: each stage's tasks are then ordinary TEIR problems, and
no task holds a block of every operand at once.  Each stage has its own chunk choice
(teir_plan/distributed/chunks.py); a step's result keeps the chunks its kept indices got,
which the next step starts from.

Planning reads only shapes, chunks and dtypes: nothing is computed, and the graph holds
only the module-level task functions of teir_plan/distributed/tasks.py with strings,
numbers, dtypes and blocks.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from teir_plan.distributed.chunks import (
    SPLIT_EVERY,
    ChunkChoice,
    Contraction,
    Rates,
    choose_chunks,
    given_chunks,
)
from teir_plan.distributed.cluster import (
    ClusterShape,
    cluster_shape,
    current_client,
    task_threads,
)
from teir_plan.distributed.tasks import add_partials, contract_blocks, keep_partial, relu_block
from teir_plan.errors import DTypeError, EinsumError, OperandTypeError, OptionTypeError, PlanError
from teir_plan.frontend.convention import (
    Optimize,
    check_casting,
    check_path,
    from_interleaved,
    normalize_optimize,
)
from teir_plan.frontend.convention import (
    result_dtype as einsum_result_dtype,
)
from teir_plan.frontend.expression import Expression, parse
from teir_plan.schedule.operands import as_operand
from teir_plan.schedule.tree_plan import tree_of

# A task may hold no more than a task of the operands' own chunks would (dask's einsum
# on them), unless that is below this: chunks so small merge into tasks worth scheduling.
MIN_BUDGET_BYTES = 16 << 20
_PIECES = "~"  # marks an index's name in a blockwise's inputs: its blocks come in pieces


def is_dask(x: object) -> bool:
    """Whether ``x`` is a dask array (a dask collection with chunks)."""
    return hasattr(x, "__dask_graph__") and hasattr(x, "chunks")


@dataclass(frozen=True)
class DaskStep:
    """One blockwise stage: the positions of its operands in the list of live tensors
    (popped in turn, the result appended, as opt_einsum's path does: (0, 0) takes the
    first two), its own subscripts, and the chunk choice for its indices."""

    operands: tuple[int, ...]
    subscripts: str
    choice: ChunkChoice
    budget_bytes: int  # the most one of its tasks may hold

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.choice.contraction.inputs

    @property
    def output(self) -> str:
        return self.choice.contraction.output

    def block_shapes(self) -> list[tuple[int, ...]]:
        """The operands' largest blocks, as the tasks see them."""
        ch = self.choice.chunks
        ext = self.choice.contraction.extents
        return [tuple(min(ch[c], ext[c]) for c in op) for op in self.inputs]


@dataclass(frozen=True)
class DaskPlan:
    """A dask contraction, planned: the steps, the result's dtype and the options the
    tasks run with.  Call it on dask arrays of the shapes and dtypes it was planned for
    to build the graph; :meth:`explain` reports what it does."""

    subscripts: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: np.dtype
    steps: tuple[DaskStep, ...]
    cluster: ClusterShape
    casting: str
    epilogue: str | None
    split_every: int
    task_threads: int | None  # teir_plan threads per task; None: the workers' setting
    client: Any = None  # the dask.distributed client planned for, if any

    def __call__(self, *operands: object) -> Any:

        live = [_as_dask(x, i) for i, x in enumerate(operands)]
        shapes = tuple(tuple(int(n) for n in x.shape) for x in live)
        if shapes != self.shapes:
            raise EinsumError(f"this dask plan is for operand shapes {self.shapes}, "
                              f"got {shapes}")
        if self.client is not None:
            from teir_plan.distributed.workers import ensure_prepared

            ensure_prepared(self.client)
        for step in self.steps:
            ops = [live.pop(i) for i in step.operands]
            live.append(_blockwise(step, ops, self))
        (result,) = live
        if self.epilogue == "relu":
            result = result.map_blocks(relu_block, dtype=self.dtype)
        return result

    @property
    def tasks(self) -> int:
        """Contraction tasks and reduction tasks over all steps."""
        total = 0
        for step in self.steps:
            total += step.choice.tasks
            partials, out_blocks = step.choice.partials, step.choice.tasks // max(
                1, step.choice.partials)
            while partials > 1:  # dask's tree reduction, split_every at a time
                partials = -(-partials // self.split_every)
                total += partials * out_blocks
        return total

    @property
    def peak_task_bytes(self) -> int:
        return max(step.choice.task_bytes for step in self.steps)

    @property
    def peak_worker_bytes(self) -> int:
        """A worker's peak: its dask threads each running the largest task."""
        return self.peak_task_bytes * self.cluster.threads_per_worker

    def explain(self) -> Any:
        from teir_plan.distributed.report import DaskReport

        return DaskReport.of(self)


def _as_dask(x: object, i: int) -> Any:
    """A dask operand as it is (its shape known: a dask array of unknown chunk sizes
    is refused), anything else as tp.einsum converts it on numpy (an array, a nested
    list, a Python or numpy scalar), taken whole."""
    import dask.array as da

    if is_dask(x):
        shape = x.shape  # type: ignore[attr-defined]
        if any(n != n for n in shape):  # NaN: chunk sizes unknown (after boolean indexing)
            raise EinsumError(f"operand {i}: a dask array of unknown chunk sizes (shape "
                              f"{shape}); call its compute_chunk_sizes() first")
        return x
    return da.from_array(as_operand(x, i), chunks=-1)


def _blockwise(step: DaskStep, ops: Sequence[Any], dplan: DaskPlan) -> Any:
    import dask.array as da

    dtype = dplan.dtype
    ch = step.choice.chunks
    grid = step.choice.grid
    ext = step.choice.contraction.extents
    summed = step.choice.contraction.summed
    # A summed index taken whole is not rechunked: each task joins the blocks along it
    # that dask hands it (a copy that lives as long as the task), where a rechunk would
    # keep a second copy of the operand on the workers.  Only where no operand repeats
    # it (a diagonal), and none broadcasts it (extent 1: dask would hand its one block
    # once per piece of the others, joined into a block of the wrong extent).
    joined = {c for c in summed if grid[c] == 1
              and all(ix.count(c) <= 1 for ix in step.inputs)
              and all(op.shape[ix.index(c)] == ext[c] for op, ix in zip(ops, step.inputs)
                      if c in ix)}
    # A kept index taken whole where the operands' chunks split it is joined in the
    # task too (in slabs, tasks.py), not rechunked: dask passes the pieces when the
    # index goes by another name in the inputs than in the output (a new axis there).
    # Not where an operand repeats it or broadcasts it (extent 1).
    kept = {c for c in step.output if grid[c] == 1
            and all(ix.count(c) <= 1 for ix in step.inputs)
            and all(op.shape[ix.index(c)] == ext[c] for op, ix in zip(ops, step.inputs)
                    if c in ix)
            and any(len(op.chunks[ix.index(c)]) > 1 for op, ix in zip(ops, step.inputs)
                    if c in ix)}
    # A broadcast axis (extent 1 where the index is longer) keeps its one chunk.
    ops = [op.rechunk(tuple(op.chunks[ax] if c in joined or c in kept else
                            ch[c] if op.shape[ax] == ext[c] else 1
                            for ax, c in enumerate(ix)))
           for op, ix in zip(ops, step.inputs)]
    split = tuple(c for c in summed if grid[c] > 1)
    out_ind = tuple(step.output) + split
    pairs: list[Any] = []
    for op, ix in zip(ops, step.inputs):
        pairs += [op, tuple(c + _PIECES if c in kept else c for c in ix)]
    # Per operand, the axes of its indices not in out_ind, in the order dask nests their
    # blocks (the operand's own order).
    join_axes = tuple(tuple(ax for ax, c in enumerate(ix)
                            if (c in summed and c not in split) or c in kept)
                      for ix in step.inputs)
    with warnings.catch_warnings():
        # dask warns when a blockwise has ten times more blocks than its largest input:
        # here the task grid is the planner's choice (chunks.py), which explain reports
        # with its task count; the warning would name nothing the caller can change.
        from dask.array.core import PerformanceWarning

        warnings.simplefilter("ignore", PerformanceWarning)
        result = da.blockwise(
            contract_blocks, out_ind, *pairs,
            adjust_chunks={c: 1 for c in split}, new_axes={c: ext[c] for c in kept},
            dtype=dtype,
            meta=np.empty((0,) * len(out_ind), dtype),
            subscripts=step.subscripts, partial_axes=len(split), result_dtype=dtype,
            casting=dplan.casting, threads=dplan.task_threads, join_axes=join_axes)
    if split:
        n = len(step.output)
        # dask's tree reduction, each task adding its blocks up in one new block
        # (tasks.add_partials), where result.sum would copy each contraction's block
        # once more and concatenate a reduction task's blocks before summing them.
        result = da.reduction(result, keep_partial, add_partials,
                              axis=tuple(range(n, n + len(split))), dtype=dtype,
                              split_every=dplan.split_every, concatenate=False,
                              meta=np.empty((0,) * n, dtype))
    return result


def plan_dask(subscripts: object, *operands: object, dtype: object = None,
              casting: str = "safe", optimize: object = True, epilogue: str | None = None,
              memory_budget: int | None = None, rechunk: bool = True,
              split_every: int = SPLIT_EVERY, client: Any = None) -> DaskPlan:
    """Plan ``subscripts`` over dask arrays (numpy arrays among them are taken whole):
    the pairwise path, and for each step the chunk per index.

    ``memory_budget``: bytes one task may hold (default: what a task of the operands'
    own chunks holds, at least 16 MiB, at most a quarter of a worker's memory
    per dask thread, see :class:`ClusterShape`); ``rechunk=False`` keeps the operands'
    chunks (and only reports their cost); ``split_every``: partial results added per
    reduction task; ``client``: the distributed client whose cluster the plan is for
    (default: the current one, else dask's threaded scheduler on this machine).
    """
    subscripts, live, expr, result_dtype, opt = _checked(
        subscripts, operands, dtype, casting, optimize, epilogue)
    shapes = [tuple(int(n) for n in x.shape) for x in live]
    empty = [c for c, n in expr.extents if n == 0]
    if empty:
        raise PlanError(f"index {empty[0]!r}: has extent 0, so there is nothing to plan "
                        f"(tp.einsum gives the result, zeros, without a plan)")
    extents = expr.extent_map
    client = current_client(client)
    cluster = cluster_shape(client)
    if memory_budget is not None and (isinstance(memory_budget, bool)
                                      or not isinstance(memory_budget, numbers.Real)):
        raise OptionTypeError(f"memory_budget: expected a number of bytes, got "
                              f"{type(memory_budget).__name__}")
    if memory_budget is not None and not 1 <= memory_budget < math.inf:
        raise EinsumError(f"memory_budget: expected a positive number of bytes, got "
                          f"{memory_budget!r}")
    budget = int(memory_budget) if memory_budget is not None else cluster.task_budget
    if not isinstance(split_every, int) or split_every < 2:
        raise EinsumError(f"split_every: expected an integer of at least 2, got {split_every!r}")
    flops, moves = _per_core_rates(result_dtype)
    path = _path(expr, opt)
    chunks: list[dict[str, int]] = []
    for ix, x in zip(expr.inputs, live):
        chunks.append(given_chunks([ix], [x.chunks]))
    users = given_chunks(expr.inputs, [x.chunks for x in live])
    steps = []
    # On the threaded scheduler nothing crosses a network: a rechunk or a partial result
    # is a copy in memory.
    rates = Rates(flops, moves, cluster.workers * cluster.threads_per_worker,
                  **({} if cluster.distributed else {"network_bytes_per_second": moves}))
    for positions, step_subscripts in path:
        ins, out = step_subscripts.split("->")
        given: dict[str, int] = {}
        for taken in [chunks.pop(p) for p in positions]:
            for c, size in taken.items():
                given[c] = max(given.get(c, 0), size)
        contraction = Contraction(tuple(ins.split(",")), out,
                                  {c: extents[c] for c in dict.fromkeys(ins.replace(",", ""))},
                                  result_dtype.itemsize)
        given = {c: given.get(c, extents[c]) for c in contraction.indices}
        # The budget comes from the user's chunks, not from the chunks an earlier step
        # chose for its result (larger ones would let every later step grow).
        as_users = {c: users.get(c, extents[c]) for c in contraction.indices}
        step_budget = budget if memory_budget is not None else _default_budget(
            contraction, as_users, cluster)
        # Unless given a budget, the tasks read the operands no more often than tasks of
        # the user's chunks would (abc,bda->dc with c and d split further read each
        # operand twice as often, and a worker peaked at 113 MiB against dask's 33).
        reads = None if memory_budget is not None else ChunkChoice(
            contraction, as_users, split_every, ()).read_bytes
        # Unless given a budget, the operands' pieces a task reads in place (an index
        # taken whole from their chunks) count against the cluster's limit only, not
        # against the budget of the given chunks' task: they are the blocks the workers
        # hold anyway, and the read limit bounds how often they are copied between
        # workers (gram 2e6 x 64 in 250000 x 8 chunks: i and j whole, 8 tasks each
        # reading its 16 pieces once, where 512 tasks read each block 8 times).
        hold = None if memory_budget is not None else cluster.task_budget
        choice = choose_chunks(contraction, given, step_budget, rates, split_every, rechunk,
                               reads, hold)
        steps.append(DaskStep(tuple(positions), step_subscripts, choice, step_budget))
        chunks.append({c: choice.chunks[c] for c in out})
    return DaskPlan(subscripts, tuple(shapes), result_dtype, tuple(steps), cluster, casting,
                    epilogue, split_every, task_threads(cluster), client)


def _checked(subscripts: object, operands: Sequence[object], dtype: object, casting: object,
             optimize: object, epilogue: str | None
             ) -> tuple[str, list[Any], Expression, np.dtype, Optimize]:
    """The arguments checked as tp.einsum checks them on numpy arrays, with the same
    errors: the subscripts (or the interleaved form), the operands as dask arrays, the
    expression, the result's dtype and ``optimize=`` normalized."""
    if not isinstance(subscripts, str):
        subscripts, operands = from_interleaved((subscripts, *operands))
    opt = normalize_optimize(optimize)
    cast = check_casting(casting)
    if epilogue not in (None, "relu"):
        raise PlanError(f"epilogue: expected None or 'relu', got {epilogue!r}")
    live = [_as_dask(x, i) for i, x in enumerate(operands)]
    expr = parse(subscripts, [tuple(int(n) for n in x.shape) for x in live])
    if isinstance(opt.path, tuple):
        check_path(opt.path, len(live))
    result = einsum_result_dtype([x.dtype for x in live], dtype, cast)
    if epilogue == "relu" and result not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise DTypeError(
            f"epilogue: relu is supported for float32 and float64 results, not {result}"
            + (" (complex numbers have no order)" if result.kind == "c" else ""))
    return subscripts, live, expr, result, opt


def _zeros(expr: Expression, live: Sequence[Any], dtype: np.dtype) -> Any:
    """The result of an expression with an index of extent 0, as numpy.einsum gives it:
    zeros (an empty sum), or an empty array; chunked as the operands are along the
    output's indices."""
    import dask.array as da

    chunks = given_chunks(expr.inputs, [x.chunks for x in live])
    shape = tuple(expr.extent(c) for c in expr.output)
    return da.zeros(shape, dtype=dtype,
                    chunks=tuple(max(1, chunks.get(c, 1)) for c in expr.output))


def _default_budget(contraction: Contraction, given: dict[str, int],
                    cluster: ClusterShape) -> int:
    """A task's memory when none is given: what a task of the given chunks holds (its
    input blocks, output block and the partial results it sums: the chunk sizes say what
    the user's workers are meant to hold; a larger task measured a higher worker peak
    than dask.array.einsum on the same chunks, gemm 4096^3 in 1024^2 chunks 132 against
    104 MiB with four times as much), at least MIN_BUDGET_BYTES, and never more than the
    cluster allows (:attr:`ClusterShape.task_budget`)."""
    as_given = ChunkChoice(contraction, given, SPLIT_EVERY, ()).task_bytes
    return min(cluster.task_budget, max(as_given, MIN_BUDGET_BYTES))


def _path(expr: Expression, opt: Optimize) -> list[tuple[tuple[int, ...], str]]:
    """The pairwise steps as (operand positions, popped in turn; the step's subscripts):
    the tree ``tp.einsum`` contracts for ``optimize=`` (its strategy, memory limit or
    explicit path), operands in the order opt_einsum pops them."""
    if len(expr.inputs) <= 2:
        return [((0,) * len(expr.inputs), expr.subscripts)]
    tree = tree_of(expr, opt)
    return [(tuple(sorted(pair, reverse=True)),
             ",".join(tree.nodes[c].term for c in node.children) + "->" + node.term)
            for pair, node in zip(tree.path, tree.steps)]


def _per_core_rates(dtype: np.dtype) -> tuple[float, float]:
    """One core's GEMM rate and memory rate, from the cost model's machine parameters."""
    from teir_plan.schedule.in_force import machine_params

    p = machine_params()
    flops = p.gemm_flops_f64 if dtype.itemsize >= 8 else p.gemm_flops_f32
    if dtype.kind == "c":
        flops /= 4
    return flops, p.dram_bytes_per_second / 2


def einsum(subscripts: object, *operands: object, out: object = None, dtype: object = None,
           order: str = "K", casting: str = "safe", optimize: object = True,
           epilogue: str | None = None, **options: Any) -> Any:
    """``tp.einsum`` on dask arrays: a dask array, each block planned and run by teir_plan
    (see :func:`plan_dask` for ``options``).  ``order`` applies to each block; ``out=`` is
    refused (the result is a new dask array)."""
    if out is not None:
        raise OperandTypeError("out: a dask contraction returns a new dask array; "
                               "out= is not supported (store the result with dask)")
    if not isinstance(order, str) or order.upper() not in ("K", "C", "F", "A"):
        raise PlanError(f"order: expected one of 'K', 'C', 'F', 'A', got {order!r}")
    _, live, expr, result, _ = _checked(subscripts, operands, dtype, casting, optimize,
                                        epilogue)
    if any(n == 0 for _, n in expr.extents):
        return _zeros(expr, live, result)
    dplan = plan_dask(subscripts, *operands, dtype=dtype, casting=casting, optimize=optimize,
                      epilogue=epilogue, **options)
    if not isinstance(subscripts, str):
        return dplan(*from_interleaved((subscripts, *operands))[1])
    return dplan(*operands)


__all__ = ["DaskPlan", "DaskStep", "einsum", "is_dask", "plan_dask"]
