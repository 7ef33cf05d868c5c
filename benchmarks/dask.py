"""tp.einsum on dask arrays against dask.array.einsum, on a LocalCluster of worker
processes (issue 39).

Both run the same expression on the same dask arrays (the same chunks, generated on the
workers); tp plans its own chunking from them (teir_plan/distributed/chunks.py), dask
contracts the chunks it is given (one blockwise over all indices, numpy.einsum per
block, partial sums by a tree reduction).  Each system is timed best of ``--repeats``
runs of ``compute()`` (graph, scheduling and transfers included) in ``--rounds`` rounds
that take turns, each on a cluster started for it holding freshly generated operands.
A worker's peak memory in a run is the kernel's high-water mark of its resident set
(VmHWM, reset through /proc/self/clear_refs as the run starts: exact, no sampling
interval) less its idle baseline (the resident set with the operands loaded and the
kernels warmed up, before the system's first run on that cluster, so memory kept from
one run to the next counts); a run's peak is its higher worker's, and the table gives
the median over the timed runs (and their range).  The first run on each cluster (tp
plans each block shape there) is not timed; its peak is given apart.
Each system is also timed with ``persist()`` (the result's blocks computed and kept on
the workers, no gather to the client: what a pipeline that goes on computing on them
does); a run's persisted blocks are released before the next.  With ``compute()`` a
worker's peak includes the blocks it holds while the client gathers them, which for a
large result (``ea,ebcd``) weighs more than the contraction's own memory.
The task counts are the graph's keys (the operands' chunks included).

``--memory-test`` runs a contraction whose operands (4 GiB in all, generated on the
workers) exceed a worker's memory limit (1.5 GiB), with tp through dask, and checks the
result against a blocked numpy reference computed slice by slice on the client.

Run: .venv/bin/python -m benchmarks.dask [--workers 2] [--repeats 3] [--rounds 2]
[--cases NAME ...] [--memory-test]
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from benchmarks.common import machine, machine_md, md_table, write_results


@dataclass(frozen=True)
class Case:
    name: str
    subscripts: str
    extents: dict[str, int]
    ways: int  # chunks along each operand's longest axes
    kind: str


CASES = [
    Case("gemm", "ik,kj->ij", {"i": 4096, "k": 4096, "j": 4096}, 4, "TCCG-shaped"),
    Case("abcd,dbea", "abcd,dbea->ec", {"a": 48, "b": 36, "c": 1024, "d": 36, "e": 1024}, 4,
         "TCCG-shaped"),
    Case("abc,bda", "abc,bda->dc", {"a": 312, "b": 24, "c": 1024, "d": 2048}, 2,
         "TCCG-shaped"),
    Case("ea,ebcd", "ea,ebcd->abcd", {"a": 384, "b": 64, "c": 64, "d": 64, "e": 384}, 8,
         "TCCG-shaped"),
    Case("gram", "ki,kj->ij", {"k": 2_000_000, "i": 64, "j": 64}, 8, "TCCG-shaped"),
    Case("mlp", "bi,ij,jk,kl->bl", {"b": 65536, "i": 512, "j": 1024, "k": 1024, "l": 256}, 4,
         "tree"),
    Case("tucker", "abc,ai,bj,ck->ijk", {"a": 128, "b": 128, "c": 128, "i": 256, "j": 256,
                                         "k": 256}, 2, "tree"),
    Case("chain", "ab,bc,cd,de->ae", {"a": 3000, "b": 3000, "c": 3000, "d": 3000, "e": 3000},
         2, "tree"),
]


def _operands(case: Case, seed: int = 0) -> list:
    import dask.array as da

    rng = da.random.default_rng(seed)
    ops = []
    for op in case.subscripts.split("->")[0].split(","):
        shape = tuple(case.extents[c] for c in op)
        big = sorted(range(len(shape)), key=lambda ax: -shape[ax])[:2]
        chunks = tuple(-(-n // case.ways) if ax in big else n for ax, n in enumerate(shape))
        ops.append(rng.standard_normal(shape, chunks=chunks, dtype=np.float32).persist())
    return ops


def _flops(case: Case) -> float:
    import opt_einsum as oe

    shapes = [tuple(case.extents[c] for c in op)
              for op in case.subscripts.split("->")[0].split(",")]
    _, info = oe.contract_path(case.subscripts, *shapes, shapes=True)
    return float(info.opt_cost)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> int:
    """On a worker: its resident set now, with the kernel's high-water mark of the
    resident set (VmHWM) reset to it (Linux's clear_refs "5"), so that the mark read at
    the end is the exact peak of what ran in between: no sampling interval to miss a
    short-lived buffer."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kib("VmRSS") << 10


def _read_peak() -> int:
    """On a worker: the resident set's high-water mark since :func:`_reset_peak`."""
    return _status_kib("VmHWM") << 10


def _settled() -> int:
    """On a worker: its resident set once teir_plan's kernel warm-up (started by the
    worker plugin in the background) has finished, so that loading kernels is not
    counted in the first run's peak."""
    for t in threading.enumerate():
        if t.name == "teir-plan-warm-up":
            t.join()
    return _status_kib("VmRSS") << 10


class PeakMemory:
    """Each worker's peak resident set over a block, above the worker's idle baseline:
    the resident set with the operands loaded and the kernels warmed up, before the
    system's first run on that cluster (``base``).  Memory a system keeps between runs
    (a pool, a cache) therefore counts in every later run's peak, as it does on a
    worker; memory the previous run freed does not."""

    def __init__(self, client: object, base: dict[str, int]) -> None:
        self.client = client
        self.base = base
        self.peak: dict[str, int] = {}

    def __enter__(self) -> PeakMemory:
        self.client.run(_reset_peak)  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = self.client.run(_read_peak)  # type: ignore[attr-defined]

    @property
    def worker_peak(self) -> int:
        """The most any one worker rose above its baseline."""
        return max(self.peak[a] - self.base.get(a, 0) for a in self.peak)


def _time(fn: Callable[[], object], repeats: int, client: object, base: dict[str, int],
          held: int) -> tuple[list[float], list[int]]:
    """Each run's seconds and worker peak (bytes above ``base``).  What ``fn`` returns
    (persisted blocks) is dropped after the run's peak is read, and its release waited
    for (until the cluster holds ``held`` results again, the operands' blocks), so that
    each run starts from what the first started from."""
    times, peaks = [], []
    for _ in range(repeats):
        with PeakMemory(client, base) as mem:
            t = time.perf_counter()
            kept = fn()
            times.append(time.perf_counter() - t)
        peaks.append(mem.worker_peak)
        del kept
        end = time.perf_counter() + 10.0
        while _held(client) > held and time.perf_counter() < end:
            time.sleep(0.05)
    return times, peaks


def _held(client: object) -> int:
    """How many results the cluster's workers hold."""
    return int(client.run_on_scheduler(  # type: ignore[attr-defined]
        lambda dask_scheduler: sum(t.state == "memory" for t in dask_scheduler.tasks.values())))


def _persisted(graph: object) -> Callable[[], object]:
    """A run that computes ``graph``'s blocks and keeps them on the workers, waiting
    for them (no gather to the client)."""
    import distributed

    def run() -> object:
        kept = graph.persist()  # type: ignore[attr-defined]
        distributed.wait(kept)
        return kept

    return run


def run_cases(cluster_options: dict, cases: list[Case], repeats: int, rounds: int
              ) -> list[dict]:
    """Each system's runs of each case on a cluster of its own, started for them (a
    worker process keeps memory it has freed, which would hide the next run's peak),
    with the operands generated on its workers (the same values: same seed)."""
    import dask.array as da
    import distributed

    import teir_plan as tp

    systems: dict[str, Callable[[str, list], object]] = {
        "tp": lambda sub, ops: tp.einsum(sub, *ops),
        "dask": lambda sub, ops: da.einsum(sub, *ops, optimize=True),
    }
    rows = []
    for case in cases:
        times: dict[str, list[float]] = {name: [] for name in systems}
        peaks: dict[str, list[int]] = {name: [] for name in systems}
        ptimes: dict[str, list[float]] = {name: [] for name in systems}  # persist()
        ppeaks: dict[str, list[int]] = {name: [] for name in systems}
        first: dict[str, list[int]] = {name: [] for name in systems}
        values: dict[str, np.ndarray] = {}
        tasks: dict[str, int] = {}
        for _ in range(rounds):
            for name, build in systems.items():
                with distributed.LocalCluster(**cluster_options) as cluster, \
                        distributed.Client(cluster) as client:
                    tp.distributed.prepare_workers(client)
                    ops = _operands(case)
                    distributed.wait(ops)
                    held = _held(client)
                    base = client.run(_settled)
                    graph = build(case.subscripts, ops)
                    tasks[name] = len(graph.__dask_graph__())  # type: ignore[attr-defined]
                    # The first run plans each block shape on the workers (tp) and loads
                    # what it needs: not timed, its peak reported apart.
                    with PeakMemory(client, base) as mem:
                        values[name] = graph.compute()  # type: ignore[attr-defined]
                    first[name].append(mem.worker_peak)
                    t, p = _time(graph.compute, repeats, client, base, held)  # type: ignore[attr-defined]
                    times[name] += t
                    peaks[name] += p
                    t, p = _time(_persisted(graph), repeats, client, base, held)
                    ptimes[name] += t
                    ppeaks[name] += p
                    del ops, graph
        ref = values["dask"]
        err = float(np.abs(values["tp"] - ref).max() / max(1e-30, np.abs(ref).max()))
        flops = _flops(case)
        best = {name: min(t) for name, t in times.items()}
        mib = {name: float(np.median(p)) / 2**20 for name, p in peaks.items()}
        pbest = {name: min(t) for name, t in ptimes.items()}
        pmib = {name: float(np.median(p)) / 2**20 for name, p in ppeaks.items()}
        rows.append({
            "case": case.name, "kind": case.kind, "subscripts": case.subscripts,
            "chunks per axis": case.ways, "GFLOP": flops / 1e9,
            "tp s": best["tp"], "dask s": best["dask"],
            "speedup": best["dask"] / best["tp"],
            "tp GFLOP/s": flops / best["tp"] / 1e9,
            "tp peak MiB": mib["tp"], "dask peak MiB": mib["dask"],
            "tp peak MiB (range)": _range(peaks["tp"]),
            "dask peak MiB (range)": _range(peaks["dask"]),
            "tp first-run MiB": max(first["tp"]) / 2**20,
            "dask first-run MiB": max(first["dask"]) / 2**20,
            "persist: tp s": pbest["tp"], "persist: dask s": pbest["dask"],
            "persist: speedup": pbest["dask"] / pbest["tp"],
            "persist: tp peak MiB": pmib["tp"], "persist: dask peak MiB": pmib["dask"],
            "tp tasks": tasks["tp"], "dask tasks": tasks["dask"], "max rel err": f"{err:.1e}",
        })
        print(f"{case.name:12s} tp {best['tp']:8.3f} s  dask {best['dask']:8.3f} s"
              f"  x{rows[-1]['speedup']:.2f}  peak MiB tp {mib['tp']:.0f} "
              f"{_range(peaks['tp'])} dask {mib['dask']:.0f} {_range(peaks['dask'])}; "
              f"first run tp {rows[-1]['tp first-run MiB']:.0f} "
              f"dask {rows[-1]['dask first-run MiB']:.0f}; persist x"
              f"{rows[-1]['persist: speedup']:.2f} peak MiB tp {pmib['tp']:.0f} "
              f"dask {pmib['dask']:.0f}", flush=True)
    return rows


def _range(peaks: list[int]) -> str:
    return f"{min(peaks) / 2**20:.0f}-{max(peaks) / 2**20:.0f}"


def memory_test(client: object) -> dict:
    """ik,kj->ij with 2 GiB operands each (float32), workers limited to 1.5 GiB."""
    import dask.array as da

    import teir_plan as tp

    i = j = 1024
    k = 1 << 19
    rng = da.random.default_rng(1)
    a = rng.standard_normal((i, k), chunks=(i, 1 << 16), dtype=np.float32)
    b = rng.standard_normal((k, j), chunks=(1 << 16, j), dtype=np.float32)
    report = tp.distributed.plan_dask("ik,kj->ij", a, b).explain().to_dict()
    base = client.run(_settled)  # type: ignore[attr-defined]
    t = time.perf_counter()
    with PeakMemory(client, base) as mem:
        got = tp.einsum("ik,kj->ij", a, b).compute()
    seconds = time.perf_counter() - t
    ref = np.zeros((i, j))
    step = 1 << 16
    for s in range(0, k, step):  # blocked numpy reference, slice by slice on the client
        ref += a[:, s:s + step].compute().astype(np.float64) @ b[s:s + step].compute().astype(
            np.float64)
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    return {"operand GiB": (a.nbytes + b.nbytes) / 2**30, "worker limit GiB": 1.5,
            "seconds": seconds, "worker peak MiB": mem.worker_peak / 2**20,
            "max rel err": f"{err:.1e}", "tasks": report["tasks"],
            "peak task MiB (planned)": report["peak_task_bytes"] / 2**20,
            "chunks": report["steps"][0]["chunks"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cases", nargs="+", default=[],
                    help="case names (some hold a comma: abcd,dbea), all when not given")
    ap.add_argument("--memory-test", action="store_true")
    args = ap.parse_args()

    import distributed

    import teir_plan as tp

    limit = "1.5GiB" if args.memory_test else "4GiB"
    options = {"n_workers": args.workers, "threads_per_worker": 1, "processes": True,
               "memory_limit": limit, "dashboard_address": None}
    info = machine()
    info.update({"dask workers": args.workers, "threads per worker": 1,
                 "worker memory limit": limit})
    data: dict = {"machine": info}
    md = ["# tp.einsum on dask arrays against dask.array.einsum", "", machine_md(info), ""]
    if args.memory_test:
        with distributed.LocalCluster(**options) as cluster, \
                distributed.Client(cluster) as client:
            tp.distributed.prepare_workers(client)
            result = memory_test(client)
        print(result)
        data["memory test"] = result
        md += ["## Operands larger than a worker's memory", "",
               md_table(list(result), [list(result.values())])]
        write_results("dask-memory", data, "\n".join(md) + "\n")
        return
    names = set(args.cases)
    cases = [c for c in CASES if not names or c.name in names]
    rows = run_cases(options, cases, args.repeats, args.rounds)
    geo = float(np.exp(np.mean(np.log([r["speedup"] for r in rows]))))
    pgeo = float(np.exp(np.mean(np.log([r["persist: speedup"] for r in rows]))))
    data.update({"rows": rows, "geomean speedup": geo, "geomean persist speedup": pgeo})
    md += [md_table(list(rows[0]), [list(r.values()) for r in rows]), "",
           f"Geometric mean of dask.array.einsum's time over tp's: {geo:.2f}x with "
           f"compute() (the result gathered on the client), {pgeo:.2f}x with persist() "
           "(the result's blocks kept on the workers; their peak then counts the "
           "result, not the gather)", ""]
    print(f"geomean x{geo:.2f}, persist x{pgeo:.2f}")
    write_results("dask", data, "\n".join(md) + "\n", complete=not names)


if __name__ == "__main__":
    main()
