"""The cluster a dask contraction runs on: its shape, and the set-up of its workers.

Three thread pools meet on a worker: dask's (``nthreads`` tasks at once), teir_plan's
(each task's parallel loops) and BLAS's.  Their product must not exceed the worker's
cores, or they preempt each other; dask's nanny sets BLAS to one thread, but not
teir_plan.  :class:`TeirPlanWorker` gives each task its share of the machine's cores in
teir_plan threads, keeps BLAS at one, and loads (or compiles, the first time on a machine) the
kernels in the background as the worker starts, so that the first task does not pay for
it.  Compiled kernels go to the executor's on-disk cache, keyed on the sources and the
CPU (teir_plan/executor/cache.py): workers on one machine compile once between them, and
a shared folder on machines of different CPUs keeps one entry per CPU.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from teir_plan.distributed.cluster import worker_threads


class TeirPlanWorker(WorkerPlugin):
    """Sets up a dask worker for teir_plan: teir_plan threads per task, one BLAS thread,
    and the kernels loaded in the background.

    ``threads``: teir_plan's threads per task, either one number for every worker or a
    mapping from worker address to number (what :func:`prepare_workers` measures: the
    cores of the worker's machine over the dask threads of all workers on it); a worker
    it does not name runs one per task, which never oversubscribes a machine whose
    workers' dask threads already match its cores (dask's default).  ``cache_dir`` puts
    the compiled kernels in a folder of its own (``TEIR_PLAN_CACHE_DIR``), for workers
    whose install is read-only.  ``pool_bytes``: idle scratch memory teir_plan's
    workspace keeps between tasks (see :func:`_limit_pool`).
    """

    idempotent = False
    name = "teir-plan"

    def __init__(self, threads: int | dict[str, int] | None = None,
                 cache_dir: str | None = None, warm_up: bool = True,
                 pool_bytes: int = 0) -> None:
        self.threads = threads
        self.cache_dir = cache_dir
        self.warm_up = warm_up
        self.pool_bytes = pool_bytes

    def threads_for(self, address: str) -> int:
        if isinstance(self.threads, dict):
            return max(1, int(self.threads.get(address, 1)))
        return max(1, int(self.threads or 1))

    def setup(self, worker: Any) -> None:
        from threadpoolctl import threadpool_limits

        from teir_plan.executor.threads import set_num_threads

        _hold(worker)
        if self.cache_dir is not None:
            os.environ["TEIR_PLAN_CACHE_DIR"] = self.cache_dir
        set_num_threads(self.threads_for(worker.address))
        blas = threadpool_limits(limits=1, user_api="blas")
        with _lock:
            if _saved is not None and _saved.blas is None:
                _saved.blas = blas  # the first set-up's: it restores the limits before it
        _limit_pool(self.pool_bytes)
        if self.warm_up:
            threading.Thread(target=_warm_up, daemon=True, name="teir-plan-warm-up").start()

    def teardown(self, worker: Any) -> None:
        _release(worker)


class _Saved:
    """What a worker's set-up changes in its process, as it was before the first set-up
    there: restored when the last worker set up in the process closes.  A worker of an
    in-process cluster (``LocalCluster(processes=False)``) shares the caller's process,
    whose teir_plan threads, BLAS threads and workspace would otherwise stay at a worker's
    settings (1, 1 and no idle buffers) after the cluster closed."""

    def __init__(self) -> None:
        from teir_plan.executor.threads import get_num_threads
        from teir_plan.schedule.workspace import workspace

        self.threads = get_num_threads()
        self.pool = (workspace.limit_bytes, workspace.last_limit_bytes)
        self.cache_dir = os.environ.get("TEIR_PLAN_CACHE_DIR")
        self.blas: Any = None  # threadpoolctl's limiter of the first set-up

    def restore(self) -> None:
        from teir_plan.executor.threads import set_num_threads
        from teir_plan.schedule.workspace import workspace

        set_num_threads(self.threads)
        workspace.limit_bytes, workspace.last_limit_bytes = self.pool
        if self.cache_dir is None:
            os.environ.pop("TEIR_PLAN_CACHE_DIR", None)
        else:
            os.environ["TEIR_PLAN_CACHE_DIR"] = self.cache_dir
        if self.blas is not None:
            self.blas.restore_original_limits()


_lock = threading.Lock()
_saved: _Saved | None = None  # the process's settings before its first worker's set-up
_holders: set[int] = set()  # the workers set up in this process (by id), not yet closed


def _hold(worker: Any) -> None:
    global _saved
    with _lock:
        if not _holders:
            _saved = _Saved()
        _holders.add(id(worker))


def _release(worker: Any) -> None:
    global _saved
    with _lock:
        if id(worker) not in _holders:
            return
        _holders.discard(id(worker))
        if _holders or _saved is None:
            return
        saved, _saved = _saved, None
    saved.restore()


def _limit_pool(limit_bytes: int) -> None:
    """Bound the idle buffers of teir_plan's workspace (1 GiB by default, for a process
    that calls the same plans in a loop).  On a dask worker they would outlive the task
    that used them: dask's memory manager, which spills and pauses on the process's
    memory, cannot free them, and they add to the worker's peak beside the blocks it
    holds (a pack buffer and the results given back after dask dropped them: 255 against
    215 MiB of worker peak on abcd,dbea).  A task then takes fresh pages: a page fault
    per 4 KiB, a few ms per task of tens of MiB."""
    from teir_plan.schedule.workspace import workspace

    workspace.limit_bytes = workspace.last_limit_bytes = limit_bytes
    workspace.trim()


def _warm_up() -> None:
    """Run a small contraction in each data type: loads the kernels it needs from the
    on-disk cache (compiling them on a machine's first worker)."""
    import numpy as np

    from teir_plan.api import einsum
    from teir_plan.progress import working

    with working("setting up this dask worker: loading (or, on a machine's first "
                 "worker, compiling) the executor's kernels", "1-30 s, in the background"):
        for dtype in (np.float32, np.float64):
            a = np.ones((64, 64), dtype)
            einsum("ik,kj->ij", a, a)


_prepared: weakref.WeakSet[Any] = weakref.WeakSet()  # clients set up by ensure_prepared


def ensure_prepared(client: Any) -> None:
    """:func:`prepare_workers` once per client, for a dask contraction planned without
    the user having called it: its tasks must not run with every worker's teir_plan
    using all of a machine's cores."""
    if client in _prepared:
        return
    if TeirPlanWorker.name not in _registered_plugins(client):
        prepare_workers(client)
    _prepared.add(client)


def _registered_plugins(client: Any) -> set[str]:
    try:
        return set(client.run_on_scheduler(_scheduler_worker_plugins))
    except Exception:  # noqa: BLE001  (an older scheduler: register anyway)
        return set()


def _scheduler_worker_plugins(dask_scheduler: Any) -> list[str]:
    return list(getattr(dask_scheduler, "worker_plugins", {}))


def prepare_workers(client: Any, threads: int | None = None,
                    cache_dir: str | None = None) -> TeirPlanWorker:
    """Register :class:`TeirPlanWorker` on ``client``'s workers and return it: each
    running worker gets ``threads`` teir_plan threads per task, or by default its share of
    its machine's cores (:func:`worker_threads`); a worker that joins later gets one
    (call this again after scaling up)."""
    plugin = TeirPlanWorker(threads=threads if threads is not None
                            else worker_threads(client), cache_dir=cache_dir)
    client.register_plugin(plugin)
    return plugin
