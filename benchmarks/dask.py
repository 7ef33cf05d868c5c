"""tp.einsum on dask arrays against dask.array.einsum, on a LocalCluster of worker
processes (issue 39).

Both run the same expression on the same dask arrays (the same chunks, generated on the
workers); tp plans its own chunking from them (teir_plan/distributed/chunks.py), dask
contracts the chunks it is given (one blockwise over all indices, numpy.einsum per
block, partial sums by a tree reduction).  Each system is timed best of ``--repeats``
runs of ``compute()`` (graph, scheduling and transfers included) in ``--rounds`` rounds
that take turns, each on a cluster started for it holding freshly generated operands;
the peak memory of a worker process (resident set, sampled every 50 ms while it runs,
less the worker's resident size before) is the most any run of that system reached.
The task counts are the graph's keys (the operands' chunks included).

``--memory-test`` runs a contraction whose operands (4 GiB in all, generated on the
workers) exceed a worker's memory limit (1.5 GiB), with tp through dask, and checks the
result against a blocked numpy reference computed slice by slice on the client.

Run: .venv/bin/python -m benchmarks.dask [--workers 2] [--repeats 3] [--rounds 2]
[--cases NAME,...] [--memory-test]
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


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


class PeakMemory:
    """Each worker's resident set, sampled while the block runs: the peak over it."""

    def __init__(self, client: object) -> None:
        self.client = client
        self.base: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self._stop = threading.Event()

    def __enter__(self) -> PeakMemory:
        self.base = self.client.run(_rss)  # type: ignore[attr-defined]
        self.peak = dict(self.base)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                for addr, rss in self.client.run(_rss).items():  # type: ignore[attr-defined]
                    self.peak[addr] = max(self.peak.get(addr, 0), rss)
            except Exception:  # noqa: BLE001 - a worker restarting: skip the sample
                pass
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def worker_peak(self) -> int:
        return max(self.peak[a] - self.base.get(a, 0) for a in self.peak)


def _time(fn: Callable[[], object], repeats: int, client: object) -> tuple[float, int]:
    best, peak = float("inf"), 0
    for _ in range(repeats):
        with PeakMemory(client) as mem:
            t = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t)
        peak = max(peak, mem.worker_peak)
    return best, peak


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
        results: dict[str, tuple[float, int]] = {}
        values: dict[str, np.ndarray] = {}
        tasks: dict[str, int] = {}
        for _ in range(rounds):
            for name, build in systems.items():
                with distributed.LocalCluster(**cluster_options) as cluster, \
                        distributed.Client(cluster) as client:
                    tp.distributed.prepare_workers(client)
                    ops = _operands(case)
                    distributed.wait(ops)
                    graph = build(case.subscripts, ops)
                    tasks[name] = len(graph.__dask_graph__())  # type: ignore[attr-defined]
                    if name not in values:
                        values[name] = graph.compute()  # type: ignore[attr-defined]
                    t, peak = _time(graph.compute, repeats, client)  # type: ignore[attr-defined]
                    old = results.get(name, (float("inf"), 0))
                    results[name] = (min(old[0], t), max(old[1], peak))
                    del ops, graph
        ref = values["dask"]
        err = float(np.abs(values["tp"] - ref).max() / max(1e-30, np.abs(ref).max()))
        flops = _flops(case)
        rows.append({
            "case": case.name, "kind": case.kind, "subscripts": case.subscripts,
            "chunks per axis": case.ways, "GFLOP": flops / 1e9,
            "tp s": results["tp"][0], "dask s": results["dask"][0],
            "speedup": results["dask"][0] / results["tp"][0],
            "tp GFLOP/s": flops / results["tp"][0] / 1e9,
            "tp peak MiB": results["tp"][1] / 2**20,
            "dask peak MiB": results["dask"][1] / 2**20,
            "tp tasks": tasks["tp"], "dask tasks": tasks["dask"], "max rel err": f"{err:.1e}",
        })
        print(f"{case.name:12s} tp {results['tp'][0]:8.3f} s  dask {results['dask'][0]:8.3f} s"
              f"  x{rows[-1]['speedup']:.2f}  peak MiB tp {rows[-1]['tp peak MiB']:.0f} "
              f"dask {rows[-1]['dask peak MiB']:.0f}", flush=True)
    return rows


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
    t = time.perf_counter()
    with PeakMemory(client) as mem:
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
    ap.add_argument("--cases", default="")
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
    names = set(filter(None, args.cases.split(",")))
    cases = [c for c in CASES if not names or c.name in names]
    rows = run_cases(options, cases, args.repeats, args.rounds)
    speedups = [r["speedup"] for r in rows]
    geo = float(np.exp(np.mean(np.log(speedups))))
    data.update({"rows": rows, "geomean speedup": geo})
    md += [md_table(list(rows[0]), [list(r.values()) for r in rows]), "",
           f"Geometric mean of dask.array.einsum's time over tp's: {geo:.2f}x", ""]
    print(f"geomean x{geo:.2f}")
    write_results("dask", data, "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
