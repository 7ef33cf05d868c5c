"""tp.einsum on dask arrays: blockwise stages along the contraction path, each block planned
and run by teir_plan on the dask workers (dask is optional: ``pip install
teir_plan[dask]``).

>>> import numpy as np, dask.array as da, teir_plan as tp
>>> a = da.ones((400, 300), chunks=100, dtype=np.float32)
>>> b = da.ones((300, 200), chunks=100, dtype=np.float32)
>>> c = tp.einsum("ik,kj->ij", a, b)
>>> c.chunks[0][:2], float(c[0, 0].compute())
((400,), 300.0)

:func:`plan_dask` gives the plan without building the graph, ``plan.explain()`` its
report; :func:`prepare_workers` sets a ``dask.distributed`` cluster's workers up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from teir_plan.distributed.chunks import ChunkChoice, choose_chunks
    from teir_plan.distributed.cluster import ClusterShape, cluster_shape
    from teir_plan.distributed.contract import DaskPlan, einsum, is_dask, plan_dask
    from teir_plan.distributed.workers import TeirPlanWorker, prepare_workers

# dask and dask.distributed load on first use: importing teir_plan never needs them.
_LAZY = {
    "ChunkChoice": "teir_plan.distributed.chunks",
    "choose_chunks": "teir_plan.distributed.chunks",
    "DaskPlan": "teir_plan.distributed.contract",
    "einsum": "teir_plan.distributed.contract",
    "is_dask": "teir_plan.distributed.contract",
    "plan_dask": "teir_plan.distributed.contract",
    "TeirPlanWorker": "teir_plan.distributed.workers",
    "cluster_shape": "teir_plan.distributed.cluster",
    "ClusterShape": "teir_plan.distributed.cluster",
    "prepare_workers": "teir_plan.distributed.workers",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'teir_plan.distributed' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ChunkChoice",
    "ClusterShape",
    "DaskPlan",
    "TeirPlanWorker",
    "choose_chunks",
    "cluster_shape",
    "einsum",
    "is_dask",
    "plan_dask",
    "prepare_workers",
]
