"""The functions dask runs on the workers.

A dask graph holds only these plain module-level functions with strings, numbers, dtypes
and arrays as arguments, never a compiled object or a plan: a worker imports this module,
plans each block with its own per-process plan cache (a block shape seen before costs a
dictionary lookup) and runs it on its own compiled kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teir_plan.errors import PlanError


def _single(block: Any) -> np.ndarray:
    """The one block dask passes in nested lists for the summed indices that are not
    split (one chunk each): taken as it is, where concatenating would copy it."""
    while isinstance(block, list):
        if len(block) != 1:
            raise PlanError(f"a summed index that is not split has one chunk, got {len(block)}")
        block = block[0]
    return block


def contract_blocks(*blocks: Any, subscripts: str, partial_axes: int,
                    result_dtype: object = None, casting: str = "safe",
                    threads: int | None = None) -> np.ndarray:
    """``tp.einsum(subscripts, *blocks)`` on ``threads`` threads (None: the process's
    count), with ``partial_axes`` trailing axes of extent 1 added: one per summed index
    split into several chunks, along which dask adds the partial results up."""
    from teir_plan.api import einsum
    from teir_plan.executor.threads import thread_count

    inputs = [_single(b) for b in blocks]
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
