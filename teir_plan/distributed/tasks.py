"""The functions dask runs on the workers.

A dask graph holds only these plain module-level functions with strings, numbers, dtypes
and arrays as arguments, never a compiled object or a plan: a worker imports this module,
plans each block with its own per-process plan cache (a block shape seen before costs a
dictionary lookup) and runs it on its own compiled kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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
    ``join_axes``: per block, the axes along which dask passes it in pieces (summed
    indices taken whole, see :func:`_joined`)."""
    from teir_plan.api import einsum
    from teir_plan.executor.threads import thread_count

    axes = join_axes or ((),) * len(blocks)
    inputs = [_joined(b, ax) for b, ax in zip(blocks, axes)]
    if threads is None:
        out = einsum(subscripts, *inputs, dtype=result_dtype, casting=casting)
    else:
        with thread_count(threads):
            out = einsum(subscripts, *inputs, dtype=result_dtype, casting=casting)
    if partial_axes:
        out = out.reshape(out.shape + (1,) * partial_axes)
    return out


def relu_block(block: np.ndarray) -> np.ndarray:
    """The ReLU epilogue, applied once the partial results are summed: numpy.maximum with
    zero, as the executor's ReLU (NaN stays NaN)."""
    return np.maximum(block, block.dtype.type(0))
