"""Where a dask contraction runs: the cluster's workers, their dask threads and memory,
and each machine's cores (what the chunk choice and the worker set-up need to know)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

DEFAULT_TASK_MEMORY_SHARE = 0.25  # of a worker's memory per dask thread, for one task
LOCAL_TASK_BYTES_CAP = 1 << 30  # the threaded scheduler's budget per task, at most


@dataclass(frozen=True)
class ClusterShape:
    """What the chunk choice needs to know of where the graph will run."""

    workers: int
    threads_per_worker: int
    memory_per_worker: int  # bytes; the machine's memory on the threaded scheduler
    distributed: bool

    @property
    def task_budget(self) -> int:
        """Bytes one task may hold: a quarter of a worker's memory per dask thread (dask
        spills at 60 % of its limit and pauses at 80 %; the rest is for the inputs it
        holds and the results it sends)."""
        share = self.memory_per_worker * DEFAULT_TASK_MEMORY_SHARE / self.threads_per_worker
        if not self.distributed:
            share = min(share, LOCAL_TASK_BYTES_CAP)
        return max(1 << 20, int(share))


def _machine_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def current_client(client: Any = None) -> Any:
    """``client``, else the current ``dask.distributed`` client, else None (dask's threaded
    scheduler runs the graph in this process)."""
    if client is not None:
        return client
    try:
        from distributed import default_client

        return default_client()
    except (ValueError, ImportError):
        return None


def cluster_shape(client: Any = None) -> ClusterShape:
    """The shape of ``client``'s cluster (a ``dask.distributed`` client), or of this
    machine under dask's threaded scheduler (its pool: dask's ``num_workers`` setting,
    else one thread per core)."""
    if client is not None:
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        if workers:
            threads = min(max(1, int(w.get("nthreads", 1))) for w in workers)
            memory = min(int(w.get("memory_limit") or _machine_memory()) for w in workers)
            return ClusterShape(len(workers), threads, memory, True)
    import dask

    pool = int(dask.config.get("num_workers", None) or _cores())
    return ClusterShape(1, max(1, pool), _machine_memory(), False)


def task_threads(shape: ClusterShape) -> int | None:
    """teir_plan threads per task: on the threaded scheduler, the cores over its pool's
    threads (one, by default: each task already has a core); on a cluster None, the
    workers' own setting (:class:`~teir_plan.distributed.workers.TeirPlanWorker`)."""
    if shape.distributed:
        return None
    return max(1, _cores() // shape.threads_per_worker)


def _cores() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
               else os.cpu_count() or 1)


def worker_threads(client: Any) -> dict[str, int]:
    """teir_plan threads per task for each of ``client``'s workers: its machine's cores
    over the dask threads of all workers on that machine (at least one)."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    cores = client.run(_cores)
    per_host: dict[str, int] = {}
    for info in workers.values():
        per_host[info["host"]] = per_host.get(info["host"], 0) + int(info["nthreads"])
    return {addr: max(1, cores.get(addr, 1) // per_host[info["host"]])
            for addr, info in workers.items()}
