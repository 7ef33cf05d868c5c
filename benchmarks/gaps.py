"""Calls with the caller's own work between them: small einsums after 0-5 ms of other
work, when the executor's worker threads have gone to sleep (schedule/idle.py).

Each call follows a busy wait of the gap (the caller's own Python or numpy work, which
keeps its core busy); the table gives, per case and gap, the median microseconds of
``--calls`` calls, the lowest median over ``--rounds`` rounds.  Systems: tp as shipped
(a small plan runs on one thread when its call finds the threads asleep), tp with the
threads always as planned (the plan's rule removed: what it did before), tp planned on
one thread, and numpy.einsum(optimize=True).  tp's three take turns within a round (one
thread pool); numpy runs after them, followed by a pause (its BLAS threads spin after a
call, see benchmarks/common.py).

Run: .venv/bin/python -m benchmarks.gaps [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from benchmarks.common import PAUSE_SECONDS, machine, machine_md, md_table, write_results

CASES: list[tuple[str, list[tuple[int, ...]]]] = [
    ("ij,jk->ik", [(128, 128), (128, 128)]),
    ("ij,jk->ik", [(256, 256), (256, 96)]),
    ("ij,jk->ik", [(512, 512), (512, 64)]),
    ("bi,ij->bj", [(64, 512), (512, 512)]),
    ("bij,bjk->bik", [(16, 64, 64), (16, 64, 64)]),
    ("ij->j", [(1000, 300)]),
    ("abc,ai,bj,ck->ijk", [(16, 16, 16), (16, 32), (16, 32), (16, 32)]),
]
GAPS_MS = (0.0, 0.3, 1.0, 5.0)
SYSTEMS = ("tp", "tp, threads as planned", "tp, one thread", "numpy.einsum")


def _busy(seconds: float) -> None:
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pass


def _median_us(fn: Callable[[], object], gap: float, calls: int) -> float:
    fn()
    times = []
    for _ in range(calls):
        _busy(gap)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import teir_plan as tp
    from teir_plan.executor.threads import thread_count

    rng = np.random.default_rng(0)
    runs: list[dict[str, Callable[[], object]]] = []
    for expr, shapes in CASES:
        ops = [rng.random(s, dtype=np.float32) for s in shapes]
        shipped = tp.plan(expr, *ops)
        tp.plan_cache.clear()  # a plan object of its own, the same programs, no rule
        kept = tp.plan(expr, *ops)
        kept.idle = None
        with thread_count(1):
            alone = tp.plan(expr, *ops)

        def in_one_thread(p: tp.Plan = alone, ops: list[np.ndarray] = ops) -> object:
            with thread_count(1):
                return p(*ops)

        runs.append({
            "tp": lambda p=shipped, ops=ops: p(*ops),
            "tp, threads as planned": lambda p=kept, ops=ops: p(*ops),
            "tp, one thread": in_one_thread,
            "numpy.einsum": lambda e=expr, ops=ops: np.einsum(e, *ops, optimize=True),
            "rule": shipped.idle is not None,  # type: ignore[dict-item]
        })
    best: dict[tuple[int, float, str], float] = {}
    for _ in range(args.rounds):
        for i, run in enumerate(runs):
            for gap in GAPS_MS:
                for name in SYSTEMS:
                    us = _median_us(run[name], gap / 1e3, args.calls)
                    key = (i, gap, name)
                    best[key] = min(best.get(key, float("inf")), us)
                    if name == "numpy.einsum":
                        time.sleep(PAUSE_SECONDS)
    rows = []
    records = []
    for i, (expr, shapes) in enumerate(CASES):
        shape_text = " ".join("x".join(map(str, s)) for s in shapes)
        for gap in GAPS_MS:
            t = {name: best[i, gap, name] for name in SYSTEMS}
            rows.append([expr, shape_text, "yes" if runs[i]["rule"] else "no", f"{gap:g}",
                         *(f"{t[n]:.1f}" for n in SYSTEMS),
                         t["numpy.einsum"] / t["tp"], t["tp, threads as planned"] / t["tp"]])
            records.append({"expression": expr, "shapes": shapes, "gap_ms": gap,
                            "rule": bool(runs[i]["rule"]), "median_us": t})
    info = machine()
    header = ["expression", "shapes", "rule", "gap ms", *(f"{n} us" for n in SYSTEMS),
              "numpy / tp", "as planned / tp"]
    md = "\n".join([
        "# Small einsums between the caller's own work (median microseconds a call)",
        "",
        machine_md(info),
        "",
        f"float32; each call after a busy wait of the gap; the median of {args.calls} "
        f"calls, the lowest over {args.rounds} rounds. `rule`: the plan runs on one thread "
        f"when a call finds the worker threads asleep (schedule/idle.py).",
        "",
        md_table(header, rows),
        "",
    ])
    path = write_results("gaps", {"machine": info, "calls": args.calls,
                                  "rounds": args.rounds, "cases": records}, md)
    print(md)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
