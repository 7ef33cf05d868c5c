"""``tp.explain``: plan an expression and build its report in one call.

Apart from :mod:`teir_plan.render.report` so that the report, which ``Plan.explain``
builds, imports nothing that plans: this module sits above the API, the report below it.
"""

from __future__ import annotations

from typing import Any

from teir_plan.render.report import Report, build_report


def explain(subscripts: str, *operands: object, measure: bool = False, top: int = 5,
            **options: Any) -> Report | Any:
    """Plan ``subscripts`` for arrays or shapes (as :func:`tp.plan`, same options) and
    return its :class:`Report`; ``measure=True`` also times the plan and its ``top``
    alternatives on random data.  Dask arrays give the dask contraction's report
    (:class:`teir_plan.distributed.report.DaskReport`).

    >>> import teir_plan as tp
    >>> r = tp.explain("trus,pqtu->pqrs", (2, 3, 8, 8), (4, 6, 2, 8))
    >>> [i["role"] for i in r.indices]
    ['N', 'N', 'M', 'M', 'K', 'K']
    """
    from teir_plan.api import plan  # the package's API, which imports the executor

    if any(hasattr(x, "__dask_graph__") for x in operands):  # a dask contraction's report
        from teir_plan.distributed.contract import plan_dask

        return plan_dask(subscripts, *operands, **options).explain()  # type: ignore[no-any-return]
    return build_report(plan(subscripts, *operands, **options), measure=measure, top=top)
