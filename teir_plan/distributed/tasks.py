"""The functions dask runs on the workers.

A dask graph holds only these plain module-level functions with strings, numbers, dtypes
and arrays as arguments, never a compiled object or a plan: a worker imports this module,
plans each block with its own per-process plan cache (a block shape seen before costs a
dictionary lookup) and runs it on its own compiled kernels.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from teir_plan.distributed.chunks import SLAB_BYTES
from teir_plan.errors import PlanError


def _joined(block: Any, axes: Sequence[int]) -> np.ndarray:
    """The blocks dask passes as nested lists for the summed indices taken whole (one
    level per index, along ``axes`` of the operand, in order), joined into one array: a
    copy only where there are several."""
    if not isinstance(block, list):
        return block
    if not axes:
        raise PlanError("a task was given nested blocks along no summed index")
    parts = [_joined(b, axes[1:]) for b in block]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axes[0])


def contract_blocks(*blocks: Any, subscripts: str, partial_axes: int,
                    result_dtype: object = None, casting: str = "safe",
                    threads: int | None = None,
                    join_axes: tuple[tuple[int, ...], ...] = ()) -> np.ndarray:
    """``tp.einsum(subscripts, *blocks)`` on ``threads`` threads (None: the process's
    count), with ``partial_axes`` trailing axes of extent 1 added: one per summed index
    split into several chunks, along which dask adds the partial results up.
    ``join_axes``: per block, the axes along which dask passes it in pieces (indices
    taken whole where the operands' chunks split them): see :func:`_over_pieces`."""
    from teir_plan.executor.threads import thread_count

    axes = join_axes or ((),) * len(blocks)
    if threads is None:
        out = _over_pieces(blocks, axes, subscripts, result_dtype, casting)
    else:
        with thread_count(threads):
            out = _over_pieces(blocks, axes, subscripts, result_dtype, casting)
    if partial_axes:
        out = out.reshape(out.shape + (1,) * partial_axes)
    return out


def _over_pieces(blocks: Sequence[Any], axes: Sequence[Sequence[int]], subscripts: str,
                 result_dtype: object, casting: str) -> np.ndarray:
    """The contraction of blocks that dask may pass in pieces along indices taken whole.
    Along summed indices only, with the less memory of two ways: the pieces joined into
    one block per operand (a copy of each operand given in pieces), or one contraction
    per combination of pieces, added into the result (one temporary of the result's
    size: gemm 512 x 512 x 4096 in 1024-long pieces holds 1 MiB more, not 16).  Along a
    kept index, a slab at a time (:func:`_in_slabs`).  The pieces themselves are dask's
    and stay in memory either way."""
    from teir_plan.api import einsum

    def run(ops: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        return einsum(subscripts, *ops, out=out, dtype=result_dtype, casting=casting)

    split = [isinstance(b, list) and len(_leaves(b)) > 1 for b in blocks]
    if not any(split):
        return run([_joined(b, ax) for b, ax in zip(blocks, axes)])
    ins, output = subscripts.split("->")
    operands = ins.split(",")
    letters = [tuple(ix[a] for a in ax) for ix, ax in zip(operands, axes)]
    counts: dict[str, int] = {}
    extents: dict[str, int] = {}
    for b, ix, ax, ls in zip(blocks, operands, axes, letters):
        level = b
        for c in ls:  # a level of nesting per index given in pieces
            counts[c] = len(level)
            level = level[0]
        for c, n in zip(ix, _joined_shape(b, ax)):
            extents[c] = max(extents.get(c, 1), int(n))
    dt = np.dtype(result_dtype) if result_dtype is not None else np.result_type(  # type: ignore[call-overload]
        *[_leaves(b)[0] for b in blocks])
    out_bytes = math.prod(extents[c] for c in output) * dt.itemsize
    pieces_bytes = sum(sum(p.nbytes for p in _leaves(b)) for b, s in zip(blocks, split) if s)
    if any(c in output for c in counts):
        return _in_slabs(blocks, axes, operands, output, extents, counts, pieces_bytes, run)
    if out_bytes >= pieces_bytes:
        return run([_joined(b, ax) for b, ax in zip(blocks, axes)])
    combos = (dict(zip(counts, combo))
              for combo in itertools.product(*(range(n) for n in counts.values())))
    return _sum_of(run, ([_piece(b, ls, at) for b, ls in zip(blocks, letters)]
                         for at in combos))


def _sum_of(run: Any, parts: Iterator[list[Any]]) -> np.ndarray:
    """The sum of ``run(ops)`` over ``parts`` (at least one): the first written as the
    result, each next one into one temporary and added, so that a task holds the result,
    one temporary and one part's operands."""
    out: np.ndarray | None = None
    tmp: np.ndarray | None = None
    for ops in parts:
        if out is None:
            out = run(ops)
            continue
        if tmp is None:
            tmp = np.empty(out.shape, out.dtype)
        run(ops, out=tmp)
        np.add(out, tmp, out=out)
    assert out is not None
    return out


def _in_slabs(blocks: Sequence[Any], axes: Sequence[Sequence[int]], operands: list[str],
              output: str, extents: dict[str, int], counts: dict[str, int],
              pieces_bytes: int, run: Any) -> np.ndarray:
    """The contraction of blocks given in pieces along a kept index (the result's
    block is whole along it, the operands' chunks are not): the pieces joined a slab of
    a summed index at a time (one that every operand given in pieces has, the longest),
    each slab's contraction added into the result, so that a task holds a slab's copy
    and not a copy of its operands; all joined at once where there is no such index."""
    summed = [c for c in extents if c not in output and c not in counts
              and all(ix.count(c) <= 1 for ix in operands)
              and all(c in ix for ix, b in zip(operands, blocks) if isinstance(b, list))]
    if not summed:
        return run([_joined(b, ax) for b, ax in zip(blocks, axes)])
    s = max(summed, key=lambda c: extents[c])
    slab = max(1, extents[s] * SLAB_BYTES // max(1, pieces_bytes))
    if slab >= extents[s]:
        return run([_joined(b, ax) for b, ax in zip(blocks, axes)])
    whole = [None if s in ix else _joined(b, ax) for b, ix, ax in zip(blocks, operands, axes)]
    cuts = (slice(start, min(start + slab, extents[s])) for start in range(0, extents[s], slab))
    return _sum_of(run, ([w if w is not None else _joined(_sliced(b, ix.index(s), cut), ax)
                          for w, b, ix, ax in zip(whole, blocks, operands, axes)]
                         for cut in cuts))


def _joined_shape(block: Any, axes: Sequence[int]) -> tuple[int, ...]:
    """The shape of the block that :func:`_joined` would make, without making it."""
    if not isinstance(block, list):
        return tuple(block.shape)
    shapes = [_joined_shape(b, axes[1:]) for b in block]
    shape = list(shapes[0])
    shape[axes[0]] = sum(sh[axes[0]] for sh in shapes)
    return tuple(shape)


def _sliced(block: Any, axis: int, cut: slice) -> Any:
    """Every piece of a nested block cut along ``axis`` (an axis no piece is split
    along: each piece has it whole)."""
    if isinstance(block, list):
        return [_sliced(b, axis, cut) for b in block]
    return block[(slice(None),) * axis + (cut,)]


def _leaves(block: Any) -> list[np.ndarray]:
    if not isinstance(block, list):
        return [block]
    return [leaf for b in block for leaf in _leaves(b)]


def _piece(block: Any, letters: Sequence[str], at: dict[str, int]) -> np.ndarray:
    for c in letters:
        block = block[at[c]]
    return block


def keep_partial(block: np.ndarray, axis: object = None, keepdims: bool = True,
                 **_: object) -> np.ndarray:
    """The first step of the partial sums' reduction: nothing, the block as it is (a
    contraction task's result already has extent 1 along each split summed index,
    where ``numpy.sum``'s first step would copy it: two result blocks held per task)."""
    return block


def add_partials(parts: Any, axis: Sequence[int] = (), keepdims: bool = False,
                 **_: object) -> np.ndarray:
    """A reduction task of the partial sums: the blocks dask passes as nested lists
    (one level per split summed index, ``split_every`` at most in all) added up into one
    new block, where ``numpy.sum``'s would concatenate them first (a copy of all of
    them, beside them and their sum).  One block is returned as it is."""
    leaves = _leaves(parts)
    out = leaves[0] if len(leaves) == 1 else np.add(leaves[0], leaves[1])
    for x in leaves[2:]:
        np.add(out, x, out=out)
    if not keepdims:
        gone = {a % out.ndim for a in axis}
        out = out.reshape(tuple(n for a, n in enumerate(out.shape) if a not in gone))
    return out


def relu_block(block: np.ndarray) -> np.ndarray:
    """The ReLU epilogue, applied once the partial results are summed: numpy.maximum with
    zero, as the executor's ReLU (NaN stays NaN)."""
    return np.maximum(block, block.dtype.type(0))
