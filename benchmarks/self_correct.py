"""Plans that correct themselves (teir_plan/schedule/trials.py): what the trials cost over
a plan's first calls, which contender they keep, and what that is worth against the
model's choice alone and against numpy.einsum.

For each case, in one process with a cache folder of its own (so no choice is stored
yet; the machine parameters are whatever the process has in force: out of the box, the
first-use measurement, taken once at the start):

* ``calls`` (default 20) calls of ``tp.einsum`` as a user makes them, each timed, with
  the self-correction on (a fresh plan, no choice stored) and off (the model's choice
  alone), in ``--pairs`` pairs of such series taken alike after a pause, in alternating
  order; the overhead is the median over the pairs of calls 2..``calls`` with the trials
  over the same calls without (the first call runs the model's choice either way);
* then, on the last series' plan, the model's choice alone (``Plan.execute_planned``),
  the contender the trials kept (``tp.einsum`` again) and numpy.einsum(optimize=True)
  timed in turns, best of ``--repeats``, with a pause before each system's round
  (another runtime's spinning threads would otherwise land on the next system's calls);
  the gain is the model's choice over the contender kept.

Calls under ``BATCH_SECONDS`` are timed in turns as the mean of a batch of back-to-back
calls.  Every result is checked against numpy.einsum in float64.

Run: .venv/bin/python -m benchmarks.self_correct [--calls 20] [--pairs 3] [--repeats 5]
     [--only EXPR]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from benchmarks.common import (
    PAUSE_SECONDS,
    machine,
    machine_md,
    md_table,
    progress,
    write_results,
)
from benchmarks.tccg import load_cases

# Common patterns outside TCCG that ran behind numpy on an AVX2 machine out of the box.
EVERYDAY: list[tuple[str, list[tuple[int, ...]]]] = [
    ("bhqd,bhkd->bhqk", [(8, 12, 128, 64), (8, 12, 128, 64)]),
    ("bhqk,bhkd->bhqd", [(8, 12, 128, 128), (8, 12, 128, 64)]),
    ("ij,j->i", [(4096, 4096), (4096,)]),
    ("ki,kj->ij", [(200_000, 64), (200_000, 64)]),
    ("bij,bjk->bik", [(512, 32, 32), (512, 32, 32)]),
]
MAX_GFLOP = 50.0  # the TCCG cases the AVX2 figures were taken on


def cases() -> list[tuple[str, list[tuple[int, ...]]]]:
    out = []
    for expr, ext in load_cases():
        ins = expr.split("->")[0].split(",")
        shapes = [tuple(ext[c] for c in s) for s in ins]
        flops = 2 * math.prod(ext.values()) / 1e9
        if flops <= MAX_GFLOP:
            out.append((expr, shapes))
    return out + EVERYDAY


# A call under this long is timed as the mean of back-to-back calls lasting about this
# long, after one untimed call: a single call right after the pause times the threads'
# and caches' wake-up (a 0.2 ms batched product timed 0.9 ms alone), not the calls a
# loop makes.
BATCH_SECONDS = 5e-3


def best_in_turns(fns: Mapping[str, Callable[[], object]], repeats: int,
                  warm: bool = False) -> dict[str, float]:
    """Each of ``fns`` timed in turns after a pause, best of ``repeats`` (a call under
    BATCH_SECONDS as the mean of a batch); ``warm``: one untimed call after each pause
    first, so that the threads are awake."""
    best = {k: math.inf for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            time.sleep(PAUSE_SECONDS)
            if warm:
                fn()
            t = time.perf_counter()
            fn()
            once = time.perf_counter() - t
            if once < BATCH_SECONDS:
                n = max(2, int(BATCH_SECONDS / max(once, 1e-6)))
                t = time.perf_counter()
                for _ in range(n):
                    fn()
                once = (time.perf_counter() - t) / n
            best[name] = min(best[name], once)
    return best


def first_calls(expr: str, ops: list[np.ndarray], calls: int, trials: bool) -> list[float]:
    """The seconds of a fresh plan's first ``calls`` calls through tp.einsum, with the
    self-correction on (no choice stored by an earlier series) or off, after a pause."""
    import teir_plan as tp
    from teir_plan.schedule import choices

    os.environ["TEIR_PLAN_SELF_CORRECT"] = "1" if trials else "0"
    tp.plan_cache.clear()
    (Path(os.environ["TEIR_PLAN_CACHE_DIR"]) / "choices.json").unlink(missing_ok=True)
    choices.forget()
    time.sleep(PAUSE_SECONDS)
    try:
        out = []
        for _ in range(calls):
            t = time.perf_counter()
            tp.einsum(expr, *ops)
            out.append(time.perf_counter() - t)
        return out
    finally:
        os.environ["TEIR_PLAN_SELF_CORRECT"] = "1"


def overheads(expr: str, ops: list[np.ndarray], calls: int, pairs: int) -> list[float]:
    """Calls 2..``calls`` with the trials over the same calls without, in ``pairs``
    pairs of series taken alike (a fresh plan after a pause), the series with the trials
    first in every other pair: one pair taken apart reads the first calls' warm-up (a
    4096^2 matrix-vector product's calls fall from 2.8 to 1.3 ms over its first ten on
    a Xeon, trials or not) and whatever ran before as the trials' cost.  The last
    series has the trials, so the plan cached after is the one they ran on."""
    out = []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        if i == pairs - 1:
            order = (False, True)
        times = {t: first_calls(expr, ops, calls, t) for t in order}
        out.append(sum(times[True][1:]) / sum(times[False][1:]) - 1.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=3,
                    help="series with and without the trials, per case (the median)")
    ap.add_argument("--only", default=None, help="run the cases whose expression is this")
    args = ap.parse_args()
    os.environ["TEIR_PLAN_SELF_CORRECT"] = "1"
    cache = tempfile.mkdtemp(prefix="teir_plan-self-correct-")
    os.environ["TEIR_PLAN_CACHE_DIR"] = cache
    import teir_plan as tp

    selected = [c for c in cases() if args.only in (None, c[0])]
    rng = np.random.default_rng(0)
    tp.einsum("ij,jk->ik", np.ones((64, 64), np.float32), np.ones((64, 64), np.float32))
    info = machine()
    records = []
    rows = []
    for i, (expr, shapes) in enumerate(selected):
        progress(i, len(selected), expr)
        ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        ref = np.einsum(expr, *(o.astype(np.float64) for o in ops), optimize=True)
        pairs = overheads(expr, ops, args.calls, args.pairs)
        overhead = float(np.median(pairs))
        plan = tp.plan(expr, *ops)  # (the last series' plan, with its trials)
        r = tp.einsum(expr, *ops)
        ok = bool(np.allclose(r, ref, rtol=1e-3, atol=1e-3 * float(np.abs(ref).max())))
        trials = plan.trials
        settled = plan.choice is not None
        best = best_in_turns({
            "model": lambda ops=ops, plan=plan: plan.execute_planned(ops, None),
            "tp": lambda ops=ops, expr=expr: tp.einsum(expr, *ops),
            "numpy": lambda ops=ops, expr=expr: np.einsum(expr, *ops, optimize=True),
        }, args.repeats)
        kept = plan.choice.kept if plan.choice is not None else "(trials under way)"
        pending = "" if trials is None else ", ".join(
            f"{c.name}: {len(c.times)}{' dropped' if c.dropped else ''}"
            for c in trials.contenders)
        rows.append([expr, best["model"] * 1e3, best["tp"] * 1e3, best["numpy"] * 1e3,
                     best["numpy"] / best["tp"], best["model"] / best["tp"],
                     f"{overhead * 100:+.1f}%", kept if settled else f"{kept}: {pending}",
                     "ok" if ok else "WRONG"])
        records.append({"expr": expr, "shapes": shapes, "overheads": pairs,
                        "model_seconds": best["model"], "tp_seconds": best["tp"],
                        "numpy_seconds": best["numpy"], "overhead": overhead,
                        "settled": settled, "kept": kept, "correct": ok,
                        "calls_to_settle": plan.choice.calls if settled and plan.choice
                        else None})
    progress(len(selected), len(selected), "done")
    ratios = [r["numpy_seconds"] / r["tp_seconds"] for r in records]
    gains = [r["model_seconds"] / r["tp_seconds"] for r in records]
    switched = sum(1 for r in records if r["settled"] and r["kept"] != "the model's choice")
    summary = (f"geomean numpy/tp after the trials: {math.exp(np.mean(np.log(ratios))):.3f} "
               f"(lowest {min(ratios):.2f}); geomean model/kept: "
               f"{math.exp(np.mean(np.log(gains))):.3f}; switched on {switched} "
               f"of {len(records)}; median overhead of calls 2..{args.calls}: "
               f"{np.median([r['overhead'] for r in records]) * 100:+.1f}%")
    md = "\n".join([
        "# Plans that correct themselves: the first calls", "",
        machine_md(info), "",
        f"float32, {tp.get_num_threads()} threads; {args.calls} calls each through "
        f"tp.einsum, then the model's choice alone, tp.einsum and numpy.einsum "
        f"(optimize=True) in turns, best of {args.repeats} (calls under "
        f"{BATCH_SECONDS * 1e3:g} ms: the mean of a batch of back-to-back calls). Overhead: "
        f"calls 2..{args.calls} over the same calls with the self-correction off, each a "
        f"fresh plan after a pause, median of {args.pairs} pairs in alternating order.", "",
        md_table(["expression", "model ms", "tp ms", "numpy ms", "numpy/tp", "model/tp",
                  "overhead", "kept", "check"], rows), "",
        summary, ""])
    complete = args.only is None
    info["threads"] = tp.get_num_threads()
    path = write_results("self-correct", {"machine": info, "cases": records,
                                          "summary": summary}, md, complete=complete)
    print(md)
    print(f"written {path}")


if __name__ == "__main__":
    main()
