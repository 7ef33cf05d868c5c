"""tp.einsum in a loop that also calls numpy.matmul (or torch.matmul): each call's time
alone and alternated with the other library's, as in a user's code that mixes them.

Two libraries' thread pools on the same cores each busy-wait after a call; alternating
calls can then wait out the other pool's spin (see teir_plan.executor.threads).  Each
configuration runs in a fresh process (the OpenMP runtime reads its spin setting once,
when it loads), and the configurations take turns over ``--rounds`` rounds; the table
gives the median over rounds of each process' median call.

Configurations: ``tp`` as shipped (it limits GNU OpenMP's spin unless the user set it,
and runs a short plan on the cores other threads leave free, schedule/idle.py);
``spin=300000``, GNU OpenMP's own default, set explicitly (as before teir_plan set it);
``tp, blas timeout=4``: as shipped, with OpenBLAS' idle threads sleeping at once
(``OPENBLAS_THREAD_TIMEOUT=4``, which must be set before numpy is imported: the user's
remedy for OpenBLAS' threads spinning for about 0.1 s after each of numpy's
multi-threaded calls); and ``cores unchecked``: as shipped but without the free-cores
check (``TEIR_PLAN_CHECK_CORES=0``), tp's threads beside OpenBLAS' spinning one; and
``workers unplaced``: as shipped but with numba's workers left where the kernel wakes
them (``TEIR_PLAN_PLACE_WORKERS=0``; executor/threads.keep_workers_off_caller).

``--peer numba`` alternates with the user's own numba parallel loop instead: its
workers are tp's own pool, spinning after the user's region (the free-cores check must
not take them for another library's).

Run: .venv/bin/python -m benchmarks.mixed [--rounds N] [--peer numpy|torch|numba]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numba
import numpy as np

from benchmarks.common import machine, machine_md, md_table, progress, timeit, write_results

CASES: list[tuple[str, list[tuple[int, ...]]]] = [
    ("ij,jk->ik", [(256, 256), (256, 256)]),
    ("bij,bjk->bik", [(512, 32, 32), (512, 32, 32)]),
    ("bhqd,bhkd->bhqk", [(8, 12, 128, 64), (8, 12, 128, 64)]),
    ("abc,cd->abd", [(32, 32, 64), (64, 64)]),
    ("ij,jk->ik", [(1024, 1024), (1024, 1024)]),
]
PEER_SIDE = 384  # the other library's call: a PEER_SIDE^3 float32 matrix product
# ... or, with --peer numba, the user's own numba parallel loop over this many float32
# (64 MiB, 1-4 ms on 2 cores): its workers are numba's, tp's own pool.
NUMBA_PEER_SIZE = 1 << 24

# The environment variables that decide how idle threads wait.
SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT",
            "TEIR_PLAN_CHECK_CORES", "TEIR_PLAN_PLACE_WORKERS")
CONFIGS = {"tp": {}, "spin=300000": {"GOMP_SPINCOUNT": "300000"},
           "tp, blas timeout=4": {"OPENBLAS_THREAD_TIMEOUT": "4"},
           "cores unchecked": {"TEIR_PLAN_CHECK_CORES": "0"},
           "workers unplaced": {"TEIR_PLAN_PLACE_WORKERS": "0"}}


@numba.njit(parallel=True, fastmath=True, cache=True)
def _sum_of_squares(v: np.ndarray) -> float:  # pragma: no cover - compiled
    s = 0.0
    for i in numba.prange(v.shape[0]):
        s += v[i] * v[i]
    return s


def _median_us(fn: Callable[[], object], repeats: int) -> float:
    return timeit(fn, repeats, warmup=0)[1] * 1e6


def worker(peer: str, repeats: int) -> dict:
    """One process' measurements: every case alone, then alternated with the peer."""
    settings = {k: os.environ.get(k) for k in SETTINGS}  # as the process started
    import teir_plan as tp

    rng = np.random.default_rng(0)
    x = rng.random((PEER_SIDE, PEER_SIDE), dtype=np.float32)
    if peer == "torch":
        import torch

        tx = torch.from_numpy(x)

        def other() -> None:
            torch.matmul(tx, tx)
    elif peer == "numba":
        v = rng.random(NUMBA_PEER_SIZE, dtype=np.float32)
        _sum_of_squares(v)

        def other() -> None:
            _sum_of_squares(v)
    else:
        def other() -> None:
            np.matmul(x, x)

    plans = []
    for expr, shapes in CASES:
        ops = [rng.random(s, dtype=np.float32) for s in shapes]
        plan = tp.plan(expr, *ops)
        for _ in range(3):
            plan(*ops)
        plans.append((plan, ops))
    out: dict = {"alone": [], "mixed": [], "peer_mixed": []}
    # Alone first: before the peer's first multi-threaded call its pool is idle.
    for plan, ops in plans:
        out["alone"].append(_median_us(lambda: plan(*ops), repeats))  # noqa: B023
    for plan, ops in plans:
        mixed, peer_mixed = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            other()
            peer_mixed.append(time.perf_counter() - t)
            t = time.perf_counter()
            plan(*ops)
            mixed.append(time.perf_counter() - t)
        out["mixed"].append(statistics.median(mixed) * 1e6)
        out["peer_mixed"].append(statistics.median(peer_mixed) * 1e6)
    out["peer_alone"] = _median_us(other, repeats)
    out["settings"] = settings
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--peer", choices=["numpy", "torch", "numba"], default="numpy")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.peer, args.repeats)))
        return
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    total = args.rounds * len(CONFIGS)
    # The caller's own thread settings would relabel the configurations.
    base = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    cmd = [sys.executable, "-m", "benchmarks.mixed", "--worker", "--peer", args.peer,
           "--repeats", str(args.repeats)]
    for r in range(args.rounds):
        for j, (name, env) in enumerate(CONFIGS.items()):
            progress(r * len(CONFIGS) + j, total, name)
            done = subprocess.run(cmd, env={**base, **env}, capture_output=True,
                                  text=True, check=True)
            run = json.loads(done.stdout.strip().splitlines()[-1])
            assert run["settings"] == {k: env.get(k) for k in SETTINGS}, (name, run)
            runs[name].append(run)
    progress(total, total, "done")

    def med(name: str, key: str, i: int | None = None) -> float:
        return statistics.median(run[key] if i is None else run[key][i] for run in runs[name])

    peer_call = (f"a numba prange over {NUMBA_PEER_SIZE} float32" if args.peer == "numba"
                 else f"{args.peer}.matmul {PEER_SIDE}^3")
    rows = []
    records = []
    for i, (expr, shapes) in enumerate(CASES):
        shape_text = " ".join("x".join(map(str, s)) for s in shapes)
        cells: list[object] = [expr, shape_text]
        rec: dict = {"expression": expr, "shapes": shapes}
        for name in CONFIGS:
            alone, mixed, peer = med(name, "alone", i), med(name, "mixed", i), med(
                name, "peer_mixed", i)
            cells += [f"{alone:.0f}", f"{mixed:.0f}", f"{peer:.0f}"]
            rec[name] = {"tp_alone_us": alone, "tp_mixed_us": mixed, "peer_mixed_us": peer}
        rows.append(cells)
        records.append(rec)
    header = ["expression", "shapes"]
    for name in CONFIGS:
        header += [f"{name}: tp alone", f"{name}: tp alternated", f"{name}: {args.peer} alternated"]
    info = machine()
    peer_alone = {name: med(name, "peer_alone") for name in CONFIGS}
    md = "\n".join([
        f"# tp.einsum alternated with {peer_call} (median microseconds)",
        "",
        machine_md(info),
        "",
        f"Each configuration in its own process, {args.rounds} rounds taking turns; per "
        f"process the median of {args.repeats} calls. `{args.peer}` alone: "
        + ", ".join(f"{peer_alone[n]:.0f} us ({n})" for n in CONFIGS) + ".",
        "",
        md_table(header, rows),
        "",
    ])
    path = write_results(f"mixed-{args.peer}", {"machine": info, "rounds": args.rounds,
                                                "repeats": args.repeats, "cases": records,
                                                "peer_alone_us": peer_alone}, md)
    print(md)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
